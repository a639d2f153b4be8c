"""Correlation tables: Figure 13 (mental rotation vs every task), Figure 14 (bundles vs Object Counting), and the
Appendix F bundle couplings (scene fixed effect; scene + responder fixed effects).

A *bundle score* is the mean correctness over the bundle's answered tasks in a row (NaN when none is
answered). Correlations are Pearson over 0/1 correctness (and bundle fractions); "within-scene" means either
restricted to views where the responders disagree or demeaned per view, as each table states.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from eval.paper.common import (
    TASK_COLUMNS,
    Group,
    Pool,
    display_name,
    fe_pearson,
    paper_task_id,
    pearson,
    task_name,
    varying_views,
)
from eval.paper.twoway import pearson_r, scene_stats
from eval.stats import benjamini_hochberg

Row = dict[str, object]
ROTATION_TASKS: tuple[str, ...] = ("task10", "task11")
CROSSVIEW_BUNDLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Mental Rotation 90", ("task10",)), ("Mental Rotation 180", ("task11",)),
    ("Mental Rotation bundle", ("task10", "task11")), ("Referential chain", ("task2", "task6", "task7")),
    ("Visible + hidden mechanism", ("task5", "task8")),
)
"""Figure 14's bundles."""
HIERARCHY_BUNDLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Internal Referential Chain", ("task2", "task6", "task7")),
    ("Visible Count Hierarchy", ("task3", "task4", "task5")),
    ("Hidden Count Hierarchy", ("task3", "task7", "task8")),
    ("Summation Mechanism", ("task5", "task8")),
)
"""Appendix F's bundles (Hidden uses Support Column, task7)."""


def bundle_score(columns: list[np.ndarray]) -> np.ndarray:
    """Row-wise mean of the answered columns (NaN where none is answered)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.stack(columns), axis=0)


def rotation_rows(group: Group) -> list[Row]:
    """Figure 13: per responder, r of each rotation task with every task, naive and within varying views.

    Within-scene rows keep the views where either task's correctness varies across the group's responders.
    A task correlated with itself has r and p empty but its n.
    """
    targets = [t for t in TASK_COLUMNS if t in ROTATION_TASKS]
    compare = [t for t in TASK_COLUMNS if t not in targets] + targets
    present = [t for t in compare if group.any_has(t)]
    pool = group.pool(present)
    varying = {t: varying_views(pool.view, pool.values[t], group.n_views) for t in present}
    rows: list[Row] = []
    for model in group.models:
        codes = group.codes[model]
        for focus in (t for t in targets if group.has(model, t)):
            for task in (t for t in compare if group.has(model, t)):
                f, o = group.col(model, focus), group.col(model, task)
                for kind in ("naive", "within_scene"):
                    keep = (varying[focus] | varying[task])[codes] if kind == "within_scene" else np.ones(len(f), bool)
                    r, p = pearson(f[keep], o[keep]) if keep.any() else (math.nan, math.nan)
                    rows.append({
                        "group": group.name, "model": model, "display_name": display_name(model),
                        "correlation_type": kind, "focus_task": paper_task_id(focus), "source_focus_task": focus,
                        "focus_name": task_name(focus), "task": paper_task_id(task), "source_task": task,
                        "task_name": task_name(task), "pearson_r": r if task != focus else math.nan,
                        "p_value": p if task != focus else math.nan,
                        "n": int((~np.isnan(f[keep]) & ~np.isnan(o[keep])).sum()),
                    })
    return rows


def crossview_bundle_rows(group: Group) -> list[Row]:
    """Figure 14: per bundle, the scene fixed-effect r with Object Counting over all responders ("aggregate"),
    then per responder the plain r restricted to views where the pooled bundle score varies."""
    models = [m for m in group.models if group.has(m, "main")]
    if not models:
        return []
    rows: list[Row] = []
    for bundle, tasks in CROSSVIEW_BUNDLES:
        tasks_any = [t for t in tasks if any(group.has(m, t) for m in models)]
        if not tasks_any:
            continue
        pool = group.pool([*tasks_any, "main"], models)
        score = bundle_score([pool.values[t] for t in tasks_any])
        r, p = fe_pearson(pool.view, score, pool.values["main"], group.n_views)
        varying = varying_views(pool.view, score, group.n_views)
        n_varying = int(varying.sum())
        rows.append({"group": group.name, "level": "aggregate", "model": "aggregate", "display_name": "Aggregate",
                     "bundle": bundle, "pearson_r_with_object_count": r, "p_value": p,
                     "n": int((~np.isnan(score) & ~np.isnan(pool.values["main"])).sum()),
                     "n_varying_scenes": n_varying, "n_tasks": len(tasks_any)})
        for model in models:
            own = [t for t in tasks if group.has(model, t)]
            if not own:
                continue
            s, main = bundle_score([group.col(model, t) for t in own]), group.col(model, "main")
            if n_varying:
                keep = varying[group.codes[model]]
                s, main = s[keep], main[keep]
            r, p = pearson(s, main)
            rows.append({"group": group.name, "level": "per_model", "model": model,
                         "display_name": display_name(model), "bundle": bundle, "pearson_r_with_object_count": r,
                         "p_value": p, "n": int((~np.isnan(s) & ~np.isnan(main)).sum()),
                         "n_varying_scenes": n_varying, "n_tasks": len(own)})
    return rows


def _pool_bundle(group: Group, tasks: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, Pool] | None:
    """(pooled bundle score, pooled Object Counting, the pool) over the bundle's tasks any responder has."""
    present = [t for t in tasks if group.any_has(t)]
    if not present or not group.any_has("main"):
        return None
    pool = group.pool([*present, "main"])
    return bundle_score([pool.values[t] for t in present]), pool.values["main"], pool


