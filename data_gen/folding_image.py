"""The picture of a folded sheet for a model's input (PIL): the open sheet's 4 x 4 grid of triangles, black where
the paper was folded away, white where the folded sheet lies, each punched hole a green mark of its shape, size
and direction; thin grey lines show the triangles. Drawn the same way every time, so the PNG bytes are a
function of the task."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from PIL import Image, ImageDraw

from spatialiq_train.core.folding import HALF_TURN_SHAPES, LOCATIONS, ROUND_SHAPES, UNIT, Hole, triangle_vertices
from spatialiq_train.core.folding_holes import direction_angle

SIZE = 168
"""Side of the picture in pixels (six 28-pixel patches)."""
_MARGIN = 8
_SCALE = (SIZE - 2 * _MARGIN) / (4 * UNIT)
BLACK, WHITE, GREEN, GREY = (0, 0, 0), (255, 255, 255), (0, 170, 0), (150, 150, 150)


def _px(p: tuple[float, float]) -> tuple[float, float]:
    """Sheet coordinates (y up) to pixels (y down)."""
    return (_MARGIN + p[0] * _SCALE, SIZE - _MARGIN - p[1] * _SCALE)


def _mark(hole: Hole) -> list[tuple[float, float]]:
    """The hole's outline around its triangle's centroid, in sheet coordinates."""
    tri = triangle_vertices(hole.location)
    cx, cy = sum(p[0] for p in tri) / 3, sum(p[1] for p in tri) / 3
    r = UNIT * (0.14 if hole.size == "small" else 0.24)
    if hole.shape in ROUND_SHAPES:
        sides = 12 if hole.shape == "circle" else 4
        pts = [
            (r * math.cos(2 * math.pi * k / sides + math.pi / 4), r * math.sin(2 * math.pi * k / sides + math.pi / 4))
            for k in range(sides)
        ]
        return [(cx + x, cy + y) for x, y in pts]
    angle = math.radians(direction_angle(hole.shape, hole.direction) or 0)
    if hole.shape in HALF_TURN_SHAPES:  # long along the upright axis, turned by the direction
        pts = [(-0.45 * r, -r), (0.45 * r, -r), (0.45 * r, r), (-0.45 * r, r)]
    else:  # an arrow head pointing where the shape's top points
        pts = [(0.0, r), (0.7 * r, -0.8 * r), (0.0, -0.4 * r), (-0.7 * r, -0.8 * r)]
    cos, sin = math.cos(angle), math.sin(angle)
    return [(cx + x * cos - y * sin, cy + x * sin + y * cos) for x, y in pts]


def sheet_png(covered: set[int], punches: Sequence[Hole]) -> bytes:
    """PNG bytes of the folded sheet (``covered`` locations white, the rest black) with its punched holes."""
    img = Image.new("RGB", (SIZE, SIZE), GREY)
    draw = ImageDraw.Draw(img)
    for loc in LOCATIONS:
        draw.polygon([_px(p) for p in triangle_vertices(loc)], fill=WHITE if loc in covered else BLACK, outline=GREY)
    for hole in punches:
        draw.polygon([_px(p) for p in _mark(hole)], fill=GREEN)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    return buf.getvalue()
