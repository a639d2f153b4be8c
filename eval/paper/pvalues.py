"""The tests behind the paper tables' p-values, computed as ``scipy.stats`` computes them, without importing it.

``scipy.stats`` takes about a second of CPU to import and a millisecond of wrapper per call (its array-API and
NaN-policy layers); the tables call these tests about a thousand times. Each function here performs the same
floating-point operations in the same order as the ``scipy.stats`` function it names and ends in the same
``scipy.special`` routine, so every number is bit-identical (``tests/test_paper_pvalues.py`` checks them against
``scipy.stats`` on random and edge-case inputs). Inputs are 1-D float arrays without NaN.
"""

from __future__ import annotations

import functools
import importlib
import math
import sys
import types
from pathlib import Path

import numpy as np


@functools.cache
def _special() -> types.ModuleType:
    """``scipy.special._ufuncs``, the compiled module holding the special functions, without ``scipy.special``.

    ``scipy.special``'s ``__init__`` imports its array-API layer, which imports the rest of numpy (``numpy.f2py``,
    ``numpy.ma``, ``numpy.testing``: 0.3 s of CPU); the compiled module itself needs only its sibling extension
    modules. So, unless ``scipy.special`` is imported already, an empty package object stands in for it while
    ``_ufuncs`` loads, and is removed afterwards: a later ``import scipy.special`` runs its ``__init__`` as usual
    and reuses this same ``_ufuncs`` module (the functions are the same objects either way).
    """
    name = "scipy.special"
    if name in sys.modules:
        return importlib.import_module(name + "._ufuncs")
    import scipy

    stand_in = types.ModuleType(name)
    stand_in.__path__ = [str(Path(scipy.__path__[0]) / "special")]
    sys.modules[name] = stand_in
    try:
        return importlib.import_module(name + "._ufuncs")
    finally:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        if vars(scipy).get("special") is stand_in:
            delattr(scipy, "special")


def _mean(x: np.ndarray) -> np.float64:
    return np.mean(x)  # type: ignore[return-value]


def _var(x: np.ndarray) -> np.float64:
    """``scipy.stats._stats_py._var(x, ddof=1)``: mean of squared deviations, times n / (n - 1)."""
    dev = x - np.mean(x, keepdims=True)
    var = np.mean(dev**2)
    n = np.float64(x.size)
    return var * (n / (n - 1))  # type: ignore[no-any-return]


def pearsonr(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``scipy.stats.pearsonr(x, y)`` (two-sided) for n >= 3 and neither side constant."""
    n = x.size
    xm = x - np.mean(x, keepdims=True)
    ym = y - np.mean(y, keepdims=True)
    xmax = np.max(np.abs(xm), keepdims=True)
    ymax = np.max(np.abs(ym), keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        normxm = xmax * np.linalg.norm(xm / xmax, axis=-1, keepdims=True)
        normym = ymax * np.linalg.norm(ym / ymax, axis=-1, keepdims=True)
        r = np.vecdot(xm / normxm, ym / normym, axis=-1)
    r = np.clip(r, -1.0, 1.0)
    ab = np.float64(n / 2 - 1)
    p = 2 * _special().betaincc(ab, ab, (np.abs(r) - (-1)) / 2)
    return float(r), float(p)


def _t_two_sided(t: np.float64, df: np.float64) -> float:
    return float(2 * _special().stdtr(df, -np.abs(t)))


def welch_ttest(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p of ``scipy.stats.ttest_ind(a, b, equal_var=False)``; NaN when a sample has fewer than 2 rows."""
    if a.size < 2 or b.size < 2:
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        v1, v2 = _var(a), _var(b)
        vn1, vn2 = v1 / a.size, v2 / b.size
        df = (vn1 + vn2) ** 2 / (vn1**2 / (a.size - 1) + vn2**2 / (b.size - 1))
        df = np.float64(1.0) if np.isnan(df) else df
        t = np.divide(_mean(a) - _mean(b), np.sqrt(vn1 + vn2))
    return _t_two_sided(t, df)


def ttest_1samp(a: np.ndarray) -> tuple[float, float]:
    """(t, two-sided p) of ``scipy.stats.ttest_1samp(a, 0.0)``; NaN with fewer than 2 rows."""
    if a.size < 2:
        return math.nan, math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        d = _mean(a) - np.float64(0.0)
        t = np.divide(d, np.sqrt(_var(a) / a.size))
    return float(t), _t_two_sided(t, np.float64(a.size - 1))


def chi2_2x2(table: list[list[int]]) -> float:
    """p of ``scipy.stats.chi2_contingency(table, correction=False)`` for a 2x2 table; NaN when an expected
    frequency is zero (where scipy raises)."""
    observed = np.asarray(table, dtype=np.float64)
    expected = observed.sum(axis=1, keepdims=True) * observed.sum(axis=0, keepdims=True) / observed.sum()
    if np.any(expected == 0):
        return math.nan
    stat = np.sum((observed - expected) ** 2 / expected)
    return float(_special().chdtrc(np.float64(1.0), stat))


def _binom(kind: str, k: float, n: int, p: float) -> float:
    """``scipy.stats.binom.pmf/cdf/sf`` at one point (support 0..n, values outside it as scipy gives them)."""
    if kind == "pmf":
        return float(np.clip(_special()._binom_pmf(k, n, p), 0, 1)) if 0 <= k <= n else 0.0
    if kind == "cdf":
        return 1.0 if k >= n else 0.0 if k < 0 else float(np.clip(_special()._binom_cdf(math.floor(k), n, p), 0, 1))
    return 0.0 if k >= n else 1.0 if k < 0 else float(np.clip(_special()._binom_sf(math.floor(k), n, p), 0, 1))


def _search(a, d: float, lo: float, hi: float) -> float:  # type: ignore[no-untyped-def]
    """scipy's binary search for the other tail: i in [lo, hi] with a(i) <= d < a(i + 1)."""
    while lo < hi:
        mid = lo + (hi - lo) // 2
        value = a(mid)
        if value < d:
            lo = mid + 1
        elif value > d:
            hi = mid - 1
        else:
            return mid
    return lo if a(lo) <= d else lo - 1


def binomtest(k: int, n: int, p: float = 0.5) -> float:
    """Two-sided p of ``scipy.stats.binomtest(k, n, p)`` (the minlike rule with relative tolerance 1e-7)."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"binomtest needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    d = _binom("pmf", k, n, p)
    rerr = 1 + 1e-7
    if k == p * n:
        return 1.0
    if k < p * n:
        ix = _search(lambda x: -_binom("pmf", x, n, p), -d * rerr, float(np.ceil(p * n)), n)
        y = n - ix + int(d * rerr == _binom("pmf", ix, n, p))
        pval = _binom("cdf", k, n, p) + _binom("sf", n - y, n, p)
    else:
        ix = _search(lambda x: _binom("pmf", x, n, p), d * rerr, 0, float(np.floor(p * n)))
        y = ix + 1
        pval = _binom("cdf", y - 1, n, p) + _binom("sf", k - 1, n, p)
    return min(1.0, pval)
