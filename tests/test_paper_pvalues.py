"""eval.paper.pvalues gives bit for bit what scipy.stats gives (the paper tables are compared byte for byte)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from eval.paper import pvalues

stats = pytest.importorskip("scipy.stats")


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _samples(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs like the tables' inputs: 0/1 correctness, bundle fractions, demeaned values, ragged sizes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(300):
        n, m = int(rng.integers(3, 400)), int(rng.integers(3, 400))
        kind = rng.integers(0, 3)
        if kind == 0:
            x, y = (rng.random(n) < rng.random()).astype(float), (rng.random(m) < rng.random()).astype(float)
        elif kind == 1:
            x, y = rng.integers(0, 4, n) / 3.0, rng.integers(0, 3, m) / 2.0
        else:
            x, y = rng.normal(size=n) * 1e3, rng.normal(size=m) - 0.5
        out.append((x, y))
    return out


def test_pearsonr_matches_scipy() -> None:
    checked = 0
    for x, y in _samples(0):
        n = min(x.size, y.size)
        x, y = x[:n], y[:n]
        if np.unique(x).size < 2 or np.unique(y).size < 2:
            continue
        want = stats.pearsonr(x, y)
        got = pvalues.pearsonr(x, y)
        assert got == (float(want.statistic), float(want.pvalue))
        checked += 1
    assert checked > 200


def test_welch_matches_scipy() -> None:
    cases = [*_samples(1), (np.ones(5), np.ones(7)), (np.array([1.0, 1.0]), np.array([0.0, 0.0])),
             (np.array([1.0]), np.array([0.0, 1.0])), (np.array([0.0, 1.0]), np.array([1.0]))]
    for a, b in cases:
        with _quiet():
            want = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
        assert _same(pvalues.welch_ttest(a, b), want), (a, b)


def test_ttest_1samp_matches_scipy() -> None:
    cases = [x for x, _ in _samples(2)] + [np.zeros(6), np.full(5, 0.25), np.array([1.0, -1.0, 0.5, 0.0, 0.0])]
    for a in cases:
        with _quiet():
            res = stats.ttest_1samp(a, 0.0)
        t, p = pvalues.ttest_1samp(a)
        assert _same(t, float(res.statistic)) and _same(p, float(res.pvalue)), a


def test_chi2_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    tables = [[[int(v) for v in rng.integers(0, 3000, 2)], [int(v) for v in rng.integers(0, 3000, 2)]]
              for _ in range(300)] + [[[0, 5], [0, 7]], [[3, 0], [4, 0]], [[0, 0], [2, 3]], [[1, 2], [2, 4]]]
    for table in tables:
        try:
            want = float(stats.chi2_contingency(table, correction=False)[1])
        except ValueError:
            want = math.nan
        assert _same(pvalues.chi2_2x2(table), want), table


def test_binomtest_matches_scipy() -> None:
    rng = np.random.default_rng(4)
    pairs = [(k, n) for n in range(1, 40) for k in range(n + 1)]
    pairs += [(int(rng.integers(0, n + 1)), n) for n in rng.integers(40, 3000, 100)]
    for k, n in pairs:
        assert pvalues.binomtest(k, n) == stats.binomtest(k, n, 0.5).pvalue, (k, n)
    with pytest.raises(ValueError):
        pvalues.binomtest(5, 4)


class _quiet:
    """Silence scipy's warnings about degenerate samples (the values are what is compared)."""

    def __enter__(self) -> None:
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


def test_special_functions_load_without_scipy_special_init() -> None:
    """pvalues loads only the compiled scipy.special._ufuncs (not scipy.special's __init__, 0.3 s of CPU), and a
    later ``import scipy.special`` still works and holds the same functions."""
    code = (
        "import sys\n"
        "from eval.paper import pvalues\n"
        "ufuncs = pvalues._special()\n"
        "assert 'scipy.special' not in sys.modules, 'scipy.special was imported'\n"
        "assert 'numpy.f2py' not in sys.modules\n"
        "import scipy, scipy.special\n"
        "assert scipy.special._ufuncs is ufuncs and scipy.special.stdtr is ufuncs.stdtr\n"
        "assert scipy.special.gammaln(5.0) == ufuncs.gammaln(5.0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
