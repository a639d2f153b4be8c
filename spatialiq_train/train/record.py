"""The recipe record beside a run, and the one check every training command makes against it.

A training command keeps the recipe it trains under as ``recipe.yaml`` in its folder (`train sft` and `train rl` in
their phase folder, `run dapo-tight` in the run folder and each phase folder). A resume or rerun compares its recipe
with the record first, before anything is loaded or written (:func:`check_record`): every key that changes what a
phase of the folder trains with is refused, named with its recorded and its new value, except keys the folder's work
never reads (``free``) and the step budget (``budget``), which may grow only with ``--extend``. A key changes what a
phase trains with when the plan the record resolves to differs from the new recipe's in a field behind that key, both
resolved on this machine (`core.plan_changes`): a key left null whose resolved value is the recorded explicit one is
no change. The record is written when the work starts, after every check (:func:`write_record`), so a refused command
leaves none behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from spatialiq_train.core.io import atomic_write_text
from spatialiq_train.core.plan import Phase
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.core.recipes import RecipeError, flatten, recipe_to_yaml
from spatialiq_train.core.recorded_recipe import continue_with

RECORD = "recipe.yaml"
"""The recipe record's file name in a run or phase folder."""

PHASE_FREE: dict[str, tuple[str, ...]] = {
    "sft": ("description", "rl", "vllm", "generation", "reward", "eval", "data.rl_split"),
    "rl": ("description", "sft", "data.sft_split"),
}
"""Recipe keys (and sections) a phase does not read: a resume of that phase alone may change them."""


HARDWARE_KEYS: tuple[str, ...] = ("sft.optimizer.micro_batch_size", "rl.optimizer.micro_batch_size",
                                   "sft.optimizer.gradient_checkpointing", "rl.optimizer.gradient_checkpointing",
                                   "model.liger_kernel")
"""Keys that fit the run to its hardware without changing the algorithm (the global batch stays): a resume on other
GPUs may change them."""


def budget_keys(phase: str) -> tuple[str, ...]:
    """The step budget of a phase: with ``--extend`` it may grow after the phase has started."""
    return (f"{phase}.optimizer.max_steps", f"{phase}.optimizer.num_train_epochs")


def recipe_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two recipe dicts (added and removed keys included)."""
    a, b = flatten(old), flatten(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k, object()) != b.get(k, object()))


def _under(key: str, prefixes: Sequence[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _changes(keys: Sequence[str], old: dict[str, Any], new: dict[str, Any]) -> str:
    a, b = flatten(old), flatten(new)
    return "; ".join(f"{k}: recorded {a.get(k, '(absent)')!r}, now {b.get(k, '(absent)')!r}" for k in keys)


def check_record(
    folder: Path,
    recipe: Recipe,
    free: Sequence[str] = (),
    budget: Sequence[str] = (),
    extend: bool = False,
    why: str = "the run has started",
    phases: Sequence[Phase] = ("sft", "rl"),
) -> list[str]:
    """Compare ``recipe`` with ``folder``'s record (none: nothing to compare) and refuse what may not change.

    Keys under ``free`` may differ, and so may keys whose values resolve alike in ``phases`` (the folder's work);
    keys in ``budget`` only with ``extend``; any other difference raises a :class:`RecipeError` naming the record,
    each key with its recorded and new value, and ``why`` it may not change. Returns the keys that differ and were
    allowed (the record is then rewritten when the work starts)."""
    import yaml

    path = folder / RECORD
    text = recipe_to_yaml(recipe)
    if not path.is_file():
        return []
    old_text = path.read_text(encoding="utf-8")
    if old_text == text:
        return []
    old, new = yaml.safe_load(old_text) or {}, yaml.safe_load(text)
    old, earlier = earlier_record(old, folder, path)  # a record of an earlier version, in today's keys
    diff = recipe_differences(old, new)
    changed = resolved_keys([k for k in diff if not _under(k, free)], old, recipe, phases)
    allowed_budget = [k for k in changed if k in budget]
    blocking = [k for k in changed if k not in allowed_budget]
    if blocking:
        may = f" (only {', '.join(free)} may change)" if free else ""
        how = f"resume with the recorded recipe{may}" if not earlier else (
            f"{earlier}; to continue it, rerun with {continue_with(old, blocking)}")
        raise RecipeError(f"{path} holds a different recipe: {', '.join(blocking)} differ and {why} "
                          f"({_changes(blocking, old, new)}); {how}, or pick a new --out for a new run")
    if allowed_budget and not extend:
        raise RecipeError(f"{path}: the run started under another step budget ({', '.join(allowed_budget)} differ: "
                          f"{_changes(allowed_budget, old, new)}); pass --extend to train on to the new budget, or "
                          "pick a new --out for a new run")
    return diff


def resolved_keys(keys: list[str], old: dict[str, Any], recipe: Recipe, phases: Sequence[Phase]) -> list[str]:
    """Of ``keys`` (differing between the record ``old`` and ``recipe``), those that change what one of ``phases``
    trains with on this machine (`core.plan_changes.resolved_changes`); all of them when the record is not a valid
    recipe today."""
    from spatialiq_train.core.plan_changes import recipe_or_none, resolved_changes

    recorded = recipe_or_none(old) if keys else None
    if recorded is None:
        return keys
    from spatialiq_train.train.plan import hardware

    # this machine, without the memory plan: the micro-batch and checkpointing it decides are free keys
    return resolved_changes(keys, recorded, recipe, phases, hardware())


def earlier_record(old: dict[str, Any], folder: Path, path: Path) -> tuple[dict[str, Any], str]:
    """``old`` in today's keys when an earlier version recorded it (`core.recorded_recipe`), with a sentence saying
    so ("" for a record of this version); a RecipeError when it cannot be continued as it trained."""
    from spatialiq_train.core.recorded_recipe import is_earlier, processes_of, read_recorded

    if not is_earlier(old):
        return old, ""
    read = read_recorded(old, processes_of(folder))
    if read.problem is not None:
        raise RecipeError(f"{path} was recorded by an earlier spatialiq and cannot be continued as it trained: "
                          f"{read.problem}; release or evaluate it as it is, or pick a new --out for a new run")
    return read.recipe, f"it was recorded by an earlier spatialiq; as it trained it reads {'; '.join(read.notes)}"


def write_record(folder: Path, recipe: Recipe) -> None:
    """Keep ``recipe`` as ``folder``'s record (written whole, then renamed into place)."""
    atomic_write_text(folder / RECORD, recipe_to_yaml(recipe))


def check_phase_record(phase_dir: Path, recipe: Recipe, phase: str, extend: bool) -> list[str]:
    """:func:`check_record` for one phase folder: the keys the phase does not read and the hardware keys
    (:data:`HARDWARE_KEYS`) are free, its budget needs ``extend``."""
    return check_record(phase_dir, recipe, (*PHASE_FREE[phase], *HARDWARE_KEYS), budget_keys(phase), extend,
                        f"the {phase.upper()} phase in {phase_dir} has started under the recorded recipe",
                        (cast(Phase, phase),))
