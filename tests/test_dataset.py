"""The one dataset schema (spatialiq_train.core.dataset): fields, validation, the view record and both layouts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from data_gen import writer
from data_gen.config import GenConfig
from data_gen.generate import run
from data_gen.traces import build_traces, load_views
from spatialiq_train.cli import app
from spatialiq_train.core import dataset, splits
from spatialiq_train.core.dataset import (
    GT_FIELDS,
    GT_INT_FIELDS,
    REWARD_FIELDS,
    DatasetError,
    DatasetNotFoundError,
    GroundTruthError,
    iter_views,
    validate_gt,
)
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.views import LEAF_VIEWS


class PatternRenderer:
    """Instance ids from the exact ray caster and an RGB image that depends on them (no real renderer needed)."""

    name = "pattern"
    num_environments = 1

    def render(self, spec):  # noqa: ANN001, ANN201
        from data_gen import visibility
        from data_gen.render import RenderResult

        ids, _ = visibility.cast(np.asarray(spec.height_map), spec.camera)
        ids = np.asarray(ids).reshape(spec.camera.resolution, spec.camera.resolution)
        rgb = np.zeros((*ids.shape, 3), np.uint8)
        rgb[..., 0] = (ids + 1) * 7 % 256
        return RenderResult(rgb=rgb, instance_ids=ids)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One root with a train and a benchmark split, each in both forms (leaf folders and parquet shards)."""
    root = tmp_path_factory.mktemp("ds")
    for split, n in (("train", 6), ("benchmark", 2)):
        run(GenConfig(out=root / split, structures=n, seed=3, split=split, resolution=24, num_shards=2),
            progress=False)
    merged = root / "merged"
    for split in ("train", "benchmark"):
        shutil.copytree(root / split / split, merged / split)
        shutil.copytree(root / split / "data", merged / "data", dirs_exist_ok=True)
    return merged


def _parquet_only(src: Path, dst: Path) -> Path:
    shutil.copytree(src / "data", dst / "data")
    return dst


def test_field_tuples_match_what_generation_writes(generated: Path) -> None:
    gt = json.loads(next(generated.rglob("gt.json")).read_text())
    assert list(gt) == list(GT_FIELDS)
    int_columns = [name for name, feature in writer.COLUMNS if feature.get("dtype") == "int64"]
    assert [c for c in int_columns if c in GT_INT_FIELDS] == list(GT_INT_FIELDS)
    assert all(isinstance(gt[f], int) for f in GT_INT_FIELDS)
    assert set(REWARD_FIELDS) < set(GT_INT_FIELDS) and dataset.COT_FIELDS == ("task1", *REWARD_FIELDS)


def test_validate_gt_names_source_key_and_fix() -> None:
    good = {"task1": "blocks", "task_main": 4, "task5": 3, "task9": None}
    assert validate_gt(good, "a/gt.json") is good
    cases = [
        ([1], {}, r"a/gt\.json: expected a JSON object of ground-truth fields, got list"),
        (dict(good, task5="3"), {}, r"a/gt\.json: key 'task5' must be an integer or null, got '3'"),
        (dict(good, task5=True), {}, r"key 'task5' must be an integer or null, got True"),
        (dict(good, task1=1), {}, r"key 'task1' must be a string or null"),
        ({"task5": 3}, {}, r"a/gt\.json: key 'task_main' missing; expected an integer"),
        (good, {"required": ("task9",)}, r"key 'task9' must be an integer, got None"),
        (good, {"required": ("task9",), "row": 7}, r"key 'task9' must be an integer, got None \(row 7\)$"),
    ]
    for gt, kw, pattern in cases:
        with pytest.raises(GroundTruthError, match=pattern) as err:
            validate_gt(gt, "a/gt.json", **kw)
        assert isinstance(err.value, UserError) and isinstance(err.value, ValueError)


