"""Benchmark cameras (benchmark-spec section 3): placement, intrinsics and pixel rays.

World frame: rows run along +x, columns along +y, z is up, the ground is z = 0. Cubes have
0.1 m edges and sit flush; block (i, j, k) has its centre at
``((i - (R-1)/2) * 0.1, (j - (C-1)/2) * 0.1, k * 0.1 + 0.05)``.

Every function here is pure; the reference generator's quirks (the 23.6 degree half-angle,
the framing box one block taller than the structure, the z multiplier that also scales the
target height) are reproduced on purpose, because the released ground truth depends on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spatialiq_train.core.views import LeafView

BLOCK_SIZE = 0.1
"""Cube edge and grid pitch in metres."""
RESOLUTION = 512
"""Benchmark image width and height in pixels."""
APERTURE_MM = 20.955
"""Horizontal and vertical aperture of the USD camera (square image)."""
BASE_FOCAL_MM = 50.0
BASE_HALF_FOV_DEG = math.degrees(math.atan(APERTURE_MM / (2 * BASE_FOCAL_MM)))
"""11.835 degrees; the fov multiplier scales this half-angle."""
_DIRECTION = np.array([-2.5, -2.3, 2.3]) / np.linalg.norm([-2.5, -2.3, 2.3])
_FRAMING_HALF_ANGLE_DEG = 23.6  # quirk: the full lens FOV used as a half-angle
_DISTANCE_FACTOR = 1.75 * 1.5
_CAMERA_Z_MULTIPLIER = 1.1
NEAR_CLIP = 0.05


@dataclass(frozen=True)
class Camera:
    """A pinhole camera looking at ``target`` with world-up +z and a square image."""

    position: tuple[float, float, float]
    target: tuple[float, float, float]
    half_fov_deg: float
    """Half of the (horizontal = vertical) field of view."""
    resolution: int = RESOLUTION

    @property
    def fov_deg(self) -> float:
        return 2 * self.half_fov_deg

    @property
    def focal_mm(self) -> float:
        """Focal length for the benchmark's 20.955 mm aperture."""
        return APERTURE_MM / (2 * math.tan(math.radians(self.half_fov_deg)))

    def basis(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(forward, right, up) unit vectors; right = forward x z, up = right x forward."""
        f = np.subtract(self.target, self.position).astype(np.float64)
        f /= np.linalg.norm(f)
        r = np.cross(f, [0.0, 0.0, 1.0])
        r /= np.linalg.norm(r)
        u = np.cross(r, f)
        return f, r, u


def block_center(i: int, j: int, k: int, rows: int, cols: int) -> np.ndarray:
    """World centre of block (row i, column j, layer k)."""
    return np.array([(i - (rows - 1) / 2) * BLOCK_SIZE, (j - (cols - 1) / 2) * BLOCK_SIZE, k * BLOCK_SIZE + 0.05])


def framing(rows: int, cols: int, layers: int) -> tuple[np.ndarray, float]:
    """(target, nominal distance term) for a structure of ``layers`` layers (section 3.2)."""
    top = layers * BLOCK_SIZE + BLOCK_SIZE  # quirk: one block taller than the structure
    extent = np.array([rows * BLOCK_SIZE, cols * BLOCK_SIZE, top])
    target = np.array([0.0, 0.0, top / 2])
    rho = max(0.5 * float(np.linalg.norm(extent)), 2 * BLOCK_SIZE)
    return target, rho / math.tan(math.radians(_FRAMING_HALF_ANGLE_DEG)) * _DISTANCE_FACTOR


def camera_position(rows: int, cols: int, layers: int, azimuth_deg: float, dist_mult: float = 1.0) -> np.ndarray:
    """Camera position for an azimuth (clockwise seen from +z) and a leaf distance multiplier."""
    target, dist = framing(rows, cols, layers)
    a, b = _DIRECTION[0] * dist, _DIRECTION[1] * dist
    t = math.radians(azimuth_deg)
    x, y = a * math.cos(t) + b * math.sin(t), -a * math.sin(t) + b * math.cos(t)
    nominal = np.array([target[0] + x, target[1] + y, _CAMERA_Z_MULTIPLIER * (target[2] + _DIRECTION[2] * dist)])
    return target + dist_mult * (nominal - target)


def nominal_camera(rows: int, cols: int, layers: int, azimuth_deg: float) -> Camera:
    """The nominal camera (distance multiplier 1, base lens) used by the analytic retention test."""
    target, _ = framing(rows, cols, layers)
    pos = camera_position(rows, cols, layers, azimuth_deg)
    return Camera(tuple(pos.tolist()), tuple(target.tolist()), BASE_HALF_FOV_DEG)


def leaf_camera(rows: int, cols: int, layers: int, leaf: LeafView, resolution: int = RESOLUTION) -> Camera:
    """The camera of one leaf view: azimuth base+offset, the leaf's lens and distance multiplier."""
    target, _ = framing(rows, cols, layers)
    pos = camera_position(rows, cols, layers, leaf.azimuth, leaf.dist)
    return Camera(tuple(pos.tolist()), tuple(target.tolist()), BASE_HALF_FOV_DEG * leaf.fov, resolution)


Window = tuple[int, int, int, int]
"""(row0, row1, col0, col1), half-open, of a rectangle of pixels."""


def pixel_ray_components(camera: Camera, window: Window | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unnormalised x, y and z ray-direction components (each (m,), row-major) through the pixel centres of
    ``window`` (default: the whole image): ``forward + x * right + y * up`` with image x, y in
    ``[-tan(half_fov), tan(half_fov)]``.

    The one place the pixel-ray arithmetic lives: :func:`pixel_rays` and the ray caster both use it, so
    their rays agree bit for bit.
    """
    n = camera.resolution
    r0, r1, c0, c1 = window if window is not None else (0, n, 0, n)
    f, r, u = camera.basis()
    s = np.tan(np.radians(camera.half_fov_deg))  # numpy's tan, as the ray caster always used: the truth depends on it
    coords = ((np.arange(n, dtype=np.float64) + 0.5) / n * 2.0 - 1.0) * s
    xs = coords[None, c0:c1]  # columns, left to right
    ys = -coords[r0:r1, None]  # rows, top to bottom
    x, y, z = ((f[a] + xs * r[a] + ys * u[a]).ravel() for a in range(3))
    return x, y, z


def unit_rays(components: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """(m, 3) unit directions from :func:`pixel_ray_components`."""
    d = np.stack(components, axis=1)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return d


def pixel_rays(camera: Camera) -> tuple[np.ndarray, np.ndarray]:
    """(origin (3,), unit directions (res*res, 3)) through pixel centres, row-major from the top-left.

    Image right is the camera's right vector and image up its up vector, as for a USD or Mitsuba
    camera built with look-at and no roll.
    """
    return np.asarray(camera.position, dtype=np.float64), unit_rays(pixel_ray_components(camera))
