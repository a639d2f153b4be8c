"""What a phase runs on this machine: the hardware decided once (`core.plan.Hardware`: GPU or CPU, the processes,
Liger and vLLM importable, the model's shape and the device's memory for the memory plan) and the phase's resolved
plan on it (`core.plan.resolve`), shown at the start of the run and kept beside the recipe record as ``plan.json``.

The efficiency settings the plan decides, each recorded with where it came from:

- micro-batch: the recipe's ``*.optimizer.micro_batch_size``; else on a GPU the memory plan's largest that fits
  (`core.memory_plan`), on the CPU each process's whole share;
- gradient checkpointing: the recipe's ``*.optimizer.gradient_checkpointing``; else on a GPU only when the memory
  plan needs it, off on the CPU;
- Liger kernels (RMSNorm, SwiGLU, rotary for Qwen2.5-VL; ``use_liger_kernel``): ``model.liger_kernel``; else on
  when the run is on a GPU and ``liger_kernel`` is importable. The fused linear cross-entropy is TRL 1.16's own
  fused LM head, which TRL always uses and which refuses Liger's (so that Liger kernel stays off);
- padding-free batches: not available. TRL 1.16's SFTTrainer refuses ``padding_free`` for vision datasets, and its
  GRPOTrainer has no padding-free path; Qwen2.5-VL's 3-D rotary positions come from ``get_rope_index`` over a
  padded batch. Recorded as off (`core.plan.PADDING_FREE_REASON`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

from spatialiq_train.core.memory_plan import ModelShape
from spatialiq_train.core.plan import PhasePlan
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.core.resolve import Hardware, resolve

log = logging.getLogger(__name__)

PLAN_FILE = "plan.json"


def world_size() -> int:
    """Processes of this run: the launcher's WORLD_SIZE (accelerate, torchrun, deepspeed), 1 when launched alone."""
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"environment WORLD_SIZE={raw!r} is not a whole number of processes") from None
    if value < 1:
        raise ValueError(f"environment WORLD_SIZE={value}: need at least 1 process")
    return value


def liger_importable() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def model_shape(model_path: str) -> ModelShape:
    """The decoder shape and parameter count of the model at ``model_path``, built on the meta device (no
    weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return ModelShape.from_config(config, sum(p.numel() for p in model.parameters()))


def zero3() -> bool:
    """Whether accelerate launched this process under DeepSpeed ZeRO stage 3 (its environment says so)."""
    return (os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"
            and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3")


def cuda_available() -> bool:
    """This machine has a CUDA device torch can use."""
    import torch

    return torch.cuda.is_available()


def hardware(*, gpu: bool | None = None, world: int | None = None, **known: Any) -> Hardware:
    """This machine as `core.resolve` sees it: CUDA (``gpu``; default: asked of torch), the launcher's processes,
    what is importable; ``known`` adds the model's shape and the device's memory for the memory plan."""
    return Hardware(gpu=cuda_available() if gpu is None else gpu, world_size=world_size() if world is None else world,
                    liger_importable=liger_importable(), vllm_importable=importlib.util.find_spec("vllm") is not None,
                    **known)


def phase_plan(recipe: Recipe, phase: str, *, gpu: bool, world: int | None = None,
               shape: ModelShape | None = None, device_bytes: float | None = None,
               tokens_per_sequence: int | None = None, state_shards: int = 1) -> PhasePlan:
    """The phase's plan on the hardware described by the arguments (``gpu``: a CUDA device is there; a dry run's
    preview, or a test's)."""
    hw = hardware(gpu=gpu, world=world, shape=shape, device_bytes=device_bytes, state_shards=state_shards,
                  tokens_per_sequence=tokens_per_sequence)
    return resolve(recipe, phase, hw)  # type: ignore[arg-type]


def machine_plan(recipe: Recipe, phase: str, model_path: str | None = None) -> PhasePlan:
    """The phase's plan on this machine. Where the plan leaves the micro-batch or checkpointing to a GPU
    (`PhasePlan.memory_open`) and the model is known, the memory plan sizes them from the model's shape (meta
    device) and the device's memory less what colocated vLLM holds (`PhasePlan.vllm_training_share`); under ZeRO-3
    the model state is planned as partitioned over the processes. `sft_config` / `grpo_config` and a run both use
    it, so they give the same TRL config. The recipe is read by `core.resolve.resolve` alone."""
    import dataclasses

    here = hardware(state_shards=world_size() if zero3() else 1)
    plan = resolve(recipe, phase, here)  # type: ignore[arg-type]
    if not (plan.memory_open and model_path):
        return plan
    import torch

    device = float(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    known = dataclasses.replace(here, shape=model_shape(model_path),
                                device_bytes=device * (1 - plan.vllm_training_share))
    return resolve(recipe, phase, known)  # type: ignore[arg-type]


def write_plan(folder: Path, plan: PhasePlan) -> None:
    """Keep the plan beside the recipe record (written whole, then renamed)."""
    import json

    from spatialiq_train.core.io import atomic_write_text

    atomic_write_text(folder / PLAN_FILE, json.dumps(plan.record(), indent=2) + "\n")
