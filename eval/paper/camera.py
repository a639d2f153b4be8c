"""Camera effects: Figure 18 (unpaired, per responder and task) and its within-structure paired version.

A view path ends in ``offset<O>_fov<F>_dist<D>``: the camera offset is O, and the view is *perspective* when
F >= 3 (a path without an F counts as not perspective). A *structure* is the path without that last part, so
the four camera settings of one structure are paired.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from eval.paper import pvalues
from eval.paper.common import HIERARCHY_COLUMNS, TASK_COLUMNS, Group, display_name, paper_task_id, task_name
from eval.stats import benjamini_hochberg

Row = dict[str, object]
_OFFSET = re.compile(r"offset([\d.]+)_")
_FOV = re.compile(r"fov(\d+)_")
_CAMERA_TAIL = re.compile(r"/offset[\d.]+_fov\d+_dist[\d.]+$")
NAMED_TASKS: tuple[str, ...] = ("task2", "task3", "task4", "task5", "task6", "task7", "task8", "main")
"""Tasks the paired table labels by name; the others keep their column name."""
MIN_STRUCTURES = 5


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def camera_factors(views: list[str]) -> dict[str, np.ndarray]:
    """``offset`` and ``perspective`` (1.0 when fov >= 3) per view; a factor no view names is absent."""
    return _factors_of(_parse_views(views), np.arange(len(views)))


@dataclass(frozen=True)
class _Parsed:
    """Camera fields of distinct view paths, parsed once per group (every responder shares the views)."""

    has_fov: np.ndarray
    perspective: np.ndarray
    has_offset: np.ndarray
    offset: np.ndarray
    structure: np.ndarray
    """Structure index per view: the path without its camera part, numbered in sorted order."""


def _parse_views(views: list[str]) -> _Parsed:
    offsets = [m.group(1) if (m := _OFFSET.search(v)) else None for v in views]
    fovs = [m.group(1) if (m := _FOV.search(v)) else None for v in views]
    names = [_CAMERA_TAIL.sub("", v) for v in views]
    lookup = {n: i for i, n in enumerate(sorted(set(names)))}
    return _Parsed(np.array([f is not None for f in fovs], dtype=bool),
                   np.array([1.0 if f is not None and float(f) >= 3 else 0.0 for f in fovs]),
                   np.array([o is not None for o in offsets], dtype=bool),
                   np.array([math.nan if o is None else _number(o) for o in offsets]),
                   np.fromiter(map(lookup.__getitem__, names), np.int64, len(names)))


def _factors_of(parsed: _Parsed, codes: np.ndarray) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    if parsed.has_fov[codes].any():
        out["perspective"] = parsed.perspective[codes]
    if parsed.has_offset[codes].any():
        out["offset"] = parsed.offset[codes]
    return out


def _welch(hi: np.ndarray, lo: np.ndarray) -> tuple[float, float]:
    """(se of the difference of means, Welch two-sided p)."""
    se = math.sqrt(lo.var(ddof=1) / lo.size + hi.var(ddof=1) / hi.size) if lo.size > 1 and hi.size > 1 else math.nan
    return se, pvalues.welch_ttest(hi, lo)


def camera_effect_rows(group: Group) -> list[Row]:
    """Figure 18: per responder, task and camera factor, high-level minus low-level accuracy (Welch test)."""
    rows: list[Row] = []
    parsed = _parse_views(group.view_names)
    for model in group.models:
        factors = _factors_of(parsed, group.codes[model])
        for task in (t for t in TASK_COLUMNS if group.has(model, t)):
            values = group.col(model, task)
            for factor in (f for f in ("perspective", "offset") if f in factors):
                level = factors[factor]
                levels = np.unique(level[~np.isnan(level)])
                if levels.size != 2:
                    continue
                lo = values[(level == levels[0]) & ~np.isnan(values)]
                hi = values[(level == levels[1]) & ~np.isnan(values)]
                if lo.size == 0 or hi.size == 0:
                    continue
                delta = float(hi.mean() - lo.mean())
                se, p = _welch(hi, lo)
                rows.append({
                    "group": group.name, "model": model, "display_name": display_name(model),
                    "task": paper_task_id(task), "source_task": task, "task_name": task_name(task), "factor": factor,
                    "low_level": float(levels[0]), "high_level": float(levels[1]), "delta_high_minus_low": delta,
                    "se": se, "p_value": p, "ci_low": delta - 1.96 * se, "ci_high": delta + 1.96 * se,
                    "n_low": int(lo.size), "n_high": int(hi.size),
                })
    return rows


def paired_deltas(struct: np.ndarray, block: np.ndarray, contrast: np.ndarray, values: np.ndarray, hi: float,
                  lo: float) -> np.ndarray:
    """Per structure (sorted), accuracy at ``contrast == hi`` minus at ``lo``, averaged over ``block`` levels
    where both exist; structures without any such pair are dropped."""
    keep = ~np.isnan(values) & ~np.isnan(block) & ~np.isnan(contrast)
    s, b, c, v = struct[keep], block[keep], contrast[keep], values[keep]
    levels_c, ci = np.unique(c, return_inverse=True)
    if hi not in levels_c or lo not in levels_c:
        return np.zeros(0)
    levels_b, bi = np.unique(b, return_inverse=True)
    n_s, n_b, n_c = int(struct.max()) + 1 if struct.size else 0, levels_b.size, levels_c.size
    key = (s * n_b + bi) * n_c + ci
    counts = np.bincount(key, minlength=n_s * n_b * n_c).reshape(n_s, n_b, n_c)
    sums = np.bincount(key, weights=v, minlength=n_s * n_b * n_c).reshape(n_s, n_b, n_c)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
        hi_i, lo_i = int(np.flatnonzero(levels_c == hi)[0]), int(np.flatnonzero(levels_c == lo)[0])
        delta = means[:, :, hi_i] - means[:, :, lo_i]
        defined = ~np.isnan(delta)
        per_struct = np.where(defined, delta, 0).sum(1) / defined.sum(1)
    return per_struct[defined.any(1)]


def _ttest(deltas: np.ndarray) -> tuple[float, float, float]:
    """(mean, t, p) of a one-sample t-test against 0; t and p NaN with fewer than 5 structures."""
    mean = float(np.mean(deltas)) if deltas.size else math.nan
    if deltas.size < MIN_STRUCTURES:
        return mean, math.nan, math.nan
    t, p = pvalues.ttest_1samp(deltas)
    return mean, t, p


def camera_within_structure_rows(group: Group) -> list[Row]:
    """figF18_camera_within_structure: paired perspective and offset effects per responder and task, with a
    one-sample t-test over structures and BH across the tasks of each responder."""
    tasks = [t for t in HIERARCHY_COLUMNS if group.any_has(t)]
    rows: list[Row] = []
    parsed = _parse_views(group.view_names)
    for model in group.models:
        codes = group.codes[model]
        # structures numbered over the group (sorted like each responder's own): paired_deltas keeps their order
        struct, persp, offset = parsed.structure[codes], parsed.perspective[codes], parsed.offset[codes]
        p_levels, o_levels = np.unique(persp[~np.isnan(persp)]), np.unique(offset[~np.isnan(offset)])
        model_rows = []
        for task in tasks:
            values = group.col(model, task)
            if not group.has(model, task) or np.isnan(values).all():
                continue
            dp = paired_deltas(struct, offset, persp, values, p_levels[-1], p_levels[0]) if p_levels.size > 1 \
                else np.zeros(0)
            do = paired_deltas(struct, persp, offset, values, o_levels[-1], o_levels[0]) if o_levels.size > 1 \
                else np.zeros(0)
            (pd_, tp, pp), (od, to, po) = _ttest(dp), _ttest(do)
            model_rows.append({
                "modality": group.name, "model": model, "task": task,
                "task_display": task_name(task) if task in NAMED_TASKS else task, "perspective_delta": pd_,
                "t_perspective": tp, "p_perspective": pp, "n_struct_perspective": int(dp.size),
                "offset_delta": od, "t_offset": to, "p_offset": po, "n_struct_offset": int(do.size),
            })
        for column in ("p_perspective", "p_offset"):
            adjusted = benjamini_hochberg([float(r[column]) for r in model_rows])  # type: ignore[arg-type]
            for row, value in zip(model_rows, adjusted, strict=True):
                row[column + "_fdr"] = float(value)
        rows += model_rows
    return rows
