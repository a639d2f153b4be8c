"""The TRL engine as one mapper from a phase's plan (`core.plan.PhasePlan`): the `SFTConfig` / `GRPOConfig` keywords
(:func:`config_kwargs`) and the trainer's own settings (:func:`trainer_settings`: model, data, rewards, dynamic
sampling, advantages, warm start, early stopping, reporting). Pure: no TRL import, no I/O (the reward terms come from
`reward.trl`, which expands a combination name into its terms).

Every plan field is used by one of the two, or refused by :func:`refuse` when TRL cannot honour its value (by name,
with what to set instead); `TRL_REFUSED` lists those fields. The rest of `spatialiq_train.train` reads the plan
and these two outputs, never the recipe's fields.
"""

from __future__ import annotations

from typing import Any

from spatialiq_train.core.plan import PhasePlan, RlAlgorithm
from spatialiq_train.core.resolve import engine_refusal

LIGER_CONFIG = {"rope": True, "rms_norm": True, "swiglu": True, "cross_entropy": False,
                "fused_linear_cross_entropy": False}
"""Liger kernels applied to Qwen2.5-VL (transformers' `liger_kernel_config`); the loss stays TRL's fused LM head."""
OPTIMIZER_ARGS = ("learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2",
                  "max_grad_norm", "max_steps", "num_train_epochs")
"""Plan optimizer fields passed to TrainingArguments under their own name (warmup_start_factor: the trainer's)."""
VLLM_ARGS = {"mode": "vllm_mode", "gpu_memory_utilization": "vllm_gpu_memory_utilization",
             "tensor_parallel_size": "vllm_tensor_parallel_size", "max_model_len": "vllm_max_model_length",
             "enable_sleep_mode": "vllm_enable_sleep_mode", "server_host": "vllm_server_host",
             "server_port": "vllm_server_port"}
"""Plan generation field -> trl.GRPOConfig field (recorded in the config on every run; read by TRL with vLLM)."""
IMPORTANCE_ARGS = ("importance_sampling_correction", "importance_sampling_mode", "importance_sampling_clip_max",
                   "importance_sampling_clip_min")
TRL_REFUSED: dict[str, tuple[Any, str]] = {
    "algorithm.kl_estimator": ("k3", "TRL's per-token KL is Schulman's k3 estimator; set k3"),
    "execution.padding_free": (False, "TRL 1.16 refuses padding_free for vision datasets"),
}
"""Plan fields TRL honours only at one value: field -> (that value, what to set instead)."""


class EngineRefusal(ValueError):
    """A plan value the engine cannot honour; the message names the recipe key and what to set instead."""


def refuse(plan: PhasePlan, refused: dict[str, tuple[Any, str]], engine: str) -> None:
    """Raise `EngineRefusal` for the first field of ``refused`` whose plan value is not the one the engine runs, and
    for early-stopping values that would have no effect (RL: no validation loss to stop on; a min_delta without a
    patience)."""
    why = engine_refusal(plan, refused, engine)
    if why:
        raise EngineRefusal(why)


def reward_terms(a: RlAlgorithm) -> list[tuple[str, float, bool]]:
    """(reward name, weight, drives the dynamic-sampling filter) of an RL phase's algorithm: the recipe's weighted
    rewards, the overlong shaping term, then a weight-0 ``exact_match`` whose logged mean is the accuracy."""
    from reward.trl import make_trl_reward_funcs

    funcs, weights = make_trl_reward_funcs(dict(a.weights))  # a combination name expands to its terms
    terms = [(f.__name__, float(w), True) for f, w in zip(funcs, weights, strict=True)]
    if a.overlong:
        terms.append(("soft_overlong_punishment", a.penalty, False))
    if "exact_match" not in {name for name, _, _ in terms}:
        terms.append(("exact_match", 0.0, False))
    return terms


def overlong_window(a: RlAlgorithm) -> tuple[int, int]:
    """TRL's soft overlong punishment's (max completion length, soft buffer) from the algorithm."""
    return a.max_response_length, a.buffer_length


def _common(plan: PhasePlan, output_dir: str) -> dict[str, Any]:
    x, lg = plan.execution, plan.logging
    return {
        "output_dir": output_dir, "run_name": f"{plan.name}-{plan.phase}",
        "bf16": x.device == "cuda" and x.dtype == "bfloat16", "use_cpu": x.device == "cpu",
        "gradient_checkpointing": x.gradient_checkpointing, "logging_steps": lg.logging_steps,
        "logging_nan_inf_filter": False,  # a NaN loss is logged as NaN, and train.divergence stops the run
        "save_strategy": "steps", "save_steps": lg.save_steps, "save_total_limit": lg.save_total_limit,
        "save_only_model": False,
        "report_to": "none",  # the metrics callback reports the integrations under the namespaced names
        "seed": lg.seed, "data_seed": lg.seed, "dataloader_num_workers": 0,
        # whole global batches only: the epoch's tail that fills no micro-batch is dropped (NeMo-RL: drop_last)
        "dataloader_drop_last": True,
    }


