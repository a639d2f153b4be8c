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
    """The SFT phase (the same for every recipe: the plan carries the values)."""
    return SFT_PHASE


def sft_config(recipe: Recipe, output_dir: str | Path, model_path: str | None = None) -> Any:
    """The TRL `SFTConfig` a run of the recipe's SFT phase trains with on this machine (`machine_plan`)."""
    return phase.phase_config(SFT_PHASE, machine_plan(recipe, "sft", model_path), output_dir)


def build_sft_trainer(
    recipe: Recipe,
    model_path: str,
    train_dataset: Any,
    output_dir: str | Path,
    eval_dataset: Any = None,
    callbacks: list[Any] | None = None,
) -> tuple[Any, Any]:
    """(SFTTrainer, processor) for `model_path` (a directory with safetensors weights or a hub id)."""
    return phase.build_phase_trainer(SFT_PHASE, recipe, model_path, train_dataset, output_dir, eval_dataset,
                                     callbacks)


def run_sft(
    recipe: Recipe,
    output_dir: str | Path,
    model_path: str | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    final_dir: str | Path | None = None,
    callbacks: list[Any] | None = None,
    extend: bool = False,
) -> Path:
    """Train (resuming from the newest checkpoint under `output_dir`) and export to `final_dir` (default
    `output_dir/final`). Datasets default to the recipe's `data.sft_split` / `data.eval_split`. A finished run is
    complete; a larger step budget needs `extend` (`phase.run_phase`)."""
    return phase.run_phase(SFT_PHASE, recipe, output_dir, model_path, train_dataset, eval_dataset, final_dir,
                           callbacks, extend)
