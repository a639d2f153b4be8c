"""Recipe records of an earlier spatialiq, read as they trained (docs/trust.md, "Older run folders").

Until the global batch became the recipe's unit (the merge of 2026-12-04, 5a823ee), a run recorded the per-device
batch (``*.optimizer.per_device_train_batch_size``, ``*.optimizer.gradient_accumulation_steps``,
``rl.steps_per_generation``) and ``rl.scale_rewards`` in its ``recipe.yaml``. Today's recipe refuses those keys; a run
folder recorded with them is read here in today's keys, with the batch it trained: per-device x accumulation x the
number of processes it ran on. That number is not in the recipe; it is read from the run's checkpoints, where the
trainer saves one ``rng_state.pth`` on one process and one ``rng_state_<rank>.pth`` per process otherwise
(:func:`processes_of`). ``release`` publishes such a run with its batch stated as it trained; a resume compares
today's recipe with the record so read, and when they differ says the exact overrides that continue it.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RETIRED_OPTIMIZER_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps")
SCALE_REWARDS = {"group": ("group_mean", "group"), "true": ("group_mean", "group"), "none": ("group_mean", "none"),
                 "false": ("group_mean", "none")}
"""The retired ``rl.scale_rewards`` values as ``rl.advantage`` (baseline, std); ``batch`` has none."""
_RNG = re.compile(r"^rng_state(?:_(\d+))?\.pth$")


@dataclass
class RecordedRecipe:
    """A recipe record read in today's keys."""

    recipe: dict[str, Any]
    """Today's keys, defaults filled (``Recipe.model_dump(mode="json")``), or the record as written (``problem``)."""
    earlier: bool = False
    """True when the record was written by an earlier version (it holds retired keys)."""
    notes: list[str] = field(default_factory=list)
    """How each retired key was read (``sft: per_device_train_batch_size 4 x ... = global_batch_size 4``)."""
    problem: str | None = None
    """Why the record cannot be read in today's keys (the process count not recorded, a batch today's recipe cannot
    state); ``recipe`` is then the record as written."""


def is_earlier(data: Any) -> bool:
    """True when a recipe record (a mapping) holds a key retired with the global batch."""
    if not isinstance(data, dict):
        return False
    rl = data.get("rl") if isinstance(data.get("rl"), dict) else {}
    if "scale_rewards" in rl or "steps_per_generation" in rl:
        return True
    return any(isinstance((data.get(p) or {}).get("optimizer"), dict) and
               any(k in data[p]["optimizer"] for k in RETIRED_OPTIMIZER_KEYS) for p in ("sft", "rl")
               if isinstance(data.get(p), dict))


def processes_of(folder: Path) -> int | None:
    """The number of processes the run in ``folder`` trained on, from its newest checkpoint's random states (in
    ``folder`` or a phase folder of it); None when no checkpoint is left."""
    found: list[tuple[int, int]] = []
    for ckpt in [*folder.glob("checkpoint-*"), *folder.glob("*/checkpoint-*")]:
        ranks = {m.group(1) for p in ckpt.iterdir() if (m := _RNG.match(p.name))} if ckpt.is_dir() else set()
        if ranks:
            step = int(ckpt.name.split("-")[-1]) if ckpt.name.split("-")[-1].isdigit() else -1
            found.append((step, 1 if None in ranks else len(ranks)))
    return max(found)[1] if found else None


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _sft(data: dict[str, Any], n: int, notes: list[str]) -> None:
    opt = data["sft"]["optimizer"]
    p, a = _whole(opt.pop("per_device_train_batch_size", 1)), _whole(opt.pop("gradient_accumulation_steps", 1))
    opt.update(global_batch_size=p * a * n, micro_batch_size=p)
    notes.append(f"sft: per_device_train_batch_size {p} x gradient_accumulation_steps {a} x {n} process(es) = "
                 f"sft.optimizer.global_batch_size {p * a * n} (micro_batch_size {p})")


def _rl(data: dict[str, Any], n: int, notes: list[str]) -> str | None:
    rl = data["rl"]
    opt = rl.get("optimizer") if isinstance(rl.get("optimizer"), dict) else {}
    p, a = _whole(opt.pop("per_device_train_batch_size", 1)), _whole(opt.pop("gradient_accumulation_steps", 1))
    spg, g = rl.pop("steps_per_generation", None), _whole(rl.get("num_generations", 16))
    if spg is not None and spg != a:
        return (f"rl.steps_per_generation {spg} differs from rl.optimizer.gradient_accumulation_steps {a}: one "
                "generation batch served several optimizer steps, which today's recipe cannot state")
    if (p * a * n) % g:
        return (f"rl: {p} x {a} x {n} process(es) = {p * a * n} completions per step are not whole groups of "
                f"rl.num_generations {g}")
    rl["prompts_per_step"] = p * a * n // g
    opt["micro_batch_size"] = p
    notes.append(f"rl: per_device_train_batch_size {p} x gradient_accumulation_steps {a} x {n} process(es) = "
                 f"{p * a * n} completions = rl.prompts_per_step {p * a * n // g} x rl.num_generations {g} "
                 f"(micro_batch_size {p})")
    if "scale_rewards" in rl:
        old = rl.pop("scale_rewards")
        if str(old).lower() not in SCALE_REWARDS:
            return f"rl.scale_rewards {old}: a batch-wide std is not offered by rl.advantage"
        baseline, std = SCALE_REWARDS[str(old).lower()]
        rl["advantage"] = {"baseline": baseline, "std": std}
        notes.append(f"rl.scale_rewards {old} = rl.advantage {{baseline: {baseline}, std: {std}}}")
    return None


def read_recorded(data: dict[str, Any], processes: int | None) -> RecordedRecipe:
    """A recipe record (a mapping, as ``yaml.safe_load`` reads it) in today's keys; ``processes`` as
    :func:`processes_of` gives it. A record of today's version is validated as it is."""
    from spatialiq_train.core.recipes import RecipeError, recipe_from_dict

    if not is_earlier(data):
        return RecordedRecipe(recipe_from_dict(data).model_dump(mode="json"))
    if processes is None:
        return RecordedRecipe(data, True, problem="it records the per-device batch, and the number of processes "
                                                  "it ran on is not recorded (no checkpoint is left)")
    out, notes = copy.deepcopy(data), []
    if isinstance((out.get("sft") or {}).get("optimizer"), dict):
        _sft(out, processes, notes)
    problem = _rl(out, processes, notes) if isinstance(out.get("rl"), dict) else None
    if problem is None:
        try:
            return RecordedRecipe(recipe_from_dict(out).model_dump(mode="json"), True, notes)
        except RecipeError as exc:
            problem = f"read in today's keys it is not a valid recipe ({exc})"
    return RecordedRecipe(data, True, notes, problem)


def continue_with(old: dict[str, Any], keys: list[str]) -> str:
    """The overrides that set ``keys`` to their values in ``old`` (today's keys), as ``KEY=VALUE`` words."""
    import json

    from spatialiq_train.core.recipes import flatten

    flat = flatten(old)
    return " ".join(f"{k}={json.dumps(flat[k]) if not isinstance(flat[k], str) else flat[k]}" for k in keys
                    if k in flat)
