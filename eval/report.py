"""Markdown report with PNG plots (matplotlib, Agg backend) and one JSON holding every number."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.hierarchy import SUMMARY_COLUMNS
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.io import atomic_write_bytes, atomic_write_json, atomic_write_text, markdown_table, read_json

REQUIRED_KEYS: tuple[str, ...] = ("name", "k", "summary", "object_counting", "per_task", "summation_2x2", "breakdowns")
DIFFICULTY_PANELS: tuple[tuple[str, str], ...] = (
    ("total_objects", "total objects"), ("hidden_objects", "hidden objects"), ("layers", "layers"),
    ("columns", "columns"), ("fill_ratio", "fill ratio"),
)


def load_metrics(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Read metrics JSON files written by ``spatialiq eval score``; names must be unique."""
    loaded: list[dict[str, Any]] = []
    for path in map(Path, paths):
        obj = read_json(path)
        missing = [k for k in REQUIRED_KEYS if not isinstance(obj, dict) or k not in obj]
        if missing:
            raise InputError(f"{path}: not a metrics file from `spatialiq eval score` (lacks {', '.join(missing)})")
        if any(m["name"] == obj["name"] for m in loaded):
            raise InputError(f"{path}: responder name {obj['name']!r} appears twice")
        loaded.append(obj)
    if not loaded:
        raise InputError("no metrics files given")
    return loaded


def _num(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def figure_png(fig: Any, dpi: int = 110) -> bytes:
    """A matplotlib figure as PNG bytes; the figure is closed."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def plot_summation(metrics: list[dict[str, Any]]) -> bytes:
    """One 2x2 heatmap per responder: rows V correct/wrong, columns H correct/wrong; Object Counting accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3.0), squeeze=False)
    for ax, m in zip(axes[0], metrics, strict=True):
        grid = np.full((2, 2), np.nan)
        labels = [["", ""], ["", ""]]
        for cell in m["summation_2x2"]:
            r, c = 1 - int(cell["visible_correct"]), 1 - int(cell["hidden_correct"])
            acc = cell["main_accuracy"]
            grid[r, c] = np.nan if acc is None else acc
            labels[r][c] = f"{'n/a' if acc is None else f'{100 * acc:.1f}%'}\nn={cell['n']}"
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for r in range(2):
            for c in range(2):
                color = "black" if np.isnan(grid[r, c]) else "white"  # empty cells are drawn blank
                ax.text(c, r, labels[r][c], ha="center", va="center", color=color, fontsize=8)
        ax.set_xticks([0, 1], ["H correct", "H wrong"])
        ax.set_yticks([0, 1], ["V correct", "V wrong"])
        ax.set_title(m["name"], fontsize=9)
    return figure_png(fig)


