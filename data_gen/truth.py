"""Per-view ground truth (benchmark-spec section 4.2-4.3) and its invariants.

All functions are pure. Visible sets come in as a mapping ``LeafView -> frozenset`` so that the
ray caster (cubes) and a renderer's instance buffer (other object types) feed the same code.
Definitions follow the reference generator's code, quirks included: task8 counts *visible*
blocks standing directly on a non-visible block; task10/task11 are ``|V_this \\ V_partner|``;
clusters are 6-connected components of the whole retained structure; ``task_main`` is the
view-dependent ``|needed(V)|``.

Besides the benchmark keys, every gt dict ends with ``camera``: the leaf camera's ``position`` and
``target`` (metres, world frame of benchmark-spec 3.1), ``fov_deg`` (full field of view),
``focal_mm`` (for the 20.955 mm aperture) and ``resolution`` (pixels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from data_gen.camera import RESOLUTION, leaf_camera
from data_gen.heightmap import Block, as_height_map
from data_gen.structure import structure_id
from data_gen.visibility import cast, support_closure, visible_set
from spatialiq_train.core.dataset import GT_INT_FIELDS, GroundTruthError
from spatialiq_train.core.truth import count_relations
from spatialiq_train.core.views import LEAF_VIEWS, LeafView

TASK1_ANSWER = "blocks"
"""task1 is always the literal ``"blocks"``, whatever the object type (spec 7.1 item 5)."""


def exact_visible_sets(
    height_map: np.ndarray, resolution: int = RESOLUTION, max_height: int = 4
) -> dict[LeafView, frozenset[Block]]:
    """Pixel-visible block sets of all 16 leaf views from the ray caster (at least one pixel each)."""
    h = as_height_map(height_map, "exact_visible_sets")
    rows, cols = h.shape
    layers = int(h.max())
    out: dict[LeafView, frozenset[Block]] = {}
    for leaf in LEAF_VIEWS:
        ids, _ = cast(h, leaf_camera(rows, cols, layers, leaf, resolution), max_height)
        out[leaf] = frozenset(visible_set(ids, cols, max_height))
    return out


def top_columns(height_map: np.ndarray) -> list[tuple[int, int]]:
    """``Top``: the columns whose height equals the global maximum L (empty for an empty map)."""
    h = as_height_map(height_map, "top_columns")
    top = int(h.max())
    if top == 0:
        return []
    return [(int(i), int(j)) for i, j in zip(*np.nonzero(h == top), strict=True)]


def support_sets(height_map: np.ndarray) -> tuple[set[Block], set[Block]]:
    """(S6, S7): blocks directly under a global-top block, and every block under one, in Top columns."""
    h = as_height_map(height_map, "support_sets")
    top = int(h.max())
    if top < 2:
        return set(), set()
    cols = top_columns(h)
    return {(i, j, top - 2) for i, j in cols}, {(i, j, k) for i, j in cols for k in range(top - 1)}


def cluster_count(height_map: np.ndarray) -> int:
    """task9: connected components of all blocks under 6-connectivity (face contact, vertical included)."""
    h = as_height_map(height_map, "cluster_count")
    rows, cols = h.shape
    blocks = {(i, j, k) for i in range(rows) for j in range(cols) for k in range(int(h[i, j]))}
    seen: set[Block] = set()
    count = 0
    for start in sorted(blocks):
        if start in seen:
            continue
        count += 1
        stack = [start]
        seen.add(start)
        while stack:
            i, j, k = stack.pop()
            for di, dj, dk in ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1)):
                nb = (i + di, j + dj, k + dk)
                if nb in blocks and nb not in seen:
                    seen.add(nb)
                    stack.append(nb)
    return count


def task8_set(visible: frozenset[Block] | set[Block]) -> set[Block]:
    """Visible blocks ``(i, j, k)``, ``k >= 1``, whose block directly below is not visible."""
    return {(i, j, k) for i, j, k in visible if k >= 1 and (i, j, k - 1) not in visible}


def _camera_fields(height_map: np.ndarray, leaf: LeafView, resolution: int) -> dict[str, Any]:
    rows, cols = height_map.shape
    cam = leaf_camera(rows, cols, int(height_map.max()), leaf, resolution)
    return {
        "position": [float(v) for v in cam.position],
        "target": [float(v) for v in cam.target],
        "fov_deg": float(cam.fov_deg),
        "focal_mm": float(cam.focal_mm),
        "resolution": int(cam.resolution),
    }


def view_truth(
    height_map: np.ndarray,
    leaf: LeafView,
    visible: Mapping[LeafView, frozenset[Block]],
    object_type: str = "cube",
    sample_idx: int | None = None,
    resolution: int = RESOLUTION,
) -> dict[str, Any]:
    """The gt.json dict of one leaf view, keys in the order of section 4.2 (plus ``camera``)."""
    h = as_height_map(height_map, "view_truth")
    missing = [lv.relpath for lv in (leaf, leaf.partner(1), leaf.partner(2)) if lv not in visible]
    if missing:
        raise ValueError(f"view_truth: no visible set given for leaf view(s) {', '.join(missing)}")
    v = frozenset(visible[leaf])
    if not v:
        raise GroundTruthError(
            f"structure {structure_id(h)}: leaf {leaf.relpath}: the visible set is empty "
            "(an exact caster or instance buffer never gives an empty set for a non-empty structure)"
        )
    outside = sorted(b for b in v if not (0 <= b[0] < h.shape[0] and 0 <= b[1] < h.shape[1] and 0 <= b[2] < h[b[:2]]))
    if outside:
        raise GroundTruthError(f"structure {structure_id(h)}: leaf {leaf.relpath}: visible blocks {outside} "
                               "are not blocks of the height map")
    layers = int(h.max())
    s6, s7 = support_sets(h)
    needed = support_closure(v)
    columns = int((h > 0).sum())
    gt: dict[str, Any] = {"object_type": object_type}
    if sample_idx is not None:
        gt["sample_idx"] = int(sample_idx)
    gt.update({
        "view_idx": leaf.view_idx,
        "offset": float(leaf.offset),
        "fov": float(leaf.fov),
        "dist": float(leaf.dist),
        "task1": TASK1_ANSWER,
        "task_main": len(needed),
        "task2": sum(1 for b in v if b[2] == layers - 1),
        "task3": columns,
        "task4": layers,
        "total_blocks": len(needed),
        "num_hidden_blocks": len(needed) - len(v),
        "num_columns": columns,
        "num_layers": layers,
        "task5": len(v),
        "task6": len(s6 & v),
        "task7": len(s7 & v),
        "task8": len(task8_set(v)),
        "task9": cluster_count(h),
        "task10": len(v - frozenset(visible[leaf.partner(1)])),
        "task11": len(v - frozenset(visible[leaf.partner(2)])),
        "visible_blocks": [[int(i), int(j), int(k)] for i, j, k in sorted(v)],
        "camera": _camera_fields(h, leaf, resolution),
    })
    return gt


_INT_FIELDS = ("view_idx", *GT_INT_FIELDS)


def _list_relations(gt: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(relation, holds) tying the written ``visible_blocks`` list to the counts."""
    g = gt
    vis = [tuple(b) for b in g["visible_blocks"]]
    vis_set = frozenset(vis)
    return [
        ("task1 == 'blocks'", g["task1"] == TASK1_ANSWER),
        ("len(visible_blocks) == task5", len(vis) == g["task5"]),
        ("visible_blocks sorted and distinct", vis == sorted(vis_set)),
        ("visible_blocks layers < task4", all(b[2] < g["task4"] for b in vis)),
        ("task_main == |needed(visible_blocks)|", len(support_closure(vis_set)) == g["task_main"]),
        ("task8 == |visible on a non-visible block|", len(task8_set(vis_set)) == g["task8"]),
    ]


