"""Mitsuba backend: exact id pass against the voxel ray caster, determinism, environments, cans, errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from data_gen.camera import block_center, leaf_camera, pixel_rays
from data_gen.render import materials, mitsuba_backend
from data_gen.render.backends import get_renderer
from data_gen.render.base import RenderError, SceneSpec
from data_gen.render.mitsuba_backend import (
    _llvm_major,
    find_libllvm,
    ids_from_shape_index,
    resolve_variant,
    shape_block_ids,
)
from data_gen.visibility import block_id, cast, visible_set
from spatialiq_train.core.views import LEAF_VIEWS

mi = pytest.importorskip("mitsuba", reason="the Mitsuba 3 renderer is not installed (pip install -e '.[render]')")
pytestmark = pytest.mark.mitsuba

FULL = ((4, 4, 4, 4),) * 4
STAIRS = ((4, 3, 2, 1), (3, 2, 1, 0), (2, 1, 0, 0), (1, 0, 0, 2))
GAPS = ((1, 0, 3), (0, 2, 0))
SINGLE = ((1,),)
TALL_RAGGED = ((2, 4, 1), (4, 0, 3), (1, 3, 2), (0, 1, 4))


def _variants() -> list[str]:
    out = ["scalar_rgb"]
    if find_libllvm() is not None:
        out.append("llvm_ad_rgb")
    return out


@pytest.fixture(scope="module", params=_variants())
def renderer(request: pytest.FixtureRequest):
    return get_renderer("mitsuba", variant=request.param, spp=2, threads=1)


@pytest.fixture(scope="module")
def scalar():
    return get_renderer("mitsuba", variant="scalar_rgb", spp=2, threads=1)


def _spec(hm, leaf=LEAF_VIEWS[0], resolution=512, **kw) -> SceneSpec:
    layers = max(max(r) for r in hm)
    return SceneSpec(hm, leaf_camera(len(hm), len(hm[0]), layers, leaf, resolution), **kw)


def _assert_agrees(ids: np.ndarray, spec: SceneSpec) -> None:
    ref, _ = cast(np.array(spec.height_map), spec.camera)
    cols = len(spec.height_map[0])
    assert ids.shape == ref.shape and ids.dtype == np.int32
    assert visible_set(ids, cols) == visible_set(ref, cols), spec.camera
    cube = (ref >= 0) | (ids >= 0)
    agreement = float((ids[cube] == ref[cube]).mean())
    assert agreement >= 0.999, f"cube-pixel agreement {agreement:.5f} < 0.999 for camera {spec.camera}"


@pytest.mark.parametrize("leaf", LEAF_VIEWS, ids=[v.relpath for v in LEAF_VIEWS])
def test_id_pass_matches_raycaster_in_all_16_leaves(renderer, leaf) -> None:
    _assert_agrees(renderer.render_ids(_spec(STAIRS, leaf)), _spec(STAIRS, leaf))


@pytest.mark.parametrize("hm", [FULL, GAPS, SINGLE, TALL_RAGGED], ids=["full4x4x4", "gaps", "single", "ragged"])
@pytest.mark.parametrize("leaf", [LEAF_VIEWS[1], LEAF_VIEWS[6], LEAF_VIEWS[8], LEAF_VIEWS[13]],
                         ids=lambda v: v.relpath)
def test_id_pass_matches_raycaster_on_other_structures(renderer, hm, leaf) -> None:
    spec = _spec(hm, leaf)
    _assert_agrees(renderer.render_ids(spec), spec)


def test_full_structure_hides_interior_blocks(scalar) -> None:
    ids = scalar.render_ids(_spec(FULL, LEAF_VIEWS[0]))
    seen = visible_set(ids, 4)
    assert (1, 1, 0) not in seen and (3, 3, 3) in seen and len(seen) < 64


def test_beauty_render_at_512_is_rgb_with_exact_ids(scalar) -> None:
    spec = _spec(STAIRS, LEAF_VIEWS[2], seed=3)
    res = scalar.render(spec)
    assert res.rgb.shape == (512, 512, 3) and res.rgb.dtype == np.uint8
    assert res.rgb.std() > 10  # not a blank frame
    _assert_agrees(res.instance_ids, spec)


def test_beauty_is_deterministic_per_seed(renderer) -> None:
    spec = _spec(STAIRS, LEAF_VIEWS[0], resolution=96, seed=11)
    first, second = renderer.render(spec), renderer.render(spec)
    assert first.rgb.tobytes() == second.rgb.tobytes()
    assert np.array_equal(first.instance_ids, second.instance_ids)
    other = renderer.render(dataclasses.replace(spec, seed=12))
    assert other.rgb.tobytes() != first.rgb.tobytes()


def test_each_environment_gives_a_different_image(renderer) -> None:
    images = [renderer.render(_spec(GAPS, LEAF_VIEWS[9], resolution=64, environment=e)).rgb.astype(np.float32)
              for e in range(len(materials.ENVIRONMENTS))]
    assert len(images) >= 4
    for a in range(len(images)):
        for b in range(a + 1, len(images)):
            assert np.abs(images[a] - images[b]).mean() > 4.0, (a, b)


def test_can_renders_and_gives_ids(renderer) -> None:
    spec = _spec(STAIRS, LEAF_VIEWS[4], resolution=128, object_type="can", seed=2)
    res = renderer.render(spec)
    assert res.rgb.shape == (128, 128, 3)
    cube_ids = renderer.render_ids(dataclasses.replace(spec, object_type="cube"))
    ids = res.instance_ids
    valid = {block_id(i, j, k, 4) for i, row in enumerate(STAIRS) for j, h in enumerate(row) for k in range(h)}
    present = set(np.unique(ids[ids >= 0]).tolist())
    assert present and present <= valid
    # Every top-layer can faces the sky and stays visible; cans are narrower than cubes, so they cover fewer pixels.
    tops = {block_id(i, j, h - 1, 4) for i, row in enumerate(STAIRS) for j, h in enumerate(row) if h}
    assert tops <= present
    assert 0 < (ids >= 0).sum() < (cube_ids >= 0).sum()


def _cast_cans(hm, camera, radius: float = 0.045) -> np.ndarray:
    """Nearest can (open side + top cap, as the scene builds them) per pixel-centre ray; -1 elsewhere."""
    o, d = pixel_rays(camera)
    rows, cols = len(hm), len(hm[0])
    best, ids = np.full(len(d), np.inf), np.full(len(d), -1, dtype=np.int32)
    for i, row in enumerate(hm):
        for j, h in enumerate(row):
            for k in range(h):
                c = block_center(i, j, k, rows, cols)
                z0, z1 = c[2] - 0.05, c[2] + 0.05
                px, py = o[0] - c[0], o[1] - c[1]
                a = d[:, 0] ** 2 + d[:, 1] ** 2
                b = 2 * (d[:, 0] * px + d[:, 1] * py)
                disc = b * b - 4 * a * (px * px + py * py - radius * radius)
                with np.errstate(invalid="ignore"):
                    t_side = (-b - np.sqrt(disc)) / (2 * a)
                z_side = o[2] + t_side * d[:, 2]
                side = (disc >= 0) & (t_side > 0) & (z_side >= z0) & (z_side <= z1)
                t_cap = (z1 - o[2]) / d[:, 2]
                cap = (t_cap > 0) & ((px + t_cap * d[:, 0]) ** 2 + (py + t_cap * d[:, 1]) ** 2 <= radius * radius)
                t = np.minimum(np.where(side, t_side, np.inf), np.where(cap, t_cap, np.inf))
                closer = t < best
                best[closer], ids[closer] = t[closer], block_id(i, j, k, cols)
    return ids.reshape(camera.resolution, camera.resolution)


@pytest.mark.parametrize("leaf", [LEAF_VIEWS[0], LEAF_VIEWS[7], LEAF_VIEWS[10]], ids=lambda v: v.relpath)
def test_can_id_pass_matches_an_analytic_cylinder_caster(renderer, leaf) -> None:
    spec = _spec(STAIRS, leaf, object_type="can")
    ids, ref = renderer.render_ids(spec), _cast_cans(STAIRS, spec.camera)
    assert visible_set(ids, 4) == visible_set(ref, 4)
    can = (ids >= 0) | (ref >= 0)
    assert (ids[can] == ref[can]).mean() >= 0.999


def test_unknown_object_type_environment_and_height_are_clear_errors(scalar) -> None:
    with pytest.raises(ValueError, match="unknown object_type 'sphere'.*cube, can"):
        scalar.render(_spec(SINGLE, object_type="sphere"))
    with pytest.raises(ValueError, match="environment must be an integer in 0..4"):
        scalar.render(_spec(SINGLE, environment=99))
    with pytest.raises(ValueError, match=r"height_map\[0\]\[1\] = 7"):
        scalar.render_ids(dataclasses.replace(_spec(SINGLE), height_map=((1, 7),)))
    with pytest.raises(ValueError, match="rectangular"):
        scalar.render_ids(dataclasses.replace(_spec(SINGLE), height_map=((1, 2), (1,))))
    with pytest.raises(ValueError, match="unknown Mitsuba variant 'gpu'"):
        get_renderer("mitsuba", variant="gpu")
    with pytest.raises(ValueError, match="unknown renderer 'blender'"):
        get_renderer("blender")
    assert issubclass(RenderError, RuntimeError)


def test_shape_index_mapping_handles_misses_ground_and_unknown_values() -> None:
    names = ["floor", "b_0_1_2", "c_1_0_0", "t_1_0_0", "mat"]
    bids = shape_block_ids(names, cols=3)
    assert bids.tolist() == [-1, block_id(0, 1, 2, 3), block_id(1, 0, 0, 3), block_id(1, 0, 0, 3), -1]
    values = np.array([7, 3, 12, 40, 5])  # registry ids in llvm variants are neither sorted nor contiguous
    si = np.array([[0.0, 3.0, 12.0], [40.0, 7.0, 99.0]], dtype=np.float32)
    assert ids_from_shape_index(si, values, bids).tolist() == [[-1, bids[1], bids[2]], [bids[3], -1, -1]]


def test_libllvm_discovery(tmp_path, monkeypatch) -> None:
    assert _llvm_major("libLLVM.so.19.1") == 19 and _llvm_major("libLLVM-15.so") == 15
    assert _llvm_major("libLLVM-20.dylib") == 20 and _llvm_major("libfoo.so") == -1
    lib = tmp_path / "libLLVM-19.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("DRJIT_LIBLLVM_PATH", str(lib))
    assert find_libllvm() == str(lib)


def test_auto_variant_prefers_llvm_and_falls_back_to_scalar_with_a_warning(monkeypatch, caplog) -> None:
    import drjit as dr

    if dr.has_backend(dr.JitBackend.CUDA):
        pytest.skip("a CUDA device is present, so auto picks cuda_ad_rgb")
    assert resolve_variant("auto") == ("llvm_ad_rgb" if find_libllvm() else "scalar_rgb")
    monkeypatch.setattr(mitsuba_backend, "find_libllvm", lambda *a, **k: None)
    with caplog.at_level("WARNING", logger="data_gen.render.mitsuba_backend"):
        assert resolve_variant("auto") == "scalar_rgb"
    assert "libllvm19" in caplog.text and "falling back to scalar_rgb" in caplog.text
    with pytest.raises(RuntimeError, match="apt-get install libllvm19"):
        resolve_variant("llvm_ad_rgb")
    with pytest.raises(RuntimeError, match="NVIDIA GPU"):
        resolve_variant("cuda_ad_rgb")


# ---- materials (pure numpy) -------------------------------------------------------------------------------


def test_block_textures_have_the_benchmark_border() -> None:
    tex = materials.wood_texture(np.random.default_rng(0))
    w = int(materials.BLOCK_TEXTURE_SIZE * materials.BORDER_FRACTION)
    assert tex.shape == (256, 256, 3) and w == 12 and 0.0 <= tex.min() and tex.max() <= 1.0
    edge = tex[0, 0]
    assert np.allclose(tex[:w], edge) and np.allclose(tex[:, -w:], edge)
    inner = tex[w:-w, w:-w]
    assert not np.allclose(inner, edge)  # the wood grain varies inside
    # The border is 0.8 x the mean of the texture before it was painted: darker than the inside.
    assert (edge < inner.reshape(-1, 3).mean(axis=0)).all()


def test_palette_is_fixed_and_choice_is_seeded() -> None:
    a, b = materials.block_palette(), materials.block_palette()
    assert len(a) == materials.PALETTE_SIZE and a[0] is b[0] and not a[0].flags.writeable
    assert not np.array_equal(a[0], a[1])
    c1 = materials.choose_block_textures(np.random.default_rng(5), 64)
    c2 = materials.choose_block_textures(np.random.default_rng(5), 64)
    assert np.array_equal(c1, c2) and len(set(c1.tolist())) > 1


def test_environments_are_distinct_and_floors_render() -> None:
    envs = materials.ENVIRONMENTS
    assert len(envs) >= 4 and len({(e.floor, e.floor_rgb, e.mat_rgb, e.sky_rgb) for e in envs}) == len(envs)
    floors = [materials.environment_floor(i) for i in range(len(envs))]
    assert all(f.shape == (512, 512, 3) and f.min() >= 0 and f.max() <= 1 for f in floors)
    assert np.linalg.norm(materials.key_light_direction(envs[0])) == pytest.approx(1.0)
    assert materials.key_light_direction(envs[0])[2] < 0  # travels downwards
    with pytest.raises(ValueError, match="unknown floor kind 'lava'"):
        materials.floor_texture("lava", (0.5, 0.5, 0.5), np.random.default_rng(0))


def test_srgb_round_trip() -> None:
    x = np.linspace(0, 1, 256, dtype=np.float32)
    back = materials.linear_to_srgb8(materials.srgb_to_linear(x))
    assert np.array_equal(back, np.round(x * 255).astype(np.uint8))
    assert materials.linear_to_srgb8(np.array([-1.0, 2.0, np.nan])).tolist() == [0, 255, 0]


def test_beauty_passes_write_each_pixel_once(scalar) -> None:
    """Order-independent accumulation: box filter and one sample per pixel per pass (no atomic splats that made
    llvm renders differ between runs), and the beauty image is the plain mean of those passes."""
    spec = _spec(STAIRS, LEAF_VIEWS[0], resolution=24, seed=5)
    sensor = mitsuba_backend.scene_dict(mi, spec, spp=4, max_depth=3, beauty=True)["sensor"]
    assert sensor["film"]["rfilter"] == {"type": "box"}
    assert sensor["sampler"] == {"type": "independent", "sample_count": 1}
    scene = scalar._load(spec, beauty=True)
    passes = [np.array(mi.render(scene, seed=(spec.seed * scalar.spp + p) & 0xFFFFFFFF, spp=1), dtype=np.float64)
              for p in range(scalar.spp)]
    np.testing.assert_array_equal(scalar._beauty(scene, spec), sum(passes) / scalar.spp)
