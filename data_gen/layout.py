"""Paths of a generated dataset and readers for the per-view folder layout.

A dataset directory ``<out>/`` holds both output forms (benchmark-spec sections 6.1 and 6.2):

```
<out>/gen_config.json                                   the arguments that decide the bytes (resume check)
<out>/manifest.json                                     written by the final merge
<out>/<split>/level_1/sample_NNNNN/scene.json           one per structure (5-digit, 1-based)
<out>/<split>/level_1/sample_NNNNN/view_VV/offsetO_fovF_distD/gt.json   (+ view.png when rendered)
<out>/data/<split>-SSSSS-of-KKKKK.parquet               one row per leaf view
<out>/shards/<split>-SSSSS-of-KKKKK.done.json           completion record of a shard (its sha256)
```

Unlike the reference generator, sample folders are zero-padded to five digits so string order is
numeric order up to 99,999 structures; the leaf folder names are the spec's ``{:g}`` names.
The readers also accept the released layout (``eval_set/data_<ts>/level_1/sample_NN/...``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_gen.camera import LeafView, parse_leaf_dir
from spatialiq_train.io import natural_key, read_json

LEVEL = "level_1"
"""The only level of the released configuration (benchmark-spec 1.1)."""
SAMPLE_DIGITS = 5
GEN_CONFIG_FILE = "gen_config.json"
MANIFEST_FILE = "manifest.json"
DATA_DIR = "data"
SHARDS_DIR = "shards"
SCENE_FILE = "scene.json"
GT_FILE = "gt.json"
IMAGE_FILE = "view.png"

SAMPLE_DIR_RE = re.compile(r"^sample_(\d+)$", re.ASCII)
"""A sample folder name: ours (``sample_00001``) or the released layout's (``sample_1``)."""
_SAMPLE_RE = SAMPLE_DIR_RE
_VIEW_RE = re.compile(r"^view_(\d+)$")


def sample_dir_name(sample_idx: int) -> str:
    """``sample_00001`` for sample_idx 1."""
    if sample_idx < 1:
        raise ValueError(f"sample_idx must be >= 1, got {sample_idx}")
    return f"sample_{sample_idx:0{SAMPLE_DIGITS}d}"


def sample_relpath(split: str, sample_idx: int) -> str:
    """``<split>/level_1/sample_NNNNN`` relative to the dataset root."""
    return f"{split}/{LEVEL}/{sample_dir_name(sample_idx)}"


def view_relpath(split: str, sample_idx: int, leaf: LeafView) -> str:
    """``<split>/level_1/sample_NNNNN/view_VV/offsetO_fovF_distD`` relative to the dataset root."""
    return f"{sample_relpath(split, sample_idx)}/{leaf.relpath}"


def shard_stem(split: str, shard: int, num_shards: int) -> str:
    """``train-00003-of-00016``: the name shared by a shard's parquet file and its completion record."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is outside 0..{num_shards - 1}")
    return f"{split}-{shard:05d}-of-{num_shards:05d}"


def shard_parquet_relpath(split: str, shard: int, num_shards: int) -> str:
    return f"{DATA_DIR}/{shard_stem(split, shard, num_shards)}.parquet"


def shard_done_relpath(split: str, shard: int, num_shards: int) -> str:
    return f"{SHARDS_DIR}/{shard_stem(split, shard, num_shards)}.done.json"


@dataclass(frozen=True)
class ViewLocation:
    """Where one leaf view lives, parsed from its folder path."""

    sample_idx: int
    leaf: LeafView
    path: Path


def parse_view_path(path: str | Path) -> tuple[int, LeafView]:
    """``.../sample_NN/view_VV/offsetO_fovF_distD`` -> (sample_idx, LeafView); ValueError names the path."""
    p = Path(path)
    sample_m = _SAMPLE_RE.match(p.parent.parent.name)
    view_m = _VIEW_RE.match(p.parent.name)
    if not (sample_m and view_m):
        raise ValueError(f"{path}: not of the form .../sample_<N>/view_<VV>/offset<O>_fov<F>_dist<D>")
    offset, fov, dist = parse_leaf_dir(p.name)
    return int(sample_m.group(1)), LeafView(int(view_m.group(1)), offset, fov, dist)


def iter_scene_files(root: str | Path) -> Iterator[Path]:
    """Every ``scene.json`` under ``root`` in the per-view layout (any split, level or run folder).

    Sorted by ``spatialiq_train.io.natural_key`` of the path relative to ``root`` (POSIX), so the released
    layout's unpadded ``sample_N`` folders come in numeric order, the order traces and eval use.
    """
    root = Path(root)
    found = [p for p in root.rglob(SCENE_FILE) if _SAMPLE_RE.match(p.parent.name)]
    yield from sorted(found, key=lambda p: natural_key(p.relative_to(root).as_posix()))


def find_gt_files(root: str | Path) -> list[Path]:
    """Every ``gt.json`` under ``root`` (hidden folders skipped), in natural order of the path relative to root.

    Any folder holding a ``gt.json`` counts as a leaf view, whatever the folders above it are called.
    """
    root = Path(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if GT_FILE in filenames:
            found.append(Path(dirpath) / GT_FILE)
    return sorted(found, key=lambda p: natural_key(p.relative_to(root).as_posix()))


def iter_leaf_dirs(sample_dir: str | Path) -> Iterator[ViewLocation]:
    """The leaf folders of one sample folder that hold a ``gt.json``, sorted by view then leaf name."""
    sample_dir = Path(sample_dir)
    for gt in sorted(sample_dir.glob(f"view_*/*/{GT_FILE}")):
        sample_idx, leaf = parse_view_path(gt.parent)
        yield ViewLocation(sample_idx, leaf, gt.parent)


def read_scene(path: str | Path) -> dict[str, Any]:
    """Read a ``scene.json`` and check the keys every reader relies on; errors name the file and key."""
    scene = read_json(path)
    if not isinstance(scene, dict):
        raise ValueError(f"{path}: scene.json must hold a JSON object")
    hmap = scene.get("height_map")
    if not (isinstance(hmap, list) and all(isinstance(r, list) and all(isinstance(v, int) for v in r) for r in hmap)):
        raise ValueError(f"{path}: key 'height_map' must be a list of rows of integers")
    return scene


def read_gt(path: str | Path) -> dict[str, Any]:
    """Read a leaf ``gt.json`` (the file or its folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / GT_FILE
    gt = read_json(p)
    if not isinstance(gt, dict):
        raise ValueError(f"{p}: gt.json must hold a JSON object")
    return gt


def split_of_path(root: str | Path, path: str | Path) -> str:
    """The first folder of ``path`` below ``root``: the split name in our layout (``eval_set`` in the released one)."""
    rel = Path(path).resolve().relative_to(Path(root).resolve())
    return rel.parts[0]
