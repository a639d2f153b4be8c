"""The MentalBlackboard paper's prediction metrics, as pure functions over holes and unfolding codes.

Per record, with ``G`` ground-truth holes, ``P`` predicted holes (duplicates counted) and ``M`` matched holes
(a one-to-one match: each ground-truth hole in turn takes the first unused predicted hole with the same shape,
size and location and a matching direction):

* partial accuracy ``M / (G + max(0, P - G))`` (extra holes are penalised, a duplicate is an extra);
* exact match: ``P == G == M``;
* extra holes ``P > G``, missing holes ``P < G`` (records counted);
* unfolding exact: the predicted codes equal the truth's, in order; per step: positions where they agree;
* per field (shape, size, location, direction): the same one-to-one count on that field alone, over
  ``G + max(0, P - G)``.

A direction matches when the truth has none (a round shape: anything matches) or the two share an angle
(``"0, 180"`` matches ``180``). Benchmark totals are micro-averaged as in the paper's scorer: partial accuracy
and the field accuracies are summed matches over summed ``G + extra``; exact match, extra, missing and unfolding
exact are shares of records; unfolding steps is matched steps over the truth's steps. A prediction that does
not parse counts as no holes and no unfolding steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spatialiq_train.core.folding import Hole

FIELDS: tuple[str, ...] = ("shape", "size", "location", "direction")
"""The per-field accuracies, in the paper's order."""


def direction_angles(direction: object) -> frozenset[int]:
    """The angles a direction stands for (``"0, 180"`` -> {0, 180}); empty for none."""
    out = set()
    for part in str(direction).split(","):
        part = part.strip()
        if part.lstrip("-").isdigit() and len(part) <= 4:
            out.add(int(part) % 360)
    return frozenset(out)


def directions_match(truth: object, predicted: object) -> bool:
    """The paper's rule: a truth without direction matches anything; otherwise the angles must overlap."""
    want = direction_angles(truth)
    return not want or bool(want & direction_angles(predicted))


def _one_to_one(truth: Sequence[Hole], predicted: Sequence[Hole], same: Callable[[Hole, Hole], bool]) -> int:
    used: set[int] = set()
    matched = 0
    for t in truth:
        for j, p in enumerate(predicted):
            if j not in used and same(t, p):
                used.add(j)
                matched += 1
                break
    return matched


def _same_hole(use_direction: bool) -> Callable[[Hole, Hole], bool]:
    def same(t: Hole, p: Hole) -> bool:
        if (t.shape, t.size, t.location) != (p.shape, p.size, p.location):
            return False
        return not use_direction or directions_match(t.direction, p.direction)

    return same


_FIELD_SAME: dict[str, Callable[[Hole, Hole], bool]] = {
    "shape": lambda t, p: t.shape == p.shape,
    "size": lambda t, p: t.size == p.size,
    "location": lambda t, p: t.location == p.location,
    "direction": lambda t, p: directions_match(t.direction, p.direction),
}


def matched_holes(predicted: Sequence[Hole], truth: Sequence[Hole], use_direction: bool = True) -> int:
    """``M``: ground-truth holes matched one-to-one by predicted holes."""
    return _one_to_one(truth, predicted, _same_hole(use_direction))


def partial_accuracy(predicted: Sequence[Hole], truth: Sequence[Hole], use_direction: bool = True) -> float:
    """``M / (G + max(0, P - G))``; 1 when the truth and the prediction are both empty."""
    g, p = len(truth), len(predicted)
    denom = g + max(0, p - g)
    return 1.0 if denom == 0 else matched_holes(predicted, truth, use_direction) / denom


def exact_set_match(predicted: Sequence[Hole], truth: Sequence[Hole], use_direction: bool = True) -> bool:
    """Every truth hole matched and nothing else predicted (a duplicated hole is not an exact match)."""
    return len(predicted) == len(truth) == matched_holes(predicted, truth, use_direction)


def unfolding_steps_matched(predicted: Sequence[str], truth: Sequence[str]) -> int:
    """How many positions of the truth's unfolding codes the prediction has the same code at."""
    return sum(1 for a, b in zip(predicted, truth, strict=False) if a == b)


@dataclass(frozen=True)
class FoldingScore:
    """One record scored: counts for the paper's metrics (see the module docstring)."""

    truth_holes: int
    predicted_holes: int
    matched: int
    field_matched: tuple[int, ...]
    """Per field of :data:`FIELDS`, one-to-one matches on that field alone."""
    unfolding_exact: bool
    unfolding_matched: int
    unfolding_steps: int
    parsed: bool

    @property
    def penalised(self) -> int:
        """``G + max(0, P - G)``, the denominator of partial accuracy."""
        return self.truth_holes + max(0, self.predicted_holes - self.truth_holes)

    @property
    def exact(self) -> bool:
        return self.predicted_holes == self.truth_holes == self.matched

    @property
    def partial(self) -> float:
        return 1.0 if self.penalised == 0 else self.matched / self.penalised


def score_prediction(
    predicted: Sequence[Hole] | None,
    truth: Sequence[Hole],
    predicted_unfolding: Sequence[str] | None = None,
    truth_unfolding: Sequence[str] = (),
    use_direction: bool = True,
) -> FoldingScore:
    """Score one record; ``predicted`` None (an answer that did not parse) counts as no holes."""
    pred = list(predicted or [])
    unf = list(predicted_unfolding or [])
    fields = tuple(_one_to_one(truth, pred, _FIELD_SAME[f]) for f in FIELDS)
    return FoldingScore(
        truth_holes=len(truth),
        predicted_holes=len(pred),
        matched=matched_holes(pred, truth, use_direction),
        field_matched=fields,
        unfolding_exact=predicted_unfolding is not None and unf == list(truth_unfolding),
        unfolding_matched=unfolding_steps_matched(unf, truth_unfolding),
        unfolding_steps=len(truth_unfolding),
        parsed=predicted is not None,
    )


def summarize_scores(scores: Sequence[FoldingScore]) -> dict[str, float]:
    """The paper's benchmark table for scored records: shares in [0, 1] (``n`` the number of records)."""
    n = len(scores)
    if n == 0:
        return {"n": 0.0}
    penalised = sum(s.penalised for s in scores)
    steps = sum(s.unfolding_steps for s in scores)
    out = {
        "n": float(n),
        "exact_match": sum(s.exact for s in scores) / n,
        "partial_accuracy": sum(s.matched for s in scores) / penalised if penalised else 1.0,
        "extra_holes": sum(s.predicted_holes > s.truth_holes for s in scores) / n,
        "missing_holes": sum(s.predicted_holes < s.truth_holes for s in scores) / n,
        "unfolding_exact": sum(s.unfolding_exact for s in scores) / n,
        "unfolding_steps": sum(s.unfolding_matched for s in scores) / steps if steps else 1.0,
        "parsed": sum(s.parsed for s in scores) / n,
    }
    for i, field in enumerate(FIELDS):
        out[field] = sum(s.field_matched[i] for s in scores) / penalised if penalised else 1.0
    return out
