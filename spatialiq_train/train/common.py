"""Pieces shared by the SFT and RL phases: policy path, processor, LoRA, checkpoints. They read the trainer settings
`train.mapper.trainer_settings` gives from the phase's plan, never the recipe."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def reporting(settings: dict[str, Any]) -> list[str]:
    """The plan's `logging.report_to` integrations that are installed (wandb offline unless the recipe asks for
    online; an explicit environment setting wins)."""
    from spatialiq_train.train.logging import report_to

    integrations = report_to(list(settings["report_to"]))
    if "wandb" in integrations:
        os.environ.setdefault("WANDB_MODE", settings["wandb"]["mode"])
        os.environ.setdefault("WANDB_PROJECT", settings["wandb"]["project"])
    return integrations


def base_model_if_built(settings: dict[str, Any], run_dir: Path) -> str | None:
    """`ensure_base_model` without building: None while the tiny model is not yet built under `run_dir/base`."""
    if settings["model"]["tiny"] and not (run_dir / "base" / "config.json").is_file():
        return None
    return ensure_base_model(settings, run_dir)


def check_init_from(value: str) -> str:
    """`rl.init_from` checked as every reader of a checkpoint checks it: a folder that exists (or a hub id), whose
    safetensors weights are finite (`core.weights.check_finite_weights` names a tensor holding NaN or infinity)."""
    from spatialiq_train.core.io import check_model_source
    from spatialiq_train.core.weights import check_finite_weights

    source = check_model_source(value, "rl.init_from")
    if Path(source).is_dir():
        check_finite_weights(source, "rl.init_from")
    return source


def ensure_base_model(settings: dict[str, Any], run_dir: Path) -> str:
    """Path or hub id of the starting policy; the tiny model is built once under `run_dir/base`."""
    model = settings["model"]
    if not model["tiny"]:
        return model["name_or_path"]
    from spatialiq_train.tiny import save_tiny

    base = run_dir / "base"
    if not (base / "config.json").is_file():
        save_tiny(base, seed=model["seed"])
    return str(base)


def load_processor_for(settings: dict[str, Any], model_path: str) -> Any:
    """The model's processor with the plan's pixel bounds."""
    from spatialiq_train.core.processor import load_processor

    return load_processor(model_path, *settings["pixels"])


def freeze_vision_tower(model: Any) -> int:
    """Stop gradients into the vision encoder; returns the number of frozen tensors."""
    frozen = 0
    for name, param in model.named_parameters():
        if ".visual." in f".{name}":
            param.requires_grad_(False)
            frozen += 1
    return frozen


def lora_config(settings: dict[str, Any]) -> Any:
    lora = settings["lora"]
    if lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                      target_modules=list(lora["target_modules"]), task_type="CAUSAL_LM")


def last_checkpoint(output_dir: Path) -> str | None:
    """The newest complete `checkpoint-N` folder under `output_dir`, if any (`train.checkpoints`)."""
    from spatialiq_train.train.checkpoints import last_complete_checkpoint

    found, _ = last_complete_checkpoint(output_dir)
    return str(found) if found is not None else None


def resume_from(trainer: Any, output_dir: Path) -> str | None:
    """The newest complete checkpoint under `output_dir`, with the trainer's model weights restored from it.

    transformers saves checkpoints under the original (hub) parameter names and renames them when a model
    is loaded with `from_pretrained`, but `Trainer._load_from_checkpoint` reads the raw file, matches no key
    of a Qwen2.5-VL model and silently keeps the phase's starting weights (optimizer, scheduler and step
    would still resume). So full-model checkpoints are loaded here through `from_pretrained` and copied in
    strictly, and the Trainer's own weight loading is skipped. LoRA adapters, DeepSpeed and FSDP checkpoints
    keep the Trainer's own loading.
    """
    from spatialiq_train.train.checkpoints import last_complete_checkpoint, set_aside

    found, skipped = last_complete_checkpoint(output_dir)
    set_aside(skipped, found)  # an incomplete checkpoint (a cut-off save) is named and moved aside, never resumed
    if found is None:
        return None
    ckpt = str(found)
    full = any((Path(ckpt) / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json"))
    if not full or getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        return ckpt
    from transformers import AutoModelForImageTextToText

    model = trainer.model
    dtype = next(model.parameters()).dtype
    saved = AutoModelForImageTextToText.from_pretrained(ckpt, dtype=dtype)
    model.load_state_dict(saved.state_dict(), strict=True)
    del saved
    trainer._load_from_checkpoint = lambda *args, **kwargs: log.info("model weights restored from %s", ckpt)
    return ckpt


def last_logged(log_history: list[dict[str, Any]], key: str) -> float | None:
    """The last value of `key` in a trainer state's log history, None when it was never logged (pure)."""
    for row in reversed(log_history):
        if isinstance(row.get(key), int | float):
            return row[key]
    return None


def restore_token_count(trainer: Any, checkpoint: str) -> None:
    """Continue `train/num_tokens` from the checkpoint on resume (an interruption or `--extend`).

    TRL's SFTTrainer counts it in `_total_train_tokens`, which starts at 0 in every new trainer and is not saved
    with a checkpoint, so a resumed run's count restarted; the count the checkpoint's trainer state last logged is
    put back. (GRPO logs `state.num_input_tokens_seen`, which the checkpoint restores itself.)"""
    state = Path(checkpoint) / "trainer_state.json"
    if not hasattr(trainer, "_total_train_tokens") or not state.is_file():
        return
    count = last_logged(json.loads(state.read_text(encoding="utf-8")).get("log_history") or [], "num_tokens")
    if count is not None:
        trainer._total_train_tokens = count
