"""The paper tables' resampling draws in bulk equal the official one-draw-at-a-time sequence.

numpy's bulk draws equal repeated single draws only for some generators and distributions, so each bulk form the
tables use is checked against the loop it replaces, on the generator they use (``numpy.random.default_rng``).
"""

from __future__ import annotations

import numpy as np
import pytest

from eval.paper.twoway import SceneStats, bootstrap_slopes, moments, scene_stats


@pytest.mark.parametrize("n_v", [7, 554, 3000])
def test_integers_in_one_call_equal_one_call_per_replicate(n_v: int) -> None:
    """twoway.bootstrap_slopes and dependency.bootstrap_lift_ci: a (K, V) integers call = K calls of size V,
    also when taken in batches."""
    bulk = np.random.default_rng(1).integers(0, n_v, size=(40, n_v))
    rng = np.random.default_rng(1)
    one_by_one = np.stack([rng.integers(0, n_v, size=n_v) for _ in range(40)])
    rng = np.random.default_rng(1)
    batched = np.concatenate([rng.integers(0, n_v, size=(k, n_v)) for k in (16, 16, 8)])
    assert np.array_equal(bulk, one_by_one) and np.array_equal(bulk, batched)


def test_bulk_and_single_draws_can_differ() -> None:
    """Why each bulk form is checked: 8-bit integers are drawn from a per-call byte buffer, so a (K, V) call
    differs from K calls of size V on the same generator."""
    bulk = np.random.default_rng(1).integers(0, 100, size=(5, 10), dtype=np.uint8)
    rng = np.random.default_rng(1)
    one_by_one = np.stack([rng.integers(0, 100, size=10, dtype=np.uint8) for _ in range(5)])
    assert not np.array_equal(bulk, one_by_one)


def test_permutation_of_a_copy_equals_shuffle_in_place() -> None:
    """dependency.permutation_null: Generator.permutation(p) draws what shuffle draws on a copy, interleaved across
    responders of different sizes."""
    sizes = (2971, 2970, 5, 1)
    arrays = [np.random.default_rng(s).random(s) for s in sizes]
    rng = np.random.default_rng(42)
    permuted = [rng.permutation(a) for _ in range(3) for a in arrays]
    rng = np.random.default_rng(42)
    shuffled = []
    for _ in range(3):
        for a in arrays:
            copy = a.copy()
            rng.shuffle(copy)
            shuffled.append(copy)
    assert all(np.array_equal(x, y) for x, y in zip(permuted, shuffled, strict=True))


def _loop_slopes(stats: SceneStats, n_boot: int, seed: int) -> np.ndarray:
    """The official form: one integers(0, V, V) per replicate, scenes in order of first appearance."""
    rng = np.random.default_rng(seed)
    n_v = stats.q.shape[0]
    out = []
    for _ in range(n_boot):
        w = np.bincount(stats.order[rng.integers(0, n_v, size=n_v)], minlength=n_v).astype(np.float64)
        xx, xy, _ = moments(stats, w[None, :])[0]
        if xx > 0:
            out.append(xy / xx)
    return np.array(out)


def test_bootstrap_slopes_equal_the_loop_over_replicates() -> None:
    rng = np.random.default_rng(7)
    view = np.repeat(rng.permutation(60), 4)
    model = np.tile(np.arange(4), 60)
    x = (rng.random(240) < 0.5).astype(float)
    y = (rng.random(240) < 0.4 + 0.3 * x).astype(float)
    stats = scene_stats(view, model, x, y)
    got = bootstrap_slopes(stats, 90, 3, batch=25)
    want = _loop_slopes(stats, 90, 3)
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("high", [3, 40, 2**20])
def test_summed_rows_equal_the_count_matrix_product(high: int) -> None:
    """dependency.summed_rows (packed words, one gather per word) = the (K, V) draw counts times the table,
    also when the fields need more than one word."""
    from eval.paper.dependency import summed_rows

    rng = np.random.default_rng(5)
    table = rng.integers(0, high, size=(300, 4))
    draws = rng.integers(0, 300, size=(20, 300))
    counts = np.stack([np.bincount(row, minlength=300) for row in draws])
    assert np.array_equal(summed_rows(table, draws), counts @ table)
