"""The paper-folding task as text: the prompt (folds, punched holes, the folded sheet as a grid) and the answer
format the rewards and the evaluation parse.

An answer gives the unfolding codes inside ``<unfolding>...</unfolding>`` (``H1-F V1-F``, last fold first), lists
the holes of the unfolded sheet inside one ``<holes>...</holes>`` pair, one hole per line (or separated by ``;``)
as ``LOCATION SIZE SHAPE [DIRECTION]`` (``14 small rectangle 90``), then gives the number of holes inside
``<answer>N</answer>``, so that the count is scored by the integer rewards unchanged. ``DIRECTION`` is the shape's
turn in degrees counter-clockwise (0, 90, 180 or 270); a half-turn shape (ellipse, rectangle) may give either
angle of its pair, a round one (circle, square) none. Parsing is pure, linear in the text, and never raises: a
malformed answer parses to ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence

from spatialiq_train.core.folding import (
    HALF_TURN_SHAPES,
    ROUND_SHAPES,
    SHAPES,
    SIDES,
    SIZES,
    Fold,
    FoldError,
    Hole,
    fold_from_code,
    location_cell,
)
from spatialiq_train.core.folding_holes import direction_label, hole_key

HOLES_OPEN = "<holes>"
HOLES_CLOSE = "</holes>"
UNFOLDING_OPEN = "<unfolding>"
UNFOLDING_CLOSE = "</unfolding>"
_MAX_ENTRIES = 64  # more entries than the sheet has triangles twice over is no answer
SHAPE_LETTERS = {
    "circle": "C",
    "square": "Q",
    "ellipse": "E",
    "star": "S",
    "triangle": "A",
    "rectangle": "R",
    "trapezoid": "Z",
    "letter": "T",
    "text": "X",
}
"""A hole's letter in the sheet grid (the release's text mapping): upper case large, lower case small."""
_SIDE_WORDS = {
    "top": "top",
    "bottom": "bottom",
    "left": "left",
    "right": "right",
    "topLeft": "top-left",
    "topRight": "top-right",
    "bottomLeft": "bottom-left",
    "bottomRight": "bottom-right",
}


def hole_line(hole: Hole) -> str:
    """One hole in the answer format: ``14 small rectangle 90`` (no direction for a round shape)."""
    head = f"{hole.location} {hole.size} {hole.shape}"
    if hole.shape in ROUND_SHAPES:
        return head
    angle = str(hole.direction).split(",")[0].strip()
    return f"{head} {angle}"


def answer_text(holes: Sequence[Hole], unfolding: Sequence[str]) -> str:
    """The SFT-plain target: the unfolding codes, the holes block, then the count in answer tags."""
    body = "\n".join(hole_line(h) for h in sorted(holes, key=hole_key))
    codes = " ".join(unfolding)
    return (
        f"{UNFOLDING_OPEN}{codes}{UNFOLDING_CLOSE}\n{HOLES_OPEN}\n{body}\n{HOLES_CLOSE}\n<answer>{len(holes)}</answer>"
    )


def cot_text(stages: Sequence[Sequence[Hole]], unfolding: Sequence[str]) -> str:
    """The SFT-CoT target: each unfolding step in order with the holes seen after it, then the answer."""
    lines = ["Unfold the last fold first."]
    for n, (code, holes) in enumerate(zip(unfolding, stages, strict=True), 1):
        seen = "; ".join(hole_line(h) for h in sorted(holes, key=hole_key))
        lines.append(f"Step {n}: unfold {code} ({fold_from_code(code).name}). Holes now: {seen}.")
    return "\n".join(lines) + "\n" + answer_text(stages[-1] if stages else (), unfolding)


def parse_unfolding(text: str) -> list[str] | None:
    """The unfolding codes of the single well-formed ``<unfolding>`` pair (``H1-F V2-F``), else None."""
    span = _span(text, UNFOLDING_OPEN, UNFOLDING_CLOSE)
    if span is None:
        return None
    codes = span.replace(",", " ").split()
    if len(codes) > 16 or not all(_is_code(c) for c in codes):
        return None
    return codes


def _is_code(code: str) -> bool:
    try:
        return fold_from_code(code).kind != "rotation"
    except FoldError:
        return False


def _span(text: str, open_tag: str, close_tag: str) -> str | None:
    if not isinstance(text, str):
        return None
    start = text.find(open_tag)
    end = text.find(close_tag)
    if start < 0 or end < start:
        return None
    if text.find(open_tag, start + 1) >= 0 or text.find(close_tag, end + 1) >= 0:
        return None
    return text[start + len(open_tag) : end]


def holes_span(text: str) -> str | None:
    """The content of the single well-formed ``<holes>`` pair (one opening tag, then one closing tag), else None."""
    return _span(text, HOLES_OPEN, HOLES_CLOSE)


def parse_hole_entry(entry: str) -> Hole | None:
    """One ``LOCATION SIZE SHAPE [DIRECTION]`` entry (case and extra spaces ignored), else None."""
    words = entry.replace(",", " ").lower().split()
    if len(words) not in (3, 4) or not words[0].isascii() or not words[0].isdigit() or len(words[0]) > 2:
        return None
    loc, size, shape = int(words[0]), words[1], words[2]
    if not 1 <= loc <= 32 or size not in SIZES or shape not in SHAPES:
        return None
    if shape in ROUND_SHAPES:
        return Hole(shape, size, "", loc) if len(words) == 3 else None
    if len(words) != 4 or words[3] not in {"0", "90", "180", "270"}:
        return None
    angle = int(words[3])
    return Hole(shape, size, direction_label(shape, angle % 180 if shape in HALF_TURN_SHAPES else angle), loc)


def parse_holes(text: str) -> list[Hole] | None:
    """The holes an answer lists, in its order, duplicates kept; None when it has no single well-formed holes
    block or any entry of it does not parse (the gate of the hole rewards)."""
    span = holes_span(text)
    if span is None:
        return None
    entries = [e.strip() for line in span.splitlines() for e in line.split(";") if e.strip()]
    if len(entries) > _MAX_ENTRIES:
        return None
    holes = [parse_hole_entry(e) for e in entries]
    return None if any(h is None for h in holes) else holes  # type: ignore[return-value]


# --- the prompt ------------------------------------------------------------------------------------------------


def step_sentence(n: int, step: Fold) -> str:
    """One folding step in words, with the release's name for it."""
    if step.kind == "rotation":
        return f"{n}. Turn the sheet {step.degrees} degrees counter-clockwise ({step.name})."
    side = _SIDE_WORDS[step.side]
    other = _SIDE_WORDS[next(k for k, v in SIDES.items() if v == (-SIDES[step.side][0], -SIDES[step.side][1]))]
    where = "towards you" if step.to_front else "away from you"
    return f"{n}. Fold the {side} half over onto the {other} half, {where} ({step.name})."


