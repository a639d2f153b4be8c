"""Every field of a phase's plan, on each engine, is used or refused: no third outcome.

For each field of the SFT and the RL plan, the test changes that one value and maps the plan with each engine's
mapper (TRL: `train.mapper.config_kwargs` + `trainer_settings`; NeMo-RL: the generated config + the settings its
driver applies, `nemo.contract.plan_data`). Used: the engine's output differs. Refused: the mapper raises, naming the
value's recipe key. A field whose change leaves an engine's output as it was fails the test (a value dropped without
a word). The batch is re-split with the changed value (`core.batch`), as resolving would. Pure: no engine runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from spatialiq_train.core.batch import rl_batch, sft_batch
from spatialiq_train.core.plan import PhasePlan, replace_field
from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe
from spatialiq_train.core.resolve import Hardware, recipe_key, resolve
from spatialiq_train.nemo.config import grpo_config, sft_config
from spatialiq_train.nemo.contract import plan_data
from spatialiq_train.nemo.recipe_values import nemo_plan
from spatialiq_train.nemo.settings import DriverSettings
from spatialiq_train.train.mapper import config_kwargs, trainer_settings

BASE = ["model.tiny=false", "run.device=auto", "model.name_or_path=/models/tiny", "model.lora.enabled=true",
        "data.eval_split=val",
        "sft.validation.every_steps=2", "sft.validation.max_samples=8", "sft.validation.early_stopping_patience=2",
        "rl.validation.every_steps=2", "rl.validation.max_samples=8", "logging.save_steps=4",
        "sft.optimizer.max_steps=-1", "sft.optimizer.num_train_epochs=2", "rl.optimizer.max_steps=-1",
        "rl.optimizer.num_train_epochs=2", "sft.optimizer.lr_scheduler_type=constant_with_warmup",
        "sft.optimizer.warmup_steps=2", "sft.optimizer.warmup_start_factor=0.1", "rl.optimizer.warmup_start_factor=0.1",
        "vllm.importance_sampling_correction=true", "vllm.importance_sampling_mode=token_truncate",
        "rl.prompts_per_step=4", "sft.max_length=512", "vllm.max_model_len=256"]
"""tiny_cpu on a GPU machine (run.device=auto), with every switch on that makes other values count (LoRA,
validation, early stopping, importance sampling), bounded by epochs (so a step budget is a change), on one process."""
DERIVED = {"phase", "batch.accumulation", "batch.micro_source", "batch.num_generations"}
"""Fields computed from others (the split's accumulation, the micro-batch's source, the RL group size twice)."""
ALTERNATIVES: dict[str, Any] = {
    "model.name_or_path": "/models/other", "model.init_from": "/ckpt/sft", "model.attn_implementation": "sdpa",
    "model.target_modules": ("q_proj",), "data.eval_split": None, "data.train_split": "train",
    "data.max_examples": 64, "data.sources": ({"traces_dir": "a", "weight": 3.0, "data_root": None},
                                              {"traces_dir": "b", "weight": 1.0, "data_root": None}),
    "algorithm.loss_type": "grpo", "algorithm.kl_estimator": "k1",
    "algorithm.baseline": "leave_one_out", "algorithm.std": "none", "algorithm.weights": {"format": 1.0},
    "algorithm.importance_sampling_mode": "sequence_mask", "algorithm.importance_sampling_clip_min": 0.5,
    "algorithm.max_length": 1024, "optimizer.lr_scheduler_type": "cosine", "optimizer.max_steps": 8,
    "execution.device": "cpu", "execution.dtype": ("float32", "bfloat16"), "generation.mode": "server",
    "generation.max_model_len": 512, "generation.server_host": "10.0.0.2", "logging.report_to": ("wandb",),
    "logging.wandb_mode": "online", "logging.save_total_limit": None, "validation.early_stopping_patience": None,
    "batch.world_size": 2, "batch.micro_batch": 2, "batch.global_batch": 8, "batch.prompts_per_step": 2,
    "validation.every_steps": 4, "logging.save_steps": 8,
}
"""Changed values where flipping, scaling or stepping the value would not give a valid other one."""


def _other(dotted: str, value: Any) -> Any:
    if dotted in ALTERNATIVES:
        alt = ALTERNATIVES[dotted]
        if dotted == "execution.dtype":  # a pair: the one it is not
            return alt[1] if value == alt[0] else alt[0]
        if alt != value:
            return alt
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1 if value > 0 else 3
    if isinstance(value, float):
        return value / 2 if value else 0.25
    if value is None:
        return 7
    if isinstance(value, str):
        return value + "_other"
    raise AssertionError(f"{dotted}: no alternative for {value!r}; add one to ALTERNATIVES")


def _changed(plan: PhasePlan, dotted: str, value: Any) -> PhasePlan:
    """The plan with one value changed; a batch value re-splits the batch as `core.batch` does."""
    if not dotted.startswith("batch."):
        return replace_field(plan, dotted, value)
    b = dataclasses.replace(plan.batch, **{dotted.split(".", 1)[1]: value})
    if plan.phase == "sft":
        batch = sft_batch(b.global_batch, b.world_size, b.micro_batch, "recipe")
    else:
        batch = rl_batch(b.prompts_per_step or 0, b.num_generations or 0, b.world_size, b.micro_batch, "recipe",
                         whole_groups=False)
    return dataclasses.replace(plan, batch=batch)


def _trl(plan: PhasePlan) -> Any:
    return config_kwargs(plan, "out"), trainer_settings(plan)


def _nemo(plan: PhasePlan) -> Any:
    settings = DriverSettings(recipe="tiny_cpu", phase=plan.phase)
    make = grpo_config if plan.phase == "rl" else sft_config
    config = make(plan, settings, 1, plan.batch.world_size).config
    config.pop("spatialiq")
    return config, plan_data(plan, "tiny_cpu")


def _plans(phase: str) -> dict[str, PhasePlan]:
    recipe = load_recipe("tiny_cpu", BASE)
    trl = resolve(recipe, phase, Hardware(gpu=True, vllm_importable=True))  # type: ignore[arg-type]
    return {"trl": trl, "nemo": nemo_plan(recipe, phase, 1, False)}


MAPPERS = {"trl": _trl, "nemo": _nemo}


def outcome(engine: str, plan: PhasePlan, dotted: str) -> str:
    """``used`` or ``refused`` (the message names the recipe key's last part); a third outcome fails."""
    base = MAPPERS[engine](plan)
    try:
        changed = MAPPERS[engine](_changed(plan, dotted, _other(dotted, plan.fields()[dotted])))
    except ValueError as exc:
        leaf = recipe_key(plan.phase, dotted).rsplit(".", 1)[-1]
        named = leaf in str(exc) or dotted.split(".")[-1] in str(exc)
        assert named, f"{engine} refuses {dotted} without naming it: {exc}"
        return "refused"
    assert changed != base, f"{engine} drops {dotted} ({recipe_key(plan.phase, dotted)}) without a word"
    return "used"


@pytest.mark.parametrize("phase", ["sft", "rl"])
def test_every_plan_field_is_used_or_refused_by_each_engine(phase: str) -> None:
    plans = _plans(phase)
    fields = [f for f in plans["trl"].fields() if f not in DERIVED]
    if phase == "sft":
        fields = [f for f in fields if f not in ("batch.prompts_per_step",)]
    else:
        fields = [f for f in fields if f != "batch.global_batch"]
    table = {f: {e: outcome(e, plans[e], f) for e in MAPPERS} for f in fields}
    assert len(table) > 40
    # the values the algorithm is made of are used by both engines
    for f in ("algorithm.epsilon", "algorithm.beta", "optimizer.learning_rate", "optimizer.max_steps",
              "optimizer.num_train_epochs", "logging.seed") if phase == "rl" else ("optimizer.learning_rate",
                                                                                  "batch.global_batch"):
        assert table[f] == {"trl": "used", "nemo": "used"}, f


@pytest.mark.parametrize("path", sorted(SHIPPED_RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_maps_or_is_refused_by_name(path: Any) -> None:
    """Each shipped recipe's plan, on each engine, maps whole or is refused naming one recipe key."""
    recipe = load_recipe(path)
    for phase in ("sft", "rl"):
        trl = resolve(recipe, phase, Hardware(gpu=True, vllm_importable=True))  # type: ignore[arg-type]
        _trl(trl)
        try:
            _nemo(nemo_plan(recipe, phase, 1, False))
        except ValueError as exc:
            assert path.stem.startswith("tiny_cpu") and "model.tiny" in str(exc), exc


NOT_PLAN = {"description": "a note", "run.device": "the hardware a TRL run asks for: decides execution.device",
            "rl.optimizer.global_batch_size": "refused at validation: the RL batch is prompts_per_step x generations"}
"""Recipe keys no phase's plan holds, and why; the ``eval`` section is the evaluation's sampling (`eval sample`)."""


def test_every_recipe_key_is_a_plan_field_of_a_phase() -> None:
    """Every recipe value a phase trains with lands in a plan field (so the field x engine test above covers it)."""
    from spatialiq_train.core.recipes import flatten

    recipe = load_recipe("tiny_cpu", ["data.eval_split=val"])
    keys = set(flatten(recipe.model_dump()))
    covered = {recipe_key(phase, f) for phase in ("sft", "rl")
               for f in resolve(recipe, phase, Hardware(gpu=False)).fields()}  # type: ignore[arg-type]
    missing = sorted(k for k in keys - covered if not k.startswith("eval.") and k not in NOT_PLAN
                     and not k.startswith("reward.weights.") and not k.startswith("data.sources"))
    assert missing == [], missing
