"""Issue 28, part A: one integrity rule for every reader of ground truth, and completions tied to their dataset
and weights (refused mismatches name both sides; a refusal writes nothing)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data_gen.config import GenConfig
from data_gen.generate import run
from eval.completions import Completion, append_completions
from spatialiq_train.cli import app
from spatialiq_train.core.dataset import GroundTruthError, iter_views, validate_gt
from test_eval_pipeline import make_dataset


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated benchmark split (2 structures, no images), with its shard records."""
    out = tmp_path_factory.mktemp("integrity") / "bench"
    run(GenConfig(out=out, structures=2, seed=5, split="benchmark"), progress=False)
    return out


def _answers(data: Path, path: Path) -> Path:
    """One completion per view answering its truth."""
    append_completions(path, [Completion(v.view, "task_main", 0, f"<answer>{v.gt['task_main']}</answer>")
                              for v in iter_views(data, "benchmark")])
    return path


def _score(completions: Path, data: Path, out: Path):  # noqa: ANN202
    return CliRunner().invoke(app, ["eval", "score", "--completions", str(completions), "--data", str(data),
                                    "--out", str(out), "--name", "m"])


def test_eval_score_refuses_an_edited_gt_that_traces_refuse(bench: Path, tmp_path: Path) -> None:
    data = shutil.copytree(bench, tmp_path / "copy")
    completions = _answers(data, tmp_path / "c.jsonl")
    gt_path = sorted(data.rglob("gt.json"))[3]
    gt = json.loads(gt_path.read_text())
    gt.update(task_main=gt["task_main"] - 1, total_blocks=gt["total_blocks"] - 1,
              num_hidden_blocks=gt["num_hidden_blocks"] - 1 if gt["num_hidden_blocks"] else 0)
    gt_path.write_text(json.dumps(gt))
    res = _score(completions, data, tmp_path / "o")
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.split())
    assert f"{gt_path.relative_to(data).as_posix()} does not match the sha256 recorded" in flat
    assert not (tmp_path / "o").exists()


def test_a_gone_gt_of_a_generated_dataset_is_refused_not_skipped(bench: Path, tmp_path: Path) -> None:
    data = shutil.copytree(bench, tmp_path / "copy")
    gone = sorted(data.rglob("gt.json"))[0]
    gone.unlink()
    with pytest.raises(GroundTruthError, match=rf"{gone.relative_to(data).as_posix()} does not match .*found missing"):
        list(iter_views(data))


def test_task_main_must_equal_total_blocks_and_the_other_relations_hold() -> None:
    gt = {"task_main": 24, "total_blocks": 24, "task5": 20, "num_hidden_blocks": 4}
    assert validate_gt(gt, "a/gt.json") is gt
    with pytest.raises(GroundTruthError, match=r"a/gt\.json: broken ground-truth relation\(s\) .*total_blocks == "
                                               r"task_main .*task_main=23.*total_blocks=24"):
        validate_gt({**gt, "task_main": 23}, "a/gt.json")
    with pytest.raises(GroundTruthError, match=r"task8 == 0 iff num_hidden_blocks == 0 .*\(row 7\)"):
        validate_gt({**gt, "task8": 0}, "s.parquet", row=7)


def test_released_layout_without_records_is_checked_for_consistency(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", prefix="eval_set/level_1")
    assert len(list(iter_views(data))) == 32
    gt_path = sorted(data.rglob("gt.json"))[0]
    gt = json.loads(gt_path.read_text())
    gt_path.write_text(json.dumps({**gt, "total_blocks": gt["task_main"] + 1}))
    with pytest.raises(GroundTruthError, match=r"total_blocks == task_main"):
        list(iter_views(data))
    gt_path.write_text(json.dumps({**gt, "task3": gt["task3"] + 1, "num_columns": gt["task3"] + 1}))
    with pytest.raises(GroundTruthError, match=r"task3 = .* of the same structure .* has"):
        list(iter_views(data))


def test_a_parquet_only_dataset_is_checked_against_its_shards_and_read(bench: Path, tmp_path: Path) -> None:
    data = shutil.copytree(bench, tmp_path / "pq")
    shutil.rmtree(data / "benchmark")  # only data/*.parquet, shards/*.done.json, manifest.json remain
    res = CliRunner().invoke(app, ["traces", "--data", str(data), "--out", str(tmp_path / "t"), "--kind", "plain",
                                   "--no-require-images"])
    assert res.exit_code == 0, res.output
    assert "benchmark.jsonl: 32 records" in res.output
    assert [v.gt for v in iter_views(data)] == [v.gt for v in iter_views(bench)]
    shard = next((data / "data").glob("*.parquet"))
    import pyarrow.parquet as pq

    table = pq.read_table(shard)
    pq.write_table(table.slice(1), shard)  # a row gone: a shard that still reads, but not the recorded one
    res = CliRunner().invoke(app, ["traces", "--data", str(data), "--out", str(tmp_path / "t2"), "--kind", "plain",
                                   "--no-require-images"])
    assert res.exit_code == 2 and f"data/{shard.name} does not match the sha256 recorded" in res.output, res.output
    assert not (tmp_path / "t2").exists()
