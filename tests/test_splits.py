"""check-splits: structure leakage across train/benchmark, train/val and warmup/rl (data_gen.split_check)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data_gen.config import GenConfig
from data_gen.generate import run
from data_gen.split_check import Record, check_splits, find_leaks
from spatialiq_train.cli import app
from spatialiq_train.core import splits
from spatialiq_train.core.errors import EXIT_USAGE
from spatialiq_train.core.views import sample_relpath


@pytest.fixture(scope="module")
def datasets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("splits")
    for split in ("train", "benchmark"):
        run(GenConfig(out=root / split, structures=3, seed=11, split=split, resolution=32), progress=False)
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_clean_datasets_pass(datasets_dir: Path) -> None:
    report = check_splits([datasets_dir / "train", datasets_dir / "benchmark"])
    assert report.leaks == []
    assert len(report.structures["train"]) == 3 and len(report.structures["benchmark"]) == 3
    result = CliRunner().invoke(app, ["check-splits", str(datasets_dir / "train"), str(datasets_dir / "benchmark")])
    assert result.exit_code == 0, result.output
    assert "no leaks" in result.output


def test_planted_benchmark_sample_in_train_is_caught(datasets_dir: Path, tmp_path: Path) -> None:
    train = _copy(datasets_dir / "train", tmp_path / "train")
    src = datasets_dir / "benchmark" / sample_relpath("benchmark", 2)
    planted = train / sample_relpath("train", 99)
    shutil.copytree(src, planted)
    sid = json.loads((src / "scene.json").read_text())["structure_id"]
    alone = check_splits([train])
    assert [str(leak) for leak in alone.leaks] == [
        f"structure {sid}: recorded in train but split_of gives benchmark: {planted}"]
    both = check_splits([train, datasets_dir / "benchmark"])
    cross = [leak for leak in both.leaks if leak.reason == "in both train and benchmark"]
    assert len(cross) == 1 and cross[0].structure_id == sid
    assert cross[0].first == str(planted) and cross[0].second == str(src)
    result = CliRunner().invoke(app, ["check-splits", str(train), str(datasets_dir / "benchmark")])
    assert result.exit_code == 1
    assert f"LEAK structure {sid}: in both train and benchmark" in result.output


def test_parquet_partition_disagreement_is_caught(datasets_dir: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    train = _copy(datasets_dir / "train", tmp_path / "train")
    shard = next((train / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    rows = table.to_pylist()
    sid = rows[0]["structure_id"]
    flip = {"train": "val", "val": "train"}
    for row in rows[:8]:  # half the views of the first structure move to the other partition
        row["trainval"] = flip[row["trainval"]]
    pq.write_table(table.from_pylist(rows, schema=table.schema), shard)
    reasons = {leak.reason for leak in check_splits([train]).leaks if leak.structure_id == sid}
    right = splits.partition_of(sid, "trainval")
    assert "in both train and val" in reasons
    assert f"recorded in trainval partition {flip[right]} but partition_of gives {right}" in reasons


def test_find_leaks_on_records() -> None:
    sid = next(f"s{i}" for i in range(1000) if splits.split_of(f"s{i}") == "train")
    dapo = splits.partition_of(sid, "dapo")
    other = {"warmup": "rl", "rl": "warmup"}[dapo]
    ok = Record(sid, "train", "a", (("dapo", dapo),))
    bad = Record(sid, "train", "b", (("dapo", other),))
    assert find_leaks([ok, Record(sid, "train", "c")]) == []
    leaks = find_leaks([ok, bad])
    assert any(leak.reason == "in both rl and warmup" and {leak.first, leak.second} == {"a", "b"} for leak in leaks)
    released = Record(sid, "eval_set", "e")  # the released layout's split name is not checked against split_of
    assert find_leaks([released]) == []


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["check-splits", str(tmp_path / "nope")])
    assert result.exit_code == EXIT_USAGE and "not a directory" in result.output  # bad input: 2 since issue 9.4


def test_recorded_structure_id_is_recomputed_and_a_mismatch_is_a_problem(datasets_dir: Path, tmp_path: Path) -> None:
    train = _copy(datasets_dir / "train", tmp_path / "train")
    scene_path = train / sample_relpath("train", 1) / "scene.json"
    scene = json.loads(scene_path.read_text())
    true_sid = scene["structure_id"]
    # a benchmark structure's height map under the train structure's recorded id: the recorded id is not trusted
    bench_scene = json.loads((datasets_dir / "benchmark" / sample_relpath("benchmark", 1) / "scene.json")
                             .read_text())
    scene["height_map"] = bench_scene["height_map"]
    scene_path.write_text(json.dumps(scene))
    report = check_splits([train])
    assert report.problems == [f"{scene_path}: recorded structure_id {true_sid!r} differs from "
                               f"{bench_scene['structure_id']!r}, the id of its height_map (the file was edited "
                               "or copied from elsewhere)"]
    assert any(leak.structure_id == bench_scene["structure_id"] and "split_of gives benchmark" in leak.reason
               for leak in report.leaks)
    assert "1 problem(s)" in report.summary()
    result = CliRunner().invoke(app, ["check-splits", str(train)])
    assert result.exit_code == 1 and f"PROBLEM {scene_path}: recorded structure_id" in result.output


def test_a_wrong_id_alone_fails_the_check(datasets_dir: Path, tmp_path: Path) -> None:
    train = _copy(datasets_dir / "train", tmp_path / "train")
    scene_path = train / sample_relpath("train", 2) / "scene.json"
    scene = json.loads(scene_path.read_text())
    scene["structure_id"] = "0123456789abcdef"
    scene_path.write_text(json.dumps(scene))
    report = check_splits([train])
    assert len(report.problems) == 1 and str(scene_path) in report.problems[0]
    assert "0123456789abcdef" not in {r for ids in report.structures.values() for r in ids}
    assert CliRunner().invoke(app, ["check-splits", str(train)]).exit_code == 1


def test_an_empty_folder_is_not_a_clean_dataset(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    res = CliRunner().invoke(app, ["check-splits", str(tmp_path)])
    assert res.exit_code == EXIT_USAGE and "no generated dataset found" in res.output  # bad input: 2 since issue 9.4


def _trace_file(path: Path, ids: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"messages": [], "structure_id": s}) + "\n" for s in ids))


def test_held_out_check_names_the_count_and_both_files(tmp_path: Path) -> None:
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.splits import HeldOutError, check_held_out

    _trace_file(tmp_path / "val.jsonl", ["a", "b", "c", "c"])
    _trace_file(tmp_path / "warmup.jsonl", ["d", "e"])
    _trace_file(tmp_path / "rl.jsonl", ["b", "c", "f"])
    check_held_out(tmp_path, "val", ["warmup"])
    check_held_out(tmp_path, None, ["warmup", "rl"])  # no validation: nothing to hold out
    with pytest.raises(HeldOutError, match=r"val.jsonl shares 2 of its 3 structures with training split 'rl' "
                                           r"\(.*rl.jsonl\), e.g. b") as info:
        check_held_out(tmp_path, "val", ["warmup", "rl"])
    assert isinstance(info.value, UserError)
    with pytest.raises(HeldOutError, match="'rl' is also a training split"):
        check_held_out(tmp_path, "rl", ["warmup", "rl"])
    with pytest.raises(HeldOutError, match=r"trace file .*train.jsonl does not exist"):
        check_held_out(tmp_path, "val", ["train"])


def test_held_out_check_covers_every_replay_source(tmp_path: Path) -> None:
    """Replay (``data.sources``): each source's training split against the run's validation split, an error naming
    the source's key and a shared structure; the run's own folder among the sources is the plain check's."""
    from spatialiq_train.core.splits import HeldOutError
    from spatialiq_train.train.held_out import check_validation_held_out

    own, other = tmp_path / "own", tmp_path / "other"
    _trace_file(own / "val.jsonl", ["a", "b"])
    _trace_file(own / "rl.jsonl", ["c"])
    _trace_file(other / "rl.jsonl", ["d", "b"])
    check_validation_held_out(str(own), "val", ["rl"], [str(own)])
    check_validation_held_out(str(own), None, ["rl"], [str(own), str(other)])  # no validation: nothing held out
    with pytest.raises(HeldOutError, match=r"^data.sources\[1\].traces_dir: .*other/rl.jsonl holds 1 of the 2 "
                                           r"structures of the validation split .*own/val.jsonl, e.g. b: "):
        check_validation_held_out(str(own), "val", ["rl"], [str(own), str(other)])
    (tmp_path / "empty").mkdir()
    with pytest.raises(HeldOutError, match=r"^data.sources\[1\].traces_dir: trace file .*empty/rl.jsonl does not "
                                           r"exist"):  # the run's own folder, however spelled, is skipped
        check_validation_held_out(str(own), "val", ["rl"], [f"{tmp_path}/x/../own", str(tmp_path / "empty")])


def test_the_three_parts_are_one_disjoint_partition() -> None:
    """val, warmup and rl: every train structure in exactly one part; val decided by the recorded trainval draw
    (so train.jsonl and val.jsonl keep their contents), warm-up and RL split the rest by the dapo draw."""
    ids = [f"s{i}" for i in range(4000)]
    parts = {s: splits.part_of(s) for s in ids}
    assert set(parts.values()) == set(splits.PARTS)
    for s, part in parts.items():
        assert (part == "val") == (splits.partition_of(s, "trainval") == "val")
        if part != "val":
            assert part == splits.partition_of(s, "dapo")
    share = {p: sum(v == p for v in parts.values()) / len(ids) for p in splits.PARTS}
    assert abs(share["val"] - 0.10) < 0.02 and abs(share["warmup"] - 0.09) < 0.02 and abs(share["rl"] - 0.81) < 0.03
    old_overlap = [s for s in ids if splits.partition_of(s, "trainval") == "val"]
    assert {parts[s] for s in old_overlap} == {"val"}  # the structures the independent draws also put in warmup/rl
