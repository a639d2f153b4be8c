"""report.md of a reward analysis: the summary and probe tables, and three PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from eval.report import figure_png
from spatialiq_train.core.io import atomic_write_bytes, atomic_write_text, markdown_table
from spatialiq_train.lab.analysis import SUMMARY_COLUMNS, Analysis
from spatialiq_train.lab.probes import PROBES

PLOTS: tuple[tuple[str, str], ...] = (
    ("reward_by_correctness.png", "Reward distribution of correct and incorrect completions"),
    ("reward_vs_abs_error.png", "Mean reward by absolute error of the parsed answer"),
    ("zero_variance.png", "Share of views whose samples all get the same reward"),
)
MAX_ERROR_BIN = 10
"""Absolute errors above this are pooled into one ``10+`` bin in the error plot."""
PNG_DPI = 100


def cell3(value: Any) -> str:
    """Floats to 3 decimals (a value that rounds to zero prints ``0.000``, never ``-0.000``), NaN as ``n/a``."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        text = f"{value:.3f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text
    return str(value)


def _axes(n: int) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(3.6 * n, 3.2), squeeze=False)
    return fig, axes[0]


def plot_by_correctness(result: Analysis) -> bytes:
    correct = result.table.exact_match == 1.0
    fig, axes = _axes(len(result.totals))
    for ax, name in zip(axes, result.totals, strict=True):
        values = result.scores[name]
        lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
        bins = np.linspace(lo, hi if hi > lo else lo + 1.0, 21)
        for mask, label in ((correct, "correct"), (~correct, "incorrect")):
            if mask.any():
                ax.hist(values[mask], bins=bins, alpha=0.6, label=f"{label} (n={int(mask.sum())})", density=True)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("reward")
        ax.legend(fontsize=7)
    return figure_png(fig, dpi=PNG_DPI)


def error_bins(abs_error: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bin, mean reward) for absolute errors 0..MAX_ERROR_BIN (the last pools larger errors); empty bins left out."""
    keep = np.isfinite(abs_error) & np.isfinite(values)
    b = np.minimum(abs_error[keep], MAX_ERROR_BIN).astype(int)
    sums = np.bincount(b, weights=values[keep], minlength=MAX_ERROR_BIN + 1)
    counts = np.bincount(b, minlength=MAX_ERROR_BIN + 1)
    present = counts > 0
    return np.flatnonzero(present), sums[present] / counts[present]


def plot_vs_error(result: Analysis) -> bytes:
    fig, axes = _axes(1)
    ax = axes[0]
    for name in result.totals:
        x, y = error_bins(result.table.abs_error, result.scores[name])
        ax.plot(x, y, marker="o", label=name)
    ax.set_xlabel(f"|answer - truth| ({MAX_ERROR_BIN} = {MAX_ERROR_BIN} or more)")
    ax.set_ylabel("mean reward")
    ax.legend(fontsize=7)
    return figure_png(fig, dpi=PNG_DPI)


def plot_zero_variance(result: Analysis) -> bytes:
    fig, axes = _axes(1)
    ax = axes[0]
    shares = [float(row["zero_variance_groups"]) for row in result.summary]  # type: ignore[arg-type]
    ax.barh([str(row["reward"]) for row in result.summary], [0.0 if math.isnan(s) else s for s in shares])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of views with zero reward variance")
    ax.invert_yaxis()
    if all(math.isnan(s) for s in shares):
        ax.text(0.5, 0.5, single_sample_reason(result.table.k), ha="center", va="center", wrap=True, fontsize=8,
                transform=ax.transAxes, bbox={"facecolor": "white"})
    return figure_png(fig, dpi=PNG_DPI)


def single_sample_reason(k: int) -> str:
    """Why the per-view numbers are not defined."""
    if k <= 1:
        return ("not defined: k = 1, one sample per view\n(zero variance needs two samples of a view; "
                "AUC is computed across views instead)")
    return "not defined: no view has two scored samples"


def notes(result: Analysis) -> list[str]:
    """The report's reading notes: the k = 1 reasons, the trace classes of the gaps, signed probe ratios."""
    t = result.table
    correct = t.exact_match == 1.0
    out = [f"- correct completions: {int((correct & t.faithful).sum())} faithful, "
           f"{int((correct & ~t.faithful & t.complete).sum())} unfaithful (every line stated, some wrong or not "
           f"adding up: `shortcut_reward_gap`), {int((correct & ~t.complete).sum())} format failures (a scored line "
           "or the total line missing, e.g. an answer alone: `format_failure_reward_gap`); each gap is that class's "
           "mean reward minus the faithful traces'"]
    if t.k <= 1:
        out.append(f"- {single_sample_reason(t.k).replace(chr(10), ' ')}: `zero_variance_groups` is n/a and "
                   "`auc_exact_match` compares correct and incorrect completions of different views, so view "
                   "difficulty enters it (`auc_scope`)")
    negative = [str(row["reward"]) for row in result.summary
                if isinstance(row["reference_mean"], float) and row["reference_mean"] < 0]
    if negative:
        out.append(f"- the faithful reference earns a negative mean under {', '.join(negative)}: a probe ratio there "
                   "is (negative probe payout) / (negative reference), so above 1.0 means the probe is penalised "
                   "more than the faithful trace and a negative ratio means the probe earns a positive reward")
    return out


def markdown(result: Analysis, meta: dict[str, object]) -> str:
    t = result.table
    head = [c for c in SUMMARY_COLUMNS if not c.startswith("probe_")]
    probe_cols = ["reward", *(f"probe_{p}" for p in PROBES)]
    parts = ["# Reward analysis", ""]
    parts += [f"- {key}: {value}" for key, value in meta.items()]
    parts += [f"- completions: {len(t.texts)} over {len(t.scenes)} views (k = {t.k}); exact match "
              f"{cell3(float(t.exact_match.mean()))}, faithful {cell3(float(t.faithful.mean()))}",
              f"- left out: {', '.join(f'{n} {why}' for why, n in t.skipped.items())}",
              f"- reward errors (samples scored 0 after an exception): {result.errors or 'none'}", *notes(result), "",
              "## Summary", "", markdown_table(head, [[row[c] for c in head] for row in result.summary], cell3), "",
              "## Gaming probes (mean payout relative to the faithful trace; 1.0 = pays as much; for a reference "
              "with a negative mean, see the note above)", "",
              markdown_table(probe_cols, [[row[c] for c in probe_cols] for row in result.summary], cell3), "",
              "Probe definitions: lab/probes.py and docs/rewards.md.", "", "## Plots", ""]
    parts += [f"![{title}]({name})\n" for name, title in PLOTS]
    return "\n".join(parts)


def write_report(result: Analysis, out: Path, meta: dict[str, object]) -> Path:
    for (name, _), draw in zip(PLOTS, (plot_by_correctness, plot_vs_error, plot_zero_variance), strict=True):
        atomic_write_bytes(out / name, draw(result))
    atomic_write_text(out / "report.md", markdown(result, meta))
    return out / "report.md"