def hole_phrase(hole: Hole) -> str:
    """A punched hole in words: location, its cell, size, shape and direction."""
    r, c, t = location_cell(hole.location)
    where = f"location {hole.location} (row {r + 1}, column {c + 1}, {'left' if t == 0 else 'right'} triangle)"
    turn = "" if hole.shape in ROUND_SHAPES else f", direction {str(hole.direction).split(',')[0].strip()}"
    return f"{where}: {hole.size} {hole.shape}{turn}"


def sheet_grid(covered: set[int], holes: Sequence[Hole] = ()) -> str:
    """The sheet as four rows of four squares, two triangles each: ``1`` paper, ``0`` none, a hole's letter."""
    marks = {h.location: SHAPE_LETTERS[h.shape] if h.size == "large" else SHAPE_LETTERS[h.shape].lower() for h in holes}
    rows = []
    for r in range(4):
        cells = []
        for c in range(4):
            pair = [r * 8 + c * 2 + t + 1 for t in (0, 1)]
            cells.append("".join(marks.get(loc, "1" if loc in covered else "0") for loc in pair))
        rows.append(" ".join(cells))
    return "\n".join(rows)


_LEGEND = ", ".join(f"{v} {k}" for k, v in SHAPE_LETTERS.items()) + "; lower case small"
PROMPT_INTRO = (
    "A square sheet of paper is a 4 x 4 grid of squares; a diagonal cuts each square into a left and a right "
    "triangle. The 32 triangles are numbered 1-32 row by row from the top left, the left triangle of each square "
    "first. The sheet is folded step by step, then holes are punched through every layer of the folded sheet."
)
PROMPT_TASK = (
    "Unfold the sheet in your mind. Which holes does the open sheet have? List every hole inside <holes></holes>, "
    "one per line as LOCATION SIZE SHAPE DIRECTION (direction in degrees counter-clockwise; none for a circle or "
    "square), then give the number of holes inside <answer></answer>."
)


def task_prompt(steps: Sequence[Fold], punches: Sequence[Hole], covered: set[int]) -> str:
    """The text of one task: the folds, the punched holes, the folded sheet as a grid, and the question."""
    lines = [PROMPT_INTRO, "", "Folds, in order:"]
    lines += [step_sentence(n, s) for n, s in enumerate(steps, 1)]
    lines += ["", "Holes punched:"] + [f"- {hole_phrase(h)}" for h in punches]
    lines += [
        "",
        "The folded sheet with its holes (1 paper, 0 no paper, a letter a hole: " + _LEGEND + "):",
        sheet_grid(covered, punches),
    ]
    return "\n".join([*lines, "", PROMPT_TASK])
