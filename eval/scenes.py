"""Benchmark views to evaluate: discovery in the per-view folder layout, ground truth, partner views.

Both our generated split (``<data>/benchmark/level_1/sample_NNNNN/view_VV/offsetO_fovF_distD/``) and
the released layout (the same leaf folders under any prefix, e.g. ``eval_set/data_<ts>/level_1/...``)
are read the same way: every ``view_VV/<leaf>/gt.json`` below the root is one scene, keyed by the
leaf folder's path relative to the root (POSIX separators), which is also the ``view`` column of
the released ``eval_raw_*`` files.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spatialiq_train.io import natural_key, read_json, resolve_inside
from spatialiq_train.views import LeafView, parse_leaf_dir

log = logging.getLogger(__name__)

GT_FILE = "gt.json"
IMAGE_FILE = "view.png"
REQUIRED_GT: tuple[str, ...] = (
    "task_main", "task2", "task3", "task4", "task5", "task6", "task7", "task8", "task9",
)
"""Integer fields every scored scene must have (task10/task11 are read when present)."""
_VIEW_RE = re.compile(r"^view_(\d+)$")


@dataclass(frozen=True)
class Scene:
    """One leaf view of the benchmark."""

    view: str
    """Leaf folder relative to the data root, e.g. ``benchmark/level_1/sample_00001/view_01/offset3_fov1_dist1``."""
    leaf: LeafView
    gt: dict[str, Any] = field(repr=False)
    root: Path = field(repr=False)
    image_bytes: bytes | None = field(default=None, repr=False, compare=False)
    """PNG bytes when the scene came from a parquet shard with an image column."""

    @property
    def image(self) -> Path:
        return self.root / self.view / IMAGE_FILE

    @property
    def image_source(self) -> Path | bytes:
        """What an engine opens: the embedded PNG bytes when present, else the view.png path."""
        return self.image_bytes if self.image_bytes is not None else self.image

    @property
    def object_type(self) -> str:
        return str(self.gt.get("object_type", "cube"))

    def partner_view(self, step: int) -> str:
        """The same leaf under base view ``(v + step - 1) % 4 + 1`` (task10: step 1, task11: step 2)."""
        partner = self.leaf.partner(step)
        sample = self.view.rsplit("/", 2)[0]
        return f"{sample}/{partner.view_dir}/{self.view.rsplit('/', 1)[1]}"

    def partner_image(self, step: int) -> Path:
        return resolve_inside(self.root, self.partner_view(step)) / IMAGE_FILE


def _check_gt(gt: Any, path: Path) -> dict[str, Any]:
    if not isinstance(gt, dict):
        raise ValueError(f"{path}: line 1: ground truth must be a JSON object, got {type(gt).__name__}")
    for key in REQUIRED_GT:
        value = gt.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{path}: key {key!r} must be an integer, got {value!r}")
    for key in ("task10", "task11", "num_hidden_blocks", "total_blocks", "num_columns", "num_layers"):
        value = gt.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{path}: key {key!r} must be an integer or absent, got {value!r}")
    return gt


SPLIT_DIRS: tuple[str, ...] = ("train", "benchmark")
"""Split folders of our generated layout; a root holding none of them is the released (split-less) layout."""


def _split_base(root: Path, split: str | None) -> Path:
    """``root/split`` when it exists; ``root`` only when it holds no split folder at all; else an error."""
    if not split or (root / split).is_dir():
        return root / split if split else root
    present = [name for name in SPLIT_DIRS if (root / name).is_dir()]
    if present:
        raise FileNotFoundError(
            f"split folder {root / split} does not exist; {root} holds split folder(s) {', '.join(present)} "
            f"(pass --split with one of them, or a data root without split folders)"
        )
    return root


def find_scenes(data: str | Path, split: str | None = "benchmark") -> list[Scene]:
    """Every leaf view with a gt.json under ``data/split``, sorted.

    ``data`` itself is read only when it holds none of the split folders (:data:`SPLIT_DIRS`), as in
    the released layout; a missing ``split`` beside another split folder raises FileNotFoundError.

    Keys stay relative to ``data``. A malformed gt.json raises a ValueError naming the file and line.
    When there is no per-view folder at all but ``data/data/<split>-*.parquet`` shards exist, the
    scenes (and their embedded images) are read from those instead.
    """
    root = Path(data)
    if not root.is_dir():
        raise FileNotFoundError(f"data folder {root} does not exist")
    if split and not (root / split).is_dir() and sorted((root / "data").glob(f"{split}-*.parquet")):
        return scenes_from_parquet(root, split)
    base = _split_base(root, split)
    scenes: list[Scene] = []
    for gt_path in base.rglob(GT_FILE):
        leaf_dir, view_dir = gt_path.parent, gt_path.parent.parent
        m = _VIEW_RE.match(view_dir.name)
        if m is None:
            continue
        try:
            offset, fov, dist = parse_leaf_dir(leaf_dir.name)
        except ValueError:
            log.debug("skipping %s: not a leaf view folder", leaf_dir)
            continue
        gt = _check_gt(read_json(gt_path), gt_path)
        rel = leaf_dir.relative_to(root).as_posix()
        scenes.append(Scene(rel, LeafView(int(m.group(1)), offset, fov, dist), gt, root))
    if not scenes:
        raise FileNotFoundError(f"no view_VV/offsetO_fovF_distD/gt.json below {base}")
    scenes.sort(key=lambda s: natural_key(s.view))
    return scenes


def _parquet_gt(row: dict[str, Any], path: Path, index: int) -> dict[str, Any]:
    gt = {k: v for k, v in row.items() if k not in ("image", "visible_blocks", "height_map", "camera")}
    try:
        return _check_gt(gt, path)
    except ValueError as exc:
        raise ValueError(f"{exc} (row {index})") from None


def scenes_from_parquet(data: str | Path, split: str) -> list[Scene]:
    """Scenes from ``data/data/<split>-*.parquet`` (one row per leaf view, ``view`` = its folder path)."""
    import pyarrow.parquet as pq

    root = Path(data)
    scenes: list[Scene] = []
    for path in sorted((root / "data").glob(f"{split}-*.parquet")):
        table = pq.read_table(path)
        for column in ("view", "view_idx", "offset", "fov", "dist", *REQUIRED_GT):
            if column not in table.column_names:
                raise ValueError(f"{path}: parquet shard lacks column {column!r}")
        for i, row in enumerate(table.to_pylist()):
            view = row["view"]
            resolve_inside(root, view)
            image = row.get("image")
            leaf = LeafView(int(row["view_idx"]), float(row["offset"]), float(row["fov"]), float(row["dist"]))
            scenes.append(Scene(view, leaf, _parquet_gt(row, path, i), root,
                                image.get("bytes") if isinstance(image, dict) else None))
    if not scenes:
        raise FileNotFoundError(f"no rows in {root / 'data'}/{split}-*.parquet")
    scenes.sort(key=lambda s: natural_key(s.view))
    return scenes
