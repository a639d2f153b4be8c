"""Supervised fine-tuning of Qwen2.5-VL with TRL's SFTTrainer, loss on the assistant tokens only.

Rows are conversational prompt-completion pairs with an `images` column (`train.data`), so TRL masks the
prompt (system, user and image tokens) and trains on the completion, i.e. the assistant turn, only. The shared
phase runner (`train.phase`) does the rest from the phase's plan: optimizer, validation, early stopping, resume,
export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spatialiq_train.core.plan import PhasePlan
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.train import common, mapper, phase
from spatialiq_train.train.plan import machine_plan


def _config_class(**kwargs: Any) -> Any:
    from trl import SFTConfig

    return SFTConfig(**kwargs)


def _make_trainer(plan: PhasePlan, model_path: str, args: Any, train_dataset: Any, eval_dataset: Any,
                  processor: Any, callbacks: list[Any]) -> Any:
    from trl import SFTTrainer

    return SFTTrainer(model=model_path, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                      processing_class=processor, peft_config=common.lora_config(mapper.trainer_settings(plan)),
                      callbacks=callbacks)


SFT_PHASE = phase.PhaseSpec(name="sft", config_class=_config_class, make_trainer=_make_trainer)


def sft_phase(recipe: Recipe | None = None) -> phase.PhaseSpec:
    """The SFT phase (the same for every recipe: the plan carries the values), for `phase.run_phase` and
    `phase.build_phase_trainer` (the trainer is TRL's `SFTTrainer`)."""
    return SFT_PHASE


def sft_config(recipe: Recipe, output_dir: str | Path, model_path: str | None = None) -> Any:
    """The TRL `SFTConfig` a run of the recipe's SFT phase trains with on this machine (`machine_plan`)."""
    return phase.phase_config(SFT_PHASE, machine_plan(recipe, "sft", model_path), output_dir)