def test_folders_and_parquet_give_the_same_views(generated: Path, tmp_path: Path) -> None:
    folders = list(iter_views(generated))
    shards = list(iter_views(_parquet_only(generated, tmp_path / "pq")))
    assert len(folders) == len(shards) == 8 * 16
    assert [v.view for v in folders] == [v.view for v in shards]
    for a, b in zip(folders, shards, strict=True):
        assert (a.leaf, a.structure_id, a.split, a.gt) == (b.leaf, b.structure_id, b.split, b.gt)
        assert a.leaf == LEAF_VIEWS[LEAF_VIEWS.index(a.leaf)] and a.split == a.view.split("/")[0]
        assert a.sample_idx == int(a.view.split("/")[2].split("_")[1])
    assert {v.split for v in folders} == {"train", "benchmark"}
    assert all(not v.has_image for v in folders + shards)  # renderer none
    bench = list(iter_views(tmp_path / "pq", "benchmark"))
    assert [v.view for v in bench] == [v.view for v in folders if v.split == "benchmark"]


def test_traces_from_parquet_only_equal_traces_from_folders(generated: Path, tmp_path: Path) -> None:
    pq_root = _parquet_only(generated, tmp_path / "pq")
    for kind in ("plain", "cot"):
        a = build_traces(load_views(generated), kind, require_images=False)  # type: ignore[arg-type]
        b = build_traces(load_views(pq_root), kind, require_images=False)  # type: ignore[arg-type]
        assert {"train", "rl", "benchmark"} <= set(a) and a == b
    runner = CliRunner()
    for name, root in (("folders", generated), ("parquet", pq_root)):
        res = runner.invoke(app, ["traces", "--data", str(root), "--out", str(tmp_path / name), "--kind", "cot",
                                  "--no-require-images"])
        assert res.exit_code == 0, res.output
    files = sorted(p.name for p in (tmp_path / "folders").glob("*.jsonl"))
    assert files == sorted(p.name for p in (tmp_path / "parquet").glob("*.jsonl")) and len(files) >= 3
    for f in files:
        assert (tmp_path / "folders" / f).read_bytes() == (tmp_path / "parquet" / f).read_bytes()


def test_rendered_parquet_carries_images(tmp_path: Path) -> None:
    out = tmp_path / "r"
    run(GenConfig(out=out, structures=1, seed=1, split="train", resolution=16, renderer="mitsuba"),
        renderer=PatternRenderer(), progress=False)
    pq_root = _parquet_only(out, tmp_path / "pq")
    folders, shards = list(iter_views(out)), list(iter_views(pq_root))
    assert all(v.has_image and v.image_bytes is None for v in folders)
    assert all(v.has_image and v.image_source == (out / v.view / "view.png").read_bytes() for v in shards)
    assert all(v.has_image and v.image_bytes is None for v in iter_views(pq_root, images=False))
    a, b = build_traces(load_views(out), "plain"), build_traces(load_views(pq_root), "plain")
    assert a == b and sum(map(len, a.values())) == 2 * 16  # trainval + dapo files, one record per view each


def test_traces_of_a_parquet_only_dataset_carry_their_images(tmp_path: Path) -> None:
    import json

    from spatialiq_train.core.traces import trace_to_example

    out = tmp_path / "r"
    run(GenConfig(out=out, structures=1, seed=1, split="train", resolution=16, renderer="mitsuba"),
        renderer=PatternRenderer(), progress=False)
    pq_root = _parquet_only(out, tmp_path / "pq")
    res = CliRunner().invoke(app, ["traces", "--data", str(pq_root), "--out", str(tmp_path / "t"), "--kind", "plain"])
    assert res.exit_code == 0, res.output
    images = tmp_path / "t" / "images"
    assert f"{images}: 16 image(s) written" in res.output and f"data.data_root={images}" in res.output
    row = json.loads((tmp_path / "t" / "rl.jsonl").read_text().splitlines()[0])
    example = trace_to_example(row, images, "rl")
    view = Path(example["images"][0]).relative_to(images).parent.as_posix()
    assert Path(example["images"][0]).read_bytes() == (out / view / "view.png").read_bytes()
    again = CliRunner().invoke(app, ["traces", "--data", str(pq_root), "--out", str(tmp_path / "t"), "--kind", "plain"])
    assert f"{images}: 0 image(s) written" in again.output  # a rerun rewrites nothing
    folders = CliRunner().invoke(app, ["traces", "--data", str(out), "--out", str(tmp_path / "f"), "--kind", "plain"])
    assert folders.exit_code == 0 and not (tmp_path / "f" / "images").exists()  # per-view images: nothing to extract


