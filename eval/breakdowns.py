"""Object Counting accuracy by object type and by difficulty bins (metrics.md section 6)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from eval.rawcsv import ResponderTable
from eval.stats import accuracy

TOTAL_BINS: tuple[tuple[str, float, float], ...] = (
    ("4-8", 4, 8), ("9-12", 9, 12), ("13-18", 13, 18), ("19-25", 19, 25), ("26+", 26, math.inf),
)
"""Total-object bins (inclusive); totals below 4 fall in ``<4``."""
FILL_BINS: tuple[tuple[str, float, float], ...] = (
    ("(0, 0.25]", 0.0, 0.25), ("(0.25, 0.5]", 0.25, 0.5), ("(0.5, 0.75]", 0.5, 0.75), ("(0.75, 1]", 0.75, 1.0),
)
"""Fill ratio ``total_blocks / (num_columns * num_layers)`` bins (left-open)."""


def total_bin_labels(total: np.ndarray) -> np.ndarray:
    labels = np.full(total.shape, "missing", dtype=object)
    labels[total < 4] = "<4"
    for label, lo, hi in TOTAL_BINS:
        labels[(total >= lo) & (total <= hi)] = label
    return labels


def fill_bin_labels(fill: np.ndarray) -> np.ndarray:
    labels = np.full(fill.shape, "missing", dtype=object)
    for label, lo, hi in FILL_BINS:
        labels[(fill > lo) & (fill <= hi)] = label
    labels[fill > 1.0] = ">1"
    return labels


def value_labels(values: np.ndarray) -> np.ndarray:
    return np.array(["missing" if math.isnan(v) else str(int(v)) for v in values], dtype=object)


def _order(label: str) -> tuple[int, float, str]:
    if label == "missing":
        return (2, 0.0, label)
    head = label.lstrip("<(>").split("-")[0].split(",")[0].rstrip("+")
    shift = -0.5 if label.startswith("<") else 0.5 if label.startswith(">") else 0.0
    try:
        return (0, float(head) + shift, label)
    except ValueError:
        return (1, 0.0, label)


def breakdown(correct: np.ndarray, labels: np.ndarray | Sequence[str]) -> list[dict[str, object]]:
    """Accuracy (with Wilson interval) of ``correct`` within each label, labels in natural order."""
    labels = np.asarray(labels, dtype=object)
    rows = []
    for label in sorted(set(labels.tolist()), key=_order):
        a = accuracy(correct[labels == label])
        rows.append({"bin": label, **a.as_dict()})
    return rows


def object_counting_breakdowns(table: ResponderTable) -> dict[str, list[dict[str, object]]]:
    """Object Counting by object type, total objects, hidden objects, layers, columns and fill ratio."""
    main = table.correct["main"]
    total = table.meta["total_blocks"]
    columns, layers = table.meta["num_columns"], table.meta["num_layers"]
    with np.errstate(divide="ignore", invalid="ignore"):
        fill = total / (columns * layers)
    return {
        "object_type": breakdown(main, np.asarray(table.object_type, dtype=object)),
        "total_objects": breakdown(main, total_bin_labels(total)),
        "hidden_objects": breakdown(main, value_labels(table.meta["num_hidden_blocks"])),
        "layers": breakdown(main, value_labels(layers)),
        "columns": breakdown(main, value_labels(columns)),
        "fill_ratio": breakdown(main, fill_bin_labels(fill)),
    }
