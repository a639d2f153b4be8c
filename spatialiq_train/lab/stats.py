"""Pure numpy functions for every number of ``reward analyze``'s summary (docs/rewards.md, "Running a reward
experiment").

Per-view quantities take ``(views, k)`` grids: row = view, column = sample slot, NaN where a view has no
completion in that slot (:func:`to_grid` builds them). Per-completion quantities take flat arrays.
"""

from __future__ import annotations

import math

import numpy as np

TIE_TOLERANCE = 1e-12
"""Rewards closer than this count as equal (zero-variance groups, AUC ties)."""


def to_grid(values: np.ndarray, rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Flat per-completion ``values`` placed at ``(rows, cols)`` of a NaN grid of ``shape``."""
    grid = np.full(shape, np.nan)
    grid[rows, cols] = values
    return grid


def mean_std(values: np.ndarray) -> tuple[float, float]:
    """Mean and population standard deviation (ddof 0) of the finite values; NaN, NaN when there are none."""
    v = values[np.isfinite(values)]
    return (float(v.mean()), float(v.std())) if v.size else (math.nan, math.nan)


def zero_variance_share(grid: np.ndarray) -> float:
    """Share of views (rows with at least two samples) whose samples all get the same reward; NaN without any."""
    present = np.isfinite(grid)
    enough = present.sum(axis=1) >= 2
    if not enough.any():
        return math.nan
    g = grid[enough]
    with np.errstate(invalid="ignore"):
        spread = np.nanmax(g, axis=1) - np.nanmin(g, axis=1)
    return float((spread <= TIE_TOLERANCE).mean())


def auc_within_views(reward: np.ndarray, correct: np.ndarray) -> float:
    """P(a correct sample outscores an incorrect sample of the same view), ties counting one half.

    Pooled over every (correct, incorrect) pair of samples of one view, across all views that have both (each
    pair weighs the same); NaN when no view has both. ``reward`` and ``correct`` are ``(views, k)`` grids,
    ``correct`` 1.0 / 0.0 / NaN (absent).
    """
    present = np.isfinite(reward) & np.isfinite(correct)
    good = present & (correct == 1.0)
    bad = present & (correct == 0.0)
    pairs = good[:, :, None] & bad[:, None, :]
    n = int(pairs.sum())
    if n == 0:
        return math.nan
    r = np.where(present, reward, 0.0)
    diff = r[:, :, None] - r[:, None, :]
    wins = np.where(diff > TIE_TOLERANCE, 1.0, np.where(np.abs(diff) <= TIE_TOLERANCE, 0.5, 0.0))
    return float((wins * pairs).sum() / n)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation over the pairs where both are finite (average ranks for ties).

    NaN with fewer than two pairs or when either side is constant.
    """
    from scipy.stats import rankdata

    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 2:
        return math.nan
    rx, ry = rankdata(x[keep]), rankdata(y[keep])
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = math.sqrt(float((rx * rx).sum()) * float((ry * ry).sum()))
    return float((rx * ry).sum() / denom) if denom > 0 else math.nan


def shortcut_gap(reward: np.ndarray, correct: np.ndarray, faithful: np.ndarray,
                 complete: np.ndarray | None = None) -> float:
    """Mean reward of correct-but-unfaithful traces minus that of correct-and-faithful ones (NaN if either is empty).

    ``correct``, ``faithful`` and ``complete`` are boolean per completion; faithfulness as the evaluation defines
    it (:data:`eval.faithfulness.SHORTCUT_RULE`: every scored line right and the answer equal to the trace's own
    sum). With ``complete``, only complete traces (every scored line and the total line present) count as
    unfaithful; a correct answer without them is a format failure (:func:`format_failure_gap`).
    """
    ok = np.isfinite(reward)
    shortcut = ok & correct & ~faithful
    if complete is not None:
        shortcut &= complete
    clean = ok & correct & faithful
    if not shortcut.any() or not clean.any():
        return math.nan
    return float(reward[shortcut].mean() - reward[clean].mean())


def format_failure_gap(reward: np.ndarray, correct: np.ndarray, faithful: np.ndarray, complete: np.ndarray) -> float:
    """Mean reward of correct answers whose trace lacks a scored line or the total line (a format failure, e.g. an
    answer alone) minus that of correct-and-faithful traces; NaN if either is empty."""
    ok = np.isfinite(reward)
    failure = ok & correct & ~complete
    clean = ok & correct & faithful
    if not failure.any() or not clean.any():
        return math.nan
    return float(reward[failure].mean() - reward[clean].mean())


def auc_across(reward: np.ndarray, correct: np.ndarray) -> float:
    """P(a correct completion outscores an incorrect one), ties 1/2, over every pair of completions whatever their
    view (the Mann-Whitney AUC); NaN without both kinds. Used when each view has one sample (k = 1), where no view
    has a pair: it then mixes view difficulty into the comparison."""
    from scipy.stats import rankdata

    keep = np.isfinite(reward) & np.isfinite(correct)
    r, c = reward[keep], correct[keep] == 1.0
    n_good, n_bad = int(c.sum()), int((~c).sum())
    if n_good == 0 or n_bad == 0:
        return math.nan
    ranks = rankdata(r)
    return float((ranks[c].sum() - n_good * (n_good + 1) / 2) / (n_good * n_bad))


def relative_payout(probe: np.ndarray, reference: np.ndarray) -> float:
    """Mean reward on a probe over mean reward on the faithful reference of the same views (1.0 = pays as much).

    NaN when the probe applies to no view or the reference pays 0 on average.
    """
    if probe.size == 0 or reference.size == 0:
        return math.nan
    ref = float(reference.mean())
    return float(probe.mean()) / ref if abs(ref) > TIE_TOLERANCE else math.nan
