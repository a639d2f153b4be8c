"""Hierarchy metrics of one responder: summary columns, summation 2x2, composition diagnostics.

Definitions: ../shared/docs/metrics.md sections 3-5. Inputs are a :class:`~eval.rawcsv.ResponderTable`
(per-view 1/0/NaN correctness plus predictions and ground truth); rows with a missing value in the
columns a statistic uses are dropped for that statistic.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from eval.rawcsv import ResponderTable
from spatialiq_train.core.errors import InputError

Convention = Literal["prerequisite_given_dependent", "dependent_given_prerequisite"]
CONVENTIONS: tuple[Convention, ...] = ("prerequisite_given_dependent", "dependent_given_prerequisite")
SUMMARY_COLUMNS: tuple[str, ...] = (
    "object_count", "visible_count", "hidden_count", "referential_chain", "visible_support", "hidden_support",
    "summation_mechanism",
)
CHAIN_EDGES: tuple[tuple[str, str], ...] = (("task2", "task6"), ("task6", "task7"))
VISIBLE_SUPPORT_EDGES: tuple[tuple[str, str], ...] = (("task3", "task5"), ("task4", "task5"))
HIDDEN_SUPPORT_EDGES: tuple[tuple[str, str], ...] = (("task3", "task8"), ("task7", "task8"))
CELLS: tuple[tuple[int, int, str], ...] = ((1, 1, "V+ H+"), (1, 0, "V+ H-"), (0, 1, "V- H+"), (0, 0, "V- H-"))
COMPOSITION_COLUMNS: tuple[str, ...] = ("main_pred", "main_gt", "task5_pred", "task5_gt", "task8_pred", "task8_gt")


def check_convention(name: str, option: str | None = None) -> Convention:
    """``name`` as a Convention; an unknown one is an InputError (naming ``option``, the flag it came from, if any)."""
    if name not in CONVENTIONS:
        where = f"{option}: " if option else ""
        raise InputError(f"{where}unknown conditional convention {name!r}; valid: {', '.join(CONVENTIONS)}")
    return name  # type: ignore[return-value]


def _rate(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


def edge_counts(table: ResponderTable, prerequisite: str, dependent: str, convention: Convention) -> tuple[int, int]:
    """(testable, passing) rows of edge P -> C under ``convention``; rows missing P or C are dropped.

    prerequisite_given_dependent: testable rows have C = 1, passing ones also P = 1.
    dependent_given_prerequisite: testable rows have P = 1, passing ones also C = 1.
    """
    if prerequisite not in table.correct or dependent not in table.correct:
        return 0, 0
    p, c = table.correct[prerequisite], table.correct[dependent]
    keep = ~np.isnan(p) & ~np.isnan(c)
    p, c = p[keep], c[keep]
    given, other = (c, p) if convention == "prerequisite_given_dependent" else (p, c)
    testable = given == 1
    return int(testable.sum()), int((other[testable] == 1).sum())


def edge_integrity(table: ResponderTable, prerequisite: str, dependent: str, convention: Convention) -> float:
    """The conditional accuracy of one edge; NaN when no row is testable."""
    testable, passing = edge_counts(table, prerequisite, dependent, convention)
    return passing / testable if testable else math.nan


def _bundle(table: ResponderTable, edges: tuple[tuple[str, str], ...], convention: Convention) -> float:
    values = [edge_integrity(table, p, c, convention) for p, c in edges]
    if convention == "prerequisite_given_dependent":
        return math.nan if any(math.isnan(v) for v in values) else float(np.mean(values))
    defined = [v for v in values if not math.isnan(v)]
    return float(np.mean(defined)) if defined else math.nan


def referential_chain(table: ResponderTable, convention: Convention) -> float:
    """Int. Ref. Chain: pooled ``1 - violations / testable`` (P|C), or the mean of defined edges (C|P)."""
    if convention == "prerequisite_given_dependent":
        counts = [edge_counts(table, p, c, convention) for p, c in CHAIN_EDGES]
        testable = sum(t for t, _ in counts)
        violations = sum(t - k for t, k in counts)
        return 1.0 - violations / testable if testable else math.nan
    return _bundle(table, CHAIN_EDGES, convention)


def residuals(table: ResponderTable) -> tuple[np.ndarray, np.ndarray]:
    """(rows used, residual) where residual = main error - (task5 error + task8 error), over complete rows."""
    if not all(t in table.pred for t in ("main", "task5", "task8")):
        return np.zeros(len(table), dtype=bool), np.zeros(0)
    cols = {"main_pred": table.pred["main"], "main_gt": table.gt["main"], "task5_pred": table.pred["task5"],
            "task5_gt": table.gt["task5"], "task8_pred": table.pred["task8"], "task8_gt": table.gt["task8"]}
    keep = np.logical_and.reduce([~np.isnan(cols[c]) for c in COMPOSITION_COLUMNS])
    res = (cols["main_pred"] - cols["main_gt"]) - (
        (cols["task5_pred"] - cols["task5_gt"]) + (cols["task8_pred"] - cols["task8_gt"]))
    return keep, res[keep]


def summary_row(table: ResponderTable, convention: Convention) -> dict[str, float]:
    """The seven summary columns of Tables 1 and 4 (plus mental_rotation_mean when task10/11 exist)."""
    convention = check_convention(convention)

    def acc(task: str) -> float:
        if task not in table.correct:
            return math.nan
        c = table.correct[task]
        return _rate(c[~np.isnan(c)])

    _, res = residuals(table)
    row = {
        "object_count": acc("main"),
        "visible_count": acc("task5"),
        "hidden_count": acc("task8"),
        "referential_chain": referential_chain(table, convention),
        "visible_support": _bundle(table, VISIBLE_SUPPORT_EDGES, convention),
        "hidden_support": _bundle(table, HIDDEN_SUPPORT_EDGES, convention),
        "summation_mechanism": _rate(res == 0),
    }
    rotation = [acc(t) for t in ("task10", "task11") if t in table.correct]
    row["mental_rotation_mean"] = float(np.mean(rotation)) if len(rotation) == 2 else math.nan
    return row


def summation_2x2(table: ResponderTable) -> list[dict[str, float | int | str]]:
    """The four V x H cells (metrics.md section 4), in the published order V+H+, V+H-, V-H+, V-H-."""
    if not all(t in table.correct for t in ("main", "task5", "task8")):
        return []
    v, h, m = table.correct["task5"], table.correct["task8"], table.correct["main"]
    keep = ~np.isnan(v) & ~np.isnan(h) & ~np.isnan(m)
    v, h, m = v[keep], h[keep], m[keep]
    total = int(keep.sum())
    overall_correct = int((m == 1).sum())
    rows: list[dict[str, float | int | str]] = []
    for vc, hc, label in CELLS:
        cell = (v == vc) & (h == hc)
        n = int(cell.sum())
        k = int((m[cell] == 1).sum())
        rows.append({
            "visible_correct": vc, "hidden_correct": hc, "cell": label,
            "main_accuracy": k / n if n else math.nan, "main_correct": k, "main_incorrect": n - k, "n": n,
            "share_of_scenes": n / total if total else math.nan,
            "overall_main_accuracy": overall_correct / total if total else math.nan,
            "overall_main_correct": overall_correct, "overall_n": total,
        })
    return rows


def composition(table: ResponderTable) -> dict[str, float | int]:
    """Composition diagnostics (metrics.md section 5): Pearson r and p, exact-match rates, residual MAD and bias."""
    from eval.paper.pvalues import pearsonr  # scipy.stats.pearsonr, bit for bit, without its import time

    keep, res = residuals(table)
    n = int(keep.sum())
    out: dict[str, float | int] = {
        "prediction_correlation_r": math.nan, "prediction_correlation_p": math.nan,
        "exact_match_rate": _rate(res == 0), "both_wrong_exact_match_rate": math.nan,
        "mean_absolute_residual": float(np.abs(res).mean()) if n else math.nan,
        "residual_bias": float(res.mean()) if n else math.nan, "both_wrong_n": 0, "n": n,
    }
    if n == 0:
        return out
    parts = table.pred["task5"][keep] + table.pred["task8"][keep]
    total = table.pred["main"][keep]
    if n >= 3 and np.ptp(parts) > 0 and np.ptp(total) > 0:
        out["prediction_correlation_r"], out["prediction_correlation_p"] = pearsonr(parts, total)
    both_wrong = (table.pred["task5"][keep] != table.gt["task5"][keep]) & (
        table.pred["task8"][keep] != table.gt["task8"][keep])
    out["both_wrong_n"] = int(both_wrong.sum())
    out["both_wrong_exact_match_rate"] = _rate(res[both_wrong] == 0)
    return out
