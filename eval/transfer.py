"""The transfer table's numbers: a base and a trained checkpoint on the same items of one benchmark, paired.

Pure functions. Accuracy: the exact McNemar test (``eval.stats.mcnemar_exact``, the binomial test on the
discordant pairs) and a paired bootstrap interval of the difference; a continuous per-item score: the paired
bootstrap interval of the mean difference; the specialisation signals: the opener share of each side (the reader
takes it from the benchmark's results, ``eval.external.chains.opener_share``) and the chain length relative to
base. Differences are trained minus base. Reading the results and writing the table are in ``eval.transfer_io``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from eval.stats import mcnemar_exact
from spatialiq_train.core.errors import InputError

BOOTSTRAP_STREAM = 0x7A1_B007
"""Mixed into the bootstrap seed so its draws do not coincide with other generators seeded from the same number."""
RESAMPLES = 2000
LEVEL = 0.95
COLUMNS: tuple[str, ...] = (
    "benchmark", "metric", "test", "n", "base", "trained", "difference", "ci_low", "ci_high", "p_value",
    "base_only", "trained_only",
)
"""transfer.csv: one row per benchmark and metric (``correct`` first, then each continuous score)."""
SIGNAL_COLUMNS: tuple[str, ...] = (
    "benchmark", "opener_base", "opener_share_base", "opener_trained", "opener_share_trained", "chain_words_base",
    "chain_words_trained", "length_ratio",
)
GROUP_COLUMNS: tuple[str, ...] = (
    "benchmark", "breakdown", "group", "n", "base", "trained", "difference", "p_value", "base_only", "trained_only",
)
"""transfer_groups.csv: accuracy per group of each breakdown a benchmark's results carry (SpatialChain: relation,
hops)."""


@dataclass
class Results:
    """One checkpoint's per-item results on one benchmark, keyed by item id (NaN: undefined for that item)."""

    benchmark: str
    model: str
    source: str
    correct: dict[str, float]
    """1.0 correct, 0.0 wrong (an unparsed answer is wrong), NaN left out of the accuracy."""
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    """Score name -> item id -> value."""
    opener: str | None = None
    opener_share: float | None = None
    chain_words: dict[str, float] = field(default_factory=dict)
    """Words in each item's reasoning chain (empty when the results have none per item)."""
    chain_words_mean: float | None = None
    groups: dict[str, dict[str, str]] = field(default_factory=dict)
    """Breakdown name -> item id -> the item's group (SpatialChain: ``relation``, ``hops``); empty when none."""


@dataclass(frozen=True)
class Bootstrap:
    """Paired bootstrap of the mean difference (trained - base) over the pairs where both are defined."""

    n: int
    base: float
    trained: float
    difference: float
    ci_low: float
    ci_high: float


