"""Build the 24 tables from raw responder tables, and write them (and their figures) to a folder."""

from __future__ import annotations

import time
from pathlib import Path

from eval.paper.common import Group, full_precision, make_group
from eval.paper.registry import TABLES, Row, TableSpec
from eval.rawcsv import ResponderTable
from spatialiq_train.core.io import atomic_write_text, csv_text


def build_tables(tables: dict[str, ResponderTable], names: list[str] | None = None,
                 timings: dict[str, float] | None = None) -> dict[str, list[Row]]:
    """name -> rows of every table (or of ``names``); responder dict order is the file-name order.

    A group without responders (no trained checkpoint, say) gives empty tables. ``timings``, when given,
    receives the CPU seconds spent on each table.
    """
    groups: dict[str, Group] = {}
    out: dict[str, list[Row]] = {}
    for spec in TABLES:
        if names is not None and spec.name not in names:
            continue
        start = time.process_time()
        out[spec.name] = _build(spec, tables, groups)
        if timings is not None:
            timings[spec.name] = time.process_time() - start
    return out


def _build(spec: TableSpec, tables: dict[str, ResponderTable], groups: dict[str, Group]) -> list[Row]:
    if spec.group is None:
        return spec.build(make_group({}, "text"))
    if spec.group not in groups:
        groups[spec.group] = make_group(tables, spec.group)
    group = groups[spec.group]
    return spec.build(group) if group.models else []


def write_tables(tables: dict[str, ResponderTable], out_dir: str | Path, figures: bool = True) -> list[Path]:
    """Write ``tables/<name>.csv`` for every table and, with ``figures``, ``figures/<name>.png`` for the
    figure tables; returns the paths written."""
    out = Path(out_dir)
    written: list[Path] = []
    built = build_tables(tables)
    for spec in TABLES:
        path = out / "tables" / f"{spec.name}.csv"
        atomic_write_text(path, csv_text(spec.columns, built[spec.name], full_precision))
        written.append(path)
    if figures:
        from eval.paper.figures import draw

        for spec in TABLES:
            if spec.figure:
                path = out / "figures" / f"{spec.name}.png"
                draw(spec.name, built[spec.name], path)
                written.append(path)
    return written
