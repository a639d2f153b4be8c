"""The pure scene description the Isaac Sim backend builds its USD stage from (no Isaac imports).

Everything that decides a number lives here and is tested without Isaac: prim paths, transforms,
the camera's intrinsics (benchmark-spec section 3.3: 20.955 mm apertures, focal length from the half
field of view, clipping 0.05..50000) and world matrix, the lights of section 3.4, per-block material
choice (the same seeded draw as the Mitsuba backend) and the prim path -> block id map that turns a
Replicator ``instance_id_segmentation`` buffer into the project's block ids.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from data_gen.camera import APERTURE_MM, BLOCK_SIZE, Camera, block_center
from data_gen.render import materials
from data_gen.render.base import SceneSpec
from data_gen.render.mitsuba_backend import check_spec
from data_gen.visibility import block_id

WORLD = "/World"
BLOCKS_ROOT = "/World/Blocks"
LOOKS_ROOT = "/World/Looks"
CAMERA_PATH = "/World/Camera"
GROUND_PATH = "/World/Ground"
ENVIRONMENT_PATH = "/World/Environment"
CLIPPING_RANGE = (0.05, 50000.0)
SEMANTIC_LABEL = "block"
CAN_RADIUS = 0.045
RT_SUBFRAMES = 32
GROUND_HALF_M = 40.0


@dataclass(frozen=True)
class ObjectPrim:
    path: str
    block: tuple[int, int, int]
    block_id: int
    kind: str
    """USD schema: ``Cube`` (size 1, scaled to 0.1 m) or ``Cylinder`` (axis Z)."""
    translate: tuple[float, float, float]
    scale: tuple[float, float, float]
    radius: float
    height: float
    material: str


@dataclass(frozen=True)
class LightPrim:
    path: str
    kind: str
    """``DomeLight`` or ``DistantLight``."""
    intensity: float
    color: tuple[float, float, float]
    rotate_xyz: tuple[float, float, float]


@dataclass(frozen=True)
class CameraPrim:
    path: str
    focal_length_mm: float
    horizontal_aperture_mm: float
    vertical_aperture_mm: float
    clipping_range: tuple[float, float]
    resolution: tuple[int, int]
    world_matrix: tuple[tuple[float, ...], ...]
    """4x4 row-major, column-vector convention (translation in the last column); USD wants its transpose."""


@dataclass(frozen=True)
class StageSpec:
    objects: tuple[ObjectPrim, ...]
    lights: tuple[LightPrim, ...]
    camera: CameraPrim
    materials: tuple[str, ...]
    """Material prim paths; index n uses block texture n of :func:`materials.block_palette` (or a can label)."""
    ground_rgb: tuple[float, float, float]
    mat_rgb: tuple[float, float, float] | None
    mat_half_m: float
    environment_usd: str | None


BENCHMARK_LIGHTS: tuple[LightPrim, ...] = (
    LightPrim("/World/DomeLight", "DomeLight", 400.0, (0.9, 0.95, 1.0), (0.0, 0.0, 0.0)),
    LightPrim("/World/KeyLight", "DistantLight", 2500.0, (1.0, 0.98, 0.95), (-40.0, 45.0, 0.0)),
    LightPrim("/World/FillLight", "DistantLight", 800.0, (0.95, 0.97, 1.0), (-30.0, -135.0, 0.0)),
)
"""Dome, key and fill lights with the benchmark's intensities, colours and rotateXYZ (section 3.4)."""


def prim_path(i: int, j: int, k: int) -> str:
    return f"{BLOCKS_ROOT}/block_{i}_{j}_{k}"


def camera_prim(camera: Camera) -> CameraPrim:
    """USD camera with the benchmark intrinsics; looks down its local -Z with +Y up, as USD cameras do."""
    f, r, u = camera.basis()
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = r, u, -f, camera.position
    return CameraPrim(
        CAMERA_PATH, camera.focal_mm, APERTURE_MM, APERTURE_MM, CLIPPING_RANGE,
        (camera.resolution, camera.resolution), tuple(tuple(float(x) for x in row) for row in m),
    )


def _objects(spec: SceneSpec, rows: int, cols: int) -> tuple[ObjectPrim, ...]:
    blocks = [(i, j, k) for i, row in enumerate(spec.height_map) for j, h in enumerate(row) for k in range(int(h))]
    choice = materials.choose_block_textures(np.random.default_rng(spec.seed), len(blocks))
    out = []
    for (i, j, k), m in zip(blocks, choice, strict=True):
        c = tuple(float(x) for x in block_center(i, j, k, rows, cols))
        if spec.object_type == "cube":
            out.append(ObjectPrim(prim_path(i, j, k), (i, j, k), block_id(i, j, k, cols), "Cube", c,
                                  (BLOCK_SIZE, BLOCK_SIZE, BLOCK_SIZE), 0.0, BLOCK_SIZE, f"{LOOKS_ROOT}/wood{m}"))
        else:
            out.append(ObjectPrim(prim_path(i, j, k), (i, j, k), block_id(i, j, k, cols), "Cylinder", c,
                                  (1.0, 1.0, 1.0), CAN_RADIUS, BLOCK_SIZE, f"{LOOKS_ROOT}/label{m % 4}"))
    return tuple(out)


