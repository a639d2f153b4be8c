"""The renderer interface (Kubric-style: plain scene spec -> backend -> named layers).

Backends live in their own modules (which import this one) and are imported only when asked for by name
(``data_gen.render.backends``), so data generation with ``--renderer none`` never loads Mitsuba or Isaac Sim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from data_gen.camera import Camera
from spatialiq_train.core.errors import JobFailure

OBJECT_TYPES: tuple[str, ...] = ("cube", "can")
"""``cube`` is what training uses; ``can`` (a cylinder) tests generalisation to unseen objects."""


class RenderError(JobFailure, RuntimeError):
    """A backend failed on one scene; the message names the scene (exit 1: the job ran and failed)."""


class RenderInterrupted(KeyboardInterrupt):
    """A render was cut short by an interrupt (the renderer wound down and returned a partial image): the image is
    thrown away, never written, and the run stops as an interrupt does (exit 130)."""


@dataclass(frozen=True)
class SceneSpec:
    """Everything a backend needs to draw one view; plain data, no backend objects."""

    height_map: tuple[tuple[int, ...], ...]
    """H[i][j]: number of stacked objects at row i, column j."""
    camera: Camera
    object_type: str = "cube"
    environment: int = 0
    """Index of the background/environment preset (chosen per structure by seed)."""
    seed: int = 0
    """Seed for every random choice the backend makes (materials, textures)."""


@dataclass
class RenderResult:
    rgb: np.ndarray
    """(H, W, 3) uint8."""
    instance_ids: np.ndarray | None = None
    """(H, W) int32 block ids as ``data_gen.visibility.block_id`` gives them, -1 where no object; None if unknown."""


class Renderer(Protocol):
    name: str

    def render(self, spec: SceneSpec) -> RenderResult: ...
