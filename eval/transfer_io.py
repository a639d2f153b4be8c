"""The transfer table's edges: reading a checkpoint's results on each benchmark, writing the table and its picture.

Two result layouts are read. An external benchmark's folder from ``spatialiq eval external`` (``metrics.json``
naming its ``benchmark`` and its ``per_item`` file; docs/transfer.md) and the Spatial-IQ benchmark split scored by
``spatialiq eval score`` (an ``eval_raw_<name>_text.csv`` file, or a folder holding exactly one), benchmark
``spatialiq``, with the completions it was scored from when the specialisation signals are wanted. The numbers
are ``eval.transfer``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.paper.common import full_precision
from eval.transfer import (
    COLUMNS,
    GROUP_COLUMNS,
    RESAMPLES,
    SIGNAL_COLUMNS,
    Results,
    benchmark_rows,
    group_rows,
    signals_row,
)
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.io import (
    atomic_write_bytes,
    atomic_write_text,
    csv_text,
    loads_json,
    markdown_table,
    read_json,
    read_text,
    resolve_inside,
)

SPATIALIQ = "spatialiq"
"""The benchmark name of the Spatial-IQ split's results in the table."""
METRICS_FILE = "metrics.json"
REQUIRED_KEYS: tuple[str, ...] = ("benchmark", "model", "n", "metrics", "per_item")


