"""Paired comparison of responders on the same scenes: exact McNemar per pair, Benjamini-Hochberg across pairs."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from eval.paper.common import full_precision
from eval.rawcsv import ResponderTable, read_raw_csv, read_raw_dir
from eval.stats import benjamini_hochberg, mcnemar_exact
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.io import atomic_write_text, csv_text

COLUMNS: tuple[str, ...] = (
    "task", "model_a", "model_b", "n", "accuracy_a", "accuracy_b", "a_only", "b_only", "p_value", "p_bh",
)


def _aligned(a: ResponderTable, b: ResponderTable, task: str) -> tuple[np.ndarray, np.ndarray]:
    """Correctness of both responders on the views they share, in ``a``'s order."""
    where_b = {v: i for i, v in enumerate(b.views)}
    rows_a = [i for i, v in enumerate(a.views) if v in where_b]
    rows_b = [where_b[a.views[i]] for i in rows_a]
    return a.correct[task][rows_a], b.correct[task][rows_b]


def pairwise_mcnemar(tables: dict[str, ResponderTable], task: str = "main") -> list[dict[str, object]]:
    """One row per pair of responders that both have ``task``; p-values BH-adjusted over the whole family. A pair
    with no view where both answered is refused (its n = 0 and p = 1 would say nothing, as if it said "no
    difference")."""
    names = [n for n in tables if task in tables[n].correct]
    rows: list[dict[str, object]] = []
    for name_a, name_b in itertools.combinations(names, 2):
        ca, cb = _aligned(tables[name_a], tables[name_b], task)
        test = mcnemar_exact(ca, cb)
        if test.n == 0:
            a, b = tables[name_a], tables[name_b]
            raise InputError(f"{a.source or name_a} and {b.source or name_b}: responders {name_a!r} and {name_b!r} "
                             f"share no view where both have a {task!r} answer ({len(ca)} common view(s) of "
                             f"{len(a)} and {len(b)}); a paired test needs the same scenes: compare files scored on "
                             "the same --data and --split")
        both = ~np.isnan(ca) & ~np.isnan(cb)
        rows.append({
            "task": task, "model_a": name_a, "model_b": name_b, "n": test.n,
            "accuracy_a": float(ca[both].mean()) if test.n else float("nan"),
            "accuracy_b": float(cb[both].mean()) if test.n else float("nan"),
            "a_only": test.a_only, "b_only": test.b_only, "p_value": test.p_value,
        })
    adjusted = benjamini_hochberg([float(r["p_value"]) for r in rows])  # type: ignore[arg-type]
    for row, p in zip(rows, adjusted, strict=True):
        row["p_bh"] = float(p)
    return rows


def load_tables(paths: Sequence[str | Path]) -> dict[str, ResponderTable]:
    tables: dict[str, ResponderTable] = {}
    for path in map(Path, paths):
        found = read_raw_dir(path) if path.is_dir() else {(t := read_raw_csv(path)).name: t}
        for name, table in found.items():
            if name in tables:
                raise InputError(f"{table.source}: responder {name!r} already read from {tables[name].source}")
            tables[name] = table
    return tables


def write_comparison(paths: Sequence[str | Path], out_dir: str | Path, task: str = "main") -> Path:
    tables = load_tables(paths)
    if len(tables) < 2:
        raise InputError(f"need at least two responders to compare, got {len(tables)}")
    path = Path(out_dir) / "mcnemar.csv"
    atomic_write_text(path, csv_text(COLUMNS, pairwise_mcnemar(tables, task), full_precision))
    return path
