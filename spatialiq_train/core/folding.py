"""Paper folding and hole punching (MentalBlackboard): an exact simulator of our own.

The sheet is a 4 x 4 grid of cells, each cut by one diagonal into a left and a right triangle: 32 triangles,
numbered row by row from the top, left triangle before right (location ``1`` is the top-left cell's left
triangle). The diagonals alternate like a chequer board, so that every crease the released folds use (the
sheet's mid lines and the diagonals of a square sheet) runs along triangle edges and maps triangles onto
triangles.

Folds and rotations act in the viewer's frame on the sheet as it lies now: a fold reflects the half of the
sheet on its named side (``horizontal_top_to_bottom``: the top half) across the mid line of the sheet's
bounding box; a rotation turns the whole sheet counter-clockwise (as seen) about the centre of that box. The
punch goes through every layer at the punched point; unfolding undoes the folds in reverse order in the final
frame, so every punched layer carries its hole to where that triangle lies on the open sheet. Locations in
records (the initial holes' and the result's) are triangles of the open sheet as it lies at the end: after
rotations that sheet is the original one turned, and its triangles are numbered by position again.

A hole's ``direction`` is the shape's turn, counter-clockwise as seen, from upright: a reflection across a
line at angle ``a`` (from the horizontal) maps it to ``2a - 180 - d``. Shapes with a half-turn symmetry
(``ellipse``, ``rectangle``) report ``"0, 180"`` or ``"90, 270"``; round ones (``circle``, ``square``) ``""``;
the rest one angle (an int). Coordinates are integers: a cell's side is 12, so that every centroid, crease and
rotation centre lands on integers. Everything here is a pure function of its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spatialiq_train.core.errors import InputError

UNIT = 12
"""Length of a cell's side in the simulator's integer coordinates (every centroid, crease and turn centre of a
sheet whose sides are whole cells then lies on integers)."""
SHEET = 4 * UNIT
"""Side of the open sheet."""
LOCATIONS: tuple[int, ...] = tuple(range(1, 33))
"""The sheet's 32 triangle locations."""

SIDES: dict[str, tuple[int, int]] = {
    "top": (0, 1),
    "bottom": (0, -1),
    "left": (-1, 0),
    "right": (1, 0),
    "topLeft": (-1, 1),
    "topRight": (1, 1),
    "bottomLeft": (-1, -1),
    "bottomRight": (1, -1),
}
"""Side of the sheet (x right, y up) -> its outward direction."""
_SIDE_NAME = {v: k for k, v in SIDES.items()}

FOLD_CODES: dict[str, str] = {
    "top": "H1",
    "bottom": "H2",
    "left": "V1",
    "right": "V2",
    "topLeft": "D1",
    "topRight": "D2",
    "bottomLeft": "D3",
    "bottomRight": "D4",
}
"""The side a fold moves -> the release's short code (``H1-F`` is ``horizontal_top_to_bottom`` to the front)."""
_CODE_SIDE = {v: k for k, v in FOLD_CODES.items()}

ROTATIONS: tuple[int, ...] = (90, 180, 270)
HALF_TURN_SHAPES = frozenset({"ellipse", "rectangle"})
ROUND_SHAPES = frozenset({"circle", "square"})
SHAPES: tuple[str, ...] = (
    "circle",
    "square",
    "ellipse",
    "rectangle",
    "star",
    "triangle",
    "trapezoid",
    "letter",
    "text",
)
SIZES: tuple[str, ...] = ("small", "large")

Point = tuple[int, int]
Matrix = tuple[int, int, int, int]
_IDENTITY: Matrix = (1, 0, 0, 1)


class FoldError(InputError):
    """A fold sequence or hole the simulator cannot carry out (the message says which step and why)."""


@dataclass(frozen=True)
class Hole:
    """One hole: its shape, size, direction as the records write it, and triangle location (1-32)."""

    shape: str
    size: str
    direction: int | str
    location: int

    def as_record(self) -> dict[str, Any]:
        return {"shape": self.shape, "size": self.size, "direction": self.direction, "location": self.location}


@dataclass(frozen=True)
class Fold:
    """One step: a fold (``kind`` horizontal/vertical/diagonal, the ``side`` it moves) or a rotation."""

    kind: str
    side: str = ""
    to_front: bool = True
    degrees: int = 0

    @property
    def name(self) -> str:
        """The release's ``foldType`` (``vertical_right_to_left``, ``rotation-90``)."""
        if self.kind == "rotation":
            return f"rotation-{self.degrees}"
        opposite = _SIDE_NAME[_neg(SIDES[self.side])]
        return f"{self.kind}_{self.side}_to_{opposite}"

    def as_record(self) -> dict[str, Any]:
        return {"foldType": self.name, "foldToFront": self.to_front}


def _neg(v: Point) -> Point:
    return (-v[0], -v[1])


def _kind(v: Point) -> str:
    return "vertical" if v[1] == 0 else "horizontal" if v[0] == 0 else "diagonal"


