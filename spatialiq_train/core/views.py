"""The benchmark's leaf views: base view, azimuth offset and lens, and the folder names and paths of them.

Every structure has 16 leaf views, ``view_VV/offset{O:g}_fov{F:g}_dist{D:g}`` (benchmark-spec
section 3.3 and 6.1), in a sample folder ``<split>/level_1/sample_NNNNN`` (ours, 5-digit) or
``.../level_1/sample_N`` (the release). This is layout vocabulary shared by data generation, traces and
evaluation, so it lives in the core; the file names and readers are in ``spatialiq_train.core.dataset``, the
camera geometry built on the views in ``data_gen.camera``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

BASE_AZIMUTHS: tuple[float, ...] = (0.0, 90.0, 180.0, 270.0)
"""Base azimuths of view_01..view_04, degrees."""
OFFSETS: tuple[float, ...] = (3.0, 12.5)
"""Azimuth offsets added to every base view, degrees (not 0 and 12.5 as the paper says)."""
LENSES: tuple[tuple[float, float], ...] = ((1.0, 1.0), (3.0, 0.3))
"""(fov multiplier, distance multiplier) pairs, zipped."""


@dataclass(frozen=True)
class LeafView:
    """One of the 16 leaf views of a structure."""

    view_idx: int
    """1..4: base azimuth 0/90/180/270 degrees."""
    offset: float
    fov: float
    dist: float

    @property
    def azimuth(self) -> float:
        return BASE_AZIMUTHS[self.view_idx - 1] + self.offset

    @property
    def view_dir(self) -> str:
        """``view_VV``, the base-view folder name."""
        return f"view_{self.view_idx:02d}"

    @property
    def leaf_dir(self) -> str:
        """``offset{O:g}_fov{F:g}_dist{D:g}``, the leaf folder name."""
        return f"offset{self.offset:g}_fov{self.fov:g}_dist{self.dist:g}"

    @property
    def relpath(self) -> str:
        """``view_VV/offsetO_fovF_distD`` relative to the structure's sample folder."""
        return f"{self.view_dir}/{self.leaf_dir}"

    def partner(self, step: int) -> LeafView:
        """The same leaf under the base view ``step`` quarter-turns further (task10: 1, task11: 2)."""
        return LeafView((self.view_idx - 1 + step) % 4 + 1, self.offset, self.fov, self.dist)


LEAF_VIEWS: tuple[LeafView, ...] = tuple(
    LeafView(v + 1, offset, fov, dist) for fov, dist in LENSES for v in range(4) for offset in OFFSETS
)
"""All 16 leaf views, in the reference generator's loop order (lens pair, base view, offset)."""


def parse_leaf_dir(name: str) -> tuple[float, float, float]:
    """``offset12.5_fov3_dist0.3`` -> (12.5, 3.0, 0.3); a ValueError names the bad folder."""
    parts = name.split("_")
    try:
        if len(parts) != 3 or not (parts[0].startswith("offset") and parts[1].startswith("fov")
                                   and parts[2].startswith("dist")):
            raise ValueError
        return float(parts[0][6:]), float(parts[1][3:]), float(parts[2][4:])
    except ValueError:
        raise ValueError(f"leaf folder {name!r} is not of the form offset<O>_fov<F>_dist<D>") from None


LEVEL = "level_1"
"""The only level of the released configuration (benchmark-spec 1.1)."""
SAMPLE_DIGITS = 5

SAMPLE_DIR_RE = re.compile(r"^sample_(\d+)$", re.ASCII)
"""A sample folder name: ours (``sample_00001``) or the released layout's (``sample_1``)."""
VIEW_DIR_RE = re.compile(r"^view_(\d+)$", re.ASCII)


def sample_dir_name(sample_idx: int) -> str:
    """``sample_00001`` for sample_idx 1."""
    if sample_idx < 1:
        raise ValueError(f"sample_idx must be >= 1, got {sample_idx}")
    return f"sample_{sample_idx:0{SAMPLE_DIGITS}d}"


def sample_relpath(split: str, sample_idx: int) -> str:
    """``<split>/level_1/sample_NNNNN`` relative to the dataset root."""
    return f"{split}/{LEVEL}/{sample_dir_name(sample_idx)}"


def view_relpath(split: str, sample_idx: int, leaf: LeafView) -> str:
    """``<split>/level_1/sample_NNNNN/view_VV/offsetO_fovF_distD`` relative to the dataset root."""
    return f"{sample_relpath(split, sample_idx)}/{leaf.relpath}"


def parse_view_path(path: str | Path) -> tuple[int, LeafView]:
    """``.../sample_NN/view_VV/offsetO_fovF_distD`` -> (sample_idx, LeafView); a ValueError names the path."""
    p = Path(path)
    sample_m = SAMPLE_DIR_RE.match(p.parent.parent.name)
    view_m = VIEW_DIR_RE.match(p.parent.name)
    if not (sample_m and view_m):
        raise ValueError(f"{path}: not of the form .../sample_<N>/view_<VV>/offset<O>_fov<F>_dist<D>")
    offset, fov, dist = parse_leaf_dir(p.name)
    return int(sample_m.group(1)), LeafView(int(view_m.group(1)), offset, fov, dist)


def parse_leaf_path(relpath: str) -> LeafView | None:
    """The LeafView of ``.../view_VV/offsetO_fovF_distD`` (any folders above), or None for another folder."""
    parts = relpath.rsplit("/", 2)
    view_m = VIEW_DIR_RE.match(parts[-2]) if len(parts) >= 2 else None
    if view_m is None:
        return None
    try:
        return LeafView(int(view_m.group(1)), *parse_leaf_dir(parts[-1]))
    except ValueError:
        return None


def sample_of_view(view: str) -> str | None:
    """The ``.../sample_N`` folder above ``view_VV`` of a leaf folder path, or None when there is none."""
    parts = view.split("/")
    return "/".join(parts[:-2]) if len(parts) >= 3 and SAMPLE_DIR_RE.match(parts[-3]) else None
