"""The recipe's value types: finite numbers, strict counts and switches, step budgets, split names (pure).

`recipe_model` builds its sections from these; they refuse what YAML would otherwise coerce silently (`true` as 1,
`.inf`, NaN, a zero step budget).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, StrictBool, StrictInt


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def _finite(value: Any) -> Any:
    """Refuse NaN and infinities (also as YAML strings such as `.inf`) before any bound is compared."""
    try:
        number = float(value) if isinstance(value, int | float | str) else None
    except ValueError:
        return value  # not a number at all: the float type says so
    if number is not None and not math.isfinite(number):
        raise ValueError(f"must be finite, got {value}")
    return value


def sane_learning_rate(value: float) -> float:
    if not 0 < value < MAX_LEARNING_RATE:
        raise ValueError(f"must be > 0 and below {MAX_LEARNING_RATE:g} (AdamW rates are about 1e-7 .. 1e-3; a larger "
                         f"one diverges to NaN), got {value:g}")
    return value


def _steps_or_epochs(value: int) -> int:
    if value == 0 or value < -1:
        raise ValueError("must be a positive number of steps, or -1 to train for num_train_epochs")
    if value > MAX_COUNT:
        raise ValueError(f"must be at most {MAX_COUNT:,} steps, got {value:,}")
    return value


MAX_BATCH = 1 << 20
"""Largest global batch, micro-batch or prompts per step a recipe may state (a million sequences per step; a larger
number is a typo, and no split of traces holds it)."""
MAX_GENERATIONS = 1024
"""Largest completions per prompt (and iterations per generation batch)."""
MAX_COUNT = 10**9
"""Largest step budget or row cap."""
MAX_EPOCHS = 10**6


MAX_LEARNING_RATE = 1.0
"""A learning rate at or above this is refused as absurd (training diverges to NaN long before)."""
Num = Annotated[float, BeforeValidator(_finite), BeforeValidator(_no_bool)]
"""A finite real number (int or float; `1e-6` strings from YAML accepted); booleans, NaN and infinities refused."""
Count = StrictInt
"""A whole number; booleans and floats refused."""
Flag = StrictBool
"""true or false only (no 0/1, no "yes")."""
MaxSteps = Annotated[StrictInt, AfterValidator(_steps_or_epochs)]
"""``max_steps``: a positive step budget, or -1 (transformers' convention) to train by epochs."""
Split = Literal["train", "val", "warmup", "rl"]
