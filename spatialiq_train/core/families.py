"""Task families: the skills the pipeline trains, peers behind one small interface.

A family (as NeMo-RL's environments are peers behind one interface) brings its own generator, trace writer,
rewards and scoring, and meets the shared pipeline at these points only:

* its trace rows have the common schema (docs/traces.md: chat ``messages`` with the image and the prompt,
  ``answer`` an integer, ``structure_id``, ``task_id``) and name their family in ``family`` (absent: ``cube``);
* the trace reader (:func:`spatialiq_train.core.traces.trace_to_example`, which both engines read through)
  carries the family's :attr:`TaskFamily.reward_columns` from each row into the RL example, so the rewards
  receive them as columns (TRL) or metadata (NeMo-RL);
* its rewards are registered names (``reward.registry``) a recipe selects in ``reward.weights``;
  :attr:`TaskFamily.default_reward` is the one its shipped recipes use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spatialiq_train.core.dataset import REWARD_FIELDS
from spatialiq_train.core.errors import InputError


@dataclass(frozen=True)
class TaskFamily:
    """One task family and what the shared pipeline needs to know of it."""

    name: str
    reward_columns: tuple[str, ...]
    """Ground-truth columns a trace row carries into the RL example, beside ``answer`` (the rewards read them)."""
    default_reward: str
    """The registered reward (or combination) the family's shipped recipes train with."""
    description: str


FAMILIES: dict[str, TaskFamily] = {
    f.name: f
    for f in (
        TaskFamily("cube", REWARD_FIELDS, "default", "Spatial-IQ cube scenes: counting and layering (spatialiq gen)"),
        TaskFamily(
            "folding",
            ("holes",),
            "folding",
            "MentalBlackboard paper folding and hole punching (spatialiq fold gen; docs/folding.md)",
        ),
    )
}
"""Every task family by name; ``cube`` is the default of a trace row that names none."""
DEFAULT_FAMILY = "cube"


def family_of(row: Mapping[str, Any], where: str = "trace row") -> TaskFamily:
    """The family a trace row names in ``family`` (``cube`` when it names none); an unknown name is an error."""
    name = row.get("family", DEFAULT_FAMILY)
    try:
        return FAMILIES[str(name)]
    except KeyError:
        raise InputError(f"{where}: unknown task family {name!r}; valid: {', '.join(FAMILIES)}") from None
