"""One PNG per figure table, drawn from the table's rows (matplotlib, Agg backend).

The drawings are for reading at a glance, not replicas of the paper's artwork: heatmaps with the value in each
cell, bars with Wilson intervals where the table has them, and the responders' display names.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.paper.common import display_name
from spatialiq_train.core.io import atomic_write_bytes

Row = dict[str, object]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    _plt().close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _f(value: object) -> float:
    return math.nan if value is None or value == "" else float(value)  # type: ignore[arg-type]


def _unique(values: Sequence[object]) -> list[Any]:
    return list(dict.fromkeys(values))


def _names(rows: list[Row]) -> dict[str, str]:
    return {str(r["model"]): str(r.get("display_name", r["model"])) for r in rows}


def _heatmap(ax: Any, grid: list[list[float]], rows: list[str], cols: list[str], title: str, vmin: float,
             vmax: float, cmap: str, fmt: str = "{:.2f}") -> Any:
    image = ax.imshow(grid, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_title(title, fontsize=10)
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            if not math.isnan(v):
                span = vmax - vmin
                strong = abs(v - (vmin + vmax) / 2) > 0.35 * span if vmin < 0 else v > vmin + 0.65 * span
                ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=7, color="white" if strong else "black")
    return image


def _grid(rows: list[Row], row_key: str, col_key: str, value: str, row_order: list[str],
          col_order: list[str]) -> list[list[float]]:
    cells = {(str(r[row_key]), str(r[col_key])): _f(r[value]) for r in rows}
    return [[cells.get((a, b), math.nan) for b in col_order] for a in row_order]


def summation(rows: list[Row], path: Path, title: str) -> None:
    """Figures 7/27: per responder, Object Counting accuracy in each visible x hidden correctness cell."""
    plt = _plt()
    models = _unique([str(r["model"]) for r in rows])
    names = _names(rows)
    fig, axes = plt.subplots(1, max(len(models), 1), figsize=(2.6 * max(len(models), 1), 2.8), squeeze=False)
    for ax, model in zip(axes[0][:len(models)], models, strict=True):
        cells = {str(r["cell"]): r for r in rows if r["model"] == model}
        grid = [[_f(cells.get(f"V{v} H{h}", {}).get("main_accuracy")) for h in "+-"] for v in "+-"]
        _heatmap(ax, grid, ["V+", "V-"], ["H+", "H-"], names[model], 0, 1, "YlGn")
        for i, v in enumerate("+-"):
            for j, h in enumerate("+-"):
                n = cells.get(f"V{v} H{h}", {}).get("n", 0)
                ax.text(j, i + 0.3, f"n={n}", ha="center", va="center", fontsize=6)
    fig.suptitle(title, y=1.04)
    _save(fig, path)


def composition(rows: list[Row], path: Path, title: str) -> None:
    """Figures 22/28: exact-composition rates and residual size/bias per responder."""
    plt = _plt()
    labels = [str(r["display_name"]) for r in rows]
    x = range(len(rows))
    fig, (a, b) = plt.subplots(1, 2, figsize=(max(6, 1.2 * len(rows) + 3), 3.6))
    a.bar([i - 0.2 for i in x], [_f(r["exact_match_rate"]) for r in rows], 0.4, label="all rows")
    a.bar([i + 0.2 for i in x], [_f(r["both_wrong_exact_match_rate"]) for r in rows], 0.4,
          label="visible and hidden both wrong")
    a.set_ylim(0, 1)
    a.set_ylabel("share with residual 0")
    a.legend(fontsize=7)
    b.bar([i - 0.2 for i in x], [_f(r["mean_absolute_residual"]) for r in rows], 0.4, label="mean |residual|")
    b.bar([i + 0.2 for i in x], [_f(r["residual_bias"]) for r in rows], 0.4, label="mean residual (bias)")
    b.axhline(0, color="black", lw=0.6)
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    fig.suptitle(title, y=1.04)
    _save(fig, path)


def task_accuracy(rows: list[Row], path: Path, title: str) -> None:
    """Figure 25: accuracy per responder and task."""
    plt = _plt()
    models = _unique([str(r["model"]) for r in rows])
    tasks = _unique([str(r["task"]) for r in rows])
    fig, ax = plt.subplots(figsize=(1.0 + 0.7 * len(tasks), 1.0 + 0.45 * len(models)))
    image = _heatmap(ax, _grid(rows, "model", "task", "accuracy", models, tasks), [_names(rows)[m] for m in models],
                     tasks, title, 0, 1, "YlGn")
    fig.colorbar(image, ax=ax, label="accuracy")
    _save(fig, path)


def object_accuracy(rows: list[Row], path: Path, title: str) -> None:
    """Figures 20/26: Object Counting accuracy per responder and object type with Wilson 95% intervals."""
    plt = _plt()
    models = _unique([str(r["model"]) for r in rows])
    objects = _unique([str(r["object_type"]) for r in rows])
    names = _names(rows)
    width = 0.8 / max(len(objects), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(models) + 2), 3.6))
    for k, obj in enumerate(objects):
        cells = {str(r["model"]): r for r in rows if r["object_type"] == obj}
        xs = [i + (k - (len(objects) - 1) / 2) * width for i, m in enumerate(models) if m in cells]
        shown = [cells[m] for m in models if m in cells]
        acc = [_f(r["accuracy"]) for r in shown]
        err = [[a - _f(r["ci_low_wilson"]) for r, a in zip(shown, acc, strict=True)],
               [_f(r["ci_high_wilson"]) - a for r, a in zip(shown, acc, strict=True)]]
        ax.bar(xs, acc, width, yerr=err, capsize=2, label=obj.replace("_", " "))
    ax.set_xticks(range(len(models)), [names[m] for m in models], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("Object Counting accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, ncol=len(objects))
    ax.set_title(title)
    _save(fig, path)


def slices(rows: list[Row], path: Path, title: str) -> None:
    """Figure 21: pooled accuracy by object type, by total-object bin, and (Object Counting) by both."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for ax, kind in zip(axes[:2], ("object", "difficulty"), strict=True):
        part = [r for r in rows if r["slice_type"] == kind]
        values = _unique([str(r["slice_value"]) for r in part])
        for task in _unique([str(r["task_name"]) for r in part]):
            cells = {str(r["slice_value"]): _f(r["accuracy"]) for r in part if r["task_name"] == task}
            ax.plot(values, [cells.get(v, math.nan) for v in values], marker="o", label=task)
        ax.set_title(f"by {kind}", fontsize=10)
        ax.set_ylim(0, 1)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    axes[1].legend(fontsize=7)
    cross = [r for r in rows if r["slice_type"] == "object_difficulty" and r["source_task"] == "main"]
    for obj in _unique([str(r["slice_value"]).split("|")[0] for r in cross]):
        part = [r for r in cross if str(r["slice_value"]).startswith(obj + "|")]
        axes[2].plot([str(r["slice_value"]).split("|")[1] for r in part], [_f(r["accuracy"]) for r in part],
                     marker="o", label=obj.replace("_", " "))
    axes[2].set_title("Object Counting by object and total objects", fontsize=10)
    axes[2].set_ylim(0, 1)
    axes[2].legend(fontsize=7)
    axes[0].set_ylabel("accuracy (all responders pooled)")
    fig.suptitle(title, y=1.04)
    _save(fig, path)


