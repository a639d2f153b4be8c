"""Structure sampling and the analytic visibility test (benchmark-spec sections 1 and 2.1-2.2).

A structure is an integer height map ``H`` of shape (rows, cols): ``H[i, j]`` blocks stand in
row ``i``, column ``j``; block ``(i, j, k)`` is the one in layer ``k`` (0-based, ``k < H[i, j]``).

Sampling follows the reference generator exactly (piecewise count weights, distinct-slot draw
with gravity collapse, the view-0 retention filter, 150 attempts then the closest), except that
every draw comes from an explicit ``numpy.random.Generator`` derived from (master seed, index),
so a structure is reproducible.

The analytic test of section 2.1 only ever compares a block's front depth with depths written
by blocks sorted before it (stable ascending front depth), so every written bin holds a depth
``<= d_f`` and the "strictly greater" test never succeeds on a written bin: a block is visible
exactly when one bin of its rectangle has not been written yet. The implementation therefore
keeps the depth buffer as a bitset (a Python int, one bit per bin) and precomputes, per
(grid, layer count, azimuth), the sorted block order and each block's rectangle masks.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from data_gen.camera import block_center, framing, nominal_camera

Block = tuple[int, int, int]

N_MIN = 3
"""``min_blocks`` of the released level_1 configuration."""
MAX_ATTEMPTS = 150
"""Attempts of the acceptance loop before the closest attempt is returned."""
HALF_SIZE = 0.05
"""Half edge of a cube in metres (also the mean half-size ``h_bar`` of the bin size)."""
PATCH_SCALE = 0.125
"""``VIEW0_PATCH_SCALE``: one bin is 1/8 of a block's angular size at the target distance."""
RETENTION_AZIMUTH = 0.0
"""Retention is computed at azimuth exactly 0 degrees (no rendered view uses it)."""


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


def as_height_map(height_map: np.ndarray, where: str) -> np.ndarray:
    """A validated int64 height map (2-D, non-empty, non-negative integers); ``where`` names the caller in errors."""
    h = np.asarray(height_map)
    if h.ndim != 2 or h.size == 0:
        raise ValueError(f"{where}: height_map must be a non-empty 2-D array, got shape {h.shape}")
    if not np.issubdtype(h.dtype, np.integer):
        if not np.all(np.equal(np.mod(h, 1), 0)):
            raise ValueError(f"{where}: height_map must hold integers, got {h.tolist()}")
        h = h.astype(np.int64)
    if (h < 0).any():
        raise ValueError(f"{where}: height_map must be non-negative, got {h.tolist()}")
    return h.astype(np.int64, copy=False)


def blocks_of(height_map: np.ndarray) -> list[Block]:
    """All blocks of a height map in (i, j, k) loop order."""
    h = as_height_map(height_map, "blocks_of")
    return [(i, j, k) for i in range(h.shape[0]) for j in range(h.shape[1]) for k in range(int(h[i, j]))]


def support_closure(blocks: Iterable[Block]) -> set[Block]:
    """``needed(V)`` (section 2.2): the blocks plus every block below one of them in its column."""
    top: dict[tuple[int, int], int] = {}
    for i, j, k in blocks:
        if k < 0:
            raise ValueError(f"support_closure: layer must be >= 0, got block {(i, j, k)}")
        top[(i, j)] = max(top.get((i, j), -1), k)
    return {(i, j, k) for (i, j), kmax in top.items() for k in range(kmax + 1)}


@lru_cache(maxsize=256)
def _bin_table(rows: int, cols: int, layers: int, azimuth_deg: float) -> tuple[tuple[int, int, int, int, int], ...]:
    """Per block slot with ``k < layers``, in stable ascending front-depth order: (i, j, k, rect, dilated).

    ``rect`` and ``dilated`` are bitsets over the bins (bit ``(y - y0) * width + (x - x0)``);
    blocks with front depth <= 0 are left out (the reference skips them).
    """
    cam = nominal_camera(rows, cols, layers, azimuth_deg)
    f, r, u = cam.basis()
    pos = np.asarray(cam.position)
    target, _ = framing(rows, cols, layers)
    dist = float(np.linalg.norm(target - pos))
    cell = (2.0 * HALF_SIZE / dist) * PATCH_SCALE
    slots = [(i, j, k) for i in range(rows) for j in range(cols) for k in range(layers)]
    centres = np.array([block_center(i, j, k, rows, cols) for i, j, k in slots]) - pos
    d_c = centres @ f
    d_f = d_c - HALF_SIZE
    x = (centres @ r) / d_c
    y = (centres @ u) / d_c
    hs = HALF_SIZE / d_c
    x_lo, x_hi = np.floor((x - hs) / cell).astype(int), np.ceil((x + hs) / cell).astype(int)
    y_lo, y_hi = np.floor((y - hs) / cell).astype(int), np.ceil((y + hs) / cell).astype(int)
    gx0, gy0 = int(x_lo.min()) - 1, int(y_lo.min()) - 1
    width = int(x_hi.max()) + 1 - gx0 + 1

    def mask(xa: int, xb: int, ya: int, yb: int) -> int:
        row = ((1 << (xb - xa + 1)) - 1) << (xa - gx0)
        return sum(row << ((yy - gy0) * width) for yy in range(ya, yb + 1))

    order = sorted(range(len(slots)), key=lambda s: d_f[s])  # stable: ties keep (i, j, k) order
    table = []
    for s in order:
        if d_f[s] <= 0:
            continue
        xa, xb, ya, yb = int(x_lo[s]), int(x_hi[s]), int(y_lo[s]), int(y_hi[s])
        table.append((*slots[s], mask(xa, xb, ya, yb), mask(xa - 1, xb + 1, ya - 1, yb + 1)))
    return tuple(table)


def _visible_in_order(h: np.ndarray, azimuth_deg: float) -> list[Block]:
    layers = int(h.max())
    if layers == 0:
        return []
    heights = h.tolist()
    written = 0
    out: list[Block] = []
    for i, j, k, rect, dilated in _bin_table(h.shape[0], h.shape[1], layers, float(azimuth_deg)):
        if k >= heights[i][j]:
            continue
        if rect & ~written:  # some bin of the rectangle is still absent from the buffer
            out.append((i, j, k))
            written |= dilated
    return out


def analytic_visible(height_map: np.ndarray, azimuth_deg: float) -> set[Block]:
    """Blocks the analytic angular-bin test (section 2.1) finds visible from the nominal camera at an azimuth."""
    h = as_height_map(height_map, "analytic_visible")
    return set(_visible_in_order(h, azimuth_deg))


def retain(height_map: np.ndarray, azimuth_deg: float = RETENTION_AZIMUTH) -> np.ndarray:
    """The view-0 retention filter: keep ``support_closure(analytic_visible(H, 0))``, truncating columns."""
    h = as_height_map(height_map, "retain")
    out = np.zeros_like(h)
    for i, j, k in _visible_in_order(h, azimuth_deg):
        if k + 1 > out[i, j]:
            out[i, j] = k + 1
    return out


def scene_visible_count(height_map: np.ndarray) -> int:
    """scene.json ``visible_blocks``: the analytic test's visible count at azimuth 0 (section 4.1)."""
    return len(analytic_visible(height_map, RETENTION_AZIMUTH))


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
