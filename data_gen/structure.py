"""Structure sampling and structure ids (benchmark-spec section 1).

A structure is an integer height map ``H`` of shape (rows, cols): ``H[i, j]`` blocks stand in
row ``i``, column ``j``; block ``(i, j, k)`` is the one in layer ``k`` (0-based, ``k < H[i, j]``).

Sampling follows the reference generator exactly (piecewise count weights, distinct-slot draw
with gravity collapse, the view-0 retention filter, 150 attempts then the closest), except that
every draw comes from an explicit ``numpy.random.Generator`` derived from (master seed, index),
so a structure is reproducible.

The analytic visibility test and the view-0 retention filter live in :mod:`data_gen.visibility`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from data_gen.heightmap import Block, as_height_map
from data_gen.visibility import retain

N_MIN = 3
"""``min_blocks`` of the released level_1 configuration."""
MAX_ATTEMPTS = 150
"""Attempts of the acceptance loop before the closest attempt is returned."""


def count_weights(n_min: int = N_MIN, n_max: int = 64) -> np.ndarray:
    """The piecewise weights ``w(n)`` for ``n = n_min .. n_max`` (index 0 is ``n_min``), section 1.2."""
    if n_min < 0 or n_max < n_min:
        raise ValueError(f"count_weights: need 0 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    out = np.zeros(n_max - n_min + 1)
    for idx, n in enumerate(range(n_min, n_max + 1)):
        if n < 3:
            w = 0.0
        elif n <= 11:
            w = 0.017 + (1.6 - 0.017) * (n - 3) / 8
        elif n <= 30:
            w = 0.8 - (0.8 - 0.2) * (n - 12) / 18
        else:
            w = 0.225 * math.exp(-0.2 * (n - 31))
        out[idx] = w
    return out


def structure_rng(master_seed: int, index: int) -> np.random.Generator:
    """The generator of structure ``index`` under ``master_seed`` (both non-negative integers)."""
    for name, value in (("master_seed", master_seed), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"structure_rng: {name} must be a non-negative integer, got {value!r}")
    return np.random.default_rng(np.random.SeedSequence([int(master_seed), int(index)]))


def structure_id(height_map: np.ndarray) -> str:
    """Content hash of a height map: the first 16 hex digits of SHA-256 over its canonical encoding.

    The encoding is the ASCII text ``"<rows>x<cols>:"`` followed by the heights in row-major order
    as decimal integers joined by commas, e.g. ``"2x2:1,0,3,2"``. It depends on nothing but the
    shape and the values (not on dtype or memory layout).
    """
    h = as_height_map(height_map, "structure_id")
    text = f"{h.shape[0]}x{h.shape[1]}:" + ",".join(str(int(v)) for v in h.ravel())
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def blocks_of(height_map: np.ndarray) -> list[Block]:
    """All blocks of a height map in (i, j, k) loop order."""
    h = as_height_map(height_map, "blocks_of")
    return [(i, j, k) for i in range(h.shape[0]) for j in range(h.shape[1]) for k in range(int(h[i, j]))]


def _uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` uniform doubles in [0, 1) from the bit generator's raw 64-bit outputs (top 53 bits).

    The sampler uses only these, never Generator methods such as ``choice`` or ``integers``: NumPy
    keeps bit-generator streams stable across versions but may change the algorithms behind the
    methods, and a structure must stay a pure function of (master seed, index).
    """
    raw = rng.bit_generator.random_raw(n)
    return (raw >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


@dataclass(frozen=True)
class SampleInfo:
    """One sampled structure with the sampler's bookkeeping (for statistics and tests)."""

    height_map: np.ndarray
    """The retained height map (int64, shape (rows, cols))."""
    target: int
    """The desired final count ``n*`` drawn from the count weights."""
    attempts: int
    """Attempts used (1..150); 150 with ``hit`` False when the closest attempt was returned."""
    hit: bool
    """Whether the final count equals ``target``."""


def sample_structure_info(
    rng: np.random.Generator, rows: int = 4, cols: int = 4, max_height: int = 4, min_blocks: int = N_MIN
) -> SampleInfo:
    """Sample one retained structure exactly as section 1.2-1.3 and report target and attempts.

    Per structure: one uniform picks ``n*`` by the count weights; per attempt, one uniform picks
    ``pre`` in [n*, N_max] and N_max more give a random order of the slots, whose first ``pre``
    are the chosen distinct slots (slot s -> cell s // max_height, gravity collapse).
    """
    if rows < 1 or cols < 1 or max_height < 1:
        raise ValueError(f"sample_structure: rows, cols, max_height must be >= 1, got {rows}, {cols}, {max_height}")
    n_max = rows * cols * max_height
    n_min = max(0, min(min_blocks, n_max))
    weights = count_weights(n_min, n_max)
    if weights.sum() <= 0:
        raise ValueError(f"sample_structure: no positive count weight in [{n_min}, {n_max}]")
    cum = np.cumsum(weights)
    target = n_min + min(int(np.searchsorted(cum, _uniforms(rng, 1)[0] * cum[-1], side="right")), len(cum) - 1)
    best: np.ndarray | None = None
    best_gap = n_max + 1
    for attempt in range(1, MAX_ATTEMPTS + 1):
        u = _uniforms(rng, 1 + n_max)
        pre = min(target + int(u[0] * (n_max - target + 1)), n_max)  # uniform in [n*, N_max]
        slots = np.argsort(u[1:], kind="stable")[:pre]  # `pre` distinct slots, uniformly at random
        h = np.bincount(slots // max_height, minlength=rows * cols).reshape(rows, cols).astype(np.int64)
        kept = retain(h)
        gap = abs(int(kept.sum()) - target)
        if gap == 0:
            return SampleInfo(kept, target, attempt, True)
        if gap < best_gap:  # strictly closer: on ties the first attempt wins
            best, best_gap = kept, gap
    assert best is not None
    return SampleInfo(best, target, MAX_ATTEMPTS, False)


def sample_structure(
    rng: np.random.Generator, rows: int = 4, cols: int = 4, max_height: int = 4, min_blocks: int = N_MIN
) -> np.ndarray:
    """Sample one retained height map (int64, shape (rows, cols)) exactly as section 1.2-1.3."""
    return sample_structure_info(rng, rows, cols, max_height, min_blocks).height_map
