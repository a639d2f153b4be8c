"""The voxel ray caster against brute-force ray-box tests and hand-computed hits; the section 3 cameras."""

from __future__ import annotations

import math

import numpy as np
import pytest

from data_gen.camera import Camera, block_center, framing, leaf_camera, nominal_camera, pixel_rays
from data_gen.structure import sample_structure, structure_rng
from data_gen.visibility import (
    NO_BLOCK,
    block_id,
    block_of,
    cast,
    cast_rays,
    grid_box,
    pixel_window,
    visible_set,
    window_rays,
)
from spatialiq_train.core.views import LEAF_VIEWS, LeafView

# ---------------------------------------------------------------- block ids


def test_block_id_layout_and_inverse() -> None:
    ids = [block_id(i, j, k, 4) for i in range(4) for j in range(4) for k in range(4)]
    assert ids == list(range(64))
    assert block_id(2, 3, 1, 4) == (2 * 4 + 3) * 4 + 1
    assert block_id(1, 2, 0, cols=3, max_height=3) == (1 * 3 + 2) * 3
    for ident in range(64):
        assert block_id(*block_of(ident, 4), cols=4) == ident
    assert block_of(45, 4) == (2, 3, 1)
    with pytest.raises(ValueError, match="not a block"):
        block_of(-1, 4)
    with pytest.raises(ValueError, match="outside"):
        block_id(0, 4, 0, 4)
    with pytest.raises(ValueError, match="outside"):
        block_id(0, 0, 4, 4)


def test_visible_set_of_id_buffer() -> None:
    ids = np.full((5, 5), NO_BLOCK, dtype=np.int32)
    ids[0, 0] = block_id(0, 0, 0, 4)
    ids[2, 1:4] = block_id(3, 2, 1, 4)
    assert visible_set(ids, 4) == {(0, 0, 0), (3, 2, 1)}
    assert visible_set(np.full((3, 3), NO_BLOCK), 4) == set()


# ---------------------------------------------------------------- brute force


