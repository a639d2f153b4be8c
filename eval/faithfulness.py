"""Trace audits without a judge (metrics.md section 7) and the ground-truth-free verifier scores.

Inputs are ``(scenes, k)`` arrays for every sampled trace: the parsed final answer, the parsed
sub-task values (NaN when a line is absent), the total line's ``hidden`` term, and the per-trace
self-consistency of :func:`spatialiq_train.core.parsing.trace_self_consistent` (1.0, 0.0, or NaN when
the answer or the total line is absent), as :func:`eval.score.collect_predictions` records it.
"""

from __future__ import annotations

import math

import numpy as np

SHORTCUT_RULE = (
    "among traces whose Object Counting answer is correct: at least one scored sub-task line (2-9) wrong or "
    "absent, or the final answer differs from the trace's own visible + hidden (total line absent counts as "
    "inconsistent)"
)
SELF_CONSISTENCY_RULE = (
    "share of traces whose final answer equals visible + hidden of their own total line; traces with no answer "
    "or no total line count as not self-consistent (and are counted separately)"
)


def consistent_mask(self_consistency: np.ndarray) -> np.ndarray:
    """Boolean array of self-consistent traces from the recorded 1.0/0.0/NaN values (NaN counts as not)."""
    return self_consistency == 1.0


def invariants_hold(sub: dict[str, np.ndarray], line_hidden: np.ndarray) -> np.ndarray:
    """The hierarchy's ground-truth-free invariants (benchmark-spec 4.3) hold for the trace's own values.

    task6 <= task7, task6 <= task2, task2 <= task3, task8 <= hidden, and task8 = 0 exactly when hidden = 0.
    Absent values fail.
    """
    t2, t3, t6, t7, t8 = (sub[t] for t in ("task2", "task3", "task6", "task7", "task8"))
    with np.errstate(invalid="ignore"):
        ok = (t6 <= t7) & (t6 <= t2) & (t2 <= t3) & (t8 <= line_hidden) & ((t8 == 0) == (line_hidden == 0))
    return ok & ~np.isnan(line_hidden)


def _share(mask: np.ndarray, within: np.ndarray) -> float:
    n = int(within.sum())
    return float((mask & within).sum() / n) if n else math.nan


def trace_audit(
    answer: np.ndarray,
    answer_gt: np.ndarray,
    sub: dict[str, np.ndarray],
    sub_gt: dict[str, np.ndarray],
    self_consistency: np.ndarray,
) -> dict[str, object]:
    """Shortcut and self-consistency rates over all traces and over the first sample."""
    consistent = consistent_mask(self_consistency)
    wrong_sub = np.zeros(answer.shape, dtype=bool)
    for task, pred in sub.items():
        wrong_sub |= ~(pred == sub_gt[task][:, None])
    correct = answer == answer_gt[:, None]
    shortcut = wrong_sub | ~consistent
    has_trace = ~np.isnan(answer)
    undefined = np.isnan(self_consistency)
    out: dict[str, object] = {"shortcut_rule": SHORTCUT_RULE, "self_consistency_rule": SELF_CONSISTENCY_RULE}
    for label, cols in (("all_samples", slice(None)), ("first_sample", slice(0, 1))):
        out[label] = {
            "shortcut_rate": _share(shortcut[:, cols], correct[:, cols]),
            "correct_traces": int(correct[:, cols].sum()),
            "self_consistency_rate": _share(consistent[:, cols], np.ones_like(consistent[:, cols])),
            "self_consistency_rate_among_answered": _share(consistent[:, cols], has_trace[:, cols]),
            "traces": int(consistent[:, cols].size),
            "traces_without_total_or_answer": int(undefined[:, cols].sum()),
        }
    return out
