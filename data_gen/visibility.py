"""Which blocks a camera sees: the analytic bin test with view-0 retention, and the exact voxel ray caster.

**Analytic test** (benchmark-spec sections 2.1-2.2, used by retention and scene.json's ``visible_blocks``).
The test only ever compares a block's front depth with depths written by blocks sorted before it (stable
ascending front depth), so every written bin holds a depth ``<= d_f`` and the "strictly greater" test never
succeeds on a written bin: a block is visible exactly when one bin of its rectangle has not been written yet.
The depth buffer is therefore a bitset (a Python int, one bit per bin), and per (grid, layer count, azimuth)
the sorted block order and each block's rectangle masks are precomputed.

**Ray caster** (the per-view ground truth of cubes). Every pixel's ray (through the pixel centre, the rays of
``camera.pixel_ray_components``) is clipped to the tightest box of whole cells around the occupied columns
(only the pixels of that box's projected window are traced at all) and then walked through the columns of
the height map with a 2-D DDA (Amanatides and Woo) in lockstep over all rays. Within one column cell the ray
spans the parameter interval ``[t_a, t_b]``; because a column is a solid box from the ground to ``H * 0.1``,
the ray hits it exactly when it is at or below the column top somewhere in that interval, i.e. when
``min(z(t_a), z(t_b)) <= top``. The hit is on the side face at ``t_a`` when ``z(t_a) <= top``, otherwise on
the top face. The layer of the hit block is ``floor(z_hit / 0.1)`` (the top layer for top-face hits). This
is the same answer as a z-buffer of all the cubes (the tests hold it against a brute-force ray-box test); a
block is visible when it owns at least one pixel centre.

Block ids, used by every instance buffer in the project: ``(i * cols + j) * max_height + k``;
-1 where a pixel shows no block (the ground plane is not a block).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from data_gen.camera import BLOCK_SIZE, Camera, Window, block_center, framing, nominal_camera, pixel_ray_components
from data_gen.camera import unit_rays as _unit_rays
from data_gen.heightmap import Block, as_height_map

HALF_SIZE = 0.05
"""Half edge of a cube in metres (also the mean half-size ``h_bar`` of the bin size)."""
PATCH_SCALE = 0.125
"""``VIEW0_PATCH_SCALE``: one bin is 1/8 of a block's angular size at the target distance."""
RETENTION_AZIMUTH = 0.0
"""Retention is computed at azimuth exactly 0 degrees (no rendered view uses it)."""

# ---------------------------------------------------------------- analytic test and retention


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


# ---------------------------------------------------------------- instance ids

NO_BLOCK = -1
"""Instance id of a pixel that shows no block."""


def block_id(i: int, j: int, k: int, cols: int, max_height: int = 4) -> int:
    """Instance id of block (i, j, k): ``(i * cols + j) * max_height + k``."""
    if not (0 <= j < cols and 0 <= k < max_height and i >= 0):
        raise ValueError(f"block_id: block {(i, j, k)} is outside a grid of {cols} columns, max height {max_height}")
    return (i * cols + j) * max_height + k


def block_of(ident: int, cols: int, max_height: int = 4) -> Block:
    """Inverse of :func:`block_id`: the block (i, j, k) of an instance id >= 0."""
    if ident < 0:
        raise ValueError(f"block_of: id {ident} is not a block (ids are >= 0; -1 means no block)")
    cell, k = divmod(int(ident), max_height)
    i, j = divmod(cell, cols)
    return i, j, k


def visible_set(ids: np.ndarray, cols: int, max_height: int = 4) -> set[Block]:
    """Blocks owning at least one pixel of an instance-id buffer."""
    flat = np.asarray(ids).ravel()
    flat = flat[flat >= 0]
    if flat.size == 0:
        return set()
    present = np.nonzero(np.bincount(flat))[0]
    return {block_of(int(v), cols, max_height) for v in present}


# ---------------------------------------------------------------- voxel ray caster

Components = tuple[np.ndarray, np.ndarray, np.ndarray]


