"""The one rule for reward weights, applied by recipe validation and by every command that takes weights (pure).

Weights are relative (the shipped recipes: ``format`` 0.1, ``integer_distance`` 0.9): at least one reward, each
weight a finite number no larger in size than :data:`MAX_REWARD_WEIGHT` (``1e308`` would overflow the weighted total
to infinity), and at least one positive (all zero, or all negative, rewards nothing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

MAX_REWARD_WEIGHT = 1000.0
"""The largest size of one reward weight; far above any useful ratio, far below a float overflow."""


def weights_problem(weights: Mapping[str, float]) -> str | None:
    """Why ``weights`` (reward name -> weight) cannot be used, in one sentence; None when they can."""
    if not weights:
        return "name at least one reward, e.g. {format: 0.1, integer_distance: 0.9}"
    for name, weight in weights.items():
        if not math.isfinite(weight):
            return f"weight of {name!r} is {weight}; weights must be finite numbers"
        if abs(weight) > MAX_REWARD_WEIGHT:
            return (f"weight of {name!r} is {weight:g}; weights are relative (e.g. 0.1 and 0.9) and each must lie "
                    f"within -{MAX_REWARD_WEIGHT:g} .. {MAX_REWARD_WEIGHT:g}, or the weighted total overflows")
    if not any(w > 0 for w in weights.values()):
        return f"no positive weight in {dict(weights)}; at least one reward must count"
    return None
