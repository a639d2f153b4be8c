"""The resolution of a phase's plan from a recipe on given hardware (pure): `resolve` and the recipe key behind each
plan field (`recipe_key`, what a refusal names). See `core.plan` for the plan itself.

The hardware is decided once, by the engine's entry point, as a `Hardware` (TRL: `train.plan.machine_plan`; NeMo-RL:
the cluster the config is generated for); the same recipe on the same hardware gives the same plan.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from spatialiq_train.core.batch import BatchPlan, rl_batch, sft_batch
from spatialiq_train.core.memory_plan import MemoryPlan, ModelShape, plan_micro_batch
from spatialiq_train.core.plan import (
    Phase,
    PhasePlan,
    PlanData,
    PlanExecution,
    PlanGeneration,
    PlanLogging,
    PlanModel,
    PlanOptimizer,
    PlanValidation,
    RlAlgorithm,
    SftAlgorithm,
    plan_fields,
    refuse_inert,
)
from spatialiq_train.core.recipe_model import Recipe

PROMPT_TEXT_TOKENS = 256
"""Memory plan: text tokens assumed per prompt besides its image (system prompt, instruction, question)."""


@dataclass(frozen=True)
class Hardware:
    """What a phase runs on, decided once by the engine's entry point: the device, the processes sharing the
    global batch, what is importable, and (for the GPU memory plan) the model's shape and the device's memory."""

    gpu: bool
    """A CUDA device is there for this run (the recipe's ``run.device`` then chooses: ``cpu`` trains on the CPU
    anyway, ``cuda`` is refused where there is none)."""
    world_size: int = 1
    device_from_recipe: bool = True
    """The recipe's ``run.device`` chooses the device (TRL); False: the engine's workers decide it (NeMo-RL's are
    GPU workers, and ``run.device`` is a TRL run's setting)."""
    liger_importable: bool = False
    vllm_importable: bool = False
    shape: ModelShape | None = None
    device_bytes: float | None = None
    state_shards: int = 1
    checkpointing_default: bool | None = None
    """A GPU run without a memory plan: gradient checkpointing when the recipe leaves it open (None: on)."""
    tokens_per_sequence: int | None = None
    whole_groups: bool = True
    sleep_mode: bool = False
    """Colocated vLLM sleeps while the policy trains when the recipe leaves ``vllm.enable_sleep_mode`` open."""
    """RL: each process generates whole groups of completions (TRL, whose dynamic sampling filters per process);
    False: the engine gathers every rollout and shares the batch as completions (NeMo-RL)."""
    """Tokens per training sequence measured on the data (None: `sequence_tokens_estimate`)."""



_GROUP_SECTIONS: dict[str, str] = {"model": "model", "logging": "logging"}
_RENAMED: dict[str, str] = {
    "model.lora": "model.lora.enabled", "model.r": "model.lora.r", "model.alpha": "model.lora.alpha",
    "model.dropout": "model.lora.dropout", "model.target_modules": "model.lora.target_modules",
    "model.init_from": "rl.init_from", "data.train_split": "data.{phase}_split",
    "algorithm.assistant_only_loss": "sft.assistant_only_loss", "algorithm.max_length": "sft.max_length",
    "algorithm.baseline": "rl.advantage.baseline", "algorithm.std": "rl.advantage.std",
    "algorithm.dynamic_sampling": "rl.dynamic_sampling.enabled",
    "algorithm.max_refill_rounds": "rl.dynamic_sampling.max_refill_rounds",
    "algorithm.batch_multiplier": "rl.dynamic_sampling.batch_multiplier",
    "algorithm.overlong": "rl.overlong.enabled", "algorithm.buffer_length": "rl.overlong.buffer_length",
    "algorithm.max_response_length": "rl.overlong.max_response_length", "algorithm.penalty": "rl.overlong.penalty",
    "algorithm.weights": "reward.weights", "batch.global_batch": "{phase}.optimizer.global_batch_size",
    "batch.micro_batch": "{phase}.optimizer.micro_batch_size", "batch.prompts_per_step": "rl.prompts_per_step",
    "batch.num_generations": "rl.num_generations", "batch.accumulation": "{phase}.optimizer.micro_batch_size",
    "batch.world_size": "the process count", "batch.micro_source": "{phase}.optimizer.micro_batch_size",
    "execution.device": "run.device", "execution.dtype": "model.dtype",
    "execution.gradient_checkpointing": "{phase}.optimizer.gradient_checkpointing",
    "execution.liger_kernel": "model.liger_kernel", "execution.padding_free": "(not a recipe key)",
    "generation.vllm": "vllm.enabled", "logging.output_dir": "run.output_dir", "logging.seed": "run.seed",
    "phase": "(the command)", "name": "name",
}


def recipe_key(phase: Phase, dotted: str) -> str:
    """The recipe key a plan field comes from (what a refusal tells the user to change)."""
    if dotted in _RENAMED:
        return _RENAMED[dotted].format(phase=phase)
    group, _, name = dotted.partition(".")
    if group in _GROUP_SECTIONS:
        return f"{_GROUP_SECTIONS[group]}.{name}"
    if group == "generation":
        sampling = name in ("max_completion_length", "temperature", "top_p", "top_k")
        return f"generation.{name}" if sampling else f"vllm.{name}"
    if group in ("optimizer", "validation"):
        return f"{phase}.{group}.{name}"
    if group == "algorithm":
        return f"rl.{name}" if not name.startswith("importance") else f"vllm.{name}"
    return f"data.{name}" if group == "data" else dotted


def _recipe_sets(recipe: Recipe, key: str) -> bool:
    """Whether the recipe (as written, overrides included) sets ``key`` rather than leaving the model default."""
    node: Any = recipe
    *parents, leaf = key.split(".")
    for part in parents:
        if not hasattr(node, "model_fields_set") or part not in node.model_fields_set:
            return False
        node = getattr(node, part)
    return hasattr(node, "model_fields_set") and leaf in node.model_fields_set


def _uses_gpu(recipe: Recipe, hw: Hardware) -> bool:
    """The device decision, once: the GPU when there is one, unless ``run.device`` says cpu; ``cuda`` without one
    is refused."""
    if not hw.device_from_recipe:
        return hw.gpu
    if recipe.run.device == "cuda" and not hw.gpu:
        raise ValueError("recipe run.device is 'cuda' but torch sees no CUDA device (set run.device=auto or cpu)")
    return hw.gpu and recipe.run.device != "cpu"


def device_not_chosen(recipe: Recipe, hardware: Hardware, engine: str) -> str | None:
    """Where ``engine``'s workers decide the device (``Hardware.device_from_recipe`` False), a ``run.device`` other
    than auto is not used: the sentence the engine's config generator shows for it (never dropped in silence), or
    None."""
    if hardware.device_from_recipe or recipe.run.device == "auto":
        return None
    return (f"run.device = {recipe.run.device!r} is not used by {engine}: its workers decide the device (run.device "
            "chooses a TRL run's)")


def check_execution(recipe: Recipe, hardware: Hardware) -> None:
    """The device and Liger decisions alone, for what a command refuses before any work: a ValueError naming the
    recipe key (the same as `resolve` raises)."""
    _liger(recipe, dataclasses.replace(hardware, gpu=_uses_gpu(recipe, hardware)))


def _liger(recipe: Recipe, hw: Hardware) -> tuple[bool, str]:
    wanted = recipe.model.liger_kernel
    if wanted is True and not hw.gpu:
        raise ValueError("model.liger_kernel=true: Liger's kernels are Triton GPU kernels and this run is on the CPU "
                         f"(run.device {recipe.run.device}); set model.liger_kernel=null (Liger is then used on a GPU "
                         "where it is installed) or false")
    if wanted is True and not hw.liger_importable:
        raise ValueError("model.liger_kernel is true but liger_kernel is not installed (pip install "
                         "'spatialiq-train[gpu]' or liger-kernel), or set model.liger_kernel=null")
    if wanted is not None:
        return bool(wanted), "recipe"
    return hw.gpu and hw.liger_importable, "hardware"


def sequence_tokens_estimate(recipe: Recipe, phase: Phase) -> int:
    """Tokens per training sequence the memory plan assumes: one view at the recipe's pixel budget, the prompt's
    text and the completion (RL: the new-token budget; SFT: max_length when set, else the new-token budget)."""
    from spatialiq_train.core.processor import FACTOR

    if phase == "sft" and recipe.sft.max_length is not None:
        return recipe.sft.max_length
    return recipe.model.max_pixels // (FACTOR * FACTOR) + PROMPT_TEXT_TOKENS + recipe.generation.max_completion_length


def _batch(recipe: Recipe, phase: Phase, hw: Hardware, liger: bool) -> tuple[BatchPlan, bool, str, MemoryPlan | None]:
    """The batch split and gradient checkpointing on this hardware (`core.batch`, `core.memory_plan`)."""
    opt = (recipe.sft if phase == "sft" else recipe.rl).optimizer

    def split(micro: int | None, source: Any = None) -> BatchPlan:
        if phase == "sft":
            return sft_batch(opt.global_batch_size or 0, hw.world_size, micro, source)
        return rl_batch(recipe.rl.prompts_per_step or 0, recipe.rl.num_generations, hw.world_size, micro, source,
                        hw.whole_groups)

    whole = split(None)
    memory, micro, micro_source = None, opt.micro_batch_size, None
    ckpt, ckpt_source = opt.gradient_checkpointing, "recipe"
    if hw.gpu and (micro is None or ckpt is None):
        if hw.shape is not None and hw.device_bytes:
            common = {"trainable_share": 0.0 if recipe.model.lora.enabled else 1.0,
                      "reference": phase == "rl" and recipe.rl.beta != 0, "liger": liger,
                      "state_shards": hw.state_shards}
            tokens = hw.tokens_per_sequence or sequence_tokens_estimate(recipe, phase)
            if micro is not None:  # the recipe's micro-batch: checkpointing only if it does not fit without
                bare = plan_micro_batch(hw.shape, micro, tokens, hw.device_bytes, checkpointing=False, **common)
                needs = bare.micro_batch < micro or not bare.fits
                memory = plan_micro_batch(hw.shape, micro, tokens, hw.device_bytes,
                                          checkpointing=needs if ckpt is None else ckpt, **common)
            else:
                memory = plan_micro_batch(hw.shape, whole.per_process, tokens, hw.device_bytes, checkpointing=ckpt,
                                          **common)
                micro, micro_source = memory.micro_batch, "memory plan"
            if ckpt is None:
                ckpt, ckpt_source = memory.gradient_checkpointing, "hardware"
        else:
            micro_source = None if micro is not None else "GPU default"
            micro = micro if micro is not None else 1
            if ckpt is None:
                ckpt = True if hw.checkpointing_default is None else hw.checkpointing_default
                ckpt_source = "hardware"
    if ckpt is None:
        ckpt, ckpt_source = False, "hardware"
    return split(micro, micro_source), bool(ckpt), ckpt_source, memory


def plan_model(recipe: Recipe, phase: Phase) -> PlanModel:
    """The phase's model: what it starts from, its pixel budget, LoRA (no hardware decides it)."""
    m = recipe.model
    return PlanModel(m.name_or_path, m.tiny, recipe.rl.init_from if phase == "rl" else None, m.attn_implementation,
                     m.min_pixels, m.max_pixels, m.freeze_vision, m.lora.enabled, m.lora.r, m.lora.alpha,
                     m.lora.dropout, tuple(m.lora.target_modules))


def algorithm(recipe: Recipe, phase: Phase) -> SftAlgorithm | RlAlgorithm:
    """The phase's algorithm: the part of its plan no hardware decides (the RL rewards, shaping and loss)."""
    if phase == "sft":
        return SftAlgorithm(recipe.sft.assistant_only_loss, recipe.sft.max_length)
    r, v = recipe.rl, recipe.vllm
    return RlAlgorithm(
        num_generations=r.num_generations, num_iterations=r.num_iterations, loss_type=r.loss_type,
        epsilon=r.epsilon, epsilon_high=r.epsilon_high, beta=r.beta, kl_estimator=r.kl_estimator,
        baseline=r.advantage.baseline, std=r.advantage.std, mask_truncated_completions=r.mask_truncated_completions,
        dynamic_sampling=r.dynamic_sampling.enabled, max_refill_rounds=r.dynamic_sampling.max_refill_rounds,
        batch_multiplier=r.dynamic_sampling.batch_multiplier, overlong=r.overlong.enabled,
        buffer_length=r.overlong.buffer_length,
        max_response_length=r.overlong.max_response_length or recipe.generation.max_completion_length,
        penalty=r.overlong.penalty, weights={k: float(w) for k, w in recipe.reward.weights.items()},
        importance_sampling_correction=v.importance_sampling_correction,
        importance_sampling_mode=v.importance_sampling_mode,
        importance_sampling_clip_max=v.importance_sampling_clip_max,
        importance_sampling_clip_min=v.importance_sampling_clip_min)


def _provenance(recipe: Recipe, plan: PhasePlan, decided: dict[str, str]) -> dict[str, str]:
    out = {}
    for dotted in plan_fields(plan):
        key = recipe_key(plan.phase, dotted)
        out[dotted] = decided.get(dotted) or ("recipe" if _recipe_sets(recipe, key) else "default")
    return out


def resolve(recipe: Recipe, phase: Phase, hardware: Hardware) -> PhasePlan:
    """The plan of ``phase`` on ``hardware``; raises ValueError or `core.batch.BatchError` naming the recipe key
    for a value that cannot run there (a batch the processes cannot share, Liger asked for but absent)."""
    hardware = dataclasses.replace(hardware, gpu=_uses_gpu(recipe, hardware))
    m, d, section = recipe.model, recipe.data, (recipe.sft if phase == "sft" else recipe.rl)
    opt, val, v = section.optimizer, section.validation, recipe.vllm
    liger, liger_source = _liger(recipe, hardware)
    batch, ckpt, ckpt_source, memory = _batch(recipe, phase, hardware, liger)
    validates = val.every_steps is not None and d.eval_split is not None
    vllm = phase == "rl" and v.enabled and hardware.gpu and hardware.vllm_importable
    dtype = m.dtype if m.dtype != "auto" else ("bfloat16" if hardware.gpu else "float32")
    lg = recipe.logging
    plan = PhasePlan(
        phase=phase, name=recipe.name,
        model=plan_model(recipe, phase),
        data=PlanData(d.traces_dir, d.data_root, d.sft_split if phase == "sft" else d.rl_split,
                      d.eval_split if validates else None, d.max_examples,
                      tuple(s.model_dump() for s in d.sources)),
        algorithm=algorithm(recipe, phase), batch=batch,
        optimizer=PlanOptimizer(opt.learning_rate, opt.lr_scheduler_type, opt.warmup_steps, opt.warmup_start_factor,
                                opt.weight_decay, opt.adam_beta1, opt.adam_beta2, opt.max_grad_norm, opt.max_steps,
                                opt.num_train_epochs),
        validation=PlanValidation(val.every_steps, val.max_samples, val.early_stopping_patience,
                                  val.early_stopping_min_delta),
        generation=PlanGeneration(**recipe.generation.model_dump(), vllm=vllm, mode=v.mode,
                                  gpu_memory_utilization=v.gpu_memory_utilization,
                                  tensor_parallel_size=v.tensor_parallel_size, max_model_len=v.max_model_len,
                                  enable_sleep_mode=hardware.sleep_mode if v.enable_sleep_mode is None
                                  else v.enable_sleep_mode, server_host=v.server_host,
                                  server_port=v.server_port) if phase == "rl" else None,
        execution=PlanExecution("cuda" if hardware.gpu else "cpu", dtype, ckpt, liger, False),
        logging=PlanLogging(tuple(lg.report_to), lg.wandb_project, lg.wandb_mode, lg.logging_steps, lg.save_steps,
                            lg.save_total_limit, recipe.run.output_dir, recipe.run.seed),
        memory=memory)
    decided = {"execution.device": "recipe" if hardware.device_from_recipe and recipe.run.device != "auto"
               else "hardware",
               "batch.world_size": "hardware", "batch.accumulation": "hardware",
               "execution.gradient_checkpointing": ckpt_source, "execution.liger_kernel": liger_source,
               "execution.padding_free": "hardware", "generation.vllm": "hardware", "phase": "recipe",
               "name": "recipe", "batch.micro_source": "hardware"}
    if v.enable_sleep_mode is None and phase == "rl":
        decided["generation.enable_sleep_mode"] = "hardware"
    if m.dtype == "auto":
        decided["execution.dtype"] = "hardware"
    if batch.micro_source in ("memory plan", "GPU default", "whole share"):
        decided["batch.micro_batch"] = "hardware"
    return dataclasses.replace(plan, provenance=_provenance(recipe, plan, decided))


def steps_per_epoch(plan: PhasePlan, rows: int) -> int:
    """Optimizer steps in one pass over ``rows`` training rows: whole global batches only (the tail that does not
    fill one is left for the next epoch's shuffle, as NeMo-RL's ``drop_last`` loader does)."""
    per_step = plan.batch.global_batch if plan.phase == "sft" else plan.batch.prompts_per_step or 1
    return rows // per_step


def step_budget(plan: PhasePlan, rows: int) -> int:
    """The steps the phase trains: ``max_steps`` when set, else ``ceil(num_train_epochs x steps per epoch)``."""
    if plan.optimizer.max_steps > 0:
        return plan.optimizer.max_steps
    return math.ceil(plan.optimizer.num_train_epochs * steps_per_epoch(plan, rows))


def engine_refusal(plan: PhasePlan, refused: dict[str, tuple[Any, str]], engine: str) -> str | None:
    """Why ``engine`` cannot train ``plan``, in one line naming the recipe key and what to set instead, or None: a
    value no engine acts on (`core.plan.refuse_inert`), else the first field of ``refused`` (dotted plan field ->
    (the one value the engine runs, advice)) whose plan value differs. Both engines' mappers call it."""
    try:
        refuse_inert(plan)
    except ValueError as exc:
        return str(exc)
    values = plan.fields()
    for dotted, (allowed, advice) in refused.items():
        if dotted in values and values[dotted] != allowed:
            return (f"{recipe_key(plan.phase, dotted)} = {values[dotted]!r}: {engine} cannot honour it "
                    f"({advice})")
    return None