def _box_clip(origin: np.ndarray, comps: Components, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slab test: (t_in, t_out) of every ray against the box [lo, hi]; t_in >= 0, a miss when t_in >= t_out."""
    n = comps[0].shape[0]
    t_in = np.zeros(n)
    t_out = np.full(n, np.inf)
    for axis, d in enumerate(comps):
        o = float(origin[axis])
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / d
            t0 = (lo[axis] - o) * inv
            t1 = (hi[axis] - o) * inv
        near = np.minimum(t0, t1)
        far = np.maximum(t0, t1)
        if not d.all():  # parallel to this slab: inside it for all t, or never
            par = d == 0
            inside = (lo[axis] <= o) & (o <= hi[axis])
            near[par] = -np.inf if inside else np.inf
            far[par] = np.inf if inside else -np.inf
        np.maximum(t_in, near, out=t_in)
        np.minimum(t_out, far, out=t_out)
    return t_in, t_out


def cast_rays(
    height_map: np.ndarray, origin: np.ndarray, dirs: np.ndarray, max_height: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """(block id int32, ray parameter float64 at the hit) for rays from one origin; -1 / inf where no block.

    With unit ``dirs`` (N, 3) the parameter is the hit distance; any non-zero directions work, since
    every test along the ray is invariant to their length.
    """
    dirs = np.asarray(dirs, dtype=np.float64)
    comps = (np.ascontiguousarray(dirs[:, 0]), np.ascontiguousarray(dirs[:, 1]), np.ascontiguousarray(dirs[:, 2]))
    return _trace(height_map, np.asarray(origin, dtype=np.float64), comps, max_height)


def _trace(height_map: np.ndarray, origin: np.ndarray, comps: Components, max_height: int
           ) -> tuple[np.ndarray, np.ndarray]:
    h = as_height_map(height_map, "cast")
    if (h > max_height).any():
        raise ValueError(f"cast: heights must be in [0, {max_height}], got {h.tolist()}")
    n = comps[0].shape[0]
    ids = np.full(n, NO_BLOCK, dtype=np.int32)
    dist = np.full(n, np.inf)
    if n == 0 or int(h.max()) == 0:
        return ids, dist
    lo, hi = grid_box(h)
    t_in, t_out = _box_clip(origin, comps, lo, hi)
    idx = np.nonzero(t_in < t_out)[0]
    if idx.size:
        hit_idx, block, t_hit = _walk(h, origin, tuple(c[idx] for c in comps), t_in[idx], t_out[idx], max_height)
        ids[idx[hit_idx]] = block
        dist[idx[hit_idx]] = t_hit
    return ids, dist


def _walk(
    h: np.ndarray, origin: np.ndarray, comps: Components, t_a: np.ndarray, t_out: np.ndarray, max_height: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """2-D DDA through the columns for rays inside the grid box over [t_a, t_out].

    Returns (ray indices that hit, their block ids, their hit parameters).
    """
    rows, cols = h.shape
    # Column tops, padded by one empty cell on every side (-inf: never hit) so a ray that steps
    # out of the grid by rounding reads nothing before its t_out ends it.
    tops = np.full((rows + 2, cols + 2), -np.inf)
    tops[1:-1, 1:-1] = np.where(h > 0, h * BLOCK_SIZE, -np.inf)
    state_f, state_i = _dda_start(h, origin, comps, t_a, t_out)
    descending = bool((comps[2] < 0).all())  # camera above the box: z only falls, so its minimum is at t_b
    entered = _dda_steps(tops.ravel(), float(origin[2]), state_f, state_i, descending, rows + cols + 1)
    if entered is None:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.astype(np.int32), np.zeros(0)
    return _hit_blocks(h, origin, comps[2], *entered, max_height)


def _dda_start(h: np.ndarray, origin: np.ndarray, comps: Components, t_a: np.ndarray, t_out: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per-ray DDA state as two stacked arrays, so that dropping finished rays is one gather each.

    Floats: (t_max_x, t_max_y, t_delta_x, t_delta_y, t_a, t_out, dz); integers: (ray index, padded cell,
    cell step along x, cell step along y).
    """
    rows, cols = h.shape
    x0, y0 = -rows * BLOCK_SIZE / 2, -cols * BLOCK_SIZE / 2
    ox, oy, _ = (float(v) for v in origin)
    dx, dy, dz = comps
    stride = cols + 2
    ci = np.clip(np.floor((ox + dx * t_a - x0) / BLOCK_SIZE), 0, rows - 1).astype(np.int64)
    cj = np.clip(np.floor((oy + dy * t_a - y0) / BLOCK_SIZE), 0, cols - 1).astype(np.int64)
    sx = np.sign(dx).astype(np.int64)
    sy = np.sign(dy).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_max_x = np.where(sx != 0, (x0 + (ci + (sx > 0)) * BLOCK_SIZE - ox) / dx, np.inf)
        t_max_y = np.where(sy != 0, (y0 + (cj + (sy > 0)) * BLOCK_SIZE - oy) / dy, np.inf)
        t_dx = np.where(sx != 0, BLOCK_SIZE / np.abs(dx), np.inf)
        t_dy = np.where(sy != 0, BLOCK_SIZE / np.abs(dy), np.inf)
    cell = (ci + 1) * stride + (cj + 1)
    state_f = np.stack([t_max_x, t_max_y, t_dx, t_dy, t_a, t_out, dz])
    state_i = np.stack([np.arange(dz.shape[0]), cell, sx * stride, sy])
    return state_f, state_i


def _dda_steps(tops: np.ndarray, oz: float, state_f: np.ndarray, state_i: np.ndarray, descending: bool,
               max_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Step all rays in lockstep until each hits a column or leaves the box.

    Returns (ray, padded cell, parameter and z where the ray entered the hit cell) of every hit, or None.
    """
    out_idx, out_cell, out_t, out_side_z = [], [], [], []
    for _ in range(max_steps):
        if state_i.shape[1] == 0:
            break
        tmx, tmy, tdx, tdy, ta, tout, dzr = state_f
        ray, cell, step_x_cell, step_y_cell = state_i
        top = tops.take(cell, mode="clip")
        t_next = np.minimum(tmx, tmy)
        z_b = oz + dzr * np.minimum(t_next, tout)
        hit = z_b <= top if descending else np.minimum(oz + dzr * ta, z_b) <= top
        if hit.any():
            sel = np.flatnonzero(hit)
            t_hit_start = ta[sel]
            out_idx.append(ray[sel])
            out_cell.append(cell[sel])
            out_t.append(t_hit_start)
            out_side_z.append(oz + dzr[sel] * t_hit_start)
        step_x = tmx < tmy
        go = np.flatnonzero(~hit & (t_next < tout))
        cell += np.where(step_x, step_x_cell, step_y_cell)
        np.add(tmx, tdx, out=tmx, where=step_x)
        np.add(tmy, tdy, out=tmy, where=~step_x)
        ta[:] = t_next
        state_f = state_f[:, go]
        state_i = state_i[:, go]
    if not out_idx:
        return None
    return np.concatenate(out_idx), np.concatenate(out_cell), np.concatenate(out_t), np.concatenate(out_side_z)


def _hit_blocks(h: np.ndarray, origin: np.ndarray, dz_all: np.ndarray, hit_ray: np.ndarray, hit_cell: np.ndarray,
                t_enter: np.ndarray, z_enter: np.ndarray, max_height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rays, block ids, hit parameters): a side-face hit where the ray entered the column, else its top face."""
    cols = h.shape[1]
    stride = cols + 2
    oz = float(origin[2])
    i, j = hit_cell // stride - 1, hit_cell % stride - 1
    height = h[i, j]
    col_top = height * BLOCK_SIZE
    side = z_enter <= col_top  # entered the column through a side face (or the box's top face at its top)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_top = (col_top - oz) / dz_all[hit_ray]
    t_hit = np.where(side, t_enter, t_top)
    layer = np.where(side, np.clip(np.floor(z_enter / BLOCK_SIZE), 0, height - 1).astype(np.int64), height - 1)
    block = ((i * cols + j) * max_height + layer).astype(np.int32)
    return hit_ray, block, t_hit


def grid_box(height_map: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) corners of the tightest axis-aligned box of whole cells holding every block of a height map."""
    h = np.asarray(height_map)
    rows, cols = h.shape
    occupied_rows = np.nonzero(h.max(axis=1) > 0)[0]
    occupied_cols = np.nonzero(h.max(axis=0) > 0)[0]
    if occupied_rows.size == 0:
        return np.zeros(3), np.zeros(3)
    x0, y0 = -rows * BLOCK_SIZE / 2, -cols * BLOCK_SIZE / 2
    lo = np.array([x0 + occupied_rows[0] * BLOCK_SIZE, y0 + occupied_cols[0] * BLOCK_SIZE, 0.0])
    hi = np.array([x0 + (occupied_rows[-1] + 1) * BLOCK_SIZE, y0 + (occupied_cols[-1] + 1) * BLOCK_SIZE,
                   float(h.max()) * BLOCK_SIZE])
    return lo, hi


def pixel_window(camera: Camera, lo: np.ndarray, hi: np.ndarray) -> Window:
    """(row0, row1, col0, col1), half-open, of the pixels whose rays can meet the box [lo, hi].

    The box's projection is the convex hull of its projected corners, so every pixel centre whose
    ray meets the box lies in the corners' pixel bounding box (widened by one pixel for rounding).
    Falls back to the whole image when a corner is not in front of the camera.
    """
    n = camera.resolution
    f, r, u = camera.basis()
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    rel = corners - np.asarray(camera.position)
    depth = rel @ f
    if (depth <= 0).any():
        return 0, n, 0, n
    s = np.tan(np.radians(camera.half_fov_deg))
    px = ((rel @ r) / depth / s + 1.0) / 2.0 * n - 0.5  # column of the pixel centre at that image x
    py = (1.0 - (rel @ u) / depth / s) / 2.0 * n - 0.5
    c0, c1 = max(int(np.floor(px.min())) - 1, 0), min(int(np.ceil(px.max())) + 2, n)
    r0, r1 = max(int(np.floor(py.min())) - 1, 0), min(int(np.ceil(py.max())) + 2, n)
    return r0, max(r1, r0), c0, max(c1, c0)


def window_rays(camera: Camera, window: Window) -> np.ndarray:
    """Unit ray directions (m, 3) of the pixels in a window, row-major: the rays of ``pixel_rays``."""
    return _unit_rays(pixel_ray_components(camera, window))


def cast(height_map: np.ndarray, camera: Camera, max_height: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel (block id int32, hit distance float32) images of shape (res, res); -1 / inf for no block.

    Pixel (row, col) is the ray through that pixel's centre, row 0 at the top, as in
    ``camera.pixel_rays``; only the pixels whose rays can meet the grid's box are traced.
    """
    n = camera.resolution
    ids = np.full((n, n), NO_BLOCK, dtype=np.int32)
    dist = np.full((n, n), np.inf, dtype=np.float32)
    h = as_height_map(height_map, "cast")
    if h.max() <= 0:
        return ids, dist
    window = pixel_window(camera, *grid_box(h))
    r0, r1, c0, c1 = window
    if r1 <= r0 or c1 <= c0:
        return ids, dist
    comps = pixel_ray_components(camera, window)
    w_ids, w_t = _trace(h, np.asarray(camera.position, dtype=np.float64), comps, max_height)
    hit = w_ids >= 0
    w_dist = np.full(w_t.shape, np.inf)
    dx, dy, dz = (c[hit] for c in comps)
    w_dist[hit] = w_t[hit] * np.sqrt(dx * dx + dy * dy + dz * dz)  # parameter along the raw ray -> distance
    ids[r0:r1, c0:c1] = w_ids.reshape(r1 - r0, c1 - c0)
    dist[r0:r1, c0:c1] = w_dist.reshape(r1 - r0, c1 - c0)
    return ids, dist
