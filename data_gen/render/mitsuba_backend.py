"""Mitsuba 3 backend: textured, edge-marked blocks (or cans) on a floor, soft light, an exact id pass.

Two passes per view (see ../shared/docs/notes/cpu-feasibility.md section 7):

* beauty: path tracer (``max_depth`` 3: direct light plus one bounce), ``spp`` passes of one independent
  sample per pixel with a box filter, averaged in float64 in pass order and converted to sRGB uint8. One
  sample per pixel per pass keeps every variant byte-deterministic (a multi-sample gaussian-filtered render
  splats atomically into neighbouring pixels, and under llvm that made rare pixels differ between runs).
  Blocks are diffuse (less noise at low spp than the benchmark's glossier preview surface), and the wood
  texture and its darker border carry the look;
* ids: the ``aov`` integrator's ``si:shape_index`` at 1 non-jittered sample per pixel centre with a box
  filter, so every pixel holds exactly one shape, mapped to the project's block ids.

A render Mitsuba cancels on SIGINT (it winds down and returns a partial image) raises
:class:`~data_gen.render.base.RenderInterrupted` instead of giving an image: an interrupted image is never written.

The scene is loaded with ``optimize=False`` so that blocks sharing a material are not merged.
Variants: ``scalar_rgb`` everywhere, ``llvm_ad_rgb`` when a libLLVM >= 19 is found (the system LLVM 15
crashes on the path tracer; Debian/Ubuntu package ``libllvm19``), ``cuda_ad_rgb`` on NVIDIA GPUs.
"""

from __future__ import annotations

import glob
import logging
import os
import re
from functools import lru_cache
from typing import Any

import numpy as np

from data_gen.camera import BLOCK_SIZE, NEAR_CLIP, Camera, block_center
from data_gen.render import materials
from data_gen.render.base import OBJECT_TYPES, RenderError, RenderInterrupted, RenderResult, SceneSpec
from data_gen.visibility import block_id

log = logging.getLogger(__name__)

MAX_HEIGHT = 4
CAN_RADIUS = 0.045
VARIANTS = ("scalar_rgb", "llvm_ad_rgb", "cuda_ad_rgb")
MIN_LLVM_MAJOR = 19
LLVM_APT_PACKAGE = "libllvm19"
_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib",
             "/usr/lib/llvm-*/lib", "/opt/homebrew/opt/llvm/lib", "/usr/local/opt/llvm/lib")
_SHAPE_ID = re.compile(r"^(?:b|c|t)_(\d+)_(\d+)_(\d+)$")


def _llvm_major(path: str) -> int:
    m = re.search(r"libLLVM(?:-|\.so\.|\.)(\d+)", os.path.basename(path))
    return int(m.group(1)) if m else -1


def find_libllvm(min_major: int = MIN_LLVM_MAJOR) -> str | None:
    """Path of the newest libLLVM with major version >= ``min_major`` in the usual library dirs, or None.

    ``DRJIT_LIBLLVM_PATH`` wins when it is set and names an existing file.
    """
    env = os.environ.get("DRJIT_LIBLLVM_PATH")
    if env and os.path.isfile(env):
        return env
    found: list[tuple[int, str]] = []
    for pattern in _LIB_DIRS:
        for d in glob.glob(pattern):
            for lib in glob.glob(os.path.join(d, "libLLVM*.so*")) + glob.glob(os.path.join(d, "libLLVM*.dylib")):
                major = _llvm_major(lib)
                if major >= min_major and os.path.isfile(lib):
                    found.append((major, lib))
    return max(found)[1] if found else None


def resolve_variant(requested: str = "auto") -> str:
    """Pick a Mitsuba variant; must run before Dr.Jit first touches its LLVM backend.

    ``auto`` prefers cuda > llvm > scalar by availability and logs a warning when it falls back to scalar
    because no libLLVM >= 19 is installed. An explicit variant that cannot run raises RuntimeError.
    """
    if requested not in ("auto", *VARIANTS):
        raise ValueError(f"unknown Mitsuba variant {requested!r}; valid: auto, {', '.join(VARIANTS)}")
    llvm_path = find_libllvm() if requested in ("auto", "llvm_ad_rgb") else None
    if llvm_path:
        os.environ["DRJIT_LIBLLVM_PATH"] = llvm_path
    import drjit as dr
    import mitsuba as mi

    def has(variant: str, backend: Any) -> bool:
        return variant in mi.variants() and bool(dr.has_backend(backend))

    if requested == "scalar_rgb":
        return requested
    if requested in ("auto", "cuda_ad_rgb") and has("cuda_ad_rgb", dr.JitBackend.CUDA):
        return "cuda_ad_rgb"
    if requested == "cuda_ad_rgb":
        raise RuntimeError("variant cuda_ad_rgb needs an NVIDIA GPU with a CUDA driver; none was found")
    if llvm_path and has("llvm_ad_rgb", dr.JitBackend.LLVM):
        return "llvm_ad_rgb"
    msg = (f"llvm_ad_rgb needs libLLVM >= {MIN_LLVM_MAJOR} (apt-get install {LLVM_APT_PACKAGE}, or set "
           "DRJIT_LIBLLVM_PATH); the system LLVM 15 crashes on the path tracer")
    if requested == "llvm_ad_rgb":
        raise RuntimeError(msg)
    log.warning("%s; falling back to scalar_rgb (slower)", msg)
    return "scalar_rgb"