def parse_fold(name: str, to_front: bool = True) -> Fold:
    """A ``foldType`` of the release (``horizontal_top_to_bottom``, ``rotation-270``) as a :class:`Fold`."""
    if name.startswith("rotation-"):
        deg = name.removeprefix("rotation-")
        if deg not in {str(d) for d in ROTATIONS}:
            raise FoldError(f"unknown rotation {name!r}; valid: rotation-90, rotation-180, rotation-270")
        return Fold("rotation", degrees=int(deg))
    kind, _, rest = name.partition("_")
    src, _, dst = rest.partition("_to_")
    if src not in SIDES or dst not in SIDES or SIDES[dst] != _neg(SIDES[src]) or _kind(SIDES[src]) != kind:
        raise FoldError(f"unknown fold {name!r}; e.g. horizontal_top_to_bottom, diagonal_bottomLeft_to_topRight")
    return Fold(kind, side=src, to_front=bool(to_front))


def fold_from_code(code: str) -> Fold:
    """A short code of the release (``H1-F``, ``D3-B``, ``R-90``) as a :class:`Fold`."""
    head, _, tail = code.partition("-")
    if head == "R":
        return parse_fold(f"rotation-{tail}")
    if head not in _CODE_SIDE or tail not in {"F", "B"}:
        raise FoldError(f"unknown fold code {code!r}; e.g. H1-F, V2-B, D3-F, R-90")
    side = _CODE_SIDE[head]
    return Fold(_kind(SIDES[side]), side=side, to_front=tail == "F")


def fold_code(fold: Fold) -> str:
    """The short code of a fold (``H1-F``) or rotation (``R-90``)."""
    if fold.kind == "rotation":
        return f"R-{fold.degrees}"
    return f"{FOLD_CODES[fold.side]}-{'F' if fold.to_front else 'B'}"


# --- the sheet's triangles -------------------------------------------------------------------------------


def location_cell(location: int) -> tuple[int, int, int]:
    """``(row, column, triangle)`` of a location: row and column 0-3 from the top left, triangle 0 left, 1 right."""
    if not 1 <= location <= 32:
        raise FoldError(f"location {location!r} is not a triangle of the sheet; valid: 1-32")
    i = location - 1
    return i // 8, (i % 8) // 2, i % 2


def triangle_vertices(location: int) -> tuple[Point, Point, Point]:
    """Vertices (x right, y up, sheet from 0 to SHEET) of a location's triangle on the open sheet."""
    r, c, t = location_cell(location)
    x0, y0 = c * UNIT, (3 - r) * UNIT
    tl, tr, bl, br = (x0, y0 + UNIT), (x0 + UNIT, y0 + UNIT), (x0, y0), (x0 + UNIT, y0)
    if (r + c) % 2 == 0:  # diagonal from top left to bottom right
        return (tl, bl, br) if t == 0 else (tl, tr, br)
    return (tl, tr, bl) if t == 0 else (tr, br, bl)


