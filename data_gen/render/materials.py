"""Procedural textures and environment presets for the renderers (pure numpy, seeded).

Textures are float32 arrays in sRGB space with values in [0, 1] and shape (H, W, 3); a backend
converts them to linear with :func:`srgb_to_linear`. The benchmark's blocks carry edge-marked
textures: every texture image gets a border of 5% of its side painted in 0.8 x its mean RGB
(benchmark-spec section 3.4). :func:`block_palette` plays the role of the benchmark's texture
folder (a fixed set of light birch-wood looks); each block then picks one at random.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

BLOCK_TEXTURE_SIZE = 256
BORDER_FRACTION = 0.05
BORDER_DARKEN = 0.8
PALETTE_SIZE = 8
FLOOR_TEXTURE_SIZE = 512

RGB = tuple[float, float, float]


@dataclass(frozen=True)
class Environment:
    """One background/lighting preset; ``SceneSpec.environment`` indexes :data:`ENVIRONMENTS`."""

    name: str
    floor: str
    """Floor texture kind: ``planks``, ``concrete``, ``tiles`` or ``carpet``."""
    floor_rgb: RGB
    """Base sRGB colour of the floor texture."""
    floor_tile_m: float
    """Side in metres that one floor texture image covers (the texture repeats)."""
    mat_rgb: RGB | None
    """sRGB colour of a square surface under the structure (the benchmark's grey surface), or None."""
    mat_half_m: float
    sky_rgb: RGB
    """Linear radiance of the constant environment emitter (soft light and background)."""
    key_azimuth_deg: float
    """Compass direction the key light comes from (0 = +x, 90 = +y)."""
    key_elevation_deg: float
    key_irradiance: float
    key_rgb: RGB


ENVIRONMENTS: tuple[Environment, ...] = (
    Environment("grey_surface_wood_floor", "planks", (0.62, 0.45, 0.30), 2.4, (0.50, 0.50, 0.50), 0.75,
                (0.80, 0.85, 0.92), 225.0, 55.0, 2.2, (1.0, 0.98, 0.95)),
    Environment("concrete_overcast", "concrete", (0.58, 0.58, 0.56), 3.0, None, 0.0,
                (1.00, 1.03, 1.10), 200.0, 65.0, 1.0, (1.0, 1.0, 1.0)),
    Environment("warm_tiles", "tiles", (0.78, 0.70, 0.58), 1.2, None, 0.0,
                (0.95, 0.86, 0.74), 300.0, 45.0, 2.0, (1.0, 0.93, 0.82)),
    Environment("dark_wood_blue_mat", "planks", (0.36, 0.24, 0.16), 2.4, (0.38, 0.44, 0.52), 0.6,
                (0.70, 0.78, 0.92), 160.0, 50.0, 2.4, (1.0, 0.97, 0.92)),
    Environment("green_carpet", "carpet", (0.30, 0.42, 0.30), 1.0, (0.62, 0.62, 0.60), 0.5,
                (0.88, 0.92, 0.88), 250.0, 70.0, 1.8, (1.0, 1.0, 0.96)),
)
"""At least four distinct backgrounds; index 0 imitates the released look (grey surface over a wooden floor)."""


def get_environment(index: int) -> Environment:
    """The preset for ``SceneSpec.environment``; a ValueError names the valid range."""
    if not isinstance(index, int | np.integer) or not 0 <= int(index) < len(ENVIRONMENTS):
        raise ValueError(f"environment must be an integer in 0..{len(ENVIRONMENTS) - 1}, got {index!r}")
    return ENVIRONMENTS[int(index)]


def key_light_direction(env: Environment) -> np.ndarray:
    """Unit vector the key light travels along (from the sky towards the ground)."""
    az, el = math.radians(env.key_azimuth_deg), math.radians(env.key_elevation_deg)
    return -np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    x = np.clip(np.asarray(x, dtype=np.float32), 0.0, 1.0)
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4).astype(np.float32)


