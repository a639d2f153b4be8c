"""Summation mechanism: the visible x hidden 2x2 (Figures 7/27) and composition diagnostics (Figures 22/28)."""

from __future__ import annotations

from eval.hierarchy import composition, summation_2x2
from eval.paper.common import Group, display_name

Row = dict[str, object]


def summation_rows(group: Group) -> list[Row]:
    """Four cells per responder (V+H+, V+H-, V-H+, V-H-) over rows where task5, task8 and main all exist."""
    rows: list[Row] = []
    for model in group.models:
        for cell in summation_2x2(group.tables[model]):
            rows.append({"group": group.name, "model": model, "display_name": display_name(model), **cell})
    return rows


def composition_rows(group: Group) -> list[Row]:
    """One row per responder with at least one row where all six predictions and truths exist."""
    rows: list[Row] = []
    for model in group.models:
        table = group.tables[model]
        if not all(t in table.pred for t in ("main", "task5", "task8")):
            continue
        stats = composition(table)
        if stats["n"]:
            rows.append({"group": group.name, "model": model, "display_name": display_name(model), **stats})
    return rows
