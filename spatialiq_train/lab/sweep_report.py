"""`spatialiq sweep report`: one row per variant and the learning curves of all of them on shared axes.

Every number comes from files the sweep's steps wrote: ``runs/<name>/eval/metrics_<name>.json`` (``eval score``),
``runs/<name>/eval/eval_raw_<name>_text.csv`` (paired McNemar against the first variant, Benjamini-Hochberg
adjusted over the comparisons made) and ``runs/<name>/rl/metrics.jsonl`` (the curves). A variant that has not
finished is listed with its status and empty numbers, never dropped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from eval.hierarchy import SUMMARY_COLUMNS
from spatialiq_train.core.io import atomic_write_bytes, atomic_write_text, csv_text, markdown_table, read_json
from spatialiq_train.lab.analyze import fmt
from spatialiq_train.lab.report import cell3
from spatialiq_train.lab.sweep import Sweep, Variant

RESULT_COLUMNS: tuple[str, ...] = (
    "k", "n", "acc@1", "acc@1_n", "maj@k", "pass@k", "selected@k", *SUMMARY_COLUMNS, "shortcut_rate",
    "self_consistency_rate", "mcnemar_p", "mcnemar_p_bh",
)
"""After ``variant``, ``status`` and one column per varied key. ``n``: the scenes every metric is scored on (maj@k,
pass@k, selected@k and the hierarchy columns); ``acc@1_n``: acc@1's own denominator as the metrics file counts it.
selected@k is the self-consistent vote."""
REWARD_KEYS: tuple[str, ...] = ("reward/total/mean", "reward_mean", "reward")
"""Metric names read for the reward-mean curve, first present wins (metrics.md names, then TRL's)."""
VALIDATION_KEYS: tuple[str, ...] = ("eval/exact_match", "eval_exact_match", "eval/accuracy")
"""Metric names read for the validation exact-match curve, first present wins."""


def status_of(sweep: Sweep, variant: Variant) -> str:
    if sweep.is_done(variant):
        return "finished"
    return "started" if sweep.run_dir(variant).exists() else "not started"


def eval_files(sweep: Sweep, variant: Variant) -> tuple[Path, Path]:
    ev = sweep.run_dir(variant) / "eval"
    return ev / f"metrics_{variant.name}.json", ev / f"eval_raw_{variant.name}_text.csv"


def metric_cells(metrics: dict[str, Any]) -> dict[str, Any]:
    """The result columns one metrics file gives (pure); NaN where it lacks a number."""
    k = metrics.get("k")
    oc = metrics.get("object_counting", {})
    faith = metrics.get("faithfulness", {}).get("all_samples", {})
    cells: dict[str, Any] = {"k": k, "n": metrics.get("scenes"), "acc@1": oc.get("acc@1"),
                             "acc@1_n": (oc.get("n") or {}).get("acc@1", oc.get("acc@1_n")),
                             "maj@k": oc.get(f"maj@{k}"),
                             "pass@k": oc.get(f"pass@{k}"), "selected@k": oc.get(f"selected@{k}[self_consistent]"),
                             "shortcut_rate": faith.get("shortcut_rate"),
                             "self_consistency_rate": faith.get("self_consistency_rate")}
    cells.update({c: metrics.get("summary", {}).get(c) for c in SUMMARY_COLUMNS})
    return {c: math.nan if v is None else v for c, v in cells.items()}


def mcnemar_against_first(correct: dict[str, tuple[list[str], np.ndarray]], names: list[str]
                          ) -> dict[str, tuple[float, float]]:
    """(p, BH-adjusted p) of each variant against ``names[0]`` on the views both answered (pure)."""
    from eval.stats import benjamini_hochberg, mcnemar_exact

    out = {n: (math.nan, math.nan) for n in names}
    if not names or names[0] not in correct:
        return out
    base_views, base = correct[names[0]]
    where = {v: i for i, v in enumerate(base_views)}
    tested: list[tuple[str, float]] = []
    for name in names[1:]:
        if name not in correct:
            continue
        views, values = correct[name]
        rows = [i for i, v in enumerate(views) if v in where]
        test = mcnemar_exact(base[[where[views[i]] for i in rows]], values[rows])
        tested.append((name, test.p_value))
    for (name, p), adj in zip(tested, benjamini_hochberg([p for _, p in tested]), strict=True):
        out[name] = (p, float(adj))
    return out


def curve(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> tuple[list[float], list[float]]:
    """(steps, values) of the first of ``keys`` that any row holds (pure)."""
    for key in keys:
        points = [(float(r["step"]), float(r[key])) for r in rows if key in r and "step" in r]
        if points:
            return [s for s, _ in points], [v for _, v in points]
    return [], []


def collect(sweep: Sweep) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The table rows and each variant's RL metrics rows."""
    from eval.rawcsv import read_raw_csv
    from spatialiq_train.core.metrics import read_metrics

    rows, correct, logs = [], {}, {}
    for v in sweep.variants:
        row: dict[str, Any] = {"variant": v.name, "status": status_of(sweep, v)}
        row.update({k: yaml.safe_dump(v.values.get(k), default_flow_style=True, width=10_000).strip().removesuffix(
            "\n...") for k in sweep.varied})
        metrics_path, raw_path = eval_files(sweep, v)
        row.update(metric_cells(read_json(metrics_path)) if metrics_path.is_file() else
                   {c: math.nan for c in RESULT_COLUMNS})
        if raw_path.is_file():
            table = read_raw_csv(raw_path, v.name)
            correct[v.name] = (table.views, table.correct["main"])
        logs[v.name] = read_metrics(sweep.run_dir(v) / "rl" / "metrics.jsonl")
        rows.append(row)
    tests = mcnemar_against_first(correct, [v.name for v in sweep.variants])
    for row in rows:
        row["mcnemar_p"], row["mcnemar_p_bh"] = tests[row["variant"]]
    return rows, logs


def plot_curves(logs: dict[str, list[dict[str, Any]]]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from eval.report import figure_png
    from spatialiq_train.lab.report import PNG_DPI

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharex=True)
    for ax, keys, title in ((axes[0], REWARD_KEYS, "RL reward mean"), (axes[1], VALIDATION_KEYS,
                                                                         "validation exact match")):
        drawn = 0
        for name, rows in logs.items():
            steps, values = curve(rows, keys)
            if steps:
                ax.plot(steps, values, marker=".", label=name)
                drawn += 1
        ax.set_title(title if drawn else f"{title} (not logged)", fontsize=10)
        ax.set_xlabel("RL step")
        if drawn:
            ax.legend(fontsize=7)
    return figure_png(fig, dpi=PNG_DPI)


def write_sweep_report(sweep: Sweep, out: str | Path) -> Path:
    """sweep.csv, curves.png and report.md under ``out``; returns the report's path."""
    out = Path(out)
    rows, logs = collect(sweep)
    header = ["variant", "status", *sweep.varied, *RESULT_COLUMNS]
    atomic_write_text(out / "sweep.csv", csv_text(header, [[r.get(c, math.nan) for c in header] for r in rows], fmt))
    atomic_write_bytes(out / "curves.png", plot_curves(logs))
    done = sum(r["status"] == "finished" for r in rows)
    first = sweep.variants[0].name if sweep.variants else "n/a"
    text = "\n".join([
        "# Sweep report", "", f"- sweep: {sweep.root}", f"- base recipe: {sweep.recipe}",
        f"- varied: {', '.join(sweep.varied)}", f"- finished: {done} of {len(rows)} variants",
        f"- evaluated on: {sweep.eval.data} (split {sweep.eval.split})",
        f"- McNemar (exact, Object Counting acc@1 sample) against the first variant {first}; p_bh: "
        "Benjamini-Hochberg over the comparisons made", "",
        markdown_table(header, [[r.get(c) for c in header] for r in rows], cell3), "",
        "![learning curves](curves.png)", ""])
    atomic_write_text(out / "report.md", text)
    return out / "report.md"