def check_spec(spec: SceneSpec) -> tuple[int, int]:
    """Validate a scene spec for this backend; returns (rows, cols). Errors name the bad field."""
    if spec.object_type not in OBJECT_TYPES:
        raise ValueError(f"unknown object_type {spec.object_type!r}; valid: {', '.join(OBJECT_TYPES)}")
    materials.get_environment(spec.environment)
    hm = spec.height_map
    rows = len(hm)
    cols = len(hm[0]) if rows else 0
    if rows == 0 or cols == 0 or any(len(r) != cols for r in hm):
        raise ValueError(f"height_map must be a non-empty rectangular grid, got row lengths {[len(r) for r in hm]}")
    for i, row in enumerate(hm):
        for j, h in enumerate(row):
            if not isinstance(h, int | np.integer) or not 0 <= h <= MAX_HEIGHT:
                raise ValueError(f"height_map[{i}][{j}] = {h!r}; must be an integer in 0..{MAX_HEIGHT}")
    return rows, cols


def _blocks(hm: tuple[tuple[int, ...], ...]) -> list[tuple[int, int, int]]:
    return [(i, j, k) for i, row in enumerate(hm) for j, h in enumerate(row) for k in range(int(h))]


@lru_cache(maxsize=64)
def _linear_texture(kind: str, index: int) -> np.ndarray:
    """Linear-RGB copy of a fixed texture (``block``, ``floor`` or ``can`` number ``index``), cached."""
    if kind == "block":
        srgb = materials.block_palette()[index]
    elif kind == "floor":
        srgb = materials.environment_floor(index)
    else:
        srgb = materials.can_label_texture(np.random.default_rng(4099 + index))
    lin = np.ascontiguousarray(materials.srgb_to_linear(srgb))
    lin.setflags(write=False)
    return lin


def _bitmap_texture(mi: Any, kind: str, index: int, **extra: Any) -> dict[str, Any]:
    bitmap = mi.Bitmap(np.array(_linear_texture(kind, index)))
    return {"type": "bitmap", "bitmap": bitmap, "raw": True, "filter_type": "bilinear", **extra}


def _sensor(mi: Any, camera: Camera, spp: int, exact_ids: bool) -> dict[str, Any]:
    T = mi.ScalarTransform4f
    sensor = {
        "type": "perspective", "fov": camera.fov_deg, "fov_axis": "x", "near_clip": NEAR_CLIP, "far_clip": 1000.0,
        "to_world": T().look_at(origin=list(camera.position), target=list(camera.target), up=[0, 0, 1]),
        "film": {"type": "hdrfilm", "width": camera.resolution, "height": camera.resolution, "pixel_format": "rgb",
                 "rfilter": {"type": "box"}},
    }
    # Box filter and one sample per pixel per pass: every pixel is written by exactly one lane, so the image
    # does not depend on the order in which threads splat (a gaussian filter's atomic splats into neighbouring
    # pixels made llvm renders differ by one level in rare pixels between runs).
    sensor["sampler"] = ({"type": "stratified", "sample_count": 1, "jitter": False} if exact_ids
                         else {"type": "independent", "sample_count": 1})
    return sensor


def _object_shapes(mi: Any, spec: SceneSpec, rows: int, cols: int, beauty: bool) -> dict[str, Any]:
    """Cubes (``b_i_j_k``) or cans (side ``c_i_j_k`` + top cap ``t_i_j_k``) with seeded per-block materials."""
    T = mi.ScalarTransform4f
    blocks = _blocks(spec.height_map)
    choice = materials.choose_block_textures(np.random.default_rng(spec.seed), len(blocks))
    out: dict[str, Any] = {}
    for (i, j, k), m in zip(blocks, choice, strict=True):
        c = block_center(i, j, k, rows, cols)
        if spec.object_type == "cube":
            out[f"b_{i}_{j}_{k}"] = {"type": "cube", "to_world": T().translate(c.tolist()).scale(BLOCK_SIZE / 2)}
            if beauty:
                out[f"b_{i}_{j}_{k}"]["bsdf"] = {"type": "ref", "id": f"wood{m}"}
        else:
            lo, hi = [c[0], c[1], c[2] - BLOCK_SIZE / 2], [c[0], c[1], c[2] + BLOCK_SIZE / 2]
            out[f"c_{i}_{j}_{k}"] = {"type": "cylinder", "p0": lo, "p1": hi, "radius": CAN_RADIUS}
            out[f"t_{i}_{j}_{k}"] = {"type": "disk", "to_world": T().translate(hi).scale(CAN_RADIUS)}
            if beauty:
                out[f"c_{i}_{j}_{k}"]["bsdf"] = {"type": "ref", "id": f"label{m % 4}"}
                out[f"t_{i}_{j}_{k}"]["bsdf"] = {"type": "ref", "id": "tin"}
    return out