def _table(rows: list[dict], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_paths_outside_the_root_are_refused(tmp_path: Path) -> None:
    row = {"view": "../elsewhere/sample_1/view_01/offset3_fov1_dist1", "view_idx": 1, "offset": 3.0, "fov": 1.0,
           "dist": 1.0, "task_main": 3}
    _table([row], tmp_path / "pq" / "data" / "benchmark-00000-of-00001.parquet")
    with pytest.raises(DatasetError, match=r"benchmark-00000-of-00001\.parquet: .*escapes the dataset root.*\(row 0\)"):
        list(iter_views(tmp_path / "pq"))
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"task_main": 3}))
    leaf = tmp_path / "fold" / "benchmark" / "level_1" / "sample_1" / "view_01" / "offset3_fov1_dist1"
    leaf.mkdir(parents=True)
    (leaf / "gt.json").symlink_to(outside)
    with pytest.raises(DatasetError, match="escapes the dataset root"):
        list(iter_views(tmp_path / "fold"))


def test_the_part_is_read_from_the_recorded_columns(generated: Path, tmp_path: Path) -> None:
    """Folders record no part (it is drawn from the structure id); parquet rows record it, and that is what counts."""
    folders = list(iter_views(generated, "train"))
    assert {v.part for v in folders} <= {"val", "warmup", "rl"} and len({v.part for v in folders}) >= 2
    assert all(v.part == splits.part_of(v.structure_id) and v.recorded_part is None for v in folders)
    assert {v.part for v in iter_views(generated, "benchmark")} == {None}
    pq_views = list(iter_views(_parquet_only(generated, tmp_path / "pq"), "train"))
    assert [v.recorded_part for v in pq_views] == [v.part for v in folders]
    row = {"view": "train/level_1/sample_1/view_01/offset3_fov1_dist1", "view_idx": 1, "offset": 3.0, "fov": 1.0,
           "dist": 1.0, "task_main": 3, "split": "train", "trainval": "val", "dapo": "rl"}
    sid = next(f"s{i}" for i in range(1000) if splits.part_of(f"s{i}") == "rl")  # its draws say rl
    for recorded, part in (({"trainval": "train", "dapo": "warmup"}, "warmup"), ({}, "val")):
        _table([{**row, "structure_id": sid, **recorded}], tmp_path / "one" / "data" / "train-00000-of-00001.parquet")
        (view,) = iter_views(tmp_path / "one", "train")
        assert view.part == part
    _table([{**row, "dapo": "later"}], tmp_path / "bad" / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(DatasetError, match=r"train-00000-of-00001\.parquet: recorded dapo 'later' is not one of "
                                           r"warmup, rl \(row 0\)"):
        list(iter_views(tmp_path / "bad", "train"))


def test_missing_data_and_split_errors(generated: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        list(iter_views(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetNotFoundError, match=r"no views found below .*empty: no view_VV"):
        list(iter_views(tmp_path / "empty"))
    train_only = tmp_path / "t"
    shutil.copytree(generated / "train", train_only / "train")
    with pytest.raises(FileNotFoundError, match=r"no benchmark views found: .*holds split folder\(s\) train"):
        list(iter_views(train_only, "benchmark"))
    _table([{"view": "x", "view_idx": 1}], tmp_path / "bad" / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(DatasetError, match=r"train-00000-of-00001\.parquet: parquet shard lacks column\(s\) 'offset'"):
        list(iter_views(tmp_path / "bad"))


def test_released_layout_without_split_folders(tmp_path: Path) -> None:
    for idx in (10, 2):
        leaf = tmp_path / "eval_set" / "data_1" / "level_1" / f"sample_{idx}" / "view_02" / "offset3_fov1_dist1"
        leaf.mkdir(parents=True)
        (leaf / "gt.json").write_text(json.dumps({"task_main": idx}))
    (tmp_path / "eval_set" / "notes").mkdir()
    (tmp_path / "eval_set" / "notes" / "gt.json").write_text("[]")  # not a leaf folder: skipped
    views = list(iter_views(tmp_path))
    assert [v.gt["task_main"] for v in views] == [2, 10] and {v.split for v in views} == {None}
    assert views[0].structure_id == "eval_set/data_1/level_1/sample_2" and views[0].sample_idx == 2
    assert views[0].partner_view(2) == "eval_set/data_1/level_1/sample_2/view_04/offset3_fov1_dist1"
    assert {v.split for v in iter_views(tmp_path, "benchmark")} == {"benchmark"}
