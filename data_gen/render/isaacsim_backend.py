"""Isaac Sim backend (RTX): builds the USD stage of ``isaac_stage.build_stage_spec`` and reads Replicator annotators.

Needs an NVIDIA RTX GPU and Isaac Sim from NVIDIA's package index:
``pip install -e '.[isaacsim]' --extra-index-url https://pypi.nvidia.com``. Everything Isaac is imported
lazily, inside the constructor and methods. Only one ``SimulationApp`` can exist per process, so the
first renderer starts it and later ones reuse it. This module cannot run on CPU-only machines; the scene
description it draws is tested on its own (tests/test_render_isaac.py).

The texture files live in a temporary folder the renderer owns: ``close()`` (or leaving a ``with`` block)
removes it. Each ``render()`` detaches its annotators and destroys its render product whether the capture
succeeded or not.
"""

from __future__ import annotations

import io
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from data_gen.render import isaac_stage as st
from data_gen.render import materials
from data_gen.render.base import RenderError, RenderResult, SceneSpec
from spatialiq_train.core.io import atomic_write_bytes

log = logging.getLogger(__name__)

MISSING_MESSAGE = (
    "the Isaac Sim renderer needs an NVIDIA RTX GPU and the isaacsim package from NVIDIA's package index: "
    "pip install -e '.[isaacsim]' --extra-index-url https://pypi.nvidia.com"
)
CAN_COLORS = ((0.72, 0.18, 0.14), (0.20, 0.42, 0.70), (0.85, 0.62, 0.15), (0.25, 0.55, 0.30))
_APP: Any = None


def _start_app(headless: bool, path_tracing: bool, resolution: int) -> Any:
    global _APP
    if _APP is None:
        from isaacsim import SimulationApp

        _APP = SimulationApp({"headless": headless, "width": resolution, "height": resolution,
                              "renderer": "PathTracing" if path_tracing else "RayTracedLighting"})
    return _APP


def write_textures(folder: Path) -> list[Path]:
    """Write the block texture palette as ``block_edge_texture_<n>.png`` (as the benchmark names them)."""
    from PIL import Image

    out = []
    for n, tex in enumerate(materials.block_palette()):
        buf = io.BytesIO()
        Image.fromarray(np.round(tex * 255).astype(np.uint8)).save(buf, format="PNG")
        path = folder / f"block_edge_texture_{n}.png"
        atomic_write_bytes(path, buf.getvalue())
        out.append(path)
    return out


class IsaacSimRenderer:
    """RTX renderer with the benchmark's lights and camera; options: ``headless``, ``rt_subframes``,
    ``path_tracing``, ``environment_usd`` (a USD to reference under /World/Environment instead of the floor),
    ``settle_updates`` (app updates after building a stage, so textures are loaded before the capture).

    Call ``close()`` when done (or use it as a context manager) to remove its texture folder."""

    name = "isaacsim"
    num_environments = len(materials.ENVIRONMENTS)
    """How many ``SceneSpec.environment`` presets this backend draws (the generator picks one per structure)."""

    def __init__(self, headless: bool = True, rt_subframes: int = st.RT_SUBFRAMES, path_tracing: bool = False,
                 environment_usd: str | None = None, resolution: int = 512, settle_updates: int = 10) -> None:
        try:
            import isaacsim  # noqa: F401
        except ImportError as exc:
            raise ImportError(MISSING_MESSAGE) from exc
        self._app = _start_app(headless, path_tracing, resolution)
        import omni.replicator.core as rep
        import omni.usd

        self._rep, self._usd = rep, omni.usd
        self.rt_subframes, self.environment_usd = int(rt_subframes), environment_usd
        self.settle_updates = int(settle_updates)
        rep.orchestrator.set_capture_on_play(False)
        self._texture_dir: tempfile.TemporaryDirectory[str] | None = tempfile.TemporaryDirectory(
            prefix="spatialiq_textures_")
        self._textures = write_textures(Path(self._texture_dir.name))

    def close(self) -> None:
        """Remove the texture folder; idempotent. The shared SimulationApp stays up for later renderers."""
        if self._texture_dir is not None:
            self._texture_dir.cleanup()
            self._texture_dir = None

    def __enter__(self) -> IsaacSimRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def render(self, spec: SceneSpec) -> RenderResult:
        if self._texture_dir is None:
            raise RenderError("this IsaacSimRenderer was closed; build a new one")
        stage_spec = st.build_stage_spec(spec, self.environment_usd)
        rep = self._rep
        product, attached = None, []
        try:
            _populate(self._usd.get_context().get_stage(), stage_spec, self._textures)
            for _ in range(self.settle_updates):  # let textures and materials load before capturing
                self._app.update()
            product = rep.create.render_product(st.CAMERA_PATH, stage_spec.camera.resolution)
            rgb = rep.AnnotatorRegistry.get_annotator("rgb")
            seg = rep.AnnotatorRegistry.get_annotator("instance_id_segmentation", init_params={"colorize": False})
            for annotator in (rgb, seg):
                annotator.attach([product])
                attached.append(annotator)
            rep.orchestrator.step(rt_subframes=self.rt_subframes)
            rgba = np.asarray(rgb.get_data())
            seg_out = seg.get_data()
            ids = st.ids_from_segmentation(seg_out["data"], seg_out["info"]["idToLabels"],
                                           st.path_block_ids(stage_spec))
        except Exception as exc:  # noqa: BLE001 - re-raised with the scene named
            raise RenderError(f"Isaac Sim render failed for camera at {spec.camera.position}, "
                              f"height_map={[list(r) for r in spec.height_map]}: {exc}") from exc
        finally:
            _release(attached, product)
        return RenderResult(rgb=np.ascontiguousarray(rgba[..., :3]).astype(np.uint8), instance_ids=ids)


