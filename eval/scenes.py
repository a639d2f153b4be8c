"""Benchmark views to evaluate, read through the one dataset reader (``spatialiq_train.core.dataset``).

Both our generated split (``<data>/benchmark/level_1/sample_NNNNN/view_VV/offsetO_fovF_distD/``), its
parquet shards (``<data>/data/benchmark-*.parquet``, images embedded) and the released layout (the same
leaf folders under any prefix, e.g. ``eval_set/data_<ts>/level_1/...``) are read the same way: every
leaf view is one scene, keyed by its folder's path relative to the root (POSIX separators), which is
also the ``view`` column of the released ``eval_raw_*`` files.
"""

from __future__ import annotations

from pathlib import Path

from spatialiq_train.core.dataset import SCORED_FIELDS, View, iter_views
from spatialiq_train.core.splits import PARTS


def find_scenes(data: str | Path, split: str | None = "benchmark") -> list[View]:
    """Every leaf view of ``data/split`` with its ground truth, in natural order of its key.

    ``data`` itself is read only when it holds none of the split folders (``spatialiq_train.core.splits.SPLITS``),
    as in the released layout; a missing ``split`` beside another split folder is a FileNotFoundError. Without
    leaf folders the ``data/<split>-*.parquet`` shards (and their embedded images) are read. Every scene needs
    the scored fields (``SCORED_FIELDS``) as integers; a malformed gt.json or row is a ValueError naming the file
    (and row) and the key. ``split`` may also name a part of the train split (``val``, ``warmup``, ``rl``:
    ``spatialiq_train.core.splits.PARTS``): each view's recorded part (``View.part``), the one the traces read.
    """
    if split not in PARTS:
        return list(iter_views(data, split, required=SCORED_FIELDS))
    views = [v for v in iter_views(data, "train", required=SCORED_FIELDS) if v.part == split]
    if not views:
        raise FileNotFoundError(f"{data}: no train view falls in the {split!r} partition")
    return views
