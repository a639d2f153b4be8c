"""Supervised fine-tuning of Qwen2.5-VL with TRL's SFTTrainer, loss on the assistant tokens only.

Rows are conversational prompt-completion pairs with an `images` column (`train.data`), so TRL masks the
prompt (system, user and image tokens) and trains on the completion, i.e. the assistant turn, only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from spatialiq_train.recipes import Recipe
from spatialiq_train.train import common

log = logging.getLogger(__name__)


def sft_config(recipe: Recipe, output_dir: str | Path) -> Any:
    """The TRL `SFTConfig` for the recipe's `sft` section."""
    from trl import SFTConfig

    s = recipe.sft
    return SFTConfig(
        **common.trainer_common(recipe, Path(output_dir), s.gradient_checkpointing),
        learning_rate=s.learning_rate,
        lr_scheduler_type=s.lr_scheduler_type,
        warmup_steps=s.warmup_steps,
        num_train_epochs=s.num_train_epochs,
        max_steps=s.max_steps,
        per_device_train_batch_size=s.per_device_train_batch_size,
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        weight_decay=s.weight_decay,
        max_grad_norm=s.max_grad_norm,
        max_length=s.max_length,
        completion_only_loss=s.assistant_only_loss,
        model_init_kwargs=common.model_init_kwargs(recipe),
        remove_unused_columns=False,
    )


def build_sft_trainer(
    recipe: Recipe,
    model_path: str,
    train_dataset: Any,
    output_dir: str | Path,
    eval_dataset: Any = None,
    callbacks: list[Any] | None = None,
) -> tuple[Any, Any]:
    """(SFTTrainer, processor) for `model_path` (a directory with safetensors weights or a hub id)."""
    from trl import SFTTrainer

    from spatialiq_train.train.logging import make_metrics_callback

    out = Path(output_dir)
    processor = common.load_processor_for(recipe, model_path)
    trainer = SFTTrainer(
        model=model_path,
        args=sft_config(recipe, out),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=processor,
        peft_config=common.lora_config(recipe),
        callbacks=[make_metrics_callback(out / "metrics.jsonl", "sft"), *(callbacks or [])],
    )
    if recipe.model.freeze_vision:
        common.freeze_vision_tower(trainer.model)
    return trainer, processor


def run_sft(
    recipe: Recipe,
    output_dir: str | Path,
    model_path: str | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    final_dir: str | Path | None = None,
    callbacks: list[Any] | None = None,
) -> Path:
    """Train (resuming from the newest checkpoint under `output_dir`) and export to `final_dir` (default
    `output_dir/final`). Datasets default to the recipe's `data.sft_split` / `data.eval_split`."""
    from spatialiq_train.train.data import load_split

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    d = recipe.data
    model_path = model_path or common.ensure_base_model(recipe, out)
    if train_dataset is None:
        train_dataset = load_split(d.traces_dir, d.sft_split, d.data_root, "sft", d.max_examples)
    trainer, processor = build_sft_trainer(recipe, model_path, train_dataset, out, eval_dataset, callbacks)
    return common.train_and_export(trainer, processor, out, Path(final_dir) if final_dir else None, "SFT")