def _brute(h: np.ndarray, origin: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest block along each ray by an independent slab test against every cube."""
    rows, cols = h.shape
    ids = np.full(len(dirs), NO_BLOCK)
    best = np.full(len(dirs), np.inf)
    for i in range(rows):
        for j in range(cols):
            for k in range(int(h[i, j])):
                c = block_center(i, j, k, rows, cols)
                t_near = np.full(len(dirs), -np.inf)
                t_far = np.full(len(dirs), np.inf)
                for ax in range(3):
                    lo, hi, o, d = c[ax] - 0.05, c[ax] + 0.05, origin[ax], dirs[:, ax]
                    par = d == 0
                    with np.errstate(divide="ignore", invalid="ignore"):
                        t0, t1 = (lo - o) / d, (hi - o) / d
                    near = np.where(par, np.where((lo <= o) & (o <= hi), -np.inf, np.inf), np.minimum(t0, t1))
                    far = np.where(par, np.where((lo <= o) & (o <= hi), np.inf, -np.inf), np.maximum(t0, t1))
                    t_near, t_far = np.maximum(t_near, near), np.minimum(t_far, far)
                hit = (t_near < t_far) & (t_near > 0) & (t_near < best)
                best[hit] = t_near[hit]
                ids[hit] = block_id(i, j, k, cols)
    return ids, best


def _structures(count: int, seed: int) -> list[np.ndarray]:
    return [sample_structure(structure_rng(seed, idx)) for idx in range(count)]


def test_caster_matches_brute_force_on_pixel_rays() -> None:
    rng = np.random.default_rng(0)
    for idx, h in enumerate(_structures(24, seed=101)):
        cam = leaf_camera(4, 4, int(h.max()), LEAF_VIEWS[idx % 16])
        origin, dirs = pixel_rays(cam)
        window = pixel_window(cam, *grid_box(h))
        r0, r1, c0, c1 = window
        rr, cc = rng.integers(r0, r1, 300), rng.integers(c0, c1, 300)
        sel = rr * 512 + cc
        ids, dist = cast_rays(h, origin, dirs[sel])
        b_ids, b_dist = _brute(h, origin, dirs[sel])
        assert (ids == b_ids).all()
        assert np.allclose(dist, b_dist, rtol=0, atol=1e-12, equal_nan=False)
        full_ids, full_dist = cast(h, cam)
        assert (full_ids[rr, cc] == b_ids).all()
        assert np.allclose(full_dist[rr, cc], b_dist, atol=1e-6)


def test_caster_matches_brute_force_on_arbitrary_rays() -> None:
    rng = np.random.default_rng(1)
    for h in _structures(12, seed=7) + [np.full((4, 4), 4), np.eye(4, dtype=int) * 3]:
        for _ in range(4):
            phi, elev = rng.uniform(0, 2 * np.pi), rng.uniform(0.02, 1.4)
            radius = rng.uniform(0.6, 2.5)
            origin = np.array([radius * np.cos(elev) * np.cos(phi), radius * np.cos(elev) * np.sin(phi),
                               0.01 + radius * np.sin(elev)])
            aims = rng.uniform([-0.25, -0.25, 0.0], [0.25, 0.25, 0.45], size=(250, 3))
            dirs = aims - origin
            dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
            ids, dist = cast_rays(h, origin, dirs)
            b_ids, b_dist = _brute(h, origin, dirs)
            assert (ids == b_ids).all()
            assert np.allclose(dist, b_dist, rtol=0, atol=1e-12)


def test_caster_handles_axis_parallel_rays() -> None:
    rng = np.random.default_rng(2)
    h = np.array([[0, 1, 2, 3], [4, 0, 1, 0], [2, 2, 0, 1], [0, 3, 1, 4]])
    for axis_dir in ([1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, -1]):
        d = np.array(axis_dir, dtype=float)
        for _ in range(60):
            p = rng.uniform([-0.19, -0.19, 0.005], [0.19, 0.19, 0.39])
            origin = p - 1.5 * d
            ids, dist = cast_rays(h, origin, d[None, :])
            b_ids, b_dist = _brute(h, origin, d[None, :])
            assert ids[0] == b_ids[0], (axis_dir, p)
            assert dist[0] == pytest.approx(b_dist[0], abs=1e-12)


def test_windowed_cast_equals_full_image_cast() -> None:
    for idx, h in enumerate(_structures(10, seed=33)):
        cam = leaf_camera(4, 4, int(h.max()), LEAF_VIEWS[(5 * idx) % 16], resolution=96)
        origin, dirs = pixel_rays(cam)
        ids, dist = cast_rays(h, origin, dirs)
        w_ids, w_dist = cast(h, cam)
        assert (w_ids == ids.reshape(96, 96)).all()
        assert np.allclose(w_dist, dist.reshape(96, 96), rtol=1e-6, atol=0)
        assert (w_ids >= 0).any()


def test_window_rays_are_pixel_rays() -> None:
    cam = leaf_camera(4, 4, 3, LEAF_VIEWS[5])
    _, dirs = pixel_rays(cam)
    window = (100, 300, 50, 400)
    assert np.array_equal(window_rays(cam, window), dirs.reshape(512, 512, 3)[100:300, 50:400].reshape(-1, 3))


def test_pixel_window_contains_every_block_pixel() -> None:
    for idx, h in enumerate(_structures(8, seed=44)):
        cam = leaf_camera(4, 4, int(h.max()), LEAF_VIEWS[(3 * idx) % 16], resolution=128)
        origin, dirs = pixel_rays(cam)
        ids, _ = cast_rays(h, origin, dirs)
        rows, cols = np.nonzero(ids.reshape(128, 128) >= 0)
        r0, r1, c0, c1 = pixel_window(cam, *grid_box(h))
        assert r0 <= rows.min() and rows.max() < r1 and c0 <= cols.min() and cols.max() < c1


def test_cast_output_types_and_empty_map() -> None:
    cam = leaf_camera(4, 4, 1, LEAF_VIEWS[0], resolution=64)
    ids, dist = cast(np.zeros((4, 4), dtype=int), cam)
    assert ids.dtype == np.int32 and dist.dtype == np.float32 and ids.shape == (64, 64)
    assert (ids == NO_BLOCK).all() and np.isinf(dist).all()
    h = np.zeros((4, 4), dtype=int)
    h[1, 2] = 2
    ids, dist = cast(h, cam)
    assert set(np.unique(ids).tolist()) <= {NO_BLOCK, block_id(1, 2, 0, 4), block_id(1, 2, 1, 4)}
    assert np.isinf(dist[ids == NO_BLOCK]).all() and np.isfinite(dist[ids >= 0]).all()
    with pytest.raises(ValueError, match="heights"):
        cast(np.full((4, 4), 5), cam)


# ---------------------------------------------------------------- hand-computed depth


def _centre_pixel_hit(h: np.ndarray, position: tuple, target: tuple) -> tuple[int, float]:
    cam = Camera(position, target, half_fov_deg=10.0, resolution=101)  # odd: pixel (50, 50) looks at target
    ids, dist = cast(h, cam)
    return int(ids[50, 50]), float(dist[50, 50])


def test_depth_of_top_face_centre() -> None:
    h = np.zeros((4, 4), dtype=int)
    h[1, 2] = 2  # block (1, 2, 1) has its top face centre at (-0.05, 0.05, 0.2)
    target = (-0.05, 0.05, 0.2)
    position = (target[0] - 0.6, target[1] - 0.8, target[2] + 1.0)
    ident, dist = _centre_pixel_hit(h, position, target)
    assert ident == block_id(1, 2, 1, 4)
    assert dist == pytest.approx(math.sqrt(0.36 + 0.64 + 1.0), abs=1e-6)


def test_depth_of_side_face_point() -> None:
    h = np.zeros((4, 4), dtype=int)
    h[1, 2] = 2  # the -x face of column (1, 2) is the plane x = -0.1
    target = (-0.1, 0.07, 0.13)  # on the face of block (1, 2, 1) (z in [0.1, 0.2])
    position = (-1.1, 0.07, 0.63)
    ident, dist = _centre_pixel_hit(h, position, target)
    assert ident == block_id(1, 2, 1, 4)
    assert dist == pytest.approx(math.sqrt(1.0 + 0.25), abs=1e-6)


def test_ground_pixel_is_no_block() -> None:
    h = np.zeros((4, 4), dtype=int)
    h[1, 2] = 2
    ident, dist = _centre_pixel_hit(h, (1.0, -1.2, 1.0), (0.15, -0.15, 0.0))
    assert ident == NO_BLOCK and math.isinf(dist)


def test_depth_equals_ray_plane_distance_for_top_faces() -> None:
    h = sample_structure(structure_rng(5, 3))
    layers = int(h.max())
    cam = leaf_camera(4, 4, layers, LEAF_VIEWS[2])
    origin, dirs = pixel_rays(cam)
    ids, dist = cast(h, cam)
    checked = 0
    for row, col in [(200, 250), (220, 260), (240, 240), (256, 256), (230, 280), (250, 230)]:
        if ids[row, col] < 0:
            continue
        i, j, k = block_of(int(ids[row, col]), 4)
        d = dirs[row * 512 + col]
        t_top = ((k + 1) * 0.1 - origin[2]) / d[2]  # the plane of this block's top face
        p = origin + t_top * d
        c = block_center(i, j, k, 4, 4)
        if abs(p[0] - c[0]) <= 0.05 and abs(p[1] - c[1]) <= 0.05:  # the ray meets the top face first
            assert dist[row, col] == pytest.approx(t_top, rel=1e-6)
            checked += 1
    assert checked >= 3


# ---------------------------------------------------------------- the cameras of section 3.2 / 3.3


@pytest.mark.parametrize(
    ("layers", "target_z", "dist_term", "range1", "range03", "pitch"),
    [
        (1, 0.10, 1.8025, 1.867, 0.560, 36.9),
        (2, 0.15, 1.9236, 1.995, 0.599, 37.0),
        (3, 0.20, 2.0814, 2.161, 0.648, 37.1),
        (4, 0.25, 2.2681, 2.357, 0.707, 37.2),
    ],
)
def test_camera_table(layers: int, target_z: float, dist_term: float, range1: float, range03: float,
                      pitch: float) -> None:
    target, term = framing(4, 4, layers)
    assert target.tolist() == pytest.approx([0.0, 0.0, target_z])
    assert term == pytest.approx(dist_term, abs=5e-5)
    for offset in (3.0, 12.5):
        near = np.subtract(leaf_camera(4, 4, layers, LeafView(1, offset, 3.0, 0.3)).position, target)
        far = np.subtract(leaf_camera(4, 4, layers, LeafView(1, offset, 1.0, 1.0)).position, target)
        assert float(np.linalg.norm(far)) == pytest.approx(range1, abs=5e-4)
        assert float(np.linalg.norm(near)) == pytest.approx(range03, abs=5e-4)
        assert math.degrees(math.atan2(far[2], math.hypot(far[0], far[1]))) == pytest.approx(pitch, abs=0.05)


def test_camera_bearing_lens_and_clearance() -> None:
    min_clear = math.inf
    for layers in range(1, 5):
        for leaf in LEAF_VIEWS:
            cam = leaf_camera(4, 4, layers, leaf)
            rel = np.subtract(cam.position, cam.target)
            bearing = math.degrees(math.atan2(rel[1], rel[0]))
            assert (bearing - (-137.39 - leaf.azimuth) + 180) % 360 - 180 == pytest.approx(0, abs=0.01)
            assert cam.position[2] > layers * 0.1  # always above the structure's top plane
            min_clear = min(min_clear, abs(cam.position[0]), abs(cam.position[1]))
            assert cam.fov_deg == pytest.approx(23.67 if leaf.fov == 1 else 71.01, abs=0.005)
            assert cam.focal_mm == pytest.approx(50.0 if leaf.fov == 1 else 14.686, abs=5e-4)
    assert min_clear == pytest.approx(0.2247, abs=5e-5)
    corners = {1: (-1, -1), 2: (-1, 1), 3: (1, 1), 4: (1, -1)}  # near cells (0,0), (0,3), (3,3), (3,0)
    for leaf in LEAF_VIEWS:
        pos = leaf_camera(4, 4, 2, leaf).position
        assert (np.sign(pos[0]), np.sign(pos[1])) == corners[leaf.view_idx]
    assert nominal_camera(4, 4, 2, 0.0).half_fov_deg == pytest.approx(11.835, abs=5e-4)


def test_leaf_views_order_and_names() -> None:
    assert len(LEAF_VIEWS) == 16 and len(set(LEAF_VIEWS)) == 16
    assert [lv.relpath for lv in LEAF_VIEWS[:3]] == [
        "view_01/offset3_fov1_dist1", "view_01/offset12.5_fov1_dist1", "view_02/offset3_fov1_dist1"]
    assert LEAF_VIEWS[-1].relpath == "view_04/offset12.5_fov3_dist0.3"
    assert LeafView(4, 3.0, 1.0, 1.0).partner(1) == LeafView(1, 3.0, 1.0, 1.0)
    assert LeafView(3, 12.5, 3.0, 0.3).partner(2) == LeafView(1, 12.5, 3.0, 0.3)
    assert LeafView(2, 12.5, 1.0, 1.0).azimuth == 102.5
