"""Punching through every layer and unfolding: the holes a folded sheet (:mod:`spatialiq_train.core.folding`)
comes to, with each hole's location and direction carried through every reflection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spatialiq_train.core.folding import (
    HALF_TURN_SHAPES,
    LOCATIONS,
    ROUND_SHAPES,
    Fold,
    FoldedSheet,
    FoldError,
    Hole,
    Matrix,
    Point,
    centroid,
    fold_steps,
    location_at,
    location_cell,
    matmul,
    pose_point,
    transpose,
    triangle_vertices,
    turn_point,
)

# --- directions --------------------------------------------------------------------------------------------

_UP: dict[int, Point] = {0: (0, 1), 90: (-1, 0), 180: (0, -1), 270: (1, 0)}
_ANGLE = {v: k for k, v in _UP.items()}


def direction_angle(shape: str, direction: object) -> int | None:
    """A record's ``direction`` as one angle (``None`` for a round shape); :class:`FoldError` if malformed."""
    if shape in ROUND_SHAPES:
        if direction not in ("", None):
            raise FoldError(f"a {shape} has no direction, got {direction!r}")
        return None
    text = str(direction).split(",")[0].strip()
    if text not in {"0", "90", "180", "270"}:
        raise FoldError(f"direction {direction!r} of a {shape}: expected 0, 90, 180 or 270")
    angle = int(text)
    return angle % 180 if shape in HALF_TURN_SHAPES else angle


def direction_label(shape: str, angle: int | None) -> int | str:
    """An angle as the records write it: ``""`` (round), ``"0, 180"``/``"90, 270"`` (half-turn), or the int."""
    if shape in ROUND_SHAPES or angle is None:
        return ""
    if shape in HALF_TURN_SHAPES:
        return "0, 180" if angle % 180 == 0 else "90, 270"
    return angle % 360


def _turn(m: Matrix, angle: int | None) -> int | None:
    return None if angle is None else _ANGLE[turn_point(m, _UP[angle])]


# --- punching and unfolding --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unfolded:
    """What one task comes to: the holes on the open sheet, the unfolding codes, and the holes after each step."""

    holes: tuple[Hole, ...]
    """The result: one hole per punched layer, as they lie on the open sheet (sorted)."""
    unfolding: tuple[str, ...]
    """``unfoldingTypes``: one code per fold, last fold first."""
    stages: tuple[tuple[Hole, ...], ...]
    """Holes as seen after each unfolding step (the last stage is ``holes``), for step-by-step traces."""


def punch_and_unfold(sheet: FoldedSheet, punches: Sequence[Hole]) -> Unfolded:
    """Punch ``punches`` (locations on the open sheet's frame) through every layer, then unfold."""
    shapes = [triangle_vertices(loc) for loc in LOCATIONS]
    last = sheet.poses[-1]
    stages: list[set[Hole]] = [set() for _ in sheet.poses[:-1]]
    for k, punch in enumerate(punches, 1):
        angle = direction_angle(punch.shape, punch.direction)
        r, c, t = location_cell(punch.location)
        centre = centroid(triangle_vertices(punch.location))
        point = (centre[0] + sheet.open_origin[0], centre[1] + sheet.open_origin[1])
        layers = [
            i for i, (p, tri) in enumerate(zip(last, shapes, strict=True)) if pose_point(p, centroid(tri)) == point
        ]
        if not layers:
            raise FoldError(f"hole {k} at location {punch.location} (row {r}, column {c}): no paper there to punch")
        for stage, poses in zip(stages, sheet.poses[:-1], strict=True):
            for i in layers:
                loc = location_at(pose_point(poses[i], centroid(shapes[i])), sheet.open_origin)
                if loc is None:
                    raise FoldError(f"hole {k}: a layer leaves the open sheet's frame while unfolding")
                m = matmul(poses[i][0], transpose(last[i][0]))
                stage.add(Hole(punch.shape, punch.size, direction_label(punch.shape, _turn(m, angle)), loc))
    ordered = tuple(tuple(sorted(s, key=hole_key)) for s in reversed(stages))
    return Unfolded(ordered[-1], sheet.unfolding, ordered)


def hole_key(hole: Hole) -> tuple[int, str, str, str]:
    """Sort key of holes: location, then shape, size, direction."""
    return (hole.location, hole.shape, hole.size, str(hole.direction))


def simulate(steps: Sequence[Fold], punches: Sequence[Hole]) -> Unfolded:
    """Fold, punch and unfold: the whole task in one call."""
    return punch_and_unfold(fold_steps(steps), punches)


def covered_locations(sheet: FoldedSheet) -> set[int]:
    """The open sheet's locations that the folded sheet covers (where a punch finds paper)."""
    last = sheet.poses[-1]
    points = {pose_point(p, centroid(triangle_vertices(loc))) for p, loc in zip(last, LOCATIONS, strict=True)}
    return {loc for pt in points if (loc := location_at(pt, sheet.open_origin)) is not None}