def paired_bootstrap(base: Sequence[float], trained: Sequence[float], seed: int, resamples: int = RESAMPLES,
                     level: float = LEVEL) -> Bootstrap:
    """Means of both sides, their difference and its percentile interval: ``resamples`` draws of the pairs with
    replacement (numpy's default generator seeded by ``(BOOTSTRAP_STREAM, seed)``), the ``(1 - level) / 2`` and
    ``(1 + level) / 2`` quantiles (linear interpolation) of the resampled mean differences. Pairs with a NaN on
    either side are dropped; no pair left gives NaN everywhere."""
    a, b = np.asarray(base, dtype=np.float64), np.asarray(trained, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired vectors differ in length: {a.shape} vs {b.shape}")
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"resamples must be >= 1 and level in (0, 1) (got {resamples}, {level})")
    both = ~np.isnan(a) & ~np.isnan(b)
    a, b = a[both], b[both]
    if a.size == 0:
        return Bootstrap(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    diff = b - a
    draws = np.random.default_rng([BOOTSTRAP_STREAM, seed]).integers(0, diff.size, size=(resamples, diff.size))
    low, high = np.quantile(diff[draws].mean(axis=1), [(1 - level) / 2, (1 + level) / 2])
    return Bootstrap(int(a.size), float(a.mean()), float(b.mean()), float(diff.mean()), float(low), float(high))


def length_ratio_to_base(base_words: Sequence[float], trained_words: Sequence[float]) -> float:
    """Mean chain length of the trained side over the base's, on the pairs both define (SpatialChain's "chains
    shrank to 15 % of their length" is 0.15); NaN when no pair is left or the base's chains are empty."""
    a, b = np.asarray(base_words, dtype=np.float64), np.asarray(trained_words, dtype=np.float64)
    both = ~np.isnan(a) & ~np.isnan(b)
    total = float(a[both].sum())
    return float(b[both].sum()) / total if both.any() and total > 0 else math.nan


def paired(base: Mapping[str, float], trained: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Values of the items both sides hold, in the base's order."""
    ids = [i for i in base if i in trained]
    return (np.array([base[i] for i in ids], dtype=np.float64), np.array([trained[i] for i in ids], dtype=np.float64))


def _require_common(base: Results, trained: Results) -> None:
    if not any(i in trained.correct for i in base.correct):
        raise InputError(f"{base.source} and {trained.source}: no item id in common ({len(base.correct)} and "
                         f"{len(trained.correct)} items); a paired comparison needs both checkpoints scored on the "
                         f"same {base.benchmark} items (the same --data)")


def benchmark_rows(base: Results, trained: Results, seed: int, resamples: int = RESAMPLES) -> list[dict[str, object]]:
    """transfer.csv's rows of one benchmark: ``correct`` (McNemar's p, bootstrap interval), then every continuous
    score both sides hold (bootstrap interval, no p)."""
    _require_common(base, trained)
    a, b = paired(base.correct, trained.correct)
    test, boot = mcnemar_exact(a, b), paired_bootstrap(a, b, seed, resamples)
    rows: list[dict[str, object]] = [{
        "benchmark": base.benchmark, "metric": "correct", "test": "mcnemar_exact", "n": test.n, "base": boot.base,
        "trained": boot.trained, "difference": boot.difference, "ci_low": boot.ci_low, "ci_high": boot.ci_high,
        "p_value": test.p_value, "base_only": test.a_only, "trained_only": test.b_only}]
    for name in (s for s in base.scores if s in trained.scores):
        boot = paired_bootstrap(*paired(base.scores[name], trained.scores[name]), seed, resamples)
        rows.append({"benchmark": base.benchmark, "metric": name, "test": "paired_bootstrap", "n": boot.n,
                     "base": boot.base, "trained": boot.trained, "difference": boot.difference,
                     "ci_low": boot.ci_low, "ci_high": boot.ci_high})
    return rows


def signals_row(base: Results, trained: Results) -> dict[str, object]:
    """The specialisation signals of one benchmark: each side's opener and its share, chain words, and the chain
    length relative to base (per item and paired when both sides hold per-item chain lengths, else the means)."""
    if base.chain_words and trained.chain_words:
        a, b = paired(base.chain_words, trained.chain_words)
        ratio = length_ratio_to_base(a, b)
        words = (float(np.nanmean(a)) if a.size else None, float(np.nanmean(b)) if b.size else None)
    else:
        words = (base.chain_words_mean, trained.chain_words_mean)
        ratio = length_ratio_to_base([math.nan if w is None else w for w in words[:1]],
                                     [math.nan if w is None else w for w in words[1:]])
    return {"benchmark": base.benchmark, "opener_base": base.opener, "opener_share_base": base.opener_share,
            "opener_trained": trained.opener, "opener_share_trained": trained.opener_share,
            "chain_words_base": words[0], "chain_words_trained": words[1], "length_ratio": ratio}


def group_rows(base: Results, trained: Results) -> list[dict[str, object]]:
    """transfer_groups.csv's rows of one benchmark: for each breakdown both sides carry and each of its groups (the
    base's labels, in the order first met), the accuracy of both sides on the items both define and the exact
    McNemar test. The groups come from the data (the question, its relation column), so both sides agree."""
    rows: list[dict[str, object]] = []
    for name in (g for g in base.groups if g in trained.groups):
        labels = base.groups[name]
        for label in dict.fromkeys(labels.values()):
            ids = {i: base.correct[i] for i, g in labels.items() if g == label and i in base.correct}
            a, b = paired(ids, trained.correct)
            test = mcnemar_exact(a, b)
            both = ~np.isnan(a) & ~np.isnan(b)
            means = (float(a[both].mean()), float(b[both].mean())) if both.any() else (math.nan, math.nan)
            rows.append({"benchmark": base.benchmark, "breakdown": name, "group": label, "n": test.n,
                         "base": means[0], "trained": means[1], "difference": means[1] - means[0],
                         "p_value": test.p_value if test.n else math.nan, "base_only": test.a_only,
                         "trained_only": test.b_only})
    return rows
