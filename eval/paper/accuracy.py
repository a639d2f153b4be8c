"""Accuracy tables: Tables 1/4 (summary), 5 (queries), 6 and Figure 25 (per task), 9 (difficulty bins),
Figures 20/26 (per object type) and 21 (pooled object and difficulty slices).

Every accuracy drops missing answers from its denominator; a (responder, task) or (responder, bin) cell with
no answered row is left out (Figure 21, pooled, keeps empty cells with accuracy NaN).
"""

from __future__ import annotations

import math

import numpy as np

from eval.hierarchy import Convention, check_convention, summary_row
from eval.paper.common import (
    QUERY_TEXT,
    TASK_COLUMNS,
    Group,
    cut,
    display_name,
    mean_ignore_nan,
    object_types,
    paper_task_id,
    present,
    task_name,
)
from eval.rawcsv import ResponderTable
from eval.stats import binomial_se, wilson_interval

Row = dict[str, object]
OBJECT_ORDER: tuple[str, ...] = ("cube", "factory_box", "soup_can", "spam")
"""Object types in the paper's order; any other type follows, sorted."""
SLICE_TASKS: tuple[str, ...] = ("task2", "task5", "task6", "task7", "task8", "main")
SLICE_CROSS_TASKS: tuple[str, ...] = ("main", "task5", "task8")
TOTAL_EDGES, TOTAL_LABELS = (0, 8, 12, 18, 25, 100), ("4-8", "9-12", "13-18", "19-25", "26+")
HIDDEN_EDGES, HIDDEN_LABELS = (-1, 0, 1, 3, 100), ("0", "1", "2-3", "4+")
COLUMN_EDGES, COLUMN_LABELS = (2.5, 5.5, 8.5, 11.5, 14.5), ("3-5", "6-8", "9-11", "12-14")
FILL_EDGES, FILL_LABELS, FILL_ORDER = (0.0, 0.55, 0.67, 1.01), ("Sparse", "Medium", "Dense"), ("Dense", "Medium",
                                                                                              "Sparse")
FACTORS: dict[str, str] = {"total_blocks": "Number of objects", "num_hidden_blocks": "Number of hidden objects",
                           "num_layers": "Number of layers", "num_columns": "Number of columns",
                           "fill_ratio": "Fill ratio"}
"""Difficulty factors of Table 9 and their display names, in the table's order."""


def _count_row(values: np.ndarray) -> tuple[float, int, int, float, float]:
    vals = present(values)
    n, k = int(vals.size), int(vals.sum())
    lo, hi = wilson_interval(k, n)
    return (k / n if n else math.nan), k, n, lo, hi


def task_accuracy_rows(group: Group) -> list[Row]:
    """Table 6 / Figure 25: per responder and task, accuracy with Wilson 95% interval (free response: no chance)."""
    rows: list[Row] = []
    for model in group.models:
        for task in TASK_COLUMNS:
            if not group.has(model, task):
                continue
            acc, k, n, lo, hi = _count_row(group.col(model, task))
            if n == 0:
                continue
            rows.append({
                "group": group.name, "model": model, "display_name": display_name(model),
                "task": paper_task_id(task), "source_task": task, "task_name": task_name(task), "accuracy": acc,
                "n_correct": k, "n_incorrect": n - k, "n": n, "binom_se": binomial_se(acc, n), "ci_low_wilson": lo,
                "ci_high_wilson": hi, "chance_level": None, "chance_adjusted_accuracy": acc,
                "chance_adjusted_ci_low": lo, "chance_adjusted_ci_high": hi, "above_chance_p": None,
            })
    main = {r["model"]: r["accuracy"] for r in rows if r["source_task"] == "main"}

    def key(row: Row) -> tuple[float, str, int]:
        score = main.get(row["model"], math.nan)
        return (-score if not math.isnan(score) else 0.0, str(row["model"]), TASK_COLUMNS.index(row["source_task"]))

    return sorted(rows, key=key)


def convention_for(group: str | None, override: str | None = None) -> Convention:
    """The conditional convention the published tables use for a responder of ``group`` (or ``override``): trained
    rows of Table 4 condition on the prerequisite; Table 1 and Table 4's human row (a responder of group ``both``)
    on the dependent."""
    if override is not None:
        return check_convention(override)
    return "dependent_given_prerequisite" if group == "trained_text" else "prerequisite_given_dependent"


def summary_rows(group: Group, accuracy_rows: list[Row]) -> list[Row]:
    """Tables 1 (text) and 4 (trained_text), ordered by Object Counting accuracy, highest first."""
    acc: dict[str, dict[str, float]] = {}
    for row in accuracy_rows:
        acc.setdefault(str(row["model"]), {})[str(row["source_task"])] = float(row["accuracy"])  # type: ignore[arg-type]
    rows: list[Row] = []
    for model in sorted(acc):
        table, a = group.tables[model], acc[model]
        conv = convention_for(table.group)
        rows.append({"model": model, "display_name": display_name(model), **summary_row(table, conv),
                     # the official mean: of whichever rotation task was answered (eval.hierarchy wants both)
                     "mental_rotation_mean": mean_ignore_nan([a.get("task10", math.nan), a.get("task11", math.nan)]),
                     "convention": conv})
    return sorted(rows, key=lambda r: (math.isnan(r["object_count"]), -np.nan_to_num(r["object_count"])))