def _release(annotators: list[Any], product: Any) -> None:
    """Detach the annotators and destroy the render product; a failure here is logged, never masks the render's."""
    for annotator in annotators:
        try:
            annotator.detach()
        except Exception:  # noqa: BLE001 - cleanup must reach the product too
            log.warning("could not detach an Isaac Sim annotator", exc_info=True)
    if product is not None:
        try:
            product.destroy()
        except Exception:  # noqa: BLE001
            log.warning("could not destroy an Isaac Sim render product", exc_info=True)


def _material(stage: Any, path: str, rgb: tuple[float, ...], texture: Path | None = None) -> Any:
    from pxr import Gf, Sdf, UsdShade

    mat = UsdShade.Material.Define(stage, path)
    shader = UsdShade.Shader.Define(stage, f"{path}/Surface")
    shader.CreateIdAttr("UsdPreviewSurface")
    shader.CreateInput("roughness", Sdf.ValueTypeNames.Float).Set(0.3)
    shader.CreateInput("metallic", Sdf.ValueTypeNames.Float).Set(0.0)
    shader.CreateInput("specular", Sdf.ValueTypeNames.Float).Set(0.5)
    color = shader.CreateInput("diffuseColor", Sdf.ValueTypeNames.Color3f)
    if texture is None:
        color.Set(Gf.Vec3f(*(float(c) for c in rgb)))
    else:
        reader = UsdShade.Shader.Define(stage, f"{path}/st")
        reader.CreateIdAttr("UsdPrimvarReader_float2")
        reader.CreateInput("varname", Sdf.ValueTypeNames.Token).Set("st")
        tex = UsdShade.Shader.Define(stage, f"{path}/Texture")
        tex.CreateIdAttr("UsdUVTexture")
        tex.CreateInput("file", Sdf.ValueTypeNames.Asset).Set(str(texture))
        tex.CreateInput("sourceColorSpace", Sdf.ValueTypeNames.Token).Set("sRGB")
        tex.CreateInput("st", Sdf.ValueTypeNames.Float2).ConnectToSource(reader.ConnectableAPI(), "result")
        color.ConnectToSource(tex.ConnectableAPI(), "rgb")
    mat.CreateSurfaceOutput().ConnectToSource(shader.ConnectableAPI(), "surface")
    return mat


def _label(prim: Any) -> None:
    """Semantic class ``block`` on every object prim, as the benchmark does (Isaac 5: add_labels; 4.5: older)."""
    try:
        from isaacsim.core.utils.semantics import add_labels

        add_labels(prim, labels=[st.SEMANTIC_LABEL], instance_name="class")
    except ImportError:
        from isaacsim.core.utils.semantics import add_update_semantics

        add_update_semantics(prim, st.SEMANTIC_LABEL)


