"""Complete NeMo-RL v0.7.0 configs (GRPO/DAPO and SFT) from a project recipe: pure functions, no I/O.

The generated config is self-contained (no `defaults:` chain into the container's examples, no `${...}`
interpolation), so every value NeMo-RL runs with is visible in one file, and it is checked against the key list
(`keys.check_config`) before anyone writes it. Recipe values come through `recipe_values.values_from_recipe`; the
project's pieces (the `spatialiq` section, data entries, environments, checkpoint metric) come from
`spatialiq_train.nemo.contract`, which the driver uses to check them.

Dynamic sampling at its cap: NeMo-RL v0.7.0 does not fill the batch when `grpo.dynamic_sampling_max_gen_batches`
extra generation batches still leave fewer than `num_prompts_per_step` prompt groups with varying reward; it
raises `ValueError("Dynamic sampling has reached the maximum allowed number of batches ...")` and the run stops.
The driver (`spatialiq nemo rl`) exits with `driver.EXIT_DYNAMIC_SAMPLING_CAP` (3) for it; the last checkpoint stays,
so a rerun resumes, but the same data will likely stop again: raise the cap, `num_generations`, or the data's
difficulty spread first. (The TRL path differs: it fills the empty slots with loss-masked groups.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from spatialiq_train.nemo.contract import (
    checkpoint_metric,
    data_entries,
    env_entries,
    phase_values,
    plan_data,
    validates,
)
from spatialiq_train.nemo.recipe_values import RELEASED_GRPO, RELEASED_SFT, NemoValues, PhaseValues, adv_estimator
from spatialiq_train.nemo.settings import SECTION, DataPlan, DriverSettings, Phase


@dataclass(frozen=True)
class Parallelism:
    policy_tp: int
    vllm_tp: int
    activation_checkpointing: bool


@dataclass
class Built:
    """A generated config and the notes a user should read (deviations, approximations)."""

    config: dict[str, Any]
    algorithm: Literal["grpo", "sft"]
    notes: list[str] = field(default_factory=list)


def model_size_b(name: str) -> float | None:
    """Parameter count in billions read from a model name (`Qwen/Qwen2.5-VL-32B-Instruct` -> 32.0)."""
    hit = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", PurePosixPath(name).name)
    return float(hit.group(1)) if hit else None


def parallelism(model_name: str, gpus_per_node: int) -> Parallelism:
    """Tensor-parallel sizes for the policy (DTensor/FSDP2) and colocated vLLM; see docs/cluster.md.

    32B: the policy shards each layer over 4 GPUs of a node (TP 4, FSDP2 across nodes) with activation
    checkpointing; vLLM TP 2 holds 32 GB of bf16 weights per GPU. NeMo-RL's own 32B recipes on 4-GPU nodes use
    the same sizes (grpo-qwen2.5-32b-32n4g-fsdp2tp4). 7B and smaller: FSDP2 only, vLLM TP 1.
    """
    size = model_size_b(model_name) or 0.0
    policy_tp, vllm_tp, ckpt = (4, 2, True) if size >= 20 else (1, 1, False)
    while gpus_per_node % policy_tp:
        policy_tp //= 2
    return Parallelism(policy_tp, min(vllm_tp, gpus_per_node), ckpt)


def lr_schedule(kind: str, warmup: float, total: int | None, start: float) -> tuple[list[dict] | None, str | None]:
    """NeMo-RL `policy.scheduler` for a recipe schedule: (SequentialLR parts or None = constant LR, note).

    `start` is the warm-up's first learning-rate factor (the recipe's `warmup_start_factor`). torch's LinearLR needs
    it above 0, so 0 (transformers' warm-up from zero) becomes 1 / warm-up steps, the factor of its first step.
    """
    if warmup < 1 and warmup > 0 and total is None:
        return None, f"{kind} schedule with fractional warm-up {warmup} needs a step budget: constant LR instead"
    warm = int(round(warmup * total)) if 0 < warmup < 1 and total else int(warmup)
    if kind in ("constant", "constant_with_warmup"):
        main = {"name": "torch.optim.lr_scheduler.ConstantLR", "kwargs": {"factor": 1.0, "total_iters": 10**10}}
    elif kind in ("cosine", "linear") and total:
        name = "CosineAnnealingLR" if kind == "cosine" else "LinearLR"
        kwargs = {"T_max": max(total - warm, 1), "eta_min": 0.0} if kind == "cosine" else \
            {"start_factor": 1.0, "end_factor": 0.0, "total_iters": max(total - warm, 1)}
        main = {"name": f"torch.optim.lr_scheduler.{name}", "kwargs": kwargs}
    elif kind in ("cosine", "linear"):
        return None, f"{kind} schedule needs a step budget (max_steps > 0): constant LR instead (as released)"
    else:
        raise ValueError(f"lr_scheduler_type {kind!r} has no NeMo-RL mapping (constant, constant_with_warmup, "
                         "cosine, linear)")
    if warm == 0:
        return (None if main["name"].endswith("ConstantLR") else [main]), None
    ramp = {"name": "torch.optim.lr_scheduler.LinearLR",
            "kwargs": {"start_factor": start if start > 0 else 1.0 / warm, "end_factor": 1.0, "total_iters": warm}}
    return [ramp, main, {"milestones": [warm]}], None


def _dtensor(v: NemoValues, par: Parallelism) -> dict[str, Any]:
    lora: dict[str, Any] = {"enabled": False}
    if v.lora:
        lora = {"enabled": True, "target_modules": v.lora["target_modules"], "exclude_modules": [],
                "match_all_linear": False, "dim": v.lora["r"], "alpha": v.lora["alpha"],
                "dropout": v.lora["dropout"], "dropout_position": "post", "lora_A_init": "xavier",
                "use_triton": par.policy_tp == 1}
    return {
        "_v2": True, "enabled": True, "cpu_offload": False,
        "sequence_parallel": False,          # sequence parallelism off: VLM inputs (as in the released config)
        "activation_checkpointing": par.activation_checkpointing,
        "tensor_parallel_size": par.policy_tp,
        "context_parallel_size": 1,          # NeMo-RL refuses context parallelism for VLMs
        "custom_parallel_plan": None,
        "lora_cfg": lora,
        "automodel_kwargs": {"freeze_config": {"freeze_vision_tower": v.freeze_vision, "freeze_audio_tower": False,
                                               "freeze_language_model": False}},
    }


def _policy(v: NemoValues, par: Parallelism, *, model: str, phase: Phase, global_batch: int) -> dict[str, Any]:
    seq = v.max_seq_len
    rl = phase == "rl"
    micro, logprob = (v.rl_micro_batch if rl else v.sft_micro_batch), RELEASED_GRPO["logprob_batch_size"]
    p = v.rl if rl else v.sft
    eps = (RELEASED_GRPO if rl else RELEASED_SFT)["adam_eps"]
    policy: dict[str, Any] = {
        "model_name": model,
        "tokenizer": {"name": model},
        "train_global_batch_size": global_batch,
        "train_micro_batch_size": micro,
        "logprob_batch_size": logprob,
        "max_total_sequence_length": seq,
        "precision": "bfloat16",
        "offload_optimizer_for_logprob": False,
        "max_grad_norm": p.max_grad_norm,
        "dtensor_cfg": _dtensor(v, par),
        "megatron_cfg": {"enabled": False},
        # released: dynamic batching for GRPO (variable completion lengths), off for SFT; packing refused for VLMs
        "dynamic_batching": {"enabled": True, "train_mb_tokens": seq * micro, "logprob_mb_tokens": seq * logprob,
                             "sequence_length_round": 64} if rl else {"enabled": False},
        "sequence_packing": {"enabled": False},
        "make_sequence_length_divisible_by": par.policy_tp,
        "optimizer": {"name": "torch.optim.AdamW", "kwargs": {
            "lr": p.lr, "weight_decay": p.weight_decay, "betas": list(p.betas), "eps": eps, "foreach": False,
            "fused": False}},
    }
    if rl:
        policy["generation"] = _generation(v, par)
    return policy


def _generation(v: NemoValues, par: Parallelism) -> dict[str, Any]:
    return {
        "backend": "vllm", "max_new_tokens": v.max_new_tokens, "temperature": v.temperature, "top_p": v.top_p,
        "top_k": v.top_k, "stop_token_ids": None, "stop_strings": None,
        "vllm_cfg": {"async_engine": False, "precision": "bfloat16", "kv_cache_dtype": "auto",
                     "tensor_parallel_size": par.vllm_tp, "pipeline_parallel_size": 1, "expert_parallel_size": 1,
                     "gpu_memory_utilization": RELEASED_GRPO["vllm_gpu_memory_utilization"],
                     "max_model_len": v.max_seq_len, "enforce_eager": False,
                     "skip_tokenizer_init": False},   # required False for VLMs (contract: the driver checks it)
        # vlm_grpo_3B.yaml: a multimodal processor cache > 0 failed at validation ("cache not found")
        "vllm_kwargs": {"mm_processor_cache_gb": 0},
        "colocated": {"enabled": True, "resources": {"gpus_per_node": None, "num_nodes": None}},
    }


def _data(v: NemoValues, plan: DataPlan, phase: Phase) -> dict[str, Any]:
    # num_workers 0: the driver loads its batches itself. A DataLoader worker is forked from the driver after Ray has
    # started its threads (init_ray comes before setup), and forking a threaded process is what died of a glibc
    # double free in CI; v0.7.0 offers no other start method. Our rows are small JSON records and images are
    # decoded once per datum: the driver's time goes to generation and training, not loading.
    data: dict[str, Any] = {"max_input_seq_length": v.max_seq_len, "shuffle": True, "num_workers": 0}
    if phase == "rl":
        # typed NotRequired in v0.7.0, but grpo.setup reads data["use_multiple_dataloader"] directly
        data["use_multiple_dataloader"] = False
    return {**data, **data_entries(plan, phase)}


def _logger(v: NemoValues, run_dir: str, phase: Phase) -> dict[str, Any]:
    return {
        "log_dir": f"{run_dir}/logs", "num_val_samples_to_print": RELEASED_GRPO["num_val_samples_to_print"],
        "wandb_enabled": v.wandb, "tensorboard_enabled": v.tensorboard, "mlflow_enabled": False,
        "swanlab_enabled": False, "monitor_gpus": True,
        "wandb": {"project": v.wandb_project, "name": f"{v.recipe_name}-{phase}"},
        # v0.7.0 ignores tensorboard.log_dir: it always writes under <log_dir>/exp_NNN/tensorboard
        "tensorboard": {},
        "gpu_monitoring": {"collection_interval": 10, "flush_interval": 10},
    }


def save_period(v: NemoValues, plan: DataPlan, phase: Phase) -> int:
    """As released: a checkpoint at every validation (save_period = val_period: 20 RL, 50 SFT), so keep_top_k
    ranks every validated step; without validation, the recipe's `logging.save_steps`."""
    every = phase_values(v, phase).val_every
    return every if plan.val_split is not None and every else v.save_period


def _checkpointing(v: NemoValues, run_dir: str, plan: DataPlan, phase: Phase) -> dict[str, Any]:
    # A fixed checkpoint_dir is what resumes: NeMo-RL restarts from the newest step_N in it.
    metric, higher = checkpoint_metric(plan, phase)
    return {"enabled": True, "checkpoint_dir": f"{run_dir}/checkpoints", "metric_name": metric,
            "higher_is_better": higher, "keep_top_k": v.keep_top_k, "save_period": save_period(v, plan, phase),
            "checkpoint_must_save_by": None, "model_save_format": "safetensors",
            "save_consolidated": True, "save_optimizer": True}


def _validation(p: PhaseValues, on: bool, cap: int) -> tuple[int, int]:
    """(validation period, rows used) of a phase; period 0 turns validation off, as NeMo-RL requires without a
    validation set. Rows default to `cap` when the recipe says "all" (NeMo-RL needs a count)."""
    return (p.val_every or 0, p.val_samples or cap) if on else (0, cap)


def _grpo(v: NemoValues, max_steps: int, validate: bool) -> dict[str, Any]:
    adv = adv_estimator(v.adv_baseline, v.adv_std)
    period, samples = _validation(v.rl, validate, RELEASED_GRPO["max_val_samples"])
    return {
        "num_prompts_per_step": v.prompts_per_step,
        "num_generations_per_prompt": v.num_generations,
        "max_rollout_turns": 1, "max_num_epochs": v.rl.epochs, "max_num_steps": max_steps,
        **adv,
        # v0.7.0's advantage estimator reads these, not the two above (which reach it only through the
        # interpolation in the shipped base YAML, absent here): set explicitly to the same values. The std the
        # estimator divides by (rl.advantage.std) is handed to it by the driver's per-view wrapper.
        "adv_estimator": {"name": "grpo", **adv, "minus_baseline": True},
        "val_period": period, "val_at_start": False, "val_at_end": False,
        "max_val_samples": samples, "val_batch_size": min(samples, RELEASED_GRPO["val_batch_size"]),
        "seed": v.seed, "overlong_filtering": v.overlong_filtering,
        "advantage_clip_low": None, "advantage_clip_high": None,
        "use_dynamic_sampling": v.dynamic_sampling,
        "batch_multiplier": RELEASED_GRPO["batch_multiplier"] if v.dynamic_sampling else 1,
        # the same number of generation batches per step as TRL's refill rounds (recipe_values.max_gen_batches)
        "dynamic_sampling_max_gen_batches": v.max_gen_batches,
        # DAPO overlong shaping: penalty grows linearly over the last `buffer` tokens before max_response_length
        "reward_shaping": {"enabled": v.overlong_shaping, "overlong_buffer_length": v.overlong_buffer,
                           "overlong_buffer_penalty": v.overlong_penalty, "max_response_length": v.overlong_max_len,
                           "stop_properly_penalty_coef": None},
        "reward_scaling": {"enabled": False, "source_min": 0.0, "source_max": 1.0, "target_min": 0.0,
                           "target_max": 1.0},
        "seq_logprob_error_threshold": None,
        "async_grpo": {"enabled": False, "max_trajectory_age_steps": 1},
    }


def _loss(v: NemoValues) -> dict[str, Any]:
    return {
        "reference_policy_kl_penalty": v.kl_beta, "reference_policy_kl_type": v.kl_type,
        "kl_input_clamp_value": RELEASED_GRPO["kl_input_clamp_value"],
        "kl_output_clamp_value": RELEASED_GRPO["kl_output_clamp_value"],
        "ratio_clip_min": v.clip_low, "ratio_clip_max": v.clip_high, "ratio_clip_c": None,
        "token_level_loss": v.token_level_loss,
        "use_on_policy_kl_approximation": False,
        "use_importance_sampling_correction": v.truncated_is_ratio is not None,
        "truncated_importance_sampling_ratio": v.truncated_is_ratio, "force_on_policy_ratio": False,
    }


def _check_batch(global_batch: int, nodes: int, gpus_per_node: int, policy_tp: int, what: str) -> int:
    """The data-parallel size, after checking that the global batch divides among its ranks."""
    dp = nodes * gpus_per_node // policy_tp
    if global_batch % dp:
        raise ValueError(f"--nodes {nodes} x --gpus-per-node {gpus_per_node} gives {dp} data-parallel policy ranks "
                         f"(tensor parallel {policy_tp}); the {what} global batch {global_batch} must divide "
                         f"evenly among them: choose --nodes so that the rank count divides {global_batch}")
    return dp


def sft_val_batch(dp: int) -> int:
    """The released validation batch (8) rounded up to a multiple of the data-parallel size: v0.7.0's SFT
    validation calls ``policy.train(gbs=<batch>)``, which asserts the batch divides among the ranks."""
    released = RELEASED_SFT["val_global_batch_size"]
    return -(-released // dp) * dp


def _cluster(nodes: int, gpus_per_node: int) -> dict[str, int]:
    return {"gpus_per_node": gpus_per_node, "num_nodes": nodes}


def grpo_config(v: NemoValues, settings: DriverSettings, nodes: int, gpus_per_node: int,
                run_dir: str | None = None) -> Built:
    """The complete GRPO/DAPO config (validation on the exact-match environment when the recipe validates)."""
    par = parallelism(v.base_model, gpus_per_node)
    plan = plan_data(v, "rl", settings.recipe)
    run_dir = run_dir or f"{v.output_dir}/nemo_rl/rl"
    max_steps = v.rl.max_steps or RELEASED_GRPO["max_num_steps"]
    global_batch = v.prompts_per_step * v.num_generations   # one optimizer step per rollout
    _check_batch(global_batch, nodes, gpus_per_node, par.policy_tp, "GRPO")
    sched, note = lr_schedule(v.rl.scheduler, v.rl.warmup, max_steps, v.rl.warmup_start)
    policy = _policy(v, par, model=v.rl_init or v.base_model, phase="rl", global_batch=global_batch)
    if sched is not None:  # v0.7.0's DTensor set-up iterates policy.scheduler whenever the key exists
        policy["scheduler"] = sched
    config = {
        SECTION: settings.model_dump(),
        "grpo": _grpo(v, max_steps, validates(v, "rl")), "loss_fn": _loss(v), "policy": policy,
        "data": _data(v, plan, "rl"), "env": env_entries(plan), "logger": _logger(v, run_dir, "rl"),
        "checkpointing": _checkpointing(v, run_dir, plan, "rl"), "cluster": _cluster(nodes, gpus_per_node),
    }
    notes = [f"rl: {note}"] if note else []
    notes.append("rl: one GRPO group per view: `spatialiq nemo rl` replaces NeMo-RL v0.7.0's grouping by prompt "
                 "token ids (under which all views of a batch, one question and one image size, are one group) "
                 "for the baseline, the advantages and the dynamic-sampling filter; see docs/cluster.md")
    if v.rl_init is None:
        notes.append("rl.init_from is not set: RL starts from (and KL-anchors to) the base model, not an SFT-CoT "
                     "checkpoint; pass --set rl.init_from=HF_DIR (spatialiq nemo convert output)")
    return Built(config, "grpo", notes)


def sft_config(v: NemoValues, settings: DriverSettings, nodes: int, gpus_per_node: int,
               run_dir: str | None = None) -> Built:
    """The complete SFT config (assistant-token loss; checkpoints chosen by validation loss)."""
    if not v.sft_assistant_only:
        raise ValueError("sft.assistant_only_loss: false has no NeMo-RL equivalent (its SFT trains the assistant "
                         "turns only)")
    par = parallelism(v.base_model, gpus_per_node)
    plan = plan_data(v, "sft", settings.recipe)
    run_dir = run_dir or f"{v.output_dir}/nemo_rl/sft"
    global_batch = v.sft_global_batch
    dp = _check_batch(global_batch, nodes, gpus_per_node, par.policy_tp, "SFT")
    sched, note = lr_schedule(v.sft.scheduler, v.sft.warmup, v.sft.max_steps, v.sft.warmup_start)
    policy = _policy(v, par, model=v.base_model, phase="sft", global_batch=global_batch)
    if sched is not None:  # v0.7.0's DTensor set-up iterates policy.scheduler whenever the key exists
        policy["scheduler"] = sched
    on = validates(v, "sft")
    val_batch = sft_val_batch(dp)
    sft = {"max_num_epochs": v.sft.epochs, "max_num_steps": v.sft.max_steps or RELEASED_SFT["max_num_steps"],
           "val_period": v.sft.val_every if on else 0,
           "val_batches": -(-v.sft.val_samples // val_batch) if on and v.sft.val_samples else 0,   # 0: all
           "val_global_batch_size": val_batch, "val_micro_batch_size": 1,
           "val_at_start": on, "val_at_end": on, "seed": v.seed, "only_unmask_final": False}
    config = {
        SECTION: settings.model_dump(), "sft": sft, "policy": policy, "data": _data(v, plan, "sft"),
        "logger": _logger(v, run_dir, "sft"), "checkpointing": _checkpointing(v, run_dir, plan, "sft"),
        "cluster": _cluster(nodes, gpus_per_node),
    }
    notes = [f"sft: {note}"] if note else []
    if on:
        notes.append("sft: early stopping (the released config's patience 3) exists in no NeMo-RL release; "
                     "keep_top_k by val:val_loss keeps the best checkpoints instead")
    return Built(config, "sft", notes)
