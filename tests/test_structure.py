"""Structure sampling, the analytic bin test, retention and structure ids (benchmark-spec sections 1-2)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from data_gen.camera import block_center, nominal_camera
from data_gen.structure import (
    MAX_ATTEMPTS,
    blocks_of,
    count_weights,
    sample_structure,
    sample_structure_info,
    structure_id,
    structure_rng,
)
from data_gen.visibility import analytic_visible, retain, scene_visible_count, support_closure

# ---------------------------------------------------------------- count weights (section 1.2)


def test_count_weight_table_values() -> None:
    w = count_weights()
    assert w.shape == (62,)
    n = np.arange(3, 65)
    at = dict(zip(n.tolist(), w.tolist(), strict=True))
    assert at[3] == pytest.approx(0.017)
    assert at[11] == pytest.approx(1.6)
    assert at[12] == pytest.approx(0.8)
    assert at[30] == pytest.approx(0.2)
    assert at[31] == pytest.approx(0.225)
    assert at[40] == pytest.approx(0.0372, abs=5e-5)
    assert at[64] == pytest.approx(0.00031, abs=5e-6)
    assert at[7] == pytest.approx(0.017 + (1.6 - 0.017) * 4 / 8)
    assert at[21] == pytest.approx(0.8 - 0.6 * 9 / 18)


def test_count_weight_distribution_figures() -> None:
    w = count_weights()
    n = np.arange(3, 65)
    p = w / w.sum()
    prob = dict(zip(n.tolist(), p.tolist(), strict=True))
    assert w.sum() == pytest.approx(18.0164, abs=5e-5)
    assert float((n * p).sum()) == pytest.approx(15.95, abs=0.005)
    assert prob[11] == pytest.approx(0.0888, abs=5e-5)
    assert int(np.argmax(p)) + 3 == 11
    assert prob[3] == pytest.approx(0.00094, abs=5e-6)
    assert prob[4] == pytest.approx(0.0119, abs=5e-5)
    assert prob[10] == pytest.approx(0.0778, abs=5e-5)
    assert prob[12] == pytest.approx(0.0444, abs=5e-5)
    assert prob[30] == pytest.approx(0.0111, abs=5e-5)
    assert prob[31] == pytest.approx(0.0125, abs=5e-5)
    assert float(p[n <= 11].sum()) == pytest.approx(0.404, abs=5e-4)
    assert float(p[(n >= 12) & (n <= 30)].sum()) == pytest.approx(0.527, abs=5e-4)
    assert float(p[n >= 31].sum()) == pytest.approx(0.069, abs=5e-4)


def test_count_weights_below_three_are_zero_and_bad_range_rejected() -> None:
    w = count_weights(0, 5)
    assert w[:3].tolist() == [0.0, 0.0, 0.0]
    assert w[3] == pytest.approx(0.017)
    with pytest.raises(ValueError, match="n_min"):
        count_weights(10, 5)


# ---------------------------------------------------------------- analytic bin test (section 2.1)


def _reference_visible(h: np.ndarray, azimuth: float) -> set[tuple[int, int, int]]:
    """Section 2.1 written out literally: a dict depth buffer holding depths, compared strictly."""
    rows, cols = h.shape
    cam = nominal_camera(rows, cols, int(h.max()), azimuth)
    f, r, u = cam.basis()
    pos = np.asarray(cam.position)
    half = 0.05
    entries = []
    for i in range(rows):
        for j in range(cols):
            for k in range(int(h[i, j])):
                rel = block_center(i, j, k, rows, cols) - pos
                d_c = float(rel @ f)
                entries.append((d_c - half, d_c, float(rel @ r), float(rel @ u), (i, j, k)))
    entries.sort(key=lambda e: e[0])  # stable
    cell = (2 * half / float(np.linalg.norm(np.asarray(cam.target) - pos))) * 0.125
    buf: dict[tuple[int, int], float] = {}
    visible = set()
    for d_f, d_c, x, y, block in entries:
        if d_f <= 0:
            continue
        hs = half / d_c
        xr = range(math.floor((x / d_c - hs) / cell), math.ceil((x / d_c + hs) / cell) + 1)
        yr = range(math.floor((y / d_c - hs) / cell), math.ceil((y / d_c + hs) / cell) + 1)
        if any((a, b) not in buf or buf[(a, b)] > d_f for a in xr for b in yr):
            visible.add(block)
            for a in range(xr.start - 1, xr.stop + 1):
                for b in range(yr.start - 1, yr.stop + 1):
                    buf[(a, b)] = min(buf.get((a, b), math.inf), d_f)
    return visible


def _raw_maps(count: int, seed: int) -> list[np.ndarray]:
    """Pre-retention maps as the sampler draws them (distinct slots, collapsed), plus uniform random maps."""
    rng = np.random.default_rng(seed)
    maps = []
    for idx in range(count):
        if idx % 2:
            slots = rng.choice(64, size=int(rng.integers(3, 65)), replace=False)
            maps.append(np.bincount(slots // 4, minlength=16).reshape(4, 4))
        else:
            maps.append(rng.integers(0, 5, size=(4, 4)))
    return [m for m in maps if m.max() > 0]


@pytest.mark.parametrize("azimuth", [0.0, 3.0, 102.5, 183.0, 282.5])
def test_analytic_visible_matches_literal_depth_buffer(azimuth: float) -> None:
    for h in _raw_maps(120, seed=int(azimuth * 10)):
        assert analytic_visible(h, azimuth) == _reference_visible(h, azimuth), h.tolist()


def test_analytic_visible_on_non_square_grids() -> None:
    rng = np.random.default_rng(5)
    for shape in [(3, 1), (1, 3), (2, 3), (3, 3)]:
        for _ in range(20):
            h = rng.integers(0, 4, size=shape)
            if h.max() == 0:
                continue
            assert analytic_visible(h, 0.0) == _reference_visible(h, 0.0)


def test_analytic_visible_simple_cases() -> None:
    single = np.zeros((4, 4), dtype=int)
    single[2, 1] = 1
    assert analytic_visible(single, 0.0) == {(2, 1, 0)}
    assert analytic_visible(np.zeros((4, 4), dtype=int), 0.0) == set()
    tower = np.zeros((4, 4), dtype=int)
    tower[1, 1] = 4
    assert (1, 1, 3) in analytic_visible(tower, 0.0)  # the camera is above: a lone tower's top is seen


def test_front_block_hides_block_directly_behind_in_analytic_test() -> None:
    # Camera at azimuth 0 sits near the -x/-y corner; a full 4x4x4 cube hides its back-bottom interior.
    full = np.full((4, 4), 4)
    vis = analytic_visible(full, 0.0)
    assert (3, 3, 0) not in vis and (1, 1, 1) not in vis
    assert all((i, j, 3) in vis for i in range(4) for j in range(4))
    assert len(vis) < 64


# ---------------------------------------------------------------- support closure and retention (section 2.2, 1.3)


def test_support_closure_adds_every_block_below() -> None:
    assert support_closure([(0, 0, 2), (1, 1, 0)]) == {(0, 0, 0), (0, 0, 1), (0, 0, 2), (1, 1, 0)}
    assert support_closure([]) == set()
    assert support_closure({(2, 3, 1), (2, 3, 3)}) == {(2, 3, k) for k in range(4)}
    with pytest.raises(ValueError, match="layer"):
        support_closure([(0, 0, -1)])


def test_retain_is_closure_of_analytic_view0_and_only_trims_tops() -> None:
    for h in _raw_maps(200, seed=11):
        kept = retain(h)
        needed = support_closure(analytic_visible(h, 0.0))
        assert set(blocks_of(kept)) == needed
        assert (kept <= h).all()
        assert kept.dtype == np.int64


def test_scene_visible_count_is_view0_analytic_count() -> None:
    for h in _raw_maps(300, seed=3):
        kept = retain(h)
        assert scene_visible_count(kept) == len(analytic_visible(kept, 0.0))
        assert scene_visible_count(kept) <= int(kept.sum())
        # The reference counts on the map before retention; retention removes only hidden blocks that never
        # wrote to the buffer and never lowers the top layer, so the count on the retained map is the same.
        assert kept.max() == h.max()
        assert analytic_visible(kept, 0.0) == analytic_visible(h, 0.0)


# ---------------------------------------------------------------- sampler (section 1.3)


@pytest.fixture(scope="module")
def sampled() -> list:
    return [sample_structure_info(structure_rng(20260403, idx)) for idx in range(1500)]


def test_sampler_statistics_match_spec(sampled: list) -> None:
    n = len(sampled)
    hits = np.array([s.hit for s in sampled])
    # Spec: about 96.9% hit n* exactly (its own 1,500-structure simulation; 4 sd of the difference is 2.5%),
    # taking 37 attempts on average when they hit.
    assert 0.944 <= hits.mean() <= 0.994
    attempts = np.mean([s.attempts for s in sampled if s.hit])
    assert 30 <= attempts <= 44
    # Misses are off by 1, occasionally by 2; a miss used all attempts.
    gaps = [abs(int(s.height_map.sum()) - s.target) for s in sampled if not s.hit]
    assert gaps and set(gaps) <= {1, 2}
    assert all(s.attempts == MAX_ATTEMPTS for s in sampled if not s.hit)
    # Layer shares 6.5 / 41 / 32 / 20.5 % (the spec's own 1,500-structure simulation): both figures carry
    # sampling error, so allow 3.5 standard deviations of the difference.
    layers = np.array([int(s.height_map.max()) for s in sampled])
    for level, share in zip(range(1, 5), (0.065, 0.41, 0.32, 0.205), strict=True):
        sd = math.sqrt(2 * share * (1 - share) / n)
        assert abs(float(np.mean(layers == level)) - share) <= 3.5 * sd, (level, float(np.mean(layers == level)))
    totals = np.array([int(s.height_map.sum()) for s in sampled])
    assert totals.min() >= 3 and totals.max() <= 64
    assert 10 <= int(np.argmax(np.bincount(totals))) <= 11  # the histogram peaks at 10-11
    columns = np.array([int((s.height_map > 0).sum()) for s in sampled])
    # The spec's simulation saw 3 to 15 non-empty columns with the mode around 8-11; two columns (e.g. a
    # stack of 2 beside a single block for n* = 3) are rare but valid.
    assert columns.min() >= 2 and np.mean(columns >= 3) > 0.99 and 7 <= int(np.argmax(np.bincount(columns))) <= 11


def test_targets_follow_count_weights(sampled: list) -> None:
    targets = np.array([s.target for s in sampled])
    w = count_weights()
    p = w / w.sum()
    assert abs(targets.mean() - 15.95) < 4 * math.sqrt(float((p * (np.arange(3, 65) - 15.95) ** 2).sum()) / 1500)
    share_low = float(np.mean(targets <= 11))
    assert abs(share_low - 0.404) < 4 * math.sqrt(0.404 * 0.596 / 1500)


def test_sampled_maps_are_valid_and_fixed_points_of_retention(sampled: list) -> None:
    for s in sampled[:300]:
        h = s.height_map
        assert h.shape == (4, 4) and h.dtype == np.int64
        assert h.min() >= 0 and h.max() <= 4
        # Removed blocks were hidden and never wrote to the buffer, so with the same camera (same layer
        # count) the retained map keeps every block again.
        assert (retain(h) == h).all()


def test_same_seed_and_index_give_same_map() -> None:
    a = [sample_structure(structure_rng(9, idx)) for idx in range(20)]
    b = [sample_structure(structure_rng(9, idx)) for idx in reversed(range(20))][::-1]
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    c = [sample_structure(structure_rng(10, idx)) for idx in range(20)]
    assert sum((x == y).all() for x, y in zip(a, c, strict=True)) < 5
    assert len({structure_id(x) for x in a}) >= 18


def test_sampler_reads_only_the_raw_bit_stream() -> None:
    """Only ``bit_generator.random_raw`` is used (stable across NumPy versions), no Generator method."""
    import types

    for idx in range(10):
        seq = np.random.SeedSequence([4, idx])
        bare = types.SimpleNamespace(bit_generator=np.random.PCG64(seq))
        full = np.random.Generator(np.random.PCG64(np.random.SeedSequence([4, idx])))
        assert (sample_structure(bare) == sample_structure(full)).all()  # type: ignore[arg-type]


def test_pinned_structures_of_a_seed() -> None:
    """Regression pin of the reproducibility contract: (master seed, index) -> height map never changes."""
    expected = {
        0: [[0, 0, 2, 2], [0, 2, 0, 0], [0, 0, 0, 0], [0, 0, 1, 2]],
        1: [[0, 1, 1, 1], [0, 2, 1, 1], [1, 1, 2, 0], [2, 0, 0, 0]],
        2: [[0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 1, 1, 0]],
    }
    for idx, hmap in expected.items():
        assert sample_structure(structure_rng(2026, idx)).tolist() == hmap


def test_structure_rng_rejects_bad_seeds() -> None:
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match="non-negative integer"):
            structure_rng(bad, 0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="index"):
            structure_rng(0, bad)  # type: ignore[arg-type]


def test_sample_structure_rejects_bad_grid() -> None:
    with pytest.raises(ValueError, match="rows"):
        sample_structure(np.random.default_rng(0), rows=0)


def test_sampler_on_other_level_shapes() -> None:
    rng = np.random.default_rng(1)
    for rows, cols, height, min_blocks in [(3, 1, 3, 2), (2, 3, 2, 2), (3, 3, 3, 6)]:
        h = sample_structure(rng, rows, cols, height, min_blocks)
        assert h.shape == (rows, cols) and h.max() <= height and h.sum() >= 1


# ---------------------------------------------------------------- structure ids


def test_structure_id_encoding_is_documented_hash() -> None:
    h = np.array([[1, 0], [3, 2]])
    assert structure_id(h) == hashlib.sha256(b"2x2:1,0,3,2").hexdigest()[:16]
    assert structure_id(h.astype(np.int8)) == structure_id(h)
    assert structure_id(np.asfortranarray(h)) == structure_id(h)
    assert structure_id(h.astype(float)) == structure_id(h)


def test_structure_id_distinguishes_maps_and_shapes() -> None:
    a = np.array([[1, 2, 3, 4]])
    assert structure_id(a) != structure_id(a.reshape(4, 1))
    assert structure_id(a) != structure_id(np.array([[1, 2, 4, 3]]))
    rng = np.random.default_rng(0)
    maps = {tuple(m.ravel()) for m in rng.integers(0, 5, size=(2000, 4, 4))}
    ids = {structure_id(np.array(m).reshape(4, 4)) for m in maps}
    assert len(ids) == len(maps)
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)


def test_structure_id_rejects_bad_maps() -> None:
    for bad in (np.array([1, 2]), np.array([[1, -1]]), np.array([[0.5, 1]]), np.zeros((0, 3))):
        with pytest.raises(ValueError, match="height_map"):
            structure_id(bad)
