"""The dataset layout as generation code names it: every name here is defined in the core.

File names, shard names and the dataset readers live in :mod:`spatialiq_train.dataset`, the sample and
leaf folder names in :mod:`spatialiq_train.views` (one schema, read the same way by traces, eval,
check-splits and fidelity); they are re-exported here so the generator and its writers keep reading
``layout.view_relpath(...)``, ``layout.GT_FILE`` and so on. See the module docstring of
``spatialiq_train.dataset`` for the tree a dataset root holds.
"""

from __future__ import annotations

from spatialiq_train.dataset import (
    DATA_DIR,
    GEN_CONFIG_FILE,
    GT_FILE,
    IMAGE_FILE,
    MANIFEST_FILE,
    SCENE_FILE,
    SHARDS_DIR,
    find_gt_files,
    iter_leaf_dirs,
    iter_scene_files,
    read_gt,
    read_scene,
    shard_done_relpath,
    shard_parquet_relpath,
    shard_stem,
    split_of_path,
)
from spatialiq_train.views import (
    LEVEL,
    SAMPLE_DIGITS,
    SAMPLE_DIR_RE,
    parse_view_path,
    sample_dir_name,
    sample_relpath,
    view_relpath,
)

__all__ = [
    "DATA_DIR", "GEN_CONFIG_FILE", "GT_FILE", "IMAGE_FILE", "LEVEL", "MANIFEST_FILE", "SAMPLE_DIGITS", "SAMPLE_DIR_RE",
    "SCENE_FILE", "SHARDS_DIR", "find_gt_files", "iter_leaf_dirs", "iter_scene_files", "parse_view_path",
    "read_gt", "read_scene", "sample_dir_name", "sample_relpath", "shard_done_relpath", "shard_parquet_relpath",
    "shard_stem", "split_of_path", "view_relpath",
]
