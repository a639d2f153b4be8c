"""Issue 28, part A: one integrity rule for every reader of ground truth, and completions tied to their dataset
and weights (refused mismatches name both sides; a refusal writes nothing)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_eval_pipeline import make_dataset
from typer.testing import CliRunner

from data_gen.config import GenConfig
from data_gen.generate import run
from eval.completions import Completion, append_completions
from spatialiq_train.cli import app
from spatialiq_train.core.dataset import GroundTruthError, iter_views, validate_gt


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


def _with_images(data: Path) -> Path:
    from PIL import Image

    for gt in data.rglob("gt.json"):
        Image.new("RGB", (64, 64), (120, 80, 40)).save(gt.parent / "view.png")
    return data


def _sample(model: Path | str, data: Path, out: Path, *extra: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["eval", "sample", "--model", str(model), "--data", str(data), "--out", str(out),
                                    "--engine", "transformers", "--k", "1", "--max-new-tokens", "2", "--limit", "1",
                                    *extra])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from spatialiq_train.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny") / "run" / "final", seed=0)


def test_completions_record_their_dataset_and_refuse_another(tiny: Path, tmp_path: Path) -> None:
    """Two sets sharing view keys: resuming set A's file with set B, or scoring it against B, is refused naming
    both; the metrics of a right pairing carry the weights digest the completions were sampled from."""
    from eval.provenance import provenance_path
    from spatialiq_train.core.weights import checkpoint_digest

    a = _with_images(make_dataset(tmp_path / "a", structures=1, seed=0))
    b = _with_images(make_dataset(tmp_path / "b", structures=1, seed=1))
    out = tmp_path / "c.jsonl"
    assert (res := _sample(tiny, a, out)).exit_code == 0, res.output
    record = json.loads(provenance_path(out).read_text())
    assert record["data"]["path"] == str(a.resolve()) and len(record["data"]["truth_digest"]) == 64
    lines = out.read_bytes()
    res = _sample(tiny, b, out)
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and "dataset:" in flat and str(a.resolve()) in flat and str(b.resolve()) in flat, flat
    assert out.read_bytes() == lines
    res = CliRunner().invoke(app, ["eval", "score", "--completions", str(out), "--data", str(b), "--out",
                                   str(tmp_path / "ob"), "--name", "m", "--limit", "1"])
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and f"sampled from {a.resolve()}" in flat and f"--data gives {b.resolve()}" in flat
    assert not (tmp_path / "ob").exists()
    res = CliRunner().invoke(app, ["reward", "analyze", "--completions", str(out), "--data", str(b), "--out",
                                   str(tmp_path / "lab"), "--rewards", "exact_match"])
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and f"sampled from {a.resolve()}" in flat and not (tmp_path / "lab").exists(), flat
    res = CliRunner().invoke(app, ["eval", "score", "--completions", str(out), "--data", str(a), "--out",
                                   str(tmp_path / "oa"), "--name", "m", "--limit", "1"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "oa" / "metrics_m.json").read_text())
    assert metrics["model_digest"] == checkpoint_digest(tiny) and metrics["model"] == str(tiny.resolve())


def test_a_refused_sample_writes_nothing_and_a_retry_with_other_settings_runs(tiny: Path, tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "d", structures=1)  # no images yet
    out = tmp_path / "c.jsonl"
    res = _sample(tiny, data, out)
    assert res.exit_code == 2 and "has no image" in res.output, res.output
    assert not out.exists() and not Path(f"{out}.provenance.json").exists()
    _with_images(data)
    res = _sample(tiny, data, out, "--engine", "vllm")  # vLLM is not installed here
    assert res.exit_code != 0 and "vllm" in res.output.lower(), res.output
    assert not out.exists() and not Path(f"{out}.provenance.json").exists()
    res = _sample(tiny, data, out, "--temperature", "0.7")
    assert res.exit_code == 0 and "1 written" in res.output, res.output


def test_a_hub_id_that_cannot_be_fetched_is_a_clean_error_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = _with_images(make_dataset(tmp_path / "d", structures=1))
    out = tmp_path / "c.jsonl"
    res = _sample("no-such-org/no-such-model", data, out)
    assert res.exit_code == 2 and res.output.startswith("error: ") and "no-such-org/no-such-model" in res.output
    assert "Traceback" not in res.output and "PosixPath" not in res.output, res.output
    assert not out.exists() and not Path(f"{out}.provenance.json").exists()


def test_a_hub_id_is_recorded_as_the_id_with_its_cached_revision(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    from eval.provenance import model_record, sampling_record
    from eval.sample import SamplingConfig
    from spatialiq_train.core.weights import checkpoint_digest

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert model_record(Path("org/backbone")) == {"model": "org/backbone", "model_digest": None,
                                                  "model_revision": None}
    rev = "0123456789abcdef0123456789abcdef01234567"
    snap = tmp_path / "hub" / "models--org--backbone" / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    (tmp_path / "hub" / "models--org--backbone" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--backbone" / "refs" / "main").write_text(rev)
    record = sampling_record(Path("org/backbone"), SamplingConfig(), {"truth_digest": "x"})
    json.dumps(record)  # a Path given by the CLI is recorded as text
    assert record["model"] == "org/backbone" and record["model_revision"] == rev
    assert record["model_digest"] == checkpoint_digest(snap)


def test_completions_without_a_record_are_scored_with_a_warning(bench: Path, tmp_path: Path) -> None:
    completions = _answers(bench, tmp_path / "c.jsonl")
    res = _score(completions, bench, tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert "warning: --completions" in res.output and "has no provenance record" in " ".join(res.output.split())
    metrics = json.loads((tmp_path / "o" / "metrics_m.json").read_text())
    assert metrics["object_counting"]["acc@1"] == 1.0 and metrics["model_digest"] is None
