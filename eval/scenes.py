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

from data_gen.camera import LeafView, parse_leaf_dir
from spatialiq_train.io import read_json, resolve_inside

log = logging.getLogger(__name__)

GT_FILE = "gt.json"
IMAGE_FILE = "view.png"
REQUIRED_GT: tuple[str, ...] = (
    "task_main", "task2", "task3", "task4", "task5", "task6", "task7", "task8", "task9",
)
"""Integer fields every scored scene must have (task10/task11 are read when present)."""
_VIEW_RE = re.compile(r"^view_(\d+)$")
_NUM_RE = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Scene:
    """One leaf view of the benchmark."""

    view: str
    """Leaf folder relative to the data root, e.g. ``benchmark/level_1/sample_00001/view_01/offset3_fov1_dist1``."""
    leaf: LeafView
    gt: dict[str, Any] = field(repr=False)
    root: Path = field(repr=False)

    @property
    def image(self) -> Path:
        return self.root / self.view / IMAGE_FILE

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


def _natural_key(path: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in _NUM_RE.split(path)]


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


def find_scenes(data: str | Path, split: str | None = "benchmark") -> list[Scene]:
    """Every leaf view with a gt.json under ``data/split`` (or ``data`` when that folder is absent), sorted.

    Keys stay relative to ``data``. A malformed gt.json raises a ValueError naming the file and line.
    """
    root = Path(data)
    if not root.is_dir():
        raise FileNotFoundError(f"data folder {root} does not exist")
    base = root / split if split and (root / split).is_dir() else root
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
    scenes.sort(key=lambda s: _natural_key(s.view))
    return scenes