def check_invariants(gt: Mapping[str, Any], structure_id: str, leaf: LeafView) -> None:
    """Check one freshly generated gt dict against the invariants of section 4.3 (a generation self-check; a gt.json
    read from disk is checked by ``spatialiq_train.core.dataset.validate_gt``); a violation raises GroundTruthError."""
    where = f"structure {structure_id}, leaf {leaf.relpath}"
    missing = [key for key in (*_INT_FIELDS, "task1", "visible_blocks") if key not in gt]
    if missing:
        raise GroundTruthError(f"{where}: gt lacks key(s) {', '.join(missing)}")
    bad = [key for key in _INT_FIELDS if isinstance(gt[key], bool) or not isinstance(gt[key], int) or gt[key] < 0]
    if bad:
        raise GroundTruthError(f"{where}: field(s) {', '.join(f'{k}={gt[k]!r}' for k in bad)} "
                               "must be non-negative integers")
    vis = gt["visible_blocks"]
    if not isinstance(vis, (list, tuple)) or not all(
            isinstance(b, (list, tuple)) and len(b) == 3 and all(isinstance(v, int) and v >= 0 for v in b)
            for b in vis):
        raise GroundTruthError(f"{where}: visible_blocks must be a list of [i, j, k] non-negative integers")
    placed = (gt["view_idx"], gt.get("offset"), gt.get("fov"), gt.get("dist"))
    if placed != (leaf.view_idx, leaf.offset, leaf.fov, leaf.dist):
        raise GroundTruthError(f"{where}: (view_idx, offset, fov, dist) = {placed} does not match the leaf")
    broken = [relation for relation, holds in count_relations(gt) + _list_relations(gt) if not holds]
    if broken:
        values = ", ".join(f"{k}={gt[k]}" for k in _INT_FIELDS if k != "view_idx")
        raise GroundTruthError(f"{where}: broken relation(s) {'; '.join(broken)} ({values})")


def structure_truth(
    height_map: np.ndarray,
    object_type: str = "cube",
    resolution: int = RESOLUTION,
    visible: Mapping[LeafView, frozenset[Block]] | None = None,
    sample_idx: int | None = None,
) -> dict[LeafView, dict[str, Any]]:
    """gt dicts of all 16 leaf views, each checked, plus the structure-level constants across views."""
    h = as_height_map(height_map, "structure_truth")
    sid = structure_id(h)
    if visible is None:
        visible = exact_visible_sets(h, resolution)
    out: dict[LeafView, dict[str, Any]] = {}
    for leaf in LEAF_VIEWS:
        gt = view_truth(h, leaf, visible, object_type, sample_idx, resolution)
        check_invariants(gt, sid, leaf)
        if gt["task_main"] > int(h.sum()):
            raise GroundTruthError(f"structure {sid}, leaf {leaf.relpath}: broken relation task_main <= "
                                   f"structure total ({gt['task_main']} > {int(h.sum())})")
        out[leaf] = gt
    first = LEAF_VIEWS[0]
    for key in ("task2", "task3", "task4", "task9"):
        values = {leaf.relpath: gt[key] for leaf, gt in out.items()}
        if len(set(values.values())) > 1:
            odd = next(rel for rel, val in values.items() if val != out[first][key])
            raise GroundTruthError(f"structure {sid}, leaf {odd}: broken relation {key} constant across views "
                                   f"({key}={values[odd]} here, {out[first][key]} in {first.relpath})")
    return out
