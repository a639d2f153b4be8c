"""Appendix F dependency tables (``text`` group): within-scene lifts, joint integrity, per-responder and
responder-controlled lifts, and the Object Counting McNemar family behind Table 6's significance marks.

All responders of the group are pooled row by row (responder order, then file row order). A *varying scene*
of a relation is a view whose prerequisite correctness differs between responders (for a joint relation:
either prerequisite differs), so a within-scene contrast compares responders on the same view.
"""

from __future__ import annotations

import math

import numpy as np

from eval.paper import pvalues
from eval.paper.common import Group, Pool, fe_pearson, varying_views
from eval.paper.twoway import scene_stats, slope_with_ci
from eval.stats import benjamini_hochberg

Row = dict[str, object]
UNARY_EDGES: tuple[tuple[str, str, str], ...] = (
    ("task2", "task6", "Internal Referential Chain"), ("task6", "task7", "Internal Referential Chain"),
    ("task3", "task5", "Visible Count Hierarchy"), ("task4", "task5", "Visible Count Hierarchy"),
    ("task3", "task8", "Hidden Count Hierarchy"), ("task7", "task8", "Hidden Count Hierarchy"),
    ("task5", "main", "Summation Mechanism"), ("task8", "main", "Summation Mechanism"),
)
"""(prerequisite, dependent, relation group) of every pre-specified edge (Figure 3)."""
JOINT_EDGES: tuple[tuple[str, str, str, str], ...] = (
    ("task3", "task4", "task5", "Visible Count Hierarchy"), ("task3", "task7", "task8", "Hidden Count Hierarchy"))
LEGACY_JOINT_EDGES: tuple[tuple[str, str, str, str], ...] = (
    ("task3", "task6", "task8", "Hidden Count Hierarchy (submitted S7 variant)"),)
"""The submitted appendix's Hidden relation (Direct Support instead of Support Column), kept as variant
``submitted_s7`` of the joint-integrity table."""
N_PERM, N_BOOT, LIFT_SEED = 500, 1000, 42
N_BOOT_TWOWAY, TWOWAY_SEED, MIN_CELL, MIN_COMMON = 2000, 1, 20, 10


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else math.nan


def _chi2_p(met: np.ndarray, unmet: np.ndarray) -> float:
    """Pearson chi-square (no continuity correction) p of the 2x2 met/unmet x dependent right/wrong table."""
    table = [[int(met.sum()), met.size - int(met.sum())], [int(unmet.sum()), unmet.size - int(unmet.sum())]]
    return pvalues.chi2_2x2(table)  # NaN for an empty row or column (expected frequency zero)