def rotation(rows: list[Row], path: Path, title: str) -> None:
    """Figure 13: within-scene r of each mental-rotation task with every task, per responder."""
    plt = _plt()
    part = [r for r in rows if r["correlation_type"] == "within_scene"]
    focuses = _unique([str(r["focus_name"]) for r in part])
    models = _unique([str(r["model"]) for r in part])
    tasks = _unique([str(r["task"]) for r in part])
    fig, axes = plt.subplots(1, max(len(focuses), 1), figsize=(1.5 + 0.55 * len(tasks) * max(len(focuses), 1),
                                                               1.2 + 0.45 * len(models)), squeeze=False)
    image = None
    for ax, focus in zip(axes[0][:len(focuses)], focuses, strict=True):
        sub = [r for r in part if r["focus_name"] == focus]
        image = _heatmap(ax, _grid(sub, "model", "task", "pearson_r", models, tasks),
                         [_names(part)[m] for m in models], tasks, f"{focus} (within-scene r)", -1, 1, "RdBu_r")
    if image is not None:
        fig.colorbar(image, ax=list(axes[0]), label="Pearson r")
    fig.suptitle(title, y=1.04)
    _save(fig, path)


def bundles(rows: list[Row], path: Path, title: str) -> None:
    """Figure 14: r of each bundle with Object Counting, per responder (bars) and pooled (black marker)."""
    plt = _plt()
    names = _unique([str(r["bundle"]) for r in rows])
    models = _unique([str(r["model"]) for r in rows if r["level"] == "per_model"])
    width = 0.8 / max(len(models), 1)
    fig, ax = plt.subplots(figsize=(max(7, 1.8 * len(names)), 3.8))
    for k, model in enumerate(models):
        cells = {str(r["bundle"]): _f(r["pearson_r_with_object_count"]) for r in rows if r["model"] == model}
        ax.bar([i + (k - (len(models) - 1) / 2) * width for i in range(len(names))],
               [cells.get(b, math.nan) for b in names], width, label=_names(rows)[model])
    agg = {str(r["bundle"]): _f(r["pearson_r_with_object_count"]) for r in rows if r["level"] == "aggregate"}
    ax.scatter(range(len(names)), [agg.get(b, math.nan) for b in names], color="black", zorder=3, marker="D",
               label="pooled (scene fixed effect)")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("r with Object Counting")
    ax.legend(fontsize=6, ncol=3)
    ax.set_title(title)
    _save(fig, path)