def _number(value: Any, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected a number or null, got {value!r}")
    return float(value)


def read_per_item(path: Path, groups: Sequence[str] = ()) -> tuple[dict[str, float], dict[str, dict[str, float]],
                                                                   dict[str, dict[str, str]]]:
    """``per_item.jsonl``: (item id -> correct, score name -> item id -> value, breakdown -> item id -> group);
    each name in ``groups`` is a field every line must hold as a string. A bad line names file and line."""
    correct: dict[str, float] = {}
    scores: dict[str, dict[str, float]] = {}
    labels: dict[str, dict[str, str]] = {name: {} for name in groups}
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        row = loads_json(line, where, one_line=True)
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or "correct" not in row:
            raise InputError(f"{where}: expected an object with 'id' (a string) and 'correct' (1, 0 or null)")
        if row["correct"] not in (0, 1, None) or isinstance(row["correct"], bool):
            raise InputError(f"{where}: 'correct' must be 1, 0 or null, got {row['correct']!r}")
        if row["id"] in correct:
            raise InputError(f"{where}: item id {row['id']!r} appears twice")
        correct[row["id"]] = _number(row["correct"], where)
        item_scores = row.get("scores") or {}
        if not isinstance(item_scores, dict):
            raise InputError(f"{where}: 'scores' must be an object of numbers")
        for name, value in item_scores.items():
            scores.setdefault(name, {})[row["id"]] = _number(value, f"{where}: scores.{name}")
        for name in groups:
            if not isinstance(row.get(name), str):
                raise InputError(f"{where}: {name!r} must be the item's group (a string): metrics.json's breakdowns "
                                 f"name it, got {row.get(name)!r}")
            labels[name][row["id"]] = row[name]
    if not correct:
        raise InputError(f"{path}: no items")
    return correct, scores, labels


def read_external(folder: Path) -> Results:
    """An ``eval external`` results folder (docs/transfer.md); a missing key or file is named."""
    path = folder / METRICS_FILE
    obj = read_json(path)
    missing = [k for k in REQUIRED_KEYS if not isinstance(obj, dict) or k not in obj]
    if missing:
        raise InputError(f"{path}: lacks {', '.join(map(repr, missing))} (the layout `spatialiq eval external` "
                         "writes: docs/transfer.md)")
    per_item = resolve_inside(folder, str(obj["per_item"]))
    if not per_item.is_file():
        raise InputError(f"{path}: its per_item file {per_item} does not exist")
    breakdowns = obj.get("breakdowns") or {}
    if not isinstance(breakdowns, dict):
        raise InputError(f"{path}: 'breakdowns' must be an object (breakdown name -> group -> cell)")
    correct, scores, groups = read_per_item(per_item, list(breakdowns))
    signals = obj.get("signals") or {}
    return Results(str(obj["benchmark"]), str(obj["model"]), str(folder), correct, scores,
                   opener=signals.get("opener"), opener_share=signals.get("opener_share"),
                   chain_words=dict(scores.get("chain_words", {})),
                   chain_words_mean=signals.get("chain_words_mean"), groups=groups)


def _raw_file(path: Path) -> Path:
    if path.is_file():
        return path
    found = sorted(path.glob("eval_raw_*_text.csv"))
    if len(found) != 1:
        raise InputError(f"{path}: holds no {METRICS_FILE} and {len(found)} eval_raw_*_text.csv files; give a "
                         "folder from `spatialiq eval external`, or one eval_raw file from `spatialiq eval score`")
    return found[0]


def read_spatialiq(path: Path, task: str, completions: Path | None) -> Results:
    """The Spatial-IQ split's per-view correctness on ``task`` (a column prefix, ``main`` = Object Counting), and
    with ``completions`` the opener and chain length of each view's first completion of that task."""
    from eval.external.chains import opener_share, tokens
    from eval.external.spatialchain import split_output
    from eval.rawcsv import read_raw_csv
    from spatialiq_train.core.tasks import TASKS

    table = read_raw_csv(_raw_file(path))
    if task not in table.correct:
        raise InputError(f"{table.source}: no {task!r} column (--task); it has {', '.join(table.tasks)}")
    out = Results(SPATIALIQ, table.name, table.source, dict(zip(table.views, map(float, table.correct[task]),
                                                                 strict=True)))
    if completions is None:
        return out
    from eval.completions import load_completions

    if not completions.is_file():
        raise InputError(f"{completions}: no such completions file")
    task_ids = {t_id for t_id, t in TASKS.items() if t.csv_column == task}
    texts = {c.view: c.text or "" for c in load_completions(completions).values()
             if c.task in task_ids and c.sample == 0 and c.view in out.correct}
    if not texts:
        raise InputError(f"{completions}: no first completion of task {task!r} for a view of {table.source}")
    out.opener, out.opener_share = opener_share(list(texts.values()))
    out.chain_words = {view: float(len(tokens(split_output(text)[0]))) for view, text in texts.items()}
    return out


def read_results(path: Path, task: str = "main", completions: Path | None = None) -> Results:
    """One checkpoint's results on one benchmark: an ``eval external`` folder, else the Spatial-IQ split's."""
    if not _is_spatialiq(path):
        return read_external(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    return read_spatialiq(path, task, completions)


def by_benchmark(results: Sequence[Results], option: str) -> dict[str, Results]:
    out: dict[str, Results] = {}
    for r in results:
        if r.benchmark in out:
            raise InputError(f"{option}: two results for benchmark {r.benchmark!r}: {out[r.benchmark].source} and "
                             f"{r.source}; give one per benchmark")
        out[r.benchmark] = r
    return out


def transfer_rows(base: Sequence[Results], trained: Sequence[Results], seed: int,
                  resamples: int = RESAMPLES) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """(transfer.csv rows, signal rows), benchmarks in the order ``base`` names them; a benchmark on one side only
    is refused, naming it."""
    b, t = by_benchmark(base, "--base"), by_benchmark(trained, "--trained")
    for one, other, flag in ((b, t, "--trained"), (t, b, "--base")):
        alone = [name for name in one if name not in other]
        if alone:
            raise InputError(f"{flag}: no results for benchmark {alone[0]!r} ({one[alone[0]].source}); give both "
                             "checkpoints' results on every benchmark")
    rows = [row for name in b for row in benchmark_rows(b[name], t[name], seed, resamples)]
    return rows, [signals_row(b[name], t[name]) for name in b]


def transfer_group_rows(base: Sequence[Results], trained: Sequence[Results]) -> list[dict[str, object]]:
    """transfer_groups.csv's rows: each benchmark's breakdowns (checked and ordered as :func:`transfer_rows`)."""
    b, t = by_benchmark(base, "--base"), by_benchmark(trained, "--trained")
    return [row for name in b if name in t for row in group_rows(b[name], t[name])]


def _pct(x: object) -> str:
    return "n/a" if not isinstance(x, float) or math.isnan(x) else f"{100 * x:.1f}"


def _num(x: object, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def summary_markdown(rows: Sequence[dict[str, Any]], signals: Sequence[dict[str, Any]],
                     groups: Sequence[dict[str, Any]] = ()) -> str:
    """The transfer table (one line per benchmark, accuracy in percent), every continuous score, then the accuracy
    per group of each breakdown."""
    sig = {s["benchmark"]: s for s in signals}
    main = [[r["benchmark"], r["n"], _pct(r["base"]), _pct(r["trained"]),
             f"{_pct(r['difference'])} [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]", _num(r["p_value"]),
             f"{r['base_only']} / {r['trained_only']}",
             f"{_pct(sig[r['benchmark']]['opener_share_base'])} -> {_pct(sig[r['benchmark']]['opener_share_trained'])}"
             f" ({sig[r['benchmark']]['opener_trained'] or 'n/a'})", _num(sig[r["benchmark"]]["length_ratio"])]
            for r in rows if r["metric"] == "correct"]
    other = [[r["benchmark"], r["metric"], r["n"], _num(r["base"]), _num(r["trained"]),
              f"{_num(r['difference'])} [{_num(r['ci_low'])}, {_num(r['ci_high'])}]"]
             for r in rows if r["metric"] != "correct"]
    parts = ["# Transfer table", "",
             "Accuracy in percent on the items both results score (n); difference = trained - base with its 95 % "
             "paired bootstrap interval; p: exact McNemar test; discordant: items only the base / only the trained "
             "checkpoint got right; opener share: outputs opening with the most common two words (the trained "
             "side's opener in brackets); chain length: trained over base.", "",
             markdown_table(["benchmark", "n", "base %", "trained %", "difference [95 % CI]", "McNemar p",
                             "discordant", "opener share %", "chain length vs base"], main)]
    if other:
        parts += ["", "## Continuous scores (paired bootstrap, 95 %)", "",
                  markdown_table(["benchmark", "score", "n", "base", "trained", "difference [95 % CI]"], other)]
    if groups:
        table = [[g["benchmark"], g["breakdown"], g["group"], g["n"], _pct(g["base"]), _pct(g["trained"]),
                  _pct(g["difference"]), _num(g["p_value"]), f"{g['base_only']} / {g['trained_only']}"] for g in groups]
        parts += ["", "## Accuracy by group (exact McNemar per group; SpatialChain: a relation cell with n < 20 is "
                  "non-inferential)", "", markdown_table(["benchmark", "breakdown", "group", "n", "base %",
                                                          "trained %", "difference", "McNemar p", "discordant"], table)]
    return "\n".join(parts) + "\n"


def plot_transfer(rows: Sequence[dict[str, Any]]) -> bytes:
    """One bar pair per benchmark (base, trained accuracy), the difference and McNemar's p above each pair."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from eval.report import figure_png

    acc = [r for r in rows if r["metric"] == "correct"]
    x = np.arange(len(acc))
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(acc), 3.4))
    for offset, side, color in ((-0.19, "base", "#9aa5b1"), (0.19, "trained", "#2f6db5")):
        ax.bar(x + offset, [100 * float(r[side]) for r in acc], width=0.36, label=side, color=color)
    for i, r in enumerate(acc):
        top = 100 * max(float(r["base"]), float(r["trained"]))
        ax.text(i, top + 2, f"{100 * float(r['difference']):+.1f} pts\np={_num(r['p_value'], 2)}", ha="center",
                fontsize=8)
    ax.set_xticks(x, [r["benchmark"] for r in acc])
    ax.set_ylim(0, 118)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("What training gained and what it cost", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    return figure_png(fig)


def write_transfer(base: Sequence[Path], trained: Sequence[Path], out: Path, task: str = "main", seed: int = 0,
                   base_completions: Path | None = None, trained_completions: Path | None = None) -> str:
    """OUT/transfer.csv, OUT/transfer_groups.csv (its header alone when no results carry breakdowns),
    OUT/transfer_signals.csv, OUT/transfer.md and OUT/transfer.png (each written whole); returns the markdown.
    ``*_completions`` go with the Spatial-IQ results of that side."""
    def read(paths: Sequence[Path], completions: Path | None, flag: str) -> list[Results]:
        read_ = [read_results(p, task, completions if _is_spatialiq(p) else None) for p in paths]
        if completions is not None and not any(r.benchmark == SPATIALIQ for r in read_):
            raise InputError(f"{flag}-completions {completions}: no Spatial-IQ results among {flag} to go with")
        return read_

    base_results = read(base, base_completions, "--base")
    trained_results = read(trained, trained_completions, "--trained")
    rows, signals = transfer_rows(base_results, trained_results, seed)
    groups = transfer_group_rows(base_results, trained_results)
    text, picture = summary_markdown(rows, signals, groups), plot_transfer(rows)  # all computed before any write
    atomic_write_text(out / "transfer.csv", csv_text(COLUMNS, rows, full_precision))
    atomic_write_text(out / "transfer_groups.csv", csv_text(GROUP_COLUMNS, groups, full_precision))
    atomic_write_text(out / "transfer_signals.csv", csv_text(SIGNAL_COLUMNS, signals, full_precision))
    atomic_write_bytes(out / "transfer.png", picture)
    atomic_write_text(out / "transfer.md", text + "\n![transfer](transfer.png)\n")
    return text


def _is_spatialiq(path: Path) -> bool:
    return not (path.is_dir() and (path / METRICS_FILE).is_file())
