"""Supervised fine-tuning of Qwen2.5-VL with TRL's SFTTrainer, loss on the assistant tokens only.

Rows are conversational prompt-completion pairs with an `images` column (`train.data`), so TRL masks the
prompt (system, user and image tokens) and trains on the completion, i.e. the assistant turn, only. The shared
phase runner (`train.phase`) does the rest: optimizer section, validation, early stopping, resume, export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.train import common, phase


def _sft_kwargs(recipe: Recipe) -> dict[str, Any]:
    return {"max_length": recipe.sft.max_length, "completion_only_loss": recipe.sft.assistant_only_loss,
            "remove_unused_columns": False}


def _config_class(**kwargs: Any) -> Any:
    from trl import SFTConfig

    return SFTConfig(**kwargs)


def _make_trainer(recipe: Recipe) -> Any:
    def make(model_path: str, args: Any, train_dataset: Any, eval_dataset: Any, processor: Any,
             callbacks: list[Any]) -> Any:
        from trl import SFTTrainer

        return SFTTrainer(model=model_path, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                          processing_class=processor, peft_config=common.lora_config(recipe), callbacks=callbacks)

    return make


def sft_phase(recipe: Recipe) -> phase.PhaseSpec:
    return phase.PhaseSpec(name="sft", config_class=_config_class, phase_kwargs=_sft_kwargs,
                           make_trainer=_make_trainer(recipe),
                           eval_batch_size=lambda r, plan: plan.batch.micro_batch)


def sft_config(recipe: Recipe, output_dir: str | Path) -> Any:
    """The TRL `SFTConfig` for the recipe's `sft` section."""
    return phase.phase_config(sft_phase(recipe), recipe, output_dir)


def build_sft_trainer(
    recipe: Recipe,
    model_path: str,
    train_dataset: Any,
    output_dir: str | Path,
    eval_dataset: Any = None,
    callbacks: list[Any] | None = None,
) -> tuple[Any, Any]:
    """(SFTTrainer, processor) for `model_path` (a directory with safetensors weights or a hub id)."""
    return phase.build_phase_trainer(sft_phase(recipe), recipe, model_path, train_dataset, output_dir,
                                     eval_dataset, callbacks)


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
    return phase.run_phase(sft_phase(recipe), recipe, output_dir, model_path, train_dataset, eval_dataset,
                           final_dir, callbacks, extend)
