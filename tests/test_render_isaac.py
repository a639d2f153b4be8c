"""Isaac Sim backend: the pure stage description, the segmentation -> block id map, the missing-package error."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from PIL import Image

from data_gen.camera import block_center, leaf_camera, pixel_rays
from data_gen.render import isaac_stage as st
from data_gen.render import materials
from data_gen.render.backends import get_renderer
from data_gen.render.base import SceneSpec
from data_gen.render.isaacsim_backend import IsaacSimRenderer, write_textures
from data_gen.visibility import block_id
from spatialiq_train.core.views import LEAF_VIEWS

HM = ((2, 0, 1), (1, 3, 0))
HAS_ISAAC = importlib.util.find_spec("isaacsim") is not None


def _spec(leaf=LEAF_VIEWS[0], **kw) -> SceneSpec:
    return SceneSpec(HM, leaf_camera(2, 3, 3, leaf), **kw)


@pytest.mark.skipif(HAS_ISAAC, reason="isaacsim is installed here")
def test_missing_isaacsim_gives_a_clear_import_error() -> None:
    with pytest.raises(ImportError, match=r"RTX GPU.*--extra-index-url https://pypi.nvidia.com"):
        IsaacSimRenderer()
    with pytest.raises(ImportError, match=r"renderer 'isaacsim' needs an optional dependency.*\.\[isaacsim\]"):
        get_renderer("isaacsim")


def test_stage_has_one_prim_per_block_with_exact_transforms_and_ids() -> None:
    stage = st.build_stage_spec(_spec(seed=4))
    assert len(stage.objects) == sum(map(sum, HM))
    paths = st.path_block_ids(stage)
    assert len(paths) == len(stage.objects) and len(set(paths.values())) == len(paths)
    for obj in stage.objects:
        i, j, k = obj.block
        assert obj.path == f"/World/Blocks/block_{i}_{j}_{k}" and obj.block_id == block_id(i, j, k, 3)
        assert np.allclose(obj.translate, block_center(i, j, k, 2, 3)) and obj.scale == (0.1, 0.1, 0.1)
        assert obj.kind == "Cube" and obj.material in stage.materials
    assert {o.block for o in stage.objects} == {(0, 0, 0), (0, 0, 1), (0, 2, 0), (1, 0, 0), (1, 1, 0), (1, 1, 1),
                                                (1, 1, 2)}


def test_per_block_materials_are_the_seeded_draw_shared_with_mitsuba() -> None:
    stage = st.build_stage_spec(_spec(seed=9))
    expect = materials.choose_block_textures(np.random.default_rng(9), len(stage.objects))
    assert [o.material for o in stage.objects] == [f"/World/Looks/wood{m}" for m in expect]
    other = st.build_stage_spec(_spec(seed=10))
    assert [o.material for o in other.objects] != [o.material for o in stage.objects]


@pytest.mark.parametrize("leaf", [LEAF_VIEWS[0], LEAF_VIEWS[13]], ids=lambda v: v.relpath)
def test_camera_intrinsics_and_pose_reproduce_the_project_pixel_rays(leaf) -> None:
    camera = leaf_camera(2, 3, 3, leaf)
    cam = st.camera_prim(camera)
    assert cam.horizontal_aperture_mm == cam.vertical_aperture_mm == 20.955
    assert cam.clipping_range == (0.05, 50000.0) and cam.resolution == (512, 512)
    assert cam.focal_length_mm == pytest.approx(50.0 if leaf.fov == 1 else 14.686, abs=2e-3)
    # Project points along the project's pixel-centre rays with the USD pinhole model; they land on those centres.
    origin, dirs = pixel_rays(camera)
    world_to_cam = np.linalg.inv(np.array(cam.world_matrix))
    picks = np.array([0, 511, 512 * 100 + 37, 512 * 511 + 3, 512 * 256 + 256])
    pts = origin + 0.7 * dirs[picks]
    q = (world_to_cam @ np.c_[pts, np.ones(len(pts))].T).T[:, :3]
    assert (q[:, 2] < 0).all()  # USD cameras look down their local -Z
    half = cam.horizontal_aperture_mm / 2
    x_ndc = cam.focal_length_mm * q[:, 0] / -q[:, 2] / half
    y_ndc = cam.focal_length_mm * q[:, 1] / -q[:, 2] / half
    cols, rows = (x_ndc + 1) / 2 * 512 - 0.5, (1 - y_ndc) / 2 * 512 - 0.5
    assert np.allclose(cols, picks % 512, atol=1e-6) and np.allclose(rows, picks // 512, atol=1e-6)


def test_lights_are_the_benchmark_rig() -> None:
    lights = {lp.path: lp for lp in st.build_stage_spec(_spec()).lights}
    dome, key, fill = lights["/World/DomeLight"], lights["/World/KeyLight"], lights["/World/FillLight"]
    assert (dome.kind, dome.intensity, dome.color) == ("DomeLight", 400.0, (0.9, 0.95, 1.0))
    assert (key.kind, key.intensity, key.color, key.rotate_xyz) == ("DistantLight", 2500.0, (1.0, 0.98, 0.95),
                                                                    (-40.0, 45.0, 0.0))
    assert (fill.intensity, fill.color, fill.rotate_xyz) == (800.0, (0.95, 0.97, 1.0), (-30.0, -135.0, 0.0))
    assert np.allclose(st.distant_light_direction((0, 0, 0)), [0, 0, -1])
    assert np.allclose(st.distant_light_direction((90, 0, 0)), [0, 1, 0], atol=1e-12)
    d = st.distant_light_direction(key.rotate_xyz)
    assert np.linalg.norm(d) == pytest.approx(1.0) and d[2] < 0  # the key light shines downwards


def test_cans_are_cylinders_with_their_own_materials() -> None:
    stage = st.build_stage_spec(_spec(object_type="can"))
    assert {o.kind for o in stage.objects} == {"Cylinder"}
    assert all(o.radius == 0.045 and o.height == 0.1 for o in stage.objects)
    assert all(o.material.startswith("/World/Looks/label") for o in stage.objects)


def test_bad_specs_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown object_type 'mug'"):
        st.build_stage_spec(_spec(object_type="mug"))
    with pytest.raises(ValueError, match="environment must be an integer"):
        st.build_stage_spec(_spec(environment=-1))
    with pytest.raises(ValueError, match=r"height_map\[1\]\[0\] = 5"):
        st.build_stage_spec(SceneSpec(((1,), (5,)), leaf_camera(2, 1, 4, LEAF_VIEWS[0])))


def test_segmentation_labels_map_to_block_ids() -> None:
    stage = st.build_stage_spec(_spec())
    paths = st.path_block_ids(stage)
    labels = {"0": "BACKGROUND", "1": "UNLABELLED", "5": "/World/Blocks/block_0_0_1/Mesh",
              "9": "/World/Ground", "7": "/World/Blocks/block_1_1_2", "8": "/World/Blocks/block_1_1_20"}
    data = np.array([[0, 5, 7], [9, 42, 1], [8, 5, 7]], dtype=np.uint32)[..., None]
    ids = st.ids_from_segmentation(data, labels, paths)
    b5, b7 = block_id(0, 0, 1, 3), block_id(1, 1, 2, 3)
    assert ids.dtype == np.int32 and ids.tolist() == [[-1, b5, b7], [-1, -1, -1], [-1, b5, b7]]
    assert st.ids_from_segmentation(np.zeros((2, 2), np.uint32), {}, paths).tolist() == [[-1, -1], [-1, -1]]


def test_cube_mesh_faces_are_outward_and_fully_uv_mapped() -> None:
    points, counts, indices, uv = st.cube_mesh()
    assert points.shape == (24, 3) and counts.tolist() == [4] * 6 and indices.tolist() == list(range(24))
    assert np.allclose(np.abs(points), 0.5)
    for f in range(6):
        quad = points[4 * f:4 * f + 4]
        normal = np.cross(quad[1] - quad[0], quad[2] - quad[1])
        assert np.dot(normal, quad.mean(axis=0)) > 0  # counter-clockwise seen from outside
        assert uv[4 * f:4 * f + 4].tolist() == [[0, 0], [1, 0], [1, 1], [0, 1]]


def test_texture_files_carry_the_darker_border(tmp_path) -> None:
    files = write_textures(tmp_path)
    assert [p.name for p in files] == [f"block_edge_texture_{n}.png" for n in range(materials.PALETTE_SIZE)]
    img = np.asarray(Image.open(files[0]).convert("RGB"), dtype=np.float64)
    assert img.shape == (256, 256, 3)
    border, inner = img[:12].reshape(-1, 3).mean(axis=0), img[12:-12, 12:-12].reshape(-1, 3).mean(axis=0)
    assert np.allclose(border, 0.8 * inner, rtol=0.05)  # 0.8 x the texture's mean, as the benchmark paints it
    assert (img[:12] == img[0, 0]).all()


class _FakeAnnotator:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def attach(self, products: list) -> None:
        self.log.append(f"attach {self.name}")

    def detach(self) -> None:
        self.log.append(f"detach {self.name}")

    def get_data(self):  # noqa: ANN201
        if self.name == "rgb":
            return np.zeros((4, 4, 4), np.uint8)
        return {"data": np.zeros((4, 4), np.uint32), "info": {"idToLabels": {}}}


@pytest.fixture
def fake_isaac(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Stand-ins for the isaacsim / omni modules, recording what the renderer does with them."""
    import sys
    import types

    import data_gen.render.isaacsim_backend as backend

    log: list[str] = []
    state = {"fail_step": False}

    class Product:
        def destroy(self) -> None:
            log.append("destroy product")

    def step(rt_subframes: int) -> None:
        if state["fail_step"]:
            raise RuntimeError("simulated capture failure")

    rep = types.SimpleNamespace(
        orchestrator=types.SimpleNamespace(set_capture_on_play=lambda flag: None, step=step),
        create=types.SimpleNamespace(render_product=lambda path, res: Product()),
        AnnotatorRegistry=types.SimpleNamespace(
            get_annotator=lambda name, init_params=None: _FakeAnnotator("rgb" if name == "rgb" else "seg", log)),
    )
    usd = types.SimpleNamespace(get_context=lambda: types.SimpleNamespace(get_stage=lambda: None))
    omni = types.ModuleType("omni")
    replicator = types.ModuleType("omni.replicator")
    core = types.ModuleType("omni.replicator.core")
    core.__dict__.update(vars(rep))
    replicator.core = core
    usd_mod = types.ModuleType("omni.usd")
    usd_mod.get_context = usd.get_context
    omni.replicator, omni.usd = replicator, usd_mod
    isaacsim = types.ModuleType("isaacsim")
    isaacsim.SimulationApp = lambda config: types.SimpleNamespace(update=lambda: None)
    for name, mod in {"isaacsim": isaacsim, "omni": omni, "omni.replicator": replicator,
                      "omni.replicator.core": core, "omni.usd": usd_mod}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(backend, "_APP", None)
    monkeypatch.setattr(backend, "_populate", lambda stage, spec, textures: log.append("populate"))
    monkeypatch.setattr(st, "ids_from_segmentation", lambda data, labels, ids: np.zeros((4, 4), np.int64))
    return types.SimpleNamespace(log=log, state=state)


def test_annotators_and_render_product_are_released_on_failure_too(fake_isaac) -> None:  # noqa: ANN001
    from data_gen.render.base import RenderError

    with IsaacSimRenderer(settle_updates=0) as renderer:
        result = renderer.render(_spec())
        assert result.rgb.shape == (4, 4, 3)
        assert fake_isaac.log[-3:] == ["detach rgb", "detach seg", "destroy product"]
        fake_isaac.log.clear()
        fake_isaac.state["fail_step"] = True
        with pytest.raises(RenderError, match="simulated capture failure"):
            renderer.render(_spec())
        assert fake_isaac.log == ["populate", "attach rgb", "attach seg", "detach rgb", "detach seg",
                                  "destroy product"]


def test_texture_folder_is_owned_and_removed_by_close(fake_isaac) -> None:  # noqa: ANN001
    from data_gen.render.base import RenderError

    renderer = IsaacSimRenderer(settle_updates=0)
    folder = renderer._textures[0].parent
    assert folder.is_dir() and len(list(folder.glob("block_edge_texture_*.png"))) == len(renderer._textures)
    renderer.close()
    assert not folder.exists()
    renderer.close()  # idempotent
    with pytest.raises(RenderError, match="closed"):
        renderer.render(_spec())
