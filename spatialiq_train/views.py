"""The benchmark's leaf views: base view, azimuth offset and lens, and their folder names.

Every structure has 16 leaf views, ``view_VV/offset{O:g}_fov{F:g}_dist{D:g}`` (benchmark-spec
section 3.3 and 6.1). This is layout vocabulary shared by data generation, traces and evaluation,
so it lives in the core; the camera geometry built on it is in ``data_gen.camera``.
"""

from __future__ import annotations

from dataclasses import dataclass

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
