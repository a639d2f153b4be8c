"""Statistics: binomial standard error, Wilson intervals, per-task accuracy, exact McNemar, Benjamini-Hochberg.

Pure numpy/scipy functions (metrics.md section 6). Correctness vectors hold 1.0, 0.0 or NaN (missing);
NaN rows are excluded from every denominator and counted separately.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

Z95 = 1.96


def binomial_se(p: float, n: int) -> float:
    """``sqrt(p (1 - p) / n)``; NaN when n = 0 or p is NaN."""
    return math.sqrt(p * (1.0 - p) / n) if n > 0 and not math.isnan(p) else math.nan


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials, clipped to [0, 1]; (NaN, NaN) when n = 0.

    The project's one Wilson interval (eval metrics, the paper tables, the model card). It is written as the
    official analysis script writes it, so the paper tables match it bit for bit. ``scipy.stats.binomtest``'s
    ``proportion_ci("wilson")`` is not used: it takes z from the exact normal quantile (1.95996...), not 1.96.
    """
    if n <= 0:
        return math.nan, math.nan
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt((p * (1 - p) + z * z / (4 * n)) / n) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Accuracy:
    """Accuracy of one task for one responder, with its uncertainty."""

    accuracy: float
    n_correct: int
    n_incorrect: int
    n: int
    n_missing: int
    binom_se: float
    ci_low_wilson: float
    ci_high_wilson: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def accuracy(correct: np.ndarray) -> Accuracy:
    """Accuracy over the non-missing entries of a 1/0/NaN vector."""
    c = np.asarray(correct, dtype=np.float64)
    present = ~np.isnan(c)
    n = int(present.sum())
    k = int((c[present] == 1).sum())
    p = k / n if n else math.nan
    lo, hi = wilson_interval(k, n)
    return Accuracy(p, k, n - k, n, int(c.size - n), binomial_se(p, n), lo, hi)


@dataclass(frozen=True)
class McNemar:
    """Exact (binomial) McNemar test on paired correctness."""

    n: int
    """Pairs where both responders have an answer."""
    a_only: int
    """A correct, B wrong."""
    b_only: int
    """A wrong, B correct."""
    p_value: float


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> McNemar:
    """Two-sided exact McNemar test of paired 1/0/NaN vectors (rows missing in either are dropped)."""
    from scipy.stats import binom

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired vectors differ in length: {a.shape} vs {b.shape}")
    both = ~np.isnan(a) & ~np.isnan(b)
    a, b = a[both], b[both]
    n01 = int(((a == 1) & (b == 0)).sum())
    n10 = int(((a == 0) & (b == 1)).sum())
    discordant = n01 + n10
    p = 1.0 if discordant == 0 else min(1.0, 2.0 * float(binom.cdf(min(n01, n10), discordant, 0.5)))
    return McNemar(int(both.sum()), n01, n10, p)


def benjamini_hochberg(p_values: np.ndarray | list[float]) -> np.ndarray:
    """BH-adjusted p-values (step-up, monotone, capped at 1), in the input order. NaN stays NaN.

    The project's one Benjamini-Hochberg. ``scipy.stats.false_discovery_control`` refuses NaN and rounds
    differently in the last bit (it multiplies by ``m / i``), so it is not used.
    """
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.size
    if m == 0:
        return out
    order = valid[np.argsort(p[valid], kind="stable")]
    ranked = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    out[order] = np.minimum(adjusted, 1.0)
    return out