def bundle_coupling_rows(group: Group) -> list[Row]:
    """tableF_bundle_coupling: per hierarchy bundle the pooled scene fixed-effect r with Object Counting
    (``aggregate``), then per responder r over the views where the pooled bundle score varies; BH within each
    level."""
    aggregate: list[Row] = []
    per_model: list[Row] = []
    for bundle, tasks in HIERARCHY_BUNDLES:
        pooled = _pool_bundle(group, tasks)
        if pooled is None:
            continue
        score, main, pool = pooled
        r, p = fe_pearson(pool.view, score, main, group.n_views)
        varying = varying_views(pool.view, score, group.n_views)
        aggregate.append({"modality": group.name, "bundle": bundle, "model": "aggregate", "r_ws": r, "p_ws": p,
                          "n_varying": int(varying.sum())})
        for model in group.models:
            own = [t for t in tasks if group.has(model, t)]
            if not own or not group.has(model, "main"):
                continue
            keep = varying[group.codes[model]]
            r_m, p_m = pearson(bundle_score([group.col(model, t) for t in own])[keep], group.col(model, "main")[keep])
            per_model.append({"modality": group.name, "bundle": bundle, "model": model, "r_ws": r_m, "p_ws": p_m,
                              "n_varying": int(varying.sum())})
    for rows in (aggregate, per_model):
        for row, value in zip(rows, benjamini_hochberg([float(r["p_ws"]) for r in rows]), strict=True):  # type: ignore[arg-type]
            row["p_ws_fdr"] = float(value)
    return aggregate + per_model


def bundle_twoway_rows(group: Group) -> list[Row]:
    """tableF_bundle_coupling_twoway: bundle vs Object Counting, r after removing scene means and r after
    removing scene and responder effects (two-way fixed effects), over rows where both exist."""
    rows: list[Row] = []
    for bundle, tasks in HIERARCHY_BUNDLES:
        pooled = _pool_bundle(group, tasks)
        if pooled is None:
            continue
        score, main, pool = pooled
        keep = ~np.isnan(score) & ~np.isnan(main)
        if keep.sum() < 3:
            continue
        view, model = pool.view[keep], pool.model[keep]
        r_one, _ = fe_pearson(view, score[keep], main[keep], group.n_views)
        rows.append({"modality": group.name, "bundle": bundle, "r_scene": r_one,
                     "r_scene_responder": pearson_r(scene_stats(view, model, score[keep], main[keep])),
                     "n": int(keep.sum())})
    return rows