def build_stage_spec(spec: SceneSpec, environment_usd: str | None = None) -> StageSpec:
    """The stage for one view; errors name the bad field and list what would be right."""
    rows, cols = check_spec(spec)  # the same checks as the Mitsuba backend (pure; no Mitsuba import)
    env = materials.get_environment(spec.environment)
    n_mat = materials.PALETTE_SIZE if spec.object_type == "cube" else 4
    stem = "wood" if spec.object_type == "cube" else "label"
    return StageSpec(
        objects=_objects(spec, rows, cols), lights=BENCHMARK_LIGHTS, camera=camera_prim(spec.camera),
        materials=tuple(f"{LOOKS_ROOT}/{stem}{n}" for n in range(n_mat)), ground_rgb=env.floor_rgb,
        mat_rgb=env.mat_rgb, mat_half_m=env.mat_half_m, environment_usd=environment_usd,
    )


def path_block_ids(stage: StageSpec) -> dict[str, int]:
    """Object prim path -> block id."""
    return {o.path: o.block_id for o in stage.objects}


def block_of_prim(label: str, paths: Mapping[str, int]) -> int:
    """Block id of a segmented prim path: the object prim itself or any prim below it; -1 otherwise."""
    path = label
    while path.startswith("/") and len(path) > 1:
        if path in paths:
            return paths[path]
        path = path.rsplit("/", 1)[0]
    return -1


def ids_from_segmentation(
    data: np.ndarray, id_to_labels: Mapping[str | int, str], paths: Mapping[str, int]
) -> np.ndarray:
    """Replicator ``instance_id_segmentation`` (uint ids + ``idToLabels``) -> (H, W) int32 block ids, -1 elsewhere."""
    data = np.asarray(data)
    if data.ndim == 3:  # (H, W, 1)
        data = data[..., 0]
    lut_keys = np.array(sorted(int(k) for k in id_to_labels), dtype=np.int64)
    lut_vals = np.array([block_of_prim(str(id_to_labels.get(str(k), id_to_labels.get(k, ""))), paths)
                         for k in lut_keys], dtype=np.int32)
    flat = data.astype(np.int64).ravel()
    if lut_keys.size == 0:
        return np.full(data.shape, -1, dtype=np.int32)
    pos = np.clip(np.searchsorted(lut_keys, flat), 0, lut_keys.size - 1)
    out = np.where(lut_keys[pos] == flat, lut_vals[pos], -1)
    return out.reshape(data.shape).astype(np.int32)


def distant_light_direction(rotate_xyz: tuple[float, float, float]) -> np.ndarray:
    """Direction a USD DistantLight travels (its local -Z) after ``xformOp:rotateXYZ`` (X first, then Y, then Z)."""
    ax, ay, az = (math.radians(a) for a in rotate_xyz)
    rx = np.array([[1, 0, 0], [0, math.cos(ax), -math.sin(ax)], [0, math.sin(ax), math.cos(ax)]])
    ry = np.array([[math.cos(ay), 0, math.sin(ay)], [0, 1, 0], [-math.sin(ay), 0, math.cos(ay)]])
    rz = np.array([[math.cos(az), -math.sin(az), 0], [math.sin(az), math.cos(az), 0], [0, 0, 1]])
    return rz @ ry @ rx @ np.array([0.0, 0.0, -1.0])


def cube_mesh() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unit cube centred at the origin as 6 quads with 24 vertices, each face UV-mapped to the full texture
    (0,0),(1,0),(1,1),(0,1) like the benchmark's mesh: (points (24,3), counts (6,), indices (24,), st (24,2))."""
    points = []
    for axis in range(3):
        for sign in (1.0, -1.0):
            n = np.zeros(3)
            n[axis] = sign
            a = np.zeros(3)
            a[(axis + 1) % 3] = 1.0
            b = np.cross(n, a)  # a x b = n, so (a, b) walks the face counter-clockwise seen from outside
            for du, dv in ((-1, -1), (1, -1), (1, 1), (-1, 1)):
                points.append(0.5 * (n + du * a + dv * b))
    st = np.tile(np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]), (6, 1))
    return np.array(points), np.full(6, 4), np.arange(24), st
