"""Two-way (scene + responder) fixed effects in closed form, with a scene-cluster bootstrap.

The official module removes both fixed effects by alternating within-scene and within-responder demeaning
(at most 50 passes, stopping at a change below 1e-10) and bootstraps by resampling scenes, each drawn copy a
scene of its own. Both converge to the projection ``M`` onto the complement of the scene and responder dummies,
so the moments are computed exactly instead (Frisch-Waugh-Lovell):

    x'My = x'M_v y - b_x' G^-1 b_y,   b_x[r] = sum over responder r of the within-scene residual of x,
    G = sum over scenes of diag(n_v) - n_v n_v' / |v|     (n_v: rows per responder in scene v),

with one responder dropped as reference. Every term is a sum over scenes, so a bootstrap sample that draws
scene v w_v times is the same sum weighted by w_v: one matrix product per batch of draws. The draws are the
official ones (``numpy.random.default_rng(seed)``, one ``integers(0, V, V)`` per replicate over scenes in
order of first appearance), so the bootstrap intervals are reproduced, not just approximated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SceneStats:
    """Per-scene sufficient statistics of two columns x, y after within-scene demeaning."""

    q: np.ndarray
    """(V, 3): sums of x~x~, x~y~, y~y~ per scene."""
    b: np.ndarray
    """(V, R, 2): per scene and responder, sums of x~ and y~."""
    n: np.ndarray
    """(V, R): rows per scene and responder."""
    order: np.ndarray
    """Scene indices (0..V-1) in order of first appearance in the rows."""


def scene_stats(view: np.ndarray, model: np.ndarray, x: np.ndarray, y: np.ndarray) -> SceneStats:
    """Statistics of rows (view code, responder code, x, y); rows must be free of NaN."""
    views, first, vi = np.unique(view, return_index=True, return_inverse=True)
    _, ri = np.unique(model, return_inverse=True)
    n_v, n_r = views.size, int(ri.max()) + 1 if ri.size else 0
    size = np.bincount(vi, minlength=n_v).astype(np.float64)
    xt = x - (np.bincount(vi, weights=x, minlength=n_v) / size)[vi]
    yt = y - (np.bincount(vi, weights=y, minlength=n_v) / size)[vi]
    q = np.stack([np.bincount(vi, weights=a * c, minlength=n_v) for a, c in ((xt, xt), (xt, yt), (yt, yt))], 1)
    cell = vi * n_r + ri
    b = np.stack([np.bincount(cell, weights=a, minlength=n_v * n_r) for a in (xt, yt)], 1).reshape(n_v, n_r, 2)
    n = np.bincount(cell, minlength=n_v * n_r).reshape(n_v, n_r).astype(np.float64)
    return SceneStats(q, b, n, np.argsort(first, kind="stable"))


def _moments(q: np.ndarray, b: np.ndarray, diag: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """(K, 3) two-way moments xx, xy, yy from summed statistics of K replicates."""
    g = np.einsum("kr,rs->krs", diag, np.eye(diag.shape[1])) - outer
    g, bb = g[:, 1:, 1:], b[:, 1:, :]
    idle = np.einsum("krr->kr", g) <= 0  # a responder without rows: its dummy is zero, keep G invertible
    g[idle.nonzero() + (idle.nonzero()[1],)] = 1.0
    try:
        sol = np.linalg.solve(g, bb)
    except np.linalg.LinAlgError:
        sol = np.linalg.pinv(g, rcond=1e-10) @ bb
    corr = np.einsum("kri,krj->kij", bb, sol)
    return q - np.stack([corr[:, 0, 0], corr[:, 0, 1], corr[:, 1, 1]], 1)


def unique_rows(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.unique(n, axis=0, return_inverse=True)`` (rows sorted lexicographically, and each row's index
    among them) for a (V, R) array of small non-negative integer counts.

    Each row is read as one base-(max + 1) number, an integer key in the same order as the rows, so a 1-D unique
    of V keys replaces numpy's sort of V structured rows (10 ms for the published files' 3000 x 9 counts).
    Other arrays, and keys that would not fit in int64, take numpy's way.
    """
    top = int(n.max(initial=0)) + 1
    if n.size == 0 or n.min() < 0 or not np.array_equal(n, np.floor(n)) or n.shape[1] * math.log2(top) >= 62:
        patterns, inverse = np.unique(n, axis=0, return_inverse=True)
        return patterns, inverse.reshape(-1)
    key = n.astype(np.int64) @ (top ** np.arange(n.shape[1] - 1, -1, -1, dtype=np.int64))
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return n[first], inverse