def linear_to_srgb8(x: np.ndarray) -> np.ndarray:
    """Linear RGB (any float shape) -> sRGB uint8, clipped; deterministic."""
    x = np.clip(np.nan_to_num(np.asarray(x, dtype=np.float32)), 0.0, 1.0)
    y = np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055)
    return np.round(np.clip(y, 0.0, 1.0) * 255.0).astype(np.uint8)


def value_noise(rng: np.random.Generator, size: int, cells: int, aspect: float = 1.0) -> np.ndarray:
    """Smooth noise in [0, 1] on a (size, size) grid, tileable; ``aspect`` stretches cells along x."""
    nx = max(1, int(round(cells / aspect)))
    grid = rng.random((cells, nx))
    ys = np.arange(size) / size * cells
    xs = np.arange(size) / size * nx
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    ty, tx = ys - y0, xs - x0
    ty, tx = ty * ty * (3 - 2 * ty), tx * tx * (3 - 2 * tx)
    y1, x1 = (y0 + 1) % cells, (x0 + 1) % nx
    a = grid[y0][:, x0] * (1 - tx) + grid[y0][:, x1] * tx
    b = grid[y1][:, x0] * (1 - tx) + grid[y1][:, x1] * tx
    return (a * (1 - ty[:, None]) + b * ty[:, None]).astype(np.float32)


def add_border(tex: np.ndarray, fraction: float = BORDER_FRACTION, darken: float = BORDER_DARKEN) -> np.ndarray:
    """Paint a border of ``fraction`` x side in ``darken`` x the mean RGB (the benchmark's edge marking)."""
    out = np.array(tex, dtype=np.float32, copy=True)
    w = max(1, int(out.shape[0] * fraction))
    edge = darken * out.reshape(-1, 3).mean(axis=0)
    out[:w], out[-w:], out[:, :w], out[:, -w:] = edge, edge, edge, edge
    return out


def wood_texture(rng: np.random.Generator, size: int = BLOCK_TEXTURE_SIZE, base: RGB = (0.87, 0.75, 0.56),
                 grain: float = 0.28) -> np.ndarray:
    """A light wood look: growth rings distorted by smooth noise, fine fibres, then the dark border."""
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
    warp = value_noise(rng, size, 4) * 1.6 + value_noise(rng, size, 16) * 0.25
    cx, cy = rng.uniform(-2.0, -1.0), rng.uniform(0.0, 1.0)
    r = np.sqrt(((xs - cx) * 0.15) ** 2 + (ys - cy) ** 2) * rng.uniform(6.0, 10.0) + 0.5 * warp
    rings = (0.5 + 0.5 * np.cos(2 * math.pi * r)) ** 6
    fibres = value_noise(rng, size, 64, aspect=8.0) - 0.5
    shade = 1.0 - grain * rings + 0.06 * fibres
    tex = np.asarray(base, dtype=np.float32)[None, None, :] * shade[..., None]
    return add_border(np.clip(tex, 0.0, 1.0))


@lru_cache(maxsize=1)
def block_palette() -> tuple[np.ndarray, ...]:
    """The fixed set of block textures (like the benchmark's texture folder); read-only arrays."""
    rng = np.random.default_rng(20240611)
    birch = np.array([0.87, 0.76, 0.58])
    out = []
    for _ in range(PALETTE_SIZE):
        base = np.clip(birch * rng.uniform(0.92, 1.05) + rng.uniform(-0.02, 0.02, size=3), 0.0, 1.0)
        tex = wood_texture(rng, base=tuple(base.tolist()), grain=float(rng.uniform(0.12, 0.22)))
        tex.setflags(write=False)
        out.append(tex)
    return tuple(out)


def choose_block_textures(rng: np.random.Generator, n_blocks: int, palette_size: int = PALETTE_SIZE) -> np.ndarray:
    """Per-block palette index, drawn independently for every block (as the benchmark does)."""
    return rng.integers(0, palette_size, size=n_blocks)