def summed_rows(table: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """(K, C) exact sums of the rows of ``table`` ((V, C) non-negative integers) picked by each of K rows of
    ``draws`` ((K, D) indices into V).

    The columns are packed side by side into int64 words, each field wide enough for the largest possible sum
    (the column maximum times D), so one gather and one row sum per word do the work of a (K, V) count matrix
    and its product with ``table``. Sums must stay below 2**63.
    """
    n_cols = table.shape[1]
    width = max(1, int(table.max(initial=0)) * draws.shape[1]).bit_length()
    per_word = max(1, 63 // width)
    sums: list[np.ndarray] = []
    for start in range(0, n_cols, per_word):
        fields = range(start, min(n_cols, start + per_word))
        word = np.zeros(table.shape[0], dtype=np.int64)
        for i, col in enumerate(fields):
            word |= table[:, col] << (i * width)
        total = np.take(word, draws).sum(axis=1)
        sums += [(total >> (i * width)) & ((1 << width) - 1) for i in range(len(fields))]
    return np.stack(sums, 1)


def bootstrap_lift_ci(pool: Pool, parent: np.ndarray, child: np.ndarray, varying: np.ndarray, n_views: int,
                      n_boot: int = N_BOOT, seed: int = LIFT_SEED) -> tuple[float, float]:
    """Scene-cluster bootstrap 95% interval of the within-scene lift: varying scenes (sorted by view id) drawn
    with replacement ``numpy.random.default_rng(seed).integers`` in one (n_boot, V) call; NaN with < 4 scenes
    or < 10 usable replicates. The official draw order follows a Python set and cannot be reproduced."""
    scenes = np.flatnonzero(varying)
    if scenes.size < 4:
        return math.nan, math.nan
    ws = varying[pool.view]
    met, unmet = ws & (parent == 1), ws & (parent == 0)
    stats = np.stack([np.bincount(pool.view[m], weights=w, minlength=n_views)[scenes]
                      for m, w in ((met, child[met]), (met, None), (unmet, child[unmet]), (unmet, None))], 1)
    table = stats.astype(np.int64)  # counts of rows and of right answers: integers, so every sum below is exact
    # (100, V) batches equal one (n_boot, V) draw (test_paper_draws.py); at 100 the arrays stay below the size
    # that the allocator maps fresh (and page-faults in) for every batch
    rng = np.random.default_rng(seed)
    sums = np.concatenate([summed_rows(table, rng.integers(0, scenes.size, size=(min(100, n_boot - i), scenes.size)))
                           for i in range(0, n_boot, 100)]).astype(np.float64)
    ok = (sums[:, 1] > 0) & (sums[:, 3] > 0)
    if ok.sum() < 10:
        return math.nan, math.nan
    lifts = sums[ok, 0] / sums[ok, 1] - sums[ok, 2] / sums[ok, 3]
    return float(np.percentile(lifts, 2.5)), float(np.percentile(lifts, 97.5))


def permutation_null(model: np.ndarray, parent: np.ndarray, child: np.ndarray, observed: float,
                     n_perm: int = N_PERM, seed: int = LIFT_SEED) -> tuple[float, float]:
    """(p, null mean) of a lift under within-responder shuffles of the prerequisite.

    Each replicate shuffles every responder's prerequisite labels (``Generator.permutation``, responders in
    order of first appearance, one fresh ``default_rng(seed)`` per relation, as the official module does) and
    recomputes the pooled lift; p = (1 + replicates >= observed) / (1 + replicates).
    """
    if n_perm <= 0 or math.isnan(observed):
        return math.nan, math.nan
    _, first = np.unique(model, return_index=True)
    groups = [model == model[i] for i in np.sort(first)]
    parents = [np.ascontiguousarray(parent[g]) for g in groups]
    childs = [np.ascontiguousarray(child[g]) for g in groups]
    met_n = float(parent.sum())
    unmet_n = float(parent.size - met_n)
    total = float(child.sum())
    if met_n <= 0 or unmet_n <= 0:
        return math.nan, math.nan
    # The draws are the official ones, one permutation per responder and replicate in that order: numpy's shuffle
    # is the whole cost, so the loop only keeps Python out of its way (counts are integers: the sums are exact).
    permute = np.random.default_rng(seed).permutation
    pairs = list(zip(parents, childs, strict=True))
    met = np.array([sum([c @ permute(p) for p, c in pairs]) for _ in range(n_perm)], dtype=np.float64)
    null = met / met_n - (total - met) / unmet_n
    return (1 + int((null >= observed).sum())) / (1 + n_perm), float(null.mean())


def _lift_record(group: Group, pool: Pool, parent: np.ndarray, child: np.ndarray,
                 varying: np.ndarray) -> Row | None:
    """The lift statistics of one relation over pooled rows without NaN; None when not estimable."""
    if parent.size < 10:
        return None
    ws = varying[pool.view]
    met, unmet = child[ws & (parent == 1)], child[ws & (parent == 0)]
    if met.size == 0 or unmet.size == 0:
        return None
    lift = _mean(met) - _mean(unmet)
    lo, hi = bootstrap_lift_ci(pool, parent, child, varying, group.n_views)
    r, p = fe_pearson(pool.view, parent, child, group.n_views)
    perm_p, null_mean = permutation_null(pool.model[ws], parent[ws], child[ws], lift)
    return {"naive_lift": _mean(child[parent == 1]) - _mean(child[parent == 0]), "ws_met": _mean(met),
            "ws_unmet": _mean(unmet), "ws_lift": lift, "ws_ci_low": lo, "ws_ci_high": hi,
            "p_ws_lift": _chi2_p(met, unmet), "r_within": r, "p_within": p, "null_mean": null_mean,
            "perm_p": perm_p, "n_varying": int(varying.sum())}


def _complete(group: Group, tasks: tuple[str, ...], models: list[str] | None = None) -> Pool | None:
    """Pooled rows where every task of ``tasks`` is answered; None if no responder has one of them."""
    names = group.models if models is None else models
    if not all(any(group.has(m, t) for m in names) for t in tasks):
        return None
    pool = group.pool(tasks, names)
    keep = np.logical_and.reduce([~np.isnan(pool.values[t]) for t in tasks])
    return pool.take(keep)


def within_scene_lift_rows(group: Group) -> list[Row]:
    """tableF_within_scene_lift: per edge (then per joint relation) naive and within-scene lifts and tests."""
    rows: list[Row] = []
    for pc, nc, label in UNARY_EDGES:
        pool = _complete(group, (pc, nc))
        if pool is None:
            continue
        varying = varying_views(pool.view, pool.values[pc], group.n_views)
        rec = _lift_record(group, pool, pool.values[pc], pool.values[nc], varying)
        if rec:
            rows.append({**rec, "group": label, "relation": f"{pc}->{nc}", "kind": "unary", "parent_1": pc,
                         "parent_2": "", "target": nc})
    for p1, p2, nc, label in JOINT_EDGES:
        pool = _complete(group, (p1, p2, nc))
        if pool is None:
            continue
        joint = ((pool.values[p1] == 1) & (pool.values[p2] == 1)).astype(np.float64)
        varying = (varying_views(pool.view, pool.values[p1], group.n_views)
                   | varying_views(pool.view, pool.values[p2], group.n_views))
        rec = _lift_record(group, pool, joint, pool.values[nc], varying)
        if rec:
            rows.append({**rec, "group": label, "relation": f"{p1}&{p2}->{nc}", "kind": "joint", "parent_1": p1,
                         "parent_2": p2, "target": nc})
    if rows:
        for column in ("p_ws_lift", "perm_p"):
            adjusted = benjamini_hochberg([float(r[column]) for r in rows])  # type: ignore[arg-type]
            for row, value in zip(rows, adjusted, strict=True):
                row[column + "_fdr"] = float(value)
    return [{"modality": group.name, **r} for r in rows]


def joint_integrity_rows(group: Group) -> list[Row]:
    """tableF_joint_integrity: P(P1 = 1 and P2 = 1 | C = 1) per responder (both Hidden variants)."""
    edges = [(*e, "prespecified_s8") for e in JOINT_EDGES] + [(*e, "submitted_s7") for e in LEGACY_JOINT_EDGES]
    rows: list[Row] = []
    for p1, p2, nc, label, variant in edges:
        for model in group.models:
            if not all(group.has(model, t) for t in (p1, p2, nc)):
                continue
            a, b, c = (group.col(model, t) for t in (p1, p2, nc))
            keep = ~np.isnan(a) & ~np.isnan(b) & (c == 1)
            if keep.any():
                rows.append({"modality": group.name, "variant": variant, "group": label,
                             "relation": f"{p1}&{p2}->{nc}", "model": model,
                             "joint_integrity": float(((a[keep] == 1) & (b[keep] == 1)).mean()),
                             "n_child_correct": int(keep.sum())})
    return rows


def per_responder_lift_rows(group: Group, models: list[str] | None = None) -> list[Row]:
    """tableF_per_responder_lift: inside each responder, P(C | P1 and P2) - P(C | not both); NaN and
    ``included`` False when either condition has fewer than 20 rows."""
    rows: list[Row] = []
    for p1, p2, nc, label in JOINT_EDGES:
        for model in group.models if models is None else models:
            if not all(group.has(model, t) for t in (p1, p2, nc)):
                continue
            a, b, c = (group.col(model, t) for t in (p1, p2, nc))
            keep = ~np.isnan(a) & ~np.isnan(b) & ~np.isnan(c)
            met = (a[keep] == 1) & (b[keep] == 1)
            n_met, n_unmet = int(met.sum()), int((~met).sum())
            included = n_met >= MIN_CELL and n_unmet >= MIN_CELL
            lift = _mean(c[keep][met]) - _mean(c[keep][~met]) if included else math.nan
            rows.append({"modality": group.name, "relation": f"{p1}&{p2}->{nc}", "group": label, "model": model,
                         "n_met": n_met, "n_unmet": n_unmet, "included": included, "marginal_lift": lift})
    return rows


def responder_controlled_rows(group: Group) -> list[Row]:
    """tableF_responder_controlled_lift: scene-only lift vs two-way fixed-effect slope, all responders and
    (when a human row exists) models only."""
    subsets = [("all", group.models)]
    if "human" in group.models:
        subsets.append(("models_only", [m for m in group.models if m != "human"]))
    rows: list[Row] = []
    for name, models in subsets:
        marginal = per_responder_lift_rows(group, models)
        for p1, p2, nc, label in JOINT_EDGES:
            pool = _complete(group, (p1, p2, nc), models)
            if pool is None:
                continue
            x, y = pool.values[p1] * pool.values[p2], pool.values[nc]
            varying = (varying_views(pool.view, pool.values[p1], group.n_views)
                       | varying_views(pool.view, pool.values[p2], group.n_views))[pool.view]
            slope, lo, hi, p_le0 = slope_with_ci(scene_stats(pool.view, pool.model, x, y), N_BOOT_TWOWAY,
                                                 TWOWAY_SEED)
            kept = [r for r in marginal if r["relation"] == f"{p1}&{p2}->{nc}" and r["included"]]
            rows.append({
                "modality": group.name, "subset": name, "relation": f"{p1}&{p2}->{nc}", "group": label,
                "scene_only_lift": _mean(y[varying & (x == 1)]) - _mean(y[varying & (x == 0)]),
                "twoway_fe_slope": slope, "ci_low": lo, "ci_high": hi, "p_boot_le0": p_le0,
                "responders_positive": sum(1 for r in kept if float(r["marginal_lift"]) > 0),  # type: ignore[arg-type]
                "responders_total": len(kept),
                "responders_excluded": float(len(group.models) - len(kept)) if name == "all" else math.nan,
                "n": int(x.size),
            })
    return rows


def mcnemar_rows(group: Group) -> list[Row]:
    """table6_mcnemar_object_counting: every pair of responders ranked by Object Counting accuracy; exact
    two-sided McNemar on shared views (a missing answer counts as wrong), BH-adjusted over all pairs."""
    accs = {m: float(np.nanmean(group.col(m, "main"))) for m in group.models}
    names = sorted(accs, key=lambda m: -accs[m])
    answers, seen = {}, {}
    for m in names:
        answers[m] = np.zeros(group.n_views)
        seen[m] = np.zeros(group.n_views, dtype=bool)
        answers[m][group.codes[m]] = np.nan_to_num(group.col(m, "main"), nan=0.0)
        seen[m][group.codes[m]] = True
    rows: list[Row] = []
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            b = names[j]
            common = seen[a] & seen[b]
            n_b = n_c = 0
            p = math.nan
            if common.sum() >= MIN_COMMON:
                ya, yb = answers[a][common], answers[b][common]
                n_b, n_c = int(((ya == 0) & (yb == 1)).sum()), int(((ya == 1) & (yb == 0)).sum())
                p = 1.0 if n_b + n_c == 0 else pvalues.binomtest(n_b, n_b + n_c, 0.5)
            rows.append({"modality": group.name, "model_a": a, "model_b": b, "acc_a": accs[a], "acc_b": accs[b],
                         "n_common": int(common.sum()), "a_wrong_b_right": n_b, "a_right_b_wrong": n_c,
                         "p_mcnemar": p, "is_adjacent": j == i + 1})
    for row, value in zip(rows, benjamini_hochberg([float(r["p_mcnemar"]) for r in rows]), strict=True):  # type: ignore[arg-type]
        row["p_mcnemar_fdr"] = float(value)
    return rows