def _materials(mi: Any, spec: SceneSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec.object_type == "cube":
        for n in range(materials.PALETTE_SIZE):
            out[f"wood{n}"] = {"type": "diffuse", "reflectance": _bitmap_texture(mi, "block", n)}
    else:
        for n in range(4):
            label = _bitmap_texture(mi, "can", n)
            out[f"label{n}"] = {"type": "diffuse", "reflectance": label}
        out["tin"] = {"type": "principled", "base_color": {"type": "rgb", "value": [0.55, 0.56, 0.58]},
                      "roughness": 0.45, "metallic": 0.6}
    return out


def _environment(mi: Any, spec: SceneSpec, beauty: bool) -> dict[str, Any]:
    """Floor, optional surface under the structure, sky and key light of preset ``spec.environment``."""
    T = mi.ScalarTransform4f
    env = materials.get_environment(spec.environment)
    half = 40.0
    floor_xf = T().translate([0, 0, -0.002]).scale([half, half, 1])
    out: dict[str, Any] = {"floor": {"type": "rectangle", "to_world": floor_xf}}
    if env.mat_rgb is not None:
        out["mat"] = {"type": "rectangle", "to_world": T().scale([env.mat_half_m, env.mat_half_m, 1])}
    if not beauty:
        return out
    floor_tex = _bitmap_texture(mi, "floor", int(spec.environment),
                                to_uv=T().scale([2 * half / env.floor_tile_m, 2 * half / env.floor_tile_m, 1]))
    out["floor"]["bsdf"] = {"type": "diffuse", "reflectance": floor_tex}
    if env.mat_rgb is not None:
        lin = materials.srgb_to_linear(np.array(env.mat_rgb)).tolist()
        out["mat"]["bsdf"] = {"type": "diffuse", "reflectance": {"type": "rgb", "value": lin}}
    out["sky"] = {"type": "constant", "radiance": {"type": "rgb", "value": list(env.sky_rgb)}}
    key = [env.key_irradiance * c for c in env.key_rgb]
    out["key"] = {"type": "directional", "direction": materials.key_light_direction(env).tolist(),
                  "irradiance": {"type": "rgb", "value": key}}
    return out


def scene_dict(mi: Any, spec: SceneSpec, spp: int, max_depth: int, beauty: bool = True) -> dict[str, Any]:
    """The Mitsuba scene dictionary of one view; ``beauty=False`` leaves out materials and lights."""
    rows, cols = check_spec(spec)
    d: dict[str, Any] = {"type": "scene"}
    if beauty:
        d["integrator"] = {"type": "path", "max_depth": max_depth}
        d.update(_materials(mi, spec))
    d["sensor"] = _sensor(mi, spec.camera, spp, exact_ids=not beauty)
    d.update(_environment(mi, spec, beauty))
    d.update(_object_shapes(mi, spec, rows, cols, beauty))
    return d


def shape_block_ids(shape_names: list[str], cols: int) -> np.ndarray:
    """Block id per shape name (``b_/c_/t_i_j_k``), -1 for floor, surface and anything else."""
    out = np.full(len(shape_names), -1, dtype=np.int32)
    for n, name in enumerate(shape_names):
        m = _SHAPE_ID.match(name)
        if m:
            out[n] = block_id(int(m.group(1)), int(m.group(2)), int(m.group(3)), cols)
    return out


def ids_from_shape_index(si: np.ndarray, index_values: np.ndarray, block_ids: np.ndarray) -> np.ndarray:
    """Per-pixel block ids from a shape_index AOV; values not in ``index_values`` (0 = miss) give -1."""
    idx = np.rint(np.asarray(si, dtype=np.float64)).astype(np.int64)
    order = np.argsort(index_values)
    keys, vals = np.asarray(index_values, dtype=np.int64)[order], np.asarray(block_ids, dtype=np.int32)[order]
    pos = np.clip(np.searchsorted(keys, idx), 0, max(len(keys) - 1, 0))
    hit = (keys[pos] == idx) if len(keys) else np.zeros(idx.shape, dtype=bool)
    return np.where(hit, vals[pos], -1).astype(np.int32)


class MitsubaRenderer:
    """The default renderer. Options: ``variant`` (auto|scalar_rgb|llvm_ad_rgb|cuda_ad_rgb), ``spp``,
    ``max_depth`` (path length; 3 = direct light plus one bounce), ``threads`` (None = all cores)."""

    name = "mitsuba"
    num_environments = len(materials.ENVIRONMENTS)
    """How many ``SceneSpec.environment`` presets this backend draws (the generator picks one per structure)."""

    def __init__(self, variant: str = "auto", spp: int = 8, max_depth: int = 3, threads: int | None = None) -> None:
        if spp < 1 or max_depth < 1:
            raise ValueError(f"spp and max_depth must be >= 1, got spp={spp}, max_depth={max_depth}")
        self.variant = resolve_variant(variant)
        self.spp, self.max_depth = int(spp), int(max_depth)
        import drjit as dr
        import mitsuba as mi

        self._mi, self._dr = mi, dr
        if threads is not None:
            dr.set_thread_count(int(threads))
        log.info("Mitsuba %s, variant %s, %d spp", mi.__version__, self.variant, self.spp)

    def _activate(self) -> Any:
        if self._mi.variant() != self.variant:
            self._mi.set_variant(self.variant)
        return self._mi

    def _load(self, spec: SceneSpec, beauty: bool) -> Any:
        mi = self._activate()
        return mi.load_dict(scene_dict(mi, spec, self.spp, self.max_depth, beauty=beauty), optimize=False)

    def _ids(self, scene: Any, spec: SceneSpec, cols: int) -> np.ndarray:
        mi, dr = self._mi, self._dr
        sensor = mi.load_dict(_sensor(mi, spec.camera, 1, exact_ids=True))
        integrator = mi.load_dict({"type": "aov", "aovs": "si:shape_index"})
        si = np.array(mi.render(scene, sensor=sensor, integrator=integrator, spp=1))[..., 0]
        _finished(integrator, spec)
        shapes = scene.shapes()
        if self.variant.startswith("scalar"):
            values = np.arange(1, len(shapes) + 1, dtype=np.int64)
        else:
            values = np.array(dr.reinterpret_array(mi.UInt32, scene.shapes_dr()), dtype=np.int64)
        return ids_from_shape_index(si, values, shape_block_ids([s.id() for s in shapes], cols))

    def _beauty(self, scene: Any, spec: SceneSpec) -> np.ndarray:
        """``spp`` one-sample passes with their own seeds, averaged in a fixed order (deterministic everywhere)."""
        total: np.ndarray | None = None
        for p in range(self.spp):
            seed = (int(spec.seed) * self.spp + p) & 0xFFFFFFFF
            img = np.array(self._mi.render(scene, seed=seed, spp=1), dtype=np.float64)
            _finished(scene.integrator(), spec)
            total = img if total is None else total + img
        assert total is not None
        return total / self.spp

    def render_ids(self, spec: SceneSpec) -> np.ndarray:
        """The exact instance-id pass alone (cheap): (res, res) int32 block ids, -1 where no object."""
        _, cols = check_spec(spec)
        try:
            return self._ids(self._load(spec, beauty=False), spec, cols)
        except Exception as exc:  # noqa: BLE001 - re-raised with the scene named
            raise RenderError(f"Mitsuba id pass failed for {_describe(spec)}: {exc}") from exc

    def render(self, spec: SceneSpec) -> RenderResult:
        _, cols = check_spec(spec)
        try:
            scene = self._load(spec, beauty=True)
            rgb = materials.linear_to_srgb8(self._beauty(scene, spec)[..., :3])
            ids = self._ids(scene, spec, cols)
        except Exception as exc:  # noqa: BLE001 - re-raised with the scene named
            raise RenderError(f"Mitsuba render failed for {_describe(spec)}: {exc}") from exc
        return RenderResult(rgb=rgb, instance_ids=ids)


def _finished(integrator: Any, spec: SceneSpec) -> None:
    """Raise RenderInterrupted when ``integrator``'s last render was cancelled. Mitsuba's own SIGINT handler (scalar
    variants) cancels a render, returns the partial image and passes the signal on to the previous handler, which
    in a background job is "ignore": without this check the partial image would be written as a finished one."""
    if integrator.should_stop():
        raise RenderInterrupted(f"the render of {_describe(spec)} was interrupted; its partial image is not kept")


def _describe(spec: SceneSpec) -> str:
    c = spec.camera
    return (f"scene (object_type={spec.object_type}, environment={spec.environment}, seed={spec.seed}, "
            f"height_map={[list(r) for r in spec.height_map]}, camera at {tuple(round(x, 4) for x in c.position)})")
