"""Exact per-pixel block visibility: a vectorised voxel ray caster over a height map.

Every pixel's ray (through the pixel centre, the rays of ``camera.pixel_rays``) is clipped to the
tightest box of whole cells around the occupied columns (only the pixels of that box's projected
window are traced at all) and then walked through the columns of the height map with a 2-D DDA
(Amanatides and Woo) in lockstep over all rays. Within one column cell the ray spans the parameter interval
``[t_a, t_b]``; because a column is a solid box from the ground to ``H * 0.1``, the ray hits it
exactly when it is at or below the column top somewhere in that interval, i.e. when
``min(z(t_a), z(t_b)) <= top``. The hit is on the side face at ``t_a`` when ``z(t_a) <= top``,
otherwise on the top face. The layer of the hit block is ``floor(z_hit / 0.1)`` (the top layer
for top-face hits). This is the same answer as a z-buffer of all the cubes (the tests hold it
against a brute-force ray-box test); a block is visible when it owns at least one pixel centre.

Block ids, used by every instance buffer in the project: ``(i * cols + j) * max_height + k``;
-1 where a pixel shows no block (the ground plane is not a block).
"""

from __future__ import annotations

import numpy as np

from data_gen.camera import BLOCK_SIZE, Camera
from data_gen.structure import as_height_map

Block = tuple[int, int, int]
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
    x0, y0 = -rows * BLOCK_SIZE / 2, -cols * BLOCK_SIZE / 2
    ox, oy, oz = (float(v) for v in origin)
    dx, dy, dz = comps
    dz_all = dz
    # Column tops, padded by one empty cell on every side (-inf: never hit) so a ray that steps
    # out of the grid by rounding reads nothing before its t_out ends it.
    tops = np.full((rows + 2, cols + 2), -np.inf)
    tops[1:-1, 1:-1] = np.where(h > 0, h * BLOCK_SIZE, -np.inf)
    tops = tops.ravel()
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
    descending = bool((dz < 0).all())  # camera above the box: z only falls, so its minimum is at t_b
    # Per-ray state as two stacked arrays, so that dropping finished rays is one gather each.
    state_f = np.stack([t_max_x, t_max_y, t_dx, t_dy, t_a, t_out, dz])
    state_i = np.stack([np.arange(dz.shape[0]), cell, sx * stride, sy])
    out_idx, out_cell, out_t, out_side_z = [], [], [], []
    for _ in range(rows + cols + 1):
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
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.astype(np.int32), np.zeros(0)
    hit_ray, hit_cell = np.concatenate(out_idx), np.concatenate(out_cell)
    t_enter, z_enter = np.concatenate(out_t), np.concatenate(out_side_z)
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


def pixel_window(camera: Camera, lo: np.ndarray, hi: np.ndarray) -> tuple[int, int, int, int]:
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


def _window_components(camera: Camera, window: tuple[int, int, int, int]) -> Components:
    """Unnormalised ray direction components of the pixels in a window, each (m,), row-major."""
    r0, r1, c0, c1 = window
    n = camera.resolution
    f, r, u = camera.basis()
    s = np.tan(np.radians(camera.half_fov_deg))
    coords = ((np.arange(n, dtype=np.float64) + 0.5) / n * 2.0 - 1.0) * s
    xs = coords[None, c0:c1]
    ys = -coords[r0:r1, None]
    # The same arithmetic, in the same order, as camera.pixel_rays before it normalises.
    return tuple((f[a] + xs * r[a] + ys * u[a]).ravel() for a in range(3))  # type: ignore[return-value]


def window_rays(camera: Camera, window: tuple[int, int, int, int]) -> np.ndarray:
    """Unit ray directions (m, 3) of the pixels in a window, row-major: the rays of ``pixel_rays``."""
    d = np.stack(_window_components(camera, window), axis=1)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return d


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
    comps = _window_components(camera, window)
    w_ids, w_t = _trace(h, np.asarray(camera.position, dtype=np.float64), comps, max_height)
    hit = w_ids >= 0
    w_dist = np.full(w_t.shape, np.inf)
    dx, dy, dz = (c[hit] for c in comps)
    w_dist[hit] = w_t[hit] * np.sqrt(dx * dx + dy * dy + dz * dz)  # parameter along the raw ray -> distance
    ids[r0:r1, c0:c1] = w_ids.reshape(r1 - r0, c1 - c0)
    dist[r0:r1, c0:c1] = w_dist.reshape(r1 - r0, c1 - c0)
    return ids, dist