def _quad(stage: Any, path: str, half: float, z: float) -> Any:
    from pxr import UsdGeom

    mesh = UsdGeom.Mesh.Define(stage, path)
    mesh.CreatePointsAttr([(-half, -half, z), (half, -half, z), (half, half, z), (-half, half, z)])
    mesh.CreateFaceVertexCountsAttr([4])
    mesh.CreateFaceVertexIndicesAttr([0, 1, 2, 3])
    return mesh


def _populate(stage: Any, spec: st.StageSpec, textures: list[Path]) -> None:
    """Replace /World with the stage of ``spec``."""
    from pxr import Gf, Sdf, UsdGeom, UsdLux, UsdShade

    if stage.GetPrimAtPath(st.WORLD):
        stage.RemovePrim(st.WORLD)
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    UsdGeom.Xform.Define(stage, st.WORLD)
    if spec.environment_usd:
        stage.DefinePrim(st.ENVIRONMENT_PATH).GetReferences().AddReference(spec.environment_usd)
    else:
        ground = _quad(stage, st.GROUND_PATH, st.GROUND_HALF_M, -0.002)
        UsdShade.MaterialBindingAPI.Apply(ground.GetPrim()).Bind(_material(stage, f"{st.LOOKS_ROOT}/ground",
                                                                           spec.ground_rgb))
        if spec.mat_rgb is not None:
            mat = _quad(stage, f"{st.WORLD}/Surface", spec.mat_half_m, 0.0)
            UsdShade.MaterialBindingAPI.Apply(mat.GetPrim()).Bind(_material(stage, f"{st.LOOKS_ROOT}/surface",
                                                                            spec.mat_rgb))
    looks = {p: _material(stage, p, (0.6, 0.6, 0.6), textures[n]) if "wood" in p
             else _material(stage, p, CAN_COLORS[n % len(CAN_COLORS)]) for n, p in enumerate(spec.materials)}
    points, counts, indices, uv = st.cube_mesh()
    for obj in spec.objects:
        if obj.kind == "Cube":
            prim = UsdGeom.Mesh.Define(stage, obj.path)
            prim.CreatePointsAttr([tuple(p) for p in points.tolist()])
            prim.CreateFaceVertexCountsAttr(counts.tolist())
            prim.CreateFaceVertexIndicesAttr(indices.tolist())
            UsdGeom.PrimvarsAPI(prim).CreatePrimvar("st", Sdf.ValueTypeNames.TexCoord2fArray,
                                                    UsdGeom.Tokens.vertex).Set([tuple(t) for t in uv.tolist()])
        else:
            prim = UsdGeom.Cylinder.Define(stage, obj.path)
            prim.CreateRadiusAttr(obj.radius)
            prim.CreateHeightAttr(obj.height)
            prim.CreateAxisAttr(UsdGeom.Tokens.z)
        xf = UsdGeom.Xformable(prim)
        xf.AddTranslateOp().Set(Gf.Vec3d(*obj.translate))
        xf.AddScaleOp().Set(Gf.Vec3f(*obj.scale))
        UsdShade.MaterialBindingAPI.Apply(prim.GetPrim()).Bind(looks[obj.material])
        _label(prim.GetPrim())
    for light in spec.lights:
        lp = (UsdLux.DomeLight if light.kind == "DomeLight" else UsdLux.DistantLight).Define(stage, light.path)
        lp.CreateIntensityAttr(light.intensity)
        lp.CreateColorAttr(Gf.Vec3f(*light.color))
        UsdGeom.Xformable(lp).AddRotateXYZOp().Set(Gf.Vec3f(*light.rotate_xyz))
    cam = spec.camera
    camera = UsdGeom.Camera.Define(stage, cam.path)
    camera.CreateFocalLengthAttr(cam.focal_length_mm)
    camera.CreateHorizontalApertureAttr(cam.horizontal_aperture_mm)
    camera.CreateVerticalApertureAttr(cam.vertical_aperture_mm)
    camera.CreateClippingRangeAttr(Gf.Vec2f(*cam.clipping_range))
    UsdGeom.Xformable(camera).AddTransformOp().Set(Gf.Matrix4d(np.array(cam.world_matrix).T.tolist()))