def _outer_basis(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(V, P) scene -> basis weights and (P, R, R) basis such that n_v n_v' / |v| = sum_p basis weights * basis.

    Scenes with the same responder presence share one basis matrix, so P is the number of presence patterns
    (one or a few for released files); past R*R patterns the basis is the R*R unit matrices instead.
    """
    patterns, inverse = unique_rows(n)
    sizes = np.where(n.sum(1) > 0, n.sum(1), 1)
    n_r = n.shape[1]
    if patterns.shape[0] > n_r * n_r:
        per_scene = np.einsum("vr,vs->vrs", n, n) / sizes[:, None, None]
        return per_scene.reshape(n.shape[0], -1), np.eye(n_r * n_r).reshape(-1, n_r, n_r)
    onehot = np.zeros((n.shape[0], patterns.shape[0]))
    onehot[np.arange(n.shape[0]), inverse] = 1.0
    p_sizes = np.where(patterns.sum(1) > 0, patterns.sum(1), 1)
    return onehot, np.einsum("pr,ps->prs", patterns, patterns) / p_sizes[:, None, None]


def moments(stats: SceneStats, weights: np.ndarray | None = None,
            outer: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """(K, 3) moments xx, xy, yy under scene weights (K, V); unweighted (1, 3) when ``weights`` is None.
    ``outer`` is ``_outer_basis(stats.n)`` when the caller has it already (one per bootstrap, not per batch)."""
    w = np.ones((1, stats.q.shape[0])) if weights is None else weights
    coef, basis = _outer_basis(stats.n) if outer is None else outer
    n_r = stats.n.shape[1]
    b = (w @ stats.b.reshape(stats.b.shape[0], -1)).reshape(w.shape[0], n_r, 2)
    return _moments(w @ stats.q, b, w @ stats.n, np.einsum("kp,prs->krs", w @ coef, basis))


def pearson_r(stats: SceneStats) -> float:
    """Pearson r of the two-way demeaned x and y; NaN when x has no two-way variation."""
    xx, xy, yy = moments(stats)[0]
    return float(xy / math.sqrt(xx * yy)) if xx > 0 and yy > 0 else math.nan


def bootstrap_slopes(stats: SceneStats, n_boot: int, seed: int, batch: int = 250) -> np.ndarray:
    """Two-way slopes of y on x over ``n_boot`` scene-cluster resamples (replicates with x'Mx = 0 dropped)."""
    rng = np.random.default_rng(seed)
    n_v = stats.q.shape[0]
    outer = _outer_basis(stats.n)
    rows = np.arange(batch)[:, None] * n_v
    out = []
    for start in range(0, n_boot, batch):
        # a (k, V) draw equals k draws of size V (tests/test_paper_draws.py): the official one per replicate
        chunk = stats.order[rng.integers(0, n_v, size=(min(batch, n_boot - start), n_v))]
        chunk += rows[:chunk.shape[0]]
        w = np.bincount(chunk.ravel(), minlength=chunk.shape[0] * n_v).reshape(-1, n_v).astype(np.float64)
        m = moments(stats, w, outer)
        keep = m[:, 0] > 0
        out.append(m[keep, 1] / m[keep, 0])
    return np.concatenate(out) if out else np.zeros(0)


def slope_with_ci(stats: SceneStats, n_boot: int, seed: int) -> tuple[float, float, float, float]:
    """(slope, 2.5th and 97.5th bootstrap percentiles, share of replicates <= 0)."""
    xx, xy, _ = moments(stats)[0]
    slope = float(xy / xx) if xx > 0 else math.nan
    boots = bootstrap_slopes(stats, n_boot, seed)
    if boots.size == 0:
        return slope, math.nan, math.nan, math.nan
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return slope, float(lo), float(hi), float(np.mean(boots <= 0))
