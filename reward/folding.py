"""Rewards for the paper-folding task family (docs/folding.md), on the answer format of
:mod:`spatialiq_train.core.folding_answers`.

The ground truth arrives in the ``holes`` column: the unfolded sheet's holes as records (a list of
``{shape, size, direction, location}``) or that list as JSON text; ``answer`` (the number of holes) serves the
integer rewards, which score the ``<answer>`` count unchanged.

* ``hole_partial``: the paper's partial accuracy ``M / (G + max(0, P - G))`` of the listed holes;
* ``hole_exact``: 1 when the listed holes are exactly the truth's (a duplicate is an extra hole);
* ``folding`` = 0.1 format + 0.2 integer_distance + 0.7 hole_partial.

Both are gated: 0 unless the completion holds one well-formed ``<holes>`` block whose every entry parses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from reward.functions import _column, _score_each
from reward.registry import register, register_combination
from spatialiq_train.core.folding import Hole
from spatialiq_train.core.folding_answers import parse_holes
from spatialiq_train.core.folding_metrics import exact_set_match, partial_accuracy
from spatialiq_train.core.folding_records import read_hole


def truth_holes(value: Any) -> list[Hole]:
    """A ``holes`` column value (records, or their JSON text) as holes; ValueError names what is wrong."""
    raw = json.loads(value) if isinstance(value, str) else value
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise ValueError(f"column 'holes': expected a list of hole records, got {type(raw).__name__}")
    return [read_hole(h, f"column 'holes'[{n}]") for n, h in enumerate(raw, 1)]


def hole_partial_score(completion: str, holes: Any) -> float:
    truth = truth_holes(holes)
    pred = parse_holes(completion)
    return 0.0 if pred is None else partial_accuracy(pred, truth)


def hole_exact_score(completion: str, holes: Any) -> float:
    truth = truth_holes(holes)
    pred = parse_holes(completion)
    return 1.0 if pred is not None and exact_set_match(pred, truth) else 0.0


@register("hole_partial")
def hole_partial_reward(completions: list[str], **columns: Any) -> list[float]:
    """Partial accuracy of the listed holes, M / (G + max(0, P - G)); 0 unless the holes block parses."""
    gt = _column(columns, "holes", len(completions), "hole_partial")
    return _score_each("hole_partial", hole_partial_score, completions, gt)


@register("hole_exact")
def hole_exact_reward(completions: list[str], **columns: Any) -> list[float]:
    """1 if the listed holes are exactly the unfolded sheet's holes, else 0 (0 unless the holes block parses)."""
    gt = _column(columns, "holes", len(completions), "hole_exact")
    return _score_each("hole_exact", hole_exact_score, completions, gt)


register_combination("folding", {"format": 0.1, "integer_distance": 0.2, "hole_partial": 0.7})