def centroid(tri: Sequence[Point]) -> Point:
    return (sum(p[0] for p in tri) // 3, sum(p[1] for p in tri) // 3)


def location_at(point: Point, origin: Point) -> int | None:
    """The location whose centroid is ``point`` on an open sheet whose lower-left corner is ``origin``."""
    dx, dy = point[0] - origin[0], point[1] - origin[1]
    if not (0 < dx < SHEET and 0 < dy < SHEET):
        return None
    c, r = dx // UNIT, 3 - dy // UNIT
    t = 0 if dx % UNIT * 2 < UNIT else 1
    loc = r * 8 + c * 2 + t + 1
    return loc if centroid(triangle_vertices(loc)) == (dx, dy) else None


# --- rigid motions ---------------------------------------------------------------------------------------


def turn_point(m: Matrix, p: Point) -> Point:
    return (m[0] * p[0] + m[1] * p[1], m[2] * p[0] + m[3] * p[1])


def matmul(a: Matrix, b: Matrix) -> Matrix:
    return (
        a[0] * b[0] + a[1] * b[2],
        a[0] * b[1] + a[1] * b[3],
        a[2] * b[0] + a[3] * b[2],
        a[2] * b[1] + a[3] * b[3],
    )


def transpose(m: Matrix) -> Matrix:
    return (m[0], m[2], m[1], m[3])


def _rotation(degrees: int) -> Matrix:
    return {0: _IDENTITY, 90: (0, -1, 1, 0), 180: (-1, 0, 0, -1), 270: (0, 1, -1, 0)}[degrees % 360]


def _reflection(v: Point) -> Matrix:
    """Reflection across the line through the origin perpendicular to ``v`` (``v`` axis-aligned or diagonal)."""
    n = v[0] * v[0] + v[1] * v[1]
    return tuple(
        int(x)
        for x in (1 - 2 * v[0] * v[0] // n, -2 * v[0] * v[1] // n, -2 * v[0] * v[1] // n, 1 - 2 * v[1] * v[1] // n)
    )  # type: ignore[return-value]


def _about(m: Matrix, centre: Point, p: Point) -> Point:
    q = turn_point(m, (p[0] - centre[0], p[1] - centre[1]))
    return (q[0] + centre[0], q[1] + centre[1])


Pose = tuple[Matrix, Point]
"""A rigid motion: world point = matrix @ point + translation."""


def pose_point(pose: Pose, p: Point) -> Point:
    q = turn_point(pose[0], p)
    return (q[0] + pose[1][0], q[1] + pose[1][1])


def _then(first: Pose, m: Matrix, centre: Point) -> Pose:
    """``first``, then ``m`` about ``centre``."""
    t = _about(m, centre, first[1])
    return (matmul(m, first[0]), t)


def _bbox(points: Sequence[Point]) -> tuple[int, int, int, int]:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), max(xs), min(ys), max(ys)


@dataclass(frozen=True)
class FoldedSheet:
    """The sheet after every step: each triangle's pose per fold (for the unfolding trace) and at the end."""

    poses: tuple[tuple[Pose, ...], ...]
    """``poses[k][i]``: location ``i + 1``'s pose after the first ``k`` folds, in the final frame."""
    open_origin: Point
    """Lower-left corner of the open sheet in the final frame (locations are numbered from it)."""
    unfolding: tuple[str, ...]
    """The release's ``unfoldingTypes``: one code per fold, last fold first."""


def fold_steps(steps: Sequence[Fold]) -> FoldedSheet:
    """Carry out ``steps`` on the open sheet; :class:`FoldError` names a step that cannot be done."""
    _check_sequence(steps)
    shapes = [triangle_vertices(loc) for loc in LOCATIONS]
    poses: list[Pose] = [(_IDENTITY, (0, 0))] * 32
    turned: Pose = (_IDENTITY, (0, 0))  # the rotations alone: where the open sheet lies
    snapshots: list[tuple[list[Pose], Pose]] = [(list(poses), turned)]
    folds: list[tuple[Fold, Matrix]] = []  # each fold with the rotations made since, as a matrix
    for n, step in enumerate(steps, 1):
        verts = [pose_point(p, v) for p, tri in zip(poses, shapes, strict=True) for v in tri]
        x0, x1, y0, y1 = _bbox(verts)
        centre = ((x0 + x1) // 2, (y0 + y1) // 2)
        if step.kind == "rotation":
            m = _rotation(step.degrees)
            poses = [_then(p, m, centre) for p in poses]
            turned = _then(turned, m, centre)
            folds = [(f, matmul(m, r)) for f, r in folds]
        else:
            v = SIDES[step.side]
            if step.kind == "diagonal" and x1 - x0 != y1 - y0:
                raise FoldError(
                    f"step {n} ({step.name}): a diagonal fold needs a square sheet, not {x1 - x0}x{y1 - y0}"
                )
            m = _reflection(v)
            moved = 0
            for i, (p, tri) in enumerate(zip(poses, shapes, strict=True)):
                c = pose_point(p, centroid(tri))
                side = (2 * c[0] - x0 - x1) * v[0] + (2 * c[1] - y0 - y1) * v[1]
                if side == 0:
                    raise FoldError(f"step {n} ({step.name}): the crease would cut a triangle of the sheet")
                if side > 0:
                    poses[i] = _then(p, m, centre)
                    moved += 1
            if moved == 0:
                raise FoldError(f"step {n} ({step.name}): nothing of the sheet lies on that side")
            folds.append((step, _IDENTITY))
        snapshots.append((list(poses), turned))
    final_turn = turned
    in_final = [tuple(_relocate(p, t, final_turn) for p in ps) for ps, t in snapshots]
    kept = [in_final[0]] + [in_final[k] for k, s in enumerate(steps, 1) if s.kind != "rotation"]
    origin = _bbox([pose_point(final_turn, v) for tri in shapes for v in tri])
    unfolding = tuple(
        fold_code(
            Fold(
                _kind(_neg(turn_point(r, SIDES[f.side]))),
                side=_SIDE_NAME[_neg(turn_point(r, SIDES[f.side]))],
                to_front=f.to_front,
            )
        )
        for f, r in reversed(folds)
    )
    return FoldedSheet(tuple(kept), (origin[0], origin[2]), unfolding)


def _relocate(pose: Pose, turned_then: Pose, turned_end: Pose) -> Pose:
    """A pose at some step seen in the final frame: undo the rotations made so far, make all of them."""
    inv_m = transpose(turned_then[0])
    back = turn_point(inv_m, (-turned_then[1][0], -turned_then[1][1]))
    undo: Pose = (matmul(inv_m, pose[0]), pose_point((inv_m, back), pose[1]))
    return (matmul(turned_end[0], undo[0]), pose_point(turned_end, undo[1]))


def _check_sequence(steps: Sequence[Fold]) -> None:
    if not any(s.kind != "rotation" for s in steps):
        raise FoldError("a task needs at least one fold (rotations alone fold nothing)")