def can_label_texture(rng: np.random.Generator, size: int = 256) -> np.ndarray:
    """A can label (u around the can, v along its height): a coloured band with stripes and a darker rim."""
    hue = rng.uniform(0.0, 1.0)
    main = np.array([0.5 + 0.4 * math.cos(2 * math.pi * (hue + s)) for s in (0.0, 1 / 3, 2 / 3)], dtype=np.float32)
    v = (np.arange(size, dtype=np.float32) + 0.5) / size
    tex = np.ones((size, size, 3), dtype=np.float32) * main
    band = (np.abs(v - 0.5) < 0.18)[:, None]
    tex = np.where(band[..., None], np.array([0.95, 0.93, 0.88], dtype=np.float32), tex)
    stripe = (np.abs(v - 0.5) < 0.03)[:, None] & np.ones((1, size), dtype=bool)
    tex = np.where(stripe[..., None], main * 0.5, tex)
    rim = ((v < 0.06) | (v > 0.94))[:, None]
    return np.where(rim[..., None], np.array([0.62, 0.62, 0.64], dtype=np.float32), tex).astype(np.float32)


def _planks(rng: np.random.Generator, size: int, base: np.ndarray) -> np.ndarray:
    n_planks = 8
    width = size // n_planks
    row = np.arange(size) // width
    tint = rng.uniform(0.82, 1.12, size=n_planks)[row]
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
    grain = value_noise(rng, size, 48, aspect=12.0)
    rings = (0.5 + 0.5 * np.cos(2 * math.pi * (ys * 40 + value_noise(rng, size, 6) * 3))) ** 3
    shade = tint[:, None] * (1.0 - 0.18 * rings - 0.12 * (grain - 0.5))
    seam = ((np.arange(size) % width) < 2)[:, None]
    offsets = rng.integers(0, size, size=n_planks)[row]
    joint = ((np.arange(size)[None, :] + offsets[:, None]) % (size // 2)) < 2
    shade = np.where(seam | joint, 0.45, shade)
    return base[None, None, :] * shade[..., None]


def floor_texture(kind: str, base: RGB, rng: np.random.Generator, size: int = FLOOR_TEXTURE_SIZE) -> np.ndarray:
    """A tileable floor texture of ``kind`` (see :class:`Environment`), sRGB float in [0, 1]."""
    b = np.asarray(base, dtype=np.float32)
    if kind == "planks":
        tex = _planks(rng, size, b)
    elif kind == "concrete":
        n = 0.25 * value_noise(rng, size, 8) + 0.35 * value_noise(rng, size, 64) + 0.4 * value_noise(rng, size, 256)
        tex = b[None, None, :] * (0.9 + 0.2 * n)[..., None]
    elif kind == "tiles":
        n_tiles, grout = 4, max(2, size // 128)
        idx = np.arange(size)
        line = (idx % (size // n_tiles)) < grout
        tint = rng.uniform(0.92, 1.06, size=(n_tiles, n_tiles))[idx[:, None] // (size // n_tiles),
                                                                 idx[None, :] // (size // n_tiles)]
        tex = b[None, None, :] * (tint * (0.95 + 0.1 * value_noise(rng, size, 64)))[..., None]
        tex = np.where((line[:, None] | line[None, :])[..., None], np.float32(0.55) * b, tex)
    elif kind == "carpet":
        n = 0.5 * value_noise(rng, size, 16) + 0.5 * rng.random((size, size)).astype(np.float32)
        tex = b[None, None, :] * (0.8 + 0.4 * n)[..., None]
    else:
        raise ValueError(f"unknown floor kind {kind!r}; valid: planks, concrete, tiles, carpet")
    return np.clip(tex, 0.0, 1.0).astype(np.float32)


@lru_cache(maxsize=len(ENVIRONMENTS))
def environment_floor(index: int) -> np.ndarray:
    """The floor texture of environment ``index`` (fixed per preset, cached, read-only)."""
    env = get_environment(index)
    tex = floor_texture(env.floor, env.floor_rgb, np.random.default_rng(7919 + index))
    tex.setflags(write=False)
    return tex