def query_rows() -> list[Row]:
    """Table 5: paper id, raw column, name and query text of every task."""
    return [{"task": paper_task_id(t), "source_task": t, "task_name": task_name(t), "query_text": QUERY_TEXT[t]}
            for t in TASK_COLUMNS]


def difficulty_bins(table: ResponderTable, factor: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Bin label per row and the display order of one Table 9 factor (right-closed bins)."""
    meta = table.meta
    if factor == "total_blocks":
        return cut(meta[factor], TOTAL_EDGES, TOTAL_LABELS), TOTAL_LABELS
    if factor == "num_hidden_blocks":
        return cut(meta[factor], HIDDEN_EDGES, HIDDEN_LABELS), HIDDEN_LABELS
    if factor == "num_columns":
        return cut(meta[factor], COLUMN_EDGES, COLUMN_LABELS), COLUMN_LABELS
    if factor == "fill_ratio":
        denom = meta["num_columns"] * meta["num_layers"]
        with np.errstate(invalid="ignore", divide="ignore"):
            fill = np.where(denom == 0, np.nan, meta["total_blocks"] / np.where(denom == 0, 1, denom))
        return cut(fill, FILL_EDGES, FILL_LABELS), FILL_ORDER
    layers = meta[factor]
    labels = np.array(["<NA>" if math.isnan(v) else str(int(v)) for v in layers], dtype=object)
    return labels, tuple(str(v) for v in sorted({int(v) for v in layers if not math.isnan(v)}))


def _bin_row(group: Group, model: str, prefix: dict[str, object], values: np.ndarray) -> Row | None:
    acc, k, n, lo, hi = _count_row(values)
    if n == 0:
        return None
    return {"group": group.name, "model": model, "display_name": display_name(model), **prefix, "accuracy": acc,
            "n_correct": k, "n_incorrect": n - k, "n": n, "binom_se": binomial_se(acc, n), "ci_low_wilson": lo,
            "ci_high_wilson": hi, "chance_adjusted_accuracy": acc, "chance_adjusted_ci_low": lo,
            "chance_adjusted_ci_high": hi}


def difficulty_rows(group: Group) -> list[Row]:
    """Table 9: Object Counting accuracy per responder, difficulty factor and bin."""
    rows: list[Row] = []
    for model in group.models:
        table = group.tables[model]
        for factor, factor_name in FACTORS.items():
            bins, order = difficulty_bins(table, factor)
            for label in order:
                prefix = {"factor": factor, "factor_name": factor_name, "bin": label}
                row = _bin_row(group, model, prefix, table.correct["main"][bins == label])
                if row is not None:
                    rows.append(row)
    return rows


def object_rows(group: Group) -> list[Row]:
    """Figures 20/26: Object Counting accuracy per responder and object type (types sorted)."""
    rows: list[Row] = []
    for model in group.models:
        objects = object_types(group.tables[model])
        for obj in sorted({o for o in objects if o is not None}):
            acc, k, n, lo, hi = _count_row(group.tables[model].correct["main"][objects == obj])
            if n:
                rows.append({"group": group.name, "model": model, "display_name": display_name(model),
                             "object_type": obj, "accuracy": acc, "n_correct": k, "n_incorrect": n - k, "n": n,
                             "ci_low_wilson": lo, "ci_high_wilson": hi, "chance_adjusted_accuracy": acc})
    return rows


def _slice(group: str, kind: str, value: str, task: str, values: np.ndarray) -> Row:
    vals = present(values)
    n, k = int(vals.size), int(vals.sum())
    return {"group": group, "slice_type": kind, "slice_value": value, "task": paper_task_id(task),
            "source_task": task, "task_name": task_name(task), "accuracy": k / n if n else math.nan,
            "n_correct": k, "n": n}


def slice_rows(group: Group) -> list[Row]:
    """Figure 21: accuracy pooled over all responders, by object type, by total-object bin, and by both."""
    models = group.models
    pool = group.pool([t for t in SLICE_TASKS if group.any_has(t)], models)
    objects = np.concatenate([object_types(group.tables[m]) for m in models])
    bins = np.concatenate([difficulty_bins(group.tables[m], "total_blocks")[0] for m in models])
    seen = {o for o in objects if o is not None}
    order = [o for o in OBJECT_ORDER if o in seen] + sorted(seen.difference(OBJECT_ORDER))
    is_object = {o: objects == o for o in order}  # object-array comparisons, once each
    in_bin = {b: bins == b for b in TOTAL_LABELS}
    rows: list[Row] = []
    for task, values in pool.values.items():
        rows += [_slice(group.name, "object", o, task, values[is_object[o]]) for o in order]
    for task, values in pool.values.items():
        rows += [_slice(group.name, "difficulty", b, task, values[in_bin[b]]) for b in TOTAL_LABELS]
    for task in SLICE_CROSS_TASKS:
        if task in pool.values:
            values = pool.values[task]
            rows += [_slice(group.name, "object_difficulty", f"{o}|{b}", task, values[is_object[o] & in_bin[b]])
                     for o in order for b in TOTAL_LABELS]
    return rows
