"""Fidelity check against the released evaluation set (data_gen.fidelity, spatialiq fidelity)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from data_gen import fidelity
from data_gen.config import GenConfig
from data_gen.fidelity import FIELDS, Views, compare
from data_gen.generate import run
from spatialiq_train.cli import app

RAW = "fixtures/paper_outputs/raw/eval_raw_qwen_text.csv"


def _views(values: dict[str, list[int]], per_structure: int) -> Views:
    n = len(next(iter(values.values())))
    return Views({f: np.asarray(v) for f, v in values.items()}, np.asarray([i // per_structure for i in range(n)]))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fid") / "ds"
    run(GenConfig(out=out, structures=3, seed=2, split="benchmark", resolution=48), progress=False)
    return out


def test_reference_is_the_released_3000_views(shared_dir: Path) -> None:
    ref = fidelity.load_reference(shared_dir / RAW)
    assert ref.n_views == 3000 and ref.n_structures == 554
    with (shared_dir / RAW).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert ref.values["total_blocks"].tolist() == [int(r["main_gt"]) for r in rows]
    assert ref.values["task9"].tolist() == [int(r["task9_gt"]) for r in rows]
    assert set(ref.values["num_layers"].tolist()) == {1, 2, 3, 4}


def test_reference_errors_name_file_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("view,total_blocks\nx/sample_01/view_01/offset3_fov1_dist1,3\n")
    with pytest.raises(ValueError, match=r"bad\.csv: missing column\(s\) \['num_hidden_blocks'"):
        fidelity.load_reference(bad)


def test_identical_samples_agree_and_shifted_ones_do_not() -> None:
    rng = np.random.default_rng(0)
    base = {f: rng.integers(1, 6, size=1600).tolist() for f in FIELDS}
    same = compare(_views(base, 4), _views(base, 4))
    assert all(d.tvd == 0 and d.chi2_p > 0.99 for d in same)
    shifted = {f: [v + 1 for v in vals] for f, vals in base.items()}
    far = compare(_views(shifted, 4), _views(base, 4))
    assert all(d.tvd > 0.15 and d.chi2_p < 1e-6 and d.tvd > d.tvd_95 for d in far)
    assert all(d.mean_generated - d.mean_reference == pytest.approx(1.0) for d in far)


def test_expected_tvd_shrinks_with_more_structures() -> None:
    rng = np.random.default_rng(1)
    vals = {f: rng.integers(1, 8, size=3200).tolist() for f in FIELDS}
    few = compare(_views(vals, 400), _views(vals, 400))  # 8 structures a side
    many = compare(_views(vals, 4), _views(vals, 4))  # 800 structures a side
    assert all(m.expected_tvd < f.expected_tvd / 3 for m, f in zip(many, few, strict=True))


def test_generated_views_from_parquet_and_from_folders_agree(generated: Path, tmp_path: Path) -> None:
    from_parquet = fidelity.load_generated(generated)
    folders = shutil.copytree(generated, tmp_path / "copy")
    shutil.rmtree(folders / "data")
    from_json = fidelity.load_generated(folders)
    assert from_parquet.n_views == from_json.n_views == 48
    assert from_parquet.n_structures == from_json.n_structures == 3
    for f in FIELDS:
        assert sorted(from_parquet.values[f].tolist()) == sorted(from_json.values[f].tolist())
    with pytest.raises(ValueError, match="no train views found"):
        fidelity.load_generated(generated, "train")


def test_cli_prints_one_line_per_field(generated: Path, shared_dir: Path) -> None:
    result = CliRunner().invoke(app, ["fidelity", str(generated), "--reference", str(shared_dir / RAW)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "48 views of 3 structures" in lines[0] and "3000 views of 554 structures" in lines[0]
    assert [line.split()[0] for line in lines[2:7]] == list(FIELDS)
    assert "sampling error" in result.output


def test_gt_missing_key_names_the_file_and_key(generated: Path, tmp_path: Path) -> None:
    folders = shutil.copytree(generated, tmp_path / "copy")
    shutil.rmtree(folders / "data")
    shutil.rmtree(folders / "shards")  # no sha256 records: the key check itself speaks (records: test_integrity.py)
    gt_path = sorted(folders.rglob("gt.json"))[5]
    gt = json.loads(gt_path.read_text())
    del gt["task9"]
    gt_path.write_text(json.dumps(gt))
    with pytest.raises(ValueError, match=rf"{gt_path.parent.name}/gt\.json: key 'task9' missing"):
        fidelity.load_generated(folders)
    gt["task9"] = None
    gt_path.write_text(json.dumps(gt))
    with pytest.raises(ValueError, match=r"gt\.json: key 'task9' must be an integer, got None"):
        fidelity.load_generated(folders)


def test_reference_short_row_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "short.csv"
    cols = ["view", "total_blocks", "num_hidden_blocks", "num_columns", "num_layers", "task9_gt"]
    bad.write_text(",".join(cols) + "\nx/level_1/sample_1/view_01/offset3_fov1_dist1,3,1\n")
    with pytest.raises(ValueError, match=r"short\.csv: line 2, column num_columns: expected an integer, got None"):
        fidelity.load_reference(bad)


def test_default_reference_does_not_depend_on_the_working_directory(
    generated: Path, shared_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fidelity.default_reference() == (shared_dir / RAW).resolve()
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["fidelity", str(generated)])
    assert result.exit_code == 0, result.output
    assert "3000 views of 554 structures" in result.output


def test_absent_default_reference_is_a_clear_error(generated: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fidelity, "default_reference", lambda: tmp_path / "nowhere.csv")
    result = CliRunner().invoke(app, ["fidelity", str(generated)])
    assert result.exit_code == 2
    assert "no --reference given and the default" in result.output and "nowhere.csv" in result.output