def _delta_panels(rows: list[Row], path: Path, title: str, panels: list[tuple[str, str, list[Row]]],
                  col_key: str) -> None:
    plt = _plt()
    models = _unique([str(r["model"]) for r in rows])
    cols = _unique([str(r[col_key]) for r in rows])
    names = {m: display_name(m) for m in models}
    fig, axes = plt.subplots(1, len(panels), figsize=(1.5 + 0.55 * len(cols) * len(panels), 1.2 + 0.45 * len(models)),
                             squeeze=False)
    image = None
    for ax, (label, value, part) in zip(axes[0], panels, strict=True):
        image = _heatmap(ax, _grid(part, "model", col_key, value, models, cols), [names[m] for m in models], cols,
                         label, -0.3, 0.3, "RdBu_r", "{:+.2f}")
    if image is not None:
        fig.colorbar(image, ax=list(axes[0]), label="accuracy difference")
    fig.suptitle(title, y=1.04)
    _save(fig, path)


def camera_effects(rows: list[Row], path: Path, title: str) -> None:
    """Figure 18: accuracy at the high minus the low level of each camera factor."""
    panels = [(f"{factor}: high - low", "delta_high_minus_low", [r for r in rows if r["factor"] == factor])
              for factor in ("perspective", "offset")]
    _delta_panels(rows, path, title, panels, "task")


def camera_paired(rows: list[Row], path: Path, title: str) -> None:
    """Figure 18 (paired): mean within-structure perspective and offset effects."""
    panels = [("perspective (paired)", "perspective_delta", rows), ("offset (paired)", "offset_delta", rows)]
    _delta_panels(rows, path, title, panels, "task_display")


DRAWERS: dict[str, Callable[[list[Row], Path, str], None]] = {
    "figure_07": summation, "figure_27": summation, "figure_22": composition, "figure_28": composition,
    "figure_25": task_accuracy, "figure_20": object_accuracy, "figure_26": object_accuracy, "figure_21": slices,
    "figure_13": rotation, "figure_14": bundles, "figure_18": camera_effects, "figF18": camera_paired,
}


def draw(name: str, rows: list[Row], path: str | Path) -> None:
    """Draw the figure of table ``name`` (its rows as built) to ``path``; an empty table gives a titled blank."""
    title = name.replace("_", " ")
    drawer = DRAWERS[name.split("_camera")[0] if name.startswith("figF18") else "_".join(name.split("_")[:2])]
    if not rows:
        plt = _plt()
        fig, ax = plt.subplots(figsize=(4, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, f"{title}\n(no rows)", ha="center", va="center")
        _save(fig, Path(path))
        return
    drawer(rows, Path(path), title)
