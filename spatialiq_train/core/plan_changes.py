"""Which differing recipe keys change what a phase trains with (pure): a resume's comparison with the run's record.

Two recipes may differ in a key and still resolve to the same plan (`core.resolve.resolve`): a key left null whose
resolved value is another recipe's explicit one (``vllm.enable_sleep_mode: null`` is off on TRL, as ``false``), or a
value the hardware decides either way (``vllm.enabled`` on the CPU, where TRL generates with transformers). A key
counts as changed when a plan field it is behind (`core.resolve.recipe_key`) differs between the two plans, each
recipe resolved on this machine; a key behind no plan field (``eval.*``, ``description``) counts when its recipe value
differs, as does every key when either recipe cannot be resolved here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spatialiq_train.core.plan import Phase
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.core.resolve import Hardware, recipe_key, resolve

_ABSENT = object()


def _behind(key: str, plan_key: str) -> bool:
    """True when recipe ``key`` is ``plan_key`` or inside it (``reward.weights.format`` in ``reward.weights``)."""
    return key == plan_key or key.startswith(plan_key + ".")


def resolved_differences(old: Recipe, new: Recipe, phases: Sequence[Phase],
                         hardware: Hardware) -> dict[str, bool] | None:
    """Recipe key -> whether a plan field behind it differs between ``old`` and ``new`` in any of ``phases``, both
    resolved on ``hardware``; None when either recipe cannot be resolved there."""
    out: dict[str, bool] = {}
    for phase in phases:
        try:
            a, b = resolve(old, phase, hardware).fields(), resolve(new, phase, hardware).fields()
        except ValueError:  # a batch the processes cannot share, Liger absent: compared as written
            return None
        for dotted in a.keys() | b.keys():
            key = recipe_key(phase, dotted)
            out[key] = out.get(key, False) or a.get(dotted, _ABSENT) != b.get(dotted, _ABSENT)
    return out


def resolved_changes(keys: Sequence[str], old: Recipe, new: Recipe, phases: Sequence[Phase],
                     hardware: Hardware) -> list[str]:
    """Of ``keys`` (recipe keys whose values differ between ``old`` and ``new``), those that change what one of
    ``phases`` trains with, in their order (see the module's docstring)."""
    differs = resolved_differences(old, new, phases, hardware)
    if differs is None:
        return list(keys)
    changed = []
    for key in keys:
        behind = [d for plan_key, d in differs.items() if _behind(key, plan_key)]
        if not behind or any(behind):
            changed.append(key)
    return changed


def recipe_or_none(data: dict[str, Any]) -> Recipe | None:
    """``data`` (a recipe record in today's keys) as a `Recipe`, or None when it is not a valid one today."""
    from spatialiq_train.core.recipes import RecipeError, recipe_from_dict

    try:
        return recipe_from_dict(data)
    except RecipeError:
        return None