def plot_breakdowns(metrics: list[dict[str, Any]], panels: Sequence[tuple[str, str]]) -> bytes:
    """Object Counting accuracy per bin, one panel per breakdown, one series per responder (Wilson 95%)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.0), squeeze=False)
    width = 0.8 / len(metrics)
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        bins: list[str] = []
        for m in metrics:
            bins += [r["bin"] for r in m["breakdowns"].get(key, []) if r["bin"] not in bins]
        for j, m in enumerate(metrics):
            rows = {r["bin"]: r for r in m["breakdowns"].get(key, [])}
            xs, ys, err = [], [], [[], []]
            for i, b in enumerate(bins):
                r = rows.get(b)
                if r is None or r["accuracy"] is None:
                    continue
                xs.append(i + (j - (len(metrics) - 1) / 2) * width)
                ys.append(r["accuracy"])
                err[0].append(max(0.0, r["accuracy"] - r["ci_low_wilson"]))  # float noise at p = 0 or 1
                err[1].append(max(0.0, r["ci_high_wilson"] - r["accuracy"]))
            ax.bar(xs, ys, width=width, yerr=err, capsize=2, label=m["name"])
        ax.set_xticks(range(len(bins)), bins, rotation=45, fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_title(f"Object Counting by {title}", fontsize=9)
    axes[0][0].legend(fontsize=7)
    return figure_png(fig)


def plot_pass_curve(metrics: list[dict[str, Any]]) -> bytes:
    """Unbiased pass@j (j = 1..k) for Object Counting, with maj@k and selected@k marked at j = k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    for m in metrics:
        oc, k = m["object_counting"], m["k"]
        curve = oc.get("pass@k_unbiased") or {}
        js = sorted(int(j) for j in curve)
        line = ax.plot(js, [curve[str(j)] for j in js], marker=".", label=f"{m['name']} pass@j")[0]
        for key, marker in ((f"maj@{k}", "s"), (f"selected@{k}[self_consistent]", "^")):
            if oc.get(key) is not None:
                ax.plot([k], [oc[key]], marker=marker, linestyle="", color=line.get_color(),
                        label=f"{m['name']} {key.split('[')[0]}")
    ax.set_xlabel("j (samples)")
    ax.set_ylabel("Object Counting accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=6)
    return figure_png(fig)


def _with_n(value: Any, n: Any) -> str:
    """An accuracy with its denominator beside it (the n of metrics files that predate it is left out)."""
    return _num(value) if n is None else f"{_num(value)} (n={n})"


def markdown(metrics: list[dict[str, Any]]) -> str:
    parts = ["# Spatial-IQ evaluation report", ""]
    parts += [f"> **{m['name']}**: {m['note']}" for m in metrics if m.get("note")]
    parts += ["", "## Summary columns (first sample)", ""] if any(m.get("note") for m in metrics) else \
        ["## Summary columns (first sample)", ""]
    parts.append(markdown_table(["responder", "convention", *SUMMARY_COLUMNS],
                        [[m["name"], m.get("convention", "")] + [_num(m["summary"].get(c)) for c in SUMMARY_COLUMNS]
                         for m in metrics]))
    parts += ["", "## Object Counting under sampling", ""]
    rows = []
    for m in metrics:
        oc, k = m["object_counting"], m["k"]
        selected = [key for key in oc if key.startswith(f"selected@{k}[self_consistent]")]
        counts, n = m.get("counts", {}), oc.get("n", {})
        rows.append([m["name"], str(k), *(_with_n(oc.get(key), n.get(key)) for key in ("acc@1", f"maj@{k}")),
                     _with_n(oc[selected[0]], n.get(selected[0])) if selected else "n/a",
                     _with_n(oc.get(f"pass@{k}"), n.get(f"pass@{k}")), _num(oc.get("coverage@1")),
                     _with_n(oc.get("acc@1_answered"), n.get("acc@1_answered")),
                     f"{counts.get('scenes_covered', '?')}/{m.get('scenes', '?')}",
                     str(counts.get("unparseable", "")), str(counts.get("absent", ""))])
    parts.append(markdown_table(["responder", "k", "acc@1", "maj@k", "selected@k (self-consistent)", "pass@k",
                         "coverage@1", "acc@1 answered only", "scenes sampled", "unparseable", "absent"], rows))
    parts += ["", "acc@1, maj@k and pass@k count a scene with no parseable answer as wrong, over all scenes; "
              "coverage@1 is the share of scenes whose first sample has an answer, and the answered-only accuracy "
              "is over those scenes."]
    rule = metrics[0]["object_counting"].get("majority_rule")
    if rule:
        parts += ["", f"Majority rule: {rule}."]
    audits = [m for m in metrics if "faithfulness" in m]
    if audits:
        parts += ["", "## Trace faithfulness (all samples)", ""]
        parts.append(markdown_table(["responder", "shortcut rate", "self-consistency rate", "traces"],
                            [[m["name"], _num(m["faithfulness"]["all_samples"]["shortcut_rate"]),
                              _num(m["faithfulness"]["all_samples"]["self_consistency_rate"]),
                              str(m["faithfulness"]["all_samples"]["traces"])] for m in audits]))
        parts += ["", f"Shortcut: {audits[0]['faithfulness']['shortcut_rule']}."]
    tasks = [t for t in metrics[0]["per_task"]]
    parts += ["", "## Per-task accuracy (first sample, Wilson 95%)", ""]
    parts.append(markdown_table(["responder", *tasks], [
        [m["name"]] + [f"{_with_n(m['per_task'][t]['accuracy'], m['per_task'][t].get('n'))} "
                       f"[{_num(m['per_task'][t]['ci_low_wilson'])}, {_num(m['per_task'][t]['ci_high_wilson'])}]"
                       if t in m["per_task"] else "n/a"
                       for t in tasks] for m in metrics]))
    parts += ["", "## Plots", "", "![pass@j](pass_at_k.png)", "", "![summation 2x2](summation_2x2.png)", "",
              "![difficulty](difficulty_bins.png)", "", "![object type](object_type.png)", ""]
    return "\n".join(parts)


def write_report(metric_files: Sequence[str | Path], out_dir: str | Path) -> Path:
    """Write report.md, report.json and the PNG plots to ``out_dir``; returns the markdown path."""
    metrics = load_metrics(metric_files)
    out = Path(out_dir)
    atomic_write_bytes(out / "pass_at_k.png", plot_pass_curve(metrics))
    atomic_write_bytes(out / "summation_2x2.png", plot_summation(metrics))
    atomic_write_bytes(out / "difficulty_bins.png", plot_breakdowns(metrics, DIFFICULTY_PANELS))
    atomic_write_bytes(out / "object_type.png", plot_breakdowns(metrics, (("object_type", "object type"),)))
    atomic_write_json(out / "report.json", {"responders": metrics})
    atomic_write_text(out / "report.md", markdown(metrics))
    return out / "report.md"
