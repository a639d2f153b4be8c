"""Issue 20's smaller holes: each refused with an error naming the file, line, row or option (not silently run)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from data_gen import fidelity
from data_gen.config import GenConfig
from data_gen.generate import run
from eval.completions import load_completions
from eval.rawcsv import ResponderTable, write_raw_csv
from spatialiq_train.cli import app
from spatialiq_train.core.errors import InputError

REF_COLUMNS = ["view", "total_blocks", "num_hidden_blocks", "num_columns", "num_layers", "task9_gt"]


def test_fidelity_reference_with_a_repeated_view_is_refused(tmp_path: Path) -> None:
    ref = tmp_path / "ref.csv"
    row = "x/level_1/sample_1/view_01/offset3_fov1_dist1,3,1,2,2,1"
    ref.write_text(",".join(REF_COLUMNS) + f"\n{row}\nx/level_1/sample_1/view_02/offset3_fov1_dist1,3,1,2,2,1\n{row}\n")
    with pytest.raises(ValueError, match=r"ref\.csv: line 4 repeats view 'x/level_1/sample_1/view_01/[^']+' of "
                                         r"line 2"):
        fidelity.load_reference(ref)


def _table(name: str, views: list[str]) -> ResponderTable:
    ones = np.ones(len(views))
    meta = {c: ones * 3 for c in ("total_blocks", "num_hidden_blocks", "num_columns", "num_layers")}
    return ResponderTable(name, views, ["cube"] * len(views), meta, {"main": ones.copy()}, {"main": ones * 3},
                          {"main": ones * 3})


def test_compare_of_disjoint_view_sets_is_refused(tmp_path: Path) -> None:
    write_raw_csv(tmp_path / "eval_raw_a_text.csv", _table("a", ["v1", "v2"]))
    write_raw_csv(tmp_path / "eval_raw_b_text.csv", _table("b", ["v3", "v4"]))
    res = CliRunner().invoke(app, ["eval", "compare", "--raw", str(tmp_path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert "responders 'a' and 'b' share no view" in res.output and "eval_raw_a_text.csv" in res.output
    assert not (tmp_path / "o" / "mcnemar.csv").exists()


def test_eval_sample_refuses_a_negative_limit(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(tmp_path), "--data", str(tmp_path),
                                   "--out", str(tmp_path / "c.jsonl"), "--limit", "-1"])
    assert res.exit_code == 2 and "--limit must be at least 1" in res.output, res.output


def test_gen_bounds_structures_before_writing_anything(tmp_path: Path) -> None:
    out = tmp_path / "d"
    res = CliRunner().invoke(app, ["gen", "--out", str(out), "--structures", str(10**12), "--seed", "1",
                                   "--split", "train", "--quiet"])
    assert res.exit_code == 2 and "--structures" in res.output and "less than or equal to" in res.output
    assert not out.exists()  # no gen_config.json left to block a sane rerun
    res = CliRunner().invoke(app, ["gen", "--out", str(out), "--structures", "1", "--seed", "1", "--split", "train",
                                   "--quiet"])
    assert res.exit_code == 0, res.output


def test_invalid_utf8_in_completions_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    good = json.dumps({"view": "v", "task": "task_main", "sample": 0, "text": "a"})
    path.write_bytes(good.encode() + b"\n" + b'{"view": "v", "task": "task_main", "sample": 1, "text": "\xff"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl: line 2: not valid UTF-8 \(byte 0xff"):
        load_completions(path)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("holes") / "ds"
    run(GenConfig(out=out, structures=2, seed=3, split="train"), progress=False)
    return out


def test_traces_checks_gt_against_the_recorded_sha256(generated: Path, tmp_path: Path) -> None:
    gt = sorted(generated.rglob("gt.json"))[0]
    original = gt.read_bytes()
    try:
        data = json.loads(original)
        data["task_main"] += 1
        gt.write_text(json.dumps(data))
        res = CliRunner().invoke(app, ["traces", "--data", str(generated), "--out", str(tmp_path / "t"), "--kind",
                                       "cot", "--no-require-images"])
        assert res.exit_code == 2, res.output
        assert f"{gt.relative_to(generated).as_posix()} does not match the sha256 recorded" in res.output
        assert not (tmp_path / "t").exists()
    finally:
        gt.write_bytes(original)


def test_traces_refuse_to_overwrite_the_other_kind(generated: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "t")
    base = ["traces", "--data", str(generated), "--out", out, "--no-require-images"]
    assert CliRunner().invoke(app, [*base, "--kind", "plain"]).exit_code == 0
    before = {p.name: p.read_bytes() for p in Path(out).glob("*.jsonl")}
    res = CliRunner().invoke(app, [*base, "--kind", "cot"])
    assert res.exit_code == 2 and "holds plain traces and this run writes --kind cot" in res.output, res.output
    assert {p.name: p.read_bytes() for p in Path(out).glob("*.jsonl")} == before
    assert CliRunner().invoke(app, [*base, "--kind", "plain"]).exit_code == 0  # the same kind reruns
