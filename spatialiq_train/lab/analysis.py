"""What a reward analysis gives (:class:`Analysis`) and the columns of its CSV files.

``lab.analyze`` computes it and writes the CSVs, ``lab.report`` draws the plots and ``report.md`` from it; both import
it from here. Column definitions: docs/rewards.md, "Running a reward experiment".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spatialiq_train.lab.probes import PROBES
from spatialiq_train.lab.table import CompletionTable

ROW_COLUMNS: tuple[str, ...] = ("view", "sample", "parsed_exact_match", "parsed_abs_error", "parsed_subtasks_correct",
                                "parsed_self_consistent")
"""The leading columns of rewards.csv (one row per completion): the facts the evaluation's parser reads, prefixed
``parsed_`` so no reward column (``exact_match`` is a reward too) can share a name; one column per reward follows."""
PROBE_COLUMNS: tuple[str, ...] = tuple(f"probe_{p}" for p in PROBES)
SUMMARY_COLUMNS: tuple[str, ...] = (
    "reward", "mean", "std", "zero_variance_groups", "auc_exact_match", "auc_scope", "spearman_abs_error",
    "shortcut_reward_gap", "format_failure_reward_gap", *PROBE_COLUMNS, "reference_mean",
)
AUC_WITHIN = "within views"
AUC_ACROSS = "across views (k = 1)"
"""summary.csv: one row per reward column; probe_<name> is the mean payout relative to the faithful trace."""


@dataclass(frozen=True)
class Analysis:
    """Every number of one analysis: the per-completion scores, the probe scores and the summary rows."""

    table: CompletionTable
    columns: list[str]
    """Every reward column: totals and combination components."""
    totals: list[str]
    """The rewards as named (one total each)."""
    scores: dict[str, np.ndarray]
    """Per completion, aligned with the table's rows."""
    probes: dict[str, dict[str, np.ndarray]]
    """probe (and ``reference``) -> column -> per-view scores (NaN where the probe does not apply)."""
    summary: list[dict[str, object]]
    errors: dict[str, int]
