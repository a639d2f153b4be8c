"""Benchmark views to evaluate, read through the one dataset reader (``spatialiq_train.dataset``).

Both our generated split (``<data>/benchmark/level_1/sample_NNNNN/view_VV/offsetO_fovF_distD/``), its
parquet shards (``<data>/data/benchmark-*.parquet``, images embedded) and the released layout (the same
leaf folders under any prefix, e.g. ``eval_set/data_<ts>/level_1/...``) are read the same way: every
leaf view is one scene, keyed by its folder's path relative to the root (POSIX separators), which is
also the ``view`` column of the released ``eval_raw_*`` files.
"""

from __future__ import annotations

from pathlib import Path

from spatialiq_train.dataset import SCORED_FIELDS, SPLIT_DIRS, View, iter_views

Scene = View
"""A scene is a :class:`spatialiq_train.dataset.View` (the name eval code and its benchmarks use)."""
__all__ = ["SPLIT_DIRS", "Scene", "find_scenes"]


def find_scenes(data: str | Path, split: str | None = "benchmark") -> list[Scene]:
    """Every leaf view of ``data/split`` with its ground truth, in natural order of its key.

    ``data`` itself is read only when it holds none of the split folders (``SPLIT_DIRS``), as in the
    released layout; a missing ``split`` beside another split folder is a FileNotFoundError. Without leaf
    folders the ``data/<split>-*.parquet`` shards (and their embedded images) are read. Every scene needs
    the scored fields (``SCORED_FIELDS``) as integers; a malformed gt.json or row is a ValueError naming
    the file (and row) and the key.
    """
    return list(iter_views(data, split, required=SCORED_FIELDS))
