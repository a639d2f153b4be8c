"""``spatialiq reward analyze``: how named rewards score sampled completions, and what crafted completions earn.

:func:`analyze` reads nothing and writes nothing: it takes the parsed :class:`~lab.table.CompletionTable` and the
rewards, and returns every number (an :class:`~lab.analysis.Analysis`); :func:`write_analysis` writes ``rewards.csv``,
``summary.csv`` and the report (``lab.report``).
Column definitions: docs/rewards.md, "Running a reward experiment".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from reward.registry import RewardFn
from spatialiq_train.core.io import atomic_write_text, csv_text
from spatialiq_train.lab import stats
from spatialiq_train.lab.analysis import AUC_ACROSS, AUC_WITHIN, ROW_COLUMNS, SUMMARY_COLUMNS, Analysis
from spatialiq_train.lab.probes import PROBES, probe_texts
from spatialiq_train.lab.scoring import column_names, gt_columns, score_all, score_batch
from spatialiq_train.lab.table import CompletionTable

PROBE_CHUNK = 256
"""Views per batch of probe completions (the padded probe is 50 kB each, so batches bound the memory)."""


def score_probes(rewards: Sequence[tuple[str, RewardFn]], gts: Sequence[dict], chunk: int = PROBE_CHUNK
                 ) -> dict[str, dict[str, np.ndarray]]:
    """Every reward column on the reference trace and each probe of every view, in batches of ``chunk`` views."""
    names = column_names(rewards)
    out = {p: {n: np.full(len(gts), np.nan) for n in names} for p in ("reference", *PROBES)}
    for start in range(0, len(gts), chunk):
        batch = list(gts[start:start + chunk])
        for probe, (rows, texts) in probe_texts(batch).items():
            if not rows:
                continue
            scored = score_batch(rewards, texts, gt_columns([batch[i] for i in rows]))
            at = np.asarray(rows) + start
            for n in names:
                out[probe][n][at] = scored[n]
    return out


def summary_row(name: str, values: np.ndarray, table: CompletionTable, probes: dict[str, dict[str, np.ndarray]]
                ) -> dict[str, object]:
    """Every summary.csv number of one reward column (pure)."""
    shape, rows, cols = table.shape, table.row_view, table.sample
    grid = stats.to_grid(values, rows, cols, shape)
    correct = table.exact_match == 1.0
    mean, std = stats.mean_std(values)
    auc, scope = stats.auc_within_views(grid, stats.to_grid(table.exact_match, rows, cols, shape)), AUC_WITHIN
    if table.k == 1:
        auc, scope = stats.auc_across(values, table.exact_match), AUC_ACROSS
    row: dict[str, object] = {
        "reward": name, "mean": mean, "std": std,
        "zero_variance_groups": stats.zero_variance_share(grid),
        "auc_exact_match": auc, "auc_scope": scope,
        "spearman_abs_error": stats.spearman(values, table.abs_error),
        "shortcut_reward_gap": stats.shortcut_gap(values, correct, table.faithful, table.complete),
        "format_failure_reward_gap": stats.format_failure_gap(values, correct, table.faithful, table.complete),
    }
    reference = probes["reference"][name]
    for probe in PROBES:
        scores = probes[probe][name]
        applies = np.isfinite(scores) & np.isfinite(reference)
        row[f"probe_{probe}"] = stats.relative_payout(scores[applies], reference[applies])
    ref = reference[np.isfinite(reference)]
    row["reference_mean"] = float(ref.mean()) if ref.size else math.nan
    return row


def analyze(table: CompletionTable, rewards: Sequence[tuple[str, RewardFn]]) -> Analysis:
    """Score every completion and every probe with every reward; the summary rows."""
    gts = [table.scenes[i].gt for i in table.row_view]
    scores, errors = score_all(rewards, table.texts, gts)
    probes = score_probes(rewards, [s.gt for s in table.scenes])
    columns = column_names(rewards)
    clash = sorted(set(columns) & set(ROW_COLUMNS))
    if clash:
        raise ValueError(f"reward column {clash[0]!r} has the name of a rewards.csv fact column; rename the reward")
    summary = [summary_row(n, scores[n], table, probes) for n in columns]
    return Analysis(table, columns, [n for n, _ in rewards], scores, probes, summary, errors)


def fmt(value: object) -> str:
    """A CSV cell: ints as ints, floats to 6 significant digits, NaN as an empty cell."""
    if isinstance(value, bool | np.bool_):
        return str(int(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return "" if not math.isfinite(value) else f"{float(value):.6g}"
    return str(value)


def rewards_csv(result: Analysis) -> str:
    t = result.table
    views = t.views()
    cols = [result.scores[n] for n in result.columns]
    rows = [(views[i], int(t.sample[i]), int(t.exact_match[i]), float(t.abs_error[i]), int(t.subtasks_correct[i]),
             float(t.self_consistent[i]), *(float(c[i]) for c in cols)) for i in range(len(views))]
    return csv_text([*ROW_COLUMNS, *result.columns], rows, fmt)


def summary_csv(result: Analysis) -> str:
    return csv_text(SUMMARY_COLUMNS, [[row[c] for c in SUMMARY_COLUMNS] for row in result.summary], fmt)


def write_analysis(result: Analysis, out: str | Path, meta: dict[str, object]) -> Path:
    """rewards.csv, summary.csv, the PNG plots and report.md under ``out``; returns the report's path."""
    from spatialiq_train.lab.report import write_report

    out = Path(out)
    atomic_write_text(out / "rewards.csv", rewards_csv(result))
    atomic_write_text(out / "summary.csv", summary_csv(result))
    return write_report(result, out, meta)
