"""What a phase runs on this hardware: the recipe's global batch split over the processes (`core.batch`) and the
GPU efficiency settings (micro-batch sized to memory, Liger kernels, gradient checkpointing), decided once per
phase, shown at the start of the run and kept beside the recipe record as ``plan.json``.

Each efficiency setting is optional and recorded with why it was chosen:

- micro-batch: the recipe's ``*.optimizer.micro_batch_size``; else on a GPU the memory plan's largest that fits
  (`core.memory_plan`), on the CPU each process's whole share;
- gradient checkpointing: the recipe's ``*.optimizer.gradient_checkpointing``; else on a GPU only when the memory
  plan needs it, off on the CPU;
- Liger kernels (RMSNorm, SwiGLU, rotary for Qwen2.5-VL; ``use_liger_kernel``): ``model.liger_kernel``; else on
  when the run is on a GPU and ``liger_kernel`` is importable. The fused linear cross-entropy is TRL 1.16's own
  fused LM head, which TRL always uses and which refuses Liger's (so that Liger kernel stays off);
- padding-free batches: not available. TRL 1.16's SFTTrainer refuses ``padding_free`` for vision datasets, and its
  GRPOTrainer has no padding-free path; Qwen2.5-VL's 3-D rotary positions come from ``get_rope_index`` over a
  padded batch. Recorded as off, with that reason.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spatialiq_train.core.batch import BatchPlan, rl_batch, sft_batch
from spatialiq_train.core.memory_plan import MemoryPlan, ModelShape, plan_micro_batch
from spatialiq_train.core.recipe_model import Recipe

log = logging.getLogger(__name__)

PLAN_FILE = "plan.json"
PROMPT_TEXT_TOKENS = 256
"""Memory plan: text tokens assumed per prompt besides its image (system prompt, instruction, question)."""
PADDING_FREE_REASON = ("TRL 1.16 refuses padding_free for vision datasets (SFTTrainer) and GRPOTrainer has no "
                       "padding-free batches; Qwen2.5-VL's 3-D rotary positions are computed over the padded batch")
LIGER_CONFIG = {"rope": True, "rms_norm": True, "swiglu": True, "cross_entropy": False,
                "fused_linear_cross_entropy": False}
"""Liger kernels applied to Qwen2.5-VL (transformers' `liger_kernel_config`); the loss stays TRL's fused LM head."""


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


@dataclass(frozen=True)
class PhasePlan:
    """The batch split and the efficiency settings of one phase on this hardware."""

    batch: BatchPlan
    gradient_checkpointing: bool
    gradient_checkpointing_source: str
    liger_kernel: bool
    liger_source: str
    padding_free: bool = False
    padding_free_reason: str = PADDING_FREE_REASON
    memory: MemoryPlan | None = None
    notes: list[str] = field(default_factory=list)

    def trl_args(self) -> dict[str, Any]:
        """Batch and kernel keywords for TRL (gradient checkpointing goes through `common.trainer_common`)."""
        out = self.batch.trl_args()
        if self.liger_kernel:
            out.update(use_liger_kernel=True, liger_kernel_config=dict(LIGER_CONFIG))
        return out

    def record(self) -> dict[str, Any]:
        return {"batch": self.batch.record(),
                "gradient_checkpointing": {"on": self.gradient_checkpointing,
                                           "source": self.gradient_checkpointing_source},
                "liger_kernel": {"on": self.liger_kernel, "source": self.liger_source,
                                 "kernels": LIGER_CONFIG if self.liger_kernel else {}},
                "padding_free": {"on": self.padding_free, "reason": self.padding_free_reason},
                "memory_plan": self.memory.record() if self.memory else None}

    def describe(self) -> str:
        extra = [f"gradient checkpointing {'on' if self.gradient_checkpointing else 'off'} "
                 f"({self.gradient_checkpointing_source})",
                 f"Liger kernels {'on' if self.liger_kernel else 'off'} ({self.liger_source})"]
        if self.memory is not None:
            extra.append(f"memory plan ~{self.memory.estimate_gib:.0f} of {self.memory.device_gib:.0f} GiB")
        return f"{self.batch.describe()}; {'; '.join(extra)}"


def _liger(recipe: Recipe, gpu: bool) -> tuple[bool, str]:
    wanted = recipe.model.liger_kernel
    if wanted is False:
        return False, "model.liger_kernel false"
    if wanted and not liger_importable():
        raise RuntimeError("model.liger_kernel is true but liger_kernel is not installed (pip install "
                           "'spatialiq-train[gpu]' or liger-kernel), or set model.liger_kernel=null")
    if wanted:
        return True, "model.liger_kernel true"
    if not gpu:
        return False, "CPU run (Liger's kernels are Triton GPU kernels)"
    if not liger_importable():
        return False, "liger_kernel is not installed"
    return True, "GPU run with liger_kernel installed"


def model_shape(model_path: str) -> ModelShape:
    """The decoder shape and parameter count of the model at ``model_path``, built on the meta device (no
    weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return ModelShape.from_config(config, sum(p.numel() for p in model.parameters()))


def sequence_tokens_estimate(recipe: Recipe, phase: str) -> int:
    """Tokens per training sequence the memory plan assumes: one view at the recipe's pixel budget, the prompt's
    text and the completion (RL: the new-token budget; SFT: max_length when set, else the new-token budget)."""
    from spatialiq_train.core.processor import FACTOR

    image = recipe.model.max_pixels // (FACTOR * FACTOR)
    if phase == "sft" and recipe.sft.max_length is not None:
        return recipe.sft.max_length
    return image + PROMPT_TEXT_TOKENS + recipe.generation.max_completion_length


def zero3() -> bool:
    """Whether accelerate launched this process under DeepSpeed ZeRO stage 3 (its environment says so)."""
    return (os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"
            and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3")


def phase_plan(recipe: Recipe, phase: str, *, gpu: bool, world: int | None = None,
               shape: ModelShape | None = None, device_bytes: float | None = None,
               tokens_per_sequence: int | None = None, state_shards: int = 1) -> PhasePlan:
    """The phase's plan. On a GPU with no micro-batch or checkpointing in the recipe, ``shape`` and
    ``device_bytes`` feed the memory plan (without them: micro-batch 1 and checkpointing on, as before)."""
    world = world_size() if world is None else world
    section = recipe.sft if phase == "sft" else recipe.rl
    opt = section.optimizer
    liger, liger_source = _liger(recipe, gpu)

    def split(micro: int | None, source: Any = None) -> BatchPlan:
        if phase == "sft":
            return sft_batch(opt.global_batch_size or 0, world, micro, source)
        return rl_batch(recipe.rl.prompts_per_step or 0, recipe.rl.num_generations, world, micro, source)

    whole = split(None)
    memory = None
    micro, micro_source = opt.micro_batch_size, None
    ckpt, ckpt_source = opt.gradient_checkpointing, "recipe"
    if gpu and (micro is None or ckpt is None):
        if shape is not None and device_bytes:
            trainable = 0.0 if recipe.model.lora.enabled else 1.0
            reference = phase == "rl" and recipe.rl.beta != 0
            tokens = tokens_per_sequence or sequence_tokens_estimate(recipe, phase)
            common = {"trainable_share": trainable, "reference": reference, "liger": liger,
                      "state_shards": state_shards}
            if micro is not None:  # the recipe's micro-batch: checkpointing only if it does not fit without
                bare = plan_micro_batch(shape, micro, tokens, device_bytes, checkpointing=False, **common)
                needs = bare.micro_batch < micro or not bare.fits
                memory = plan_micro_batch(shape, micro, tokens, device_bytes,
                                          checkpointing=needs if ckpt is None else ckpt, **common)
            else:
                memory = plan_micro_batch(shape, whole.per_process, tokens, device_bytes, checkpointing=ckpt,
                                          **common)
                micro, micro_source = memory.micro_batch, "memory plan"
            if ckpt is None:
                ckpt, ckpt_source = memory.gradient_checkpointing, "memory plan"
        else:
            micro = micro if micro is not None else 1
            micro_source = None if opt.micro_batch_size is not None else "GPU default"
            if ckpt is None:
                ckpt, ckpt_source = True, "GPU default without a memory plan (model shape or memory unknown)"
    if ckpt is None:
        ckpt, ckpt_source = False, "CPU default"
    batch = split(micro, micro_source)
    return PhasePlan(batch, bool(ckpt), ckpt_source, liger, liger_source, memory=memory)


def gpu_phase_plan(recipe: Recipe, phase: str, model_path: str | None) -> PhasePlan:
    """:func:`phase_plan` on this machine: a GPU run reads the model's shape (meta device) and the device's
    memory for the memory plan when the recipe leaves the micro-batch or checkpointing open, less what colocated
    vLLM holds (:func:`vllm_share`); under ZeRO-3 the model state is planned as partitioned over the processes."""
    from spatialiq_train.train.common import on_gpu

    gpu = on_gpu(recipe)
    opt = (recipe.sft if phase == "sft" else recipe.rl).optimizer
    shape = device = None
    if gpu and (opt.micro_batch_size is None or opt.gradient_checkpointing is None) and model_path:
        import torch

        shape = model_shape(model_path)
        device = float(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
        device *= 1 - vllm_share(recipe, phase)
    return phase_plan(recipe, phase, gpu=gpu, shape=shape, device_bytes=device,
                      state_shards=world_size() if zero3() else 1)


def vllm_share(recipe: Recipe, phase: str) -> float:
    """The share of the GPU that colocated vLLM holds while the RL phase trains (0 with sleep mode, which frees
    its weights and cache during the optimizer step, or when vLLM does not run here)."""
    v = recipe.vllm
    if phase != "rl" or not v.enabled or v.mode != "colocate" or v.enable_sleep_mode:
        return 0.0
    return v.gpu_memory_utilization if importlib.util.find_spec("vllm") is not None else 0.0


def write_plan(folder: Path, plan: PhasePlan) -> None:
    """Keep the plan beside the recipe record (written whole, then renamed)."""
    import json

    from spatialiq_train.core.io import atomic_write_text

    atomic_write_text(folder / PLAN_FILE, json.dumps(plan.record(), indent=2) + "\n")