def _validation(plan: PhasePlan) -> dict[str, Any]:
    val = plan.validation
    if val.every_steps is None or plan.data.eval_split is None:
        return {"eval_strategy": "no"}
    eval_batch = plan.batch.micro_batch if plan.phase == "sft" else plan.rl.num_generations
    out: dict[str, Any] = {"eval_strategy": "steps", "eval_steps": val.every_steps,
                           "per_device_eval_batch_size": eval_batch}
    if val.early_stopping_patience is not None:
        out.update(metric_for_best_model="eval_loss", greater_is_better=False, load_best_model_at_end=True)
    return out


def _rl(plan: PhasePlan, a: RlAlgorithm, reward_weights: list[float] | None) -> dict[str, Any]:
    g = plan.generation
    assert g is not None
    keys = ("num_generations", "num_iterations", "loss_type", "epsilon", "epsilon_high", "beta",
            "mask_truncated_completions")
    weights = reward_weights if reward_weights is not None else [w for _, w, _ in reward_terms(plan.rl)]
    return {
        **{k: getattr(a, k) for k in keys},
        "scale_rewards": "none",  # TRL's own advantages are replaced by the plan's (train.advantages)
        "max_completion_length": g.max_completion_length, "temperature": g.temperature, "top_p": g.top_p,
        "top_k": g.top_k, "use_vllm": g.vllm, **{trl: getattr(g, key) for key, trl in VLLM_ARGS.items()},
        **{f"vllm_{key}": getattr(a, key) for key in IMPORTANCE_ARGS},
        "reward_weights": list(weights), "log_completions": False,
    }


def config_kwargs(plan: PhasePlan, output_dir: str, reward_weights: list[float] | None = None) -> dict[str, Any]:
    """The `SFTConfig` (SFT) or `GRPOConfig` (RL) keywords of the plan; ``reward_weights`` replaces the plan's
    reward terms' weights (a caller's own reward functions). Refused values raise `EngineRefusal`."""
    refuse(plan, TRL_REFUSED, "TRL")
    o, b = plan.optimizer, plan.batch
    out = {**_common(plan, output_dir), **{k: getattr(o, k) for k in OPTIMIZER_ARGS},
           "per_device_train_batch_size": b.micro_batch, "gradient_accumulation_steps": b.accumulation,
           **_validation(plan), "model_init_kwargs": {"dtype": plan.execution.dtype}}
    if plan.model.attn_implementation:
        out["model_init_kwargs"]["attn_implementation"] = plan.model.attn_implementation
    if plan.execution.liger_kernel:
        out.update(use_liger_kernel=True, liger_kernel_config=dict(LIGER_CONFIG))
    if plan.data.sources:  # replay: each step reads the next global batch of the mix (the sequential sampler)
        out.update(train_sampling_strategy="sequential", **({"shuffle_dataset": False} if plan.phase == "rl" else {}))
    if plan.phase == "sft":
        a = plan.algorithm
        return {**out, "max_length": a.max_length, "completion_only_loss": a.assistant_only_loss,
                "remove_unused_columns": False}
    return {**out, "steps_per_generation": b.steps_per_generation, **_rl(plan, plan.rl, reward_weights)}


def trainer_settings(plan: PhasePlan) -> dict[str, Any]:
    """What the phase runner applies besides the TRL config: the policy, the data it reads, LoRA, the frozen vision
    tower, the warm-start schedule, early stopping, the metrics' integrations and, for RL, the rewards, dynamic
    sampling and advantages."""
    m, d, val, lg = plan.model, plan.data, plan.validation, plan.logging
    out: dict[str, Any] = {
        "model": {"name_or_path": m.name_or_path, "tiny": m.tiny, "init_from": m.init_from, "seed": lg.seed},
        "pixels": (m.min_pixels, m.max_pixels), "freeze_vision": m.freeze_vision,
        "lora": {"r": m.r, "alpha": m.alpha, "dropout": m.dropout, "target_modules": list(m.target_modules)}
        if m.lora else None,
        "data": {"traces_dir": d.traces_dir, "data_root": d.data_root, "train_split": d.train_split,
                 "eval_split": d.eval_split, "max_examples": d.max_examples, "eval_rows": val.max_samples,
                 "sources": [dict(x) for x in d.sources]},
        "warmup_start_factor": plan.optimizer.warmup_start_factor,
        "early_stopping": (val.early_stopping_patience, val.early_stopping_min_delta)
        if val.early_stopping_patience is not None else None,
        "report_to": list(lg.report_to), "wandb": {"project": lg.wandb_project, "mode": lg.wandb_mode},
        "processes": plan.batch.world_size,  # the perf callback's device count
        "output_dir": lg.output_dir,  # the commands' default --out
    }
    if plan.phase == "rl":
        a = plan.rl
        out.update(rewards=reward_terms(plan.rl), overlong=overlong_window(a),
                   dynamic_sampling=(a.dynamic_sampling, a.max_refill_rounds, a.batch_multiplier),
                   advantage=(a.baseline, a.std))
    return out
