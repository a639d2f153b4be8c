"""Folder names and readers of the per-view layout (benchmark-spec 6.1, our 5-digit sample folders)."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_gen.split_check import split_of_path
from spatialiq_train.core.dataset import (
    iter_leaf_dirs,
    iter_scene_files,
    read_gt,
    read_scene,
    shard_done_relpath,
    shard_parquet_relpath,
    shard_stem,
)
from spatialiq_train.core.io import atomic_write_json
from spatialiq_train.core.views import (
    LEAF_VIEWS,
    LeafView,
    parse_view_path,
    sample_dir_name,
    sample_relpath,
    view_relpath,
)


def test_leaf_folder_names_follow_the_spec_g_format() -> None:
    names = {view_relpath("train", 7, leaf).split("/", 3)[3] for leaf in LEAF_VIEWS}
    assert names == {
        f"view_{v:02d}/{leaf}" for v in (1, 2, 3, 4)
        for leaf in ("offset3_fov1_dist1", "offset12.5_fov1_dist1", "offset3_fov3_dist0.3", "offset12.5_fov3_dist0.3")
    }
    leaf = LeafView(1, 12.5, 3.0, 0.3)
    assert view_relpath("benchmark", 1, leaf) == "benchmark/level_1/sample_00001/view_01/offset12.5_fov3_dist0.3"
    assert view_relpath("train", 123, LeafView(4, 3.0, 1.0, 1.0)) == (
        "train/level_1/sample_00123/view_04/offset3_fov1_dist1")


def test_sample_folder_padding_sorts_numerically() -> None:
    names = [sample_dir_name(i) for i in (1, 9, 10, 99, 100, 12345)]
    assert names == sorted(names)
    assert names[0] == "sample_00001"
    with pytest.raises(ValueError, match="sample_idx must be >= 1"):
        sample_dir_name(0)


def test_shard_names_and_bad_index() -> None:
    assert shard_parquet_relpath("train", 3, 16) == "data/train-00003-of-00016.parquet"
    assert shard_done_relpath("benchmark", 0, 1) == "shards/benchmark-00000-of-00001.done.json"
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        shard_stem("train", 2, 2)


@pytest.mark.parametrize("leaf", LEAF_VIEWS)
def test_parse_view_path_round_trips(leaf: LeafView) -> None:
    assert parse_view_path(view_relpath("train", 42, leaf)) == (42, leaf)


def test_parse_view_path_reads_the_released_layout_and_rejects_others() -> None:
    released = "eval_set/data_20260403_170859/level_1/sample_01/view_03/offset12.5_fov1_dist1"
    assert parse_view_path(released) == (1, LeafView(3, 12.5, 1.0, 1.0))
    with pytest.raises(ValueError, match="sample_<N>/view_<VV>"):
        parse_view_path("train/level_1/sample_01/offset3_fov1_dist1")
    with pytest.raises(ValueError, match="offset<O>_fov<F>_dist<D>"):
        parse_view_path("x/sample_01/view_01/offset_3_fov_1_dist_1")


def test_readers_walk_a_tree(tmp_path: Path) -> None:
    for idx in (2, 1):
        sample = tmp_path / sample_relpath("train", idx)
        atomic_write_json(sample / "scene.json", {"height_map": [[1, 0], [0, 2]], "sample_idx": idx})
        for leaf in LEAF_VIEWS[:3]:
            atomic_write_json(tmp_path / view_relpath("train", idx, leaf) / "gt.json", {"view_idx": 1})
    (tmp_path / "train" / "level_1" / "notasample").mkdir()
    scenes = list(iter_scene_files(tmp_path))
    assert [p.parent.name for p in scenes] == ["sample_00001", "sample_00002"]
    assert split_of_path(tmp_path, scenes[0]) == "train"
    views = list(iter_leaf_dirs(scenes[0].parent))
    assert len(views) == 3 and {v.leaf for v in views} == set(LEAF_VIEWS[:3])
    assert all(v.sample_idx == 1 for v in views)
    assert read_gt(views[0].path) == {"view_idx": 1}


def test_read_scene_names_the_bad_key(tmp_path: Path) -> None:
    path = tmp_path / "scene.json"
    atomic_write_json(path, {"height_map": [[1, "x"]]})
    with pytest.raises(ValueError, match=r"scene\.json: key 'height_map'"):
        read_scene(path)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1"):
        read_scene(path)


def test_scene_files_of_the_released_layout_come_in_numeric_order(tmp_path: Path) -> None:
    for idx in (10, 2, 1, 100, 9):
        atomic_write_json(tmp_path / "eval_set" / "data_x" / "level_1" / f"sample_{idx}" / "scene.json",
                          {"height_map": [[1]]})
    names = [p.parent.name for p in iter_scene_files(tmp_path)]
    assert names == ["sample_1", "sample_2", "sample_9", "sample_10", "sample_100"]
