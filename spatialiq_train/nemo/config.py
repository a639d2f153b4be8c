"""Complete NeMo-RL v0.7.0 configs (GRPO/DAPO and SFT) from a project recipe: pure functions, no I/O.

The generated config is self-contained (no `defaults:` chain into the container's examples, no `${...}`
interpolation), so every value NeMo-RL runs with is visible in one file, and it is checked against the key list
(`keys.check_config`) before anyone writes it. It is the NeMo-RL mapper of a phase's plan (`core.plan.PhasePlan`):
every plan field is used here or refused (`recipe_values.refuse`); the plan itself travels in the config's
`spatialiq` section, from which the driver reads it. The project's pieces (data entries, environments, checkpoint
metric) come from `spatialiq_train.nemo.contract`, which the driver uses to check them.

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

from spatialiq_train.core.plan import PhasePlan
from spatialiq_train.nemo.contract import checkpoint_metric, data_entries, env_entries, plan_data
from spatialiq_train.nemo.recipe_values import (
    RELEASED_GRPO,
    RELEASED_SFT,
    WARMUP_FROM_ZERO,
    NemoRefusal,
    adv_estimator,
    importance_sampling,
    max_gen_batches,
    max_steps_or_none,
    refuse,
    step_budget,
    token_level,
)
from spatialiq_train.nemo.settings import SECTION, DataPlan, DriverSettings


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
    it above 0, so 0 (transformers' warm-up from zero) starts at `WARMUP_FROM_ZERO`: the factor at every step is
    TRL's to 1e-9. A schedule that needs the step count (a fractional warm-up, cosine, linear) without a step
    budget is refused: NeMo-RL would otherwise run another schedule than the recipe's.
    """
    if kind == "constant":  # transformers' constant schedule has no warm-up, whatever warmup_steps says
        warmup = 0
    if warmup < 1 and warmup > 0 and total is None:
        raise NemoRefusal(f"{kind} schedule with fractional warm-up {warmup} needs a step budget on NeMo-RL: set "
                          "the phase's optimizer.max_steps, or warmup_steps as a number of steps")
    warm = int(round(warmup * total)) if 0 < warmup < 1 and total else int(warmup)
    if kind in ("constant", "constant_with_warmup"):
        main = {"name": "torch.optim.lr_scheduler.ConstantLR", "kwargs": {"factor": 1.0, "total_iters": 10**10}}
    elif kind in ("cosine", "linear") and total:
        name = "CosineAnnealingLR" if kind == "cosine" else "LinearLR"
        kwargs = {"T_max": max(total - warm, 1), "eta_min": 0.0} if kind == "cosine" else \
            {"start_factor": 1.0, "end_factor": 0.0, "total_iters": max(total - warm, 1)}
        main = {"name": f"torch.optim.lr_scheduler.{name}", "kwargs": kwargs}
    elif kind in ("cosine", "linear"):
        raise NemoRefusal(f"lr_scheduler_type {kind} needs a step budget on NeMo-RL: set the phase's "
                          "optimizer.max_steps, or lr_scheduler_type constant / constant_with_warmup")
    else:
        raise NemoRefusal(f"lr_scheduler_type {kind!r} has no NeMo-RL mapping (constant, constant_with_warmup, "
                         "cosine, linear)")
    if warm == 0:
        return (None if main["name"].endswith("ConstantLR") else [main]), None
    ramp = {"name": "torch.optim.lr_scheduler.LinearLR",
            "kwargs": {"start_factor": start if start > 0 else WARMUP_FROM_ZERO, "end_factor": 1.0,
                       "total_iters": warm}}
    return [ramp, main, {"milestones": [warm]}], None


def _dtensor(plan: PhasePlan, par: Parallelism) -> dict[str, Any]:
    m = plan.model
    lora: dict[str, Any] = {"enabled": False}
    if m.lora:
        lora = {"enabled": True, "target_modules": list(m.target_modules), "exclude_modules": [],
                "match_all_linear": False, "dim": m.r, "alpha": m.alpha, "dropout": m.dropout,
                "dropout_position": "post", "lora_A_init": "xavier", "use_triton": par.policy_tp == 1}
    return {
        "_v2": True, "enabled": True, "cpu_offload": False,
        "sequence_parallel": False,          # sequence parallelism off: VLM inputs (as in the released config)
        "activation_checkpointing": plan.execution.gradient_checkpointing,
        "tensor_parallel_size": par.policy_tp,
        "context_parallel_size": 1,          # NeMo-RL refuses context parallelism for VLMs
        "custom_parallel_plan": None,
        "lora_cfg": lora,
        "automodel_kwargs": {"freeze_config": {"freeze_vision_tower": m.freeze_vision, "freeze_audio_tower": False,
                                               "freeze_language_model": False}},
    }


def max_seq_len(plan: PhasePlan) -> int:
    """Prompt + completion tokens: RL `vllm.max_model_len`, SFT `sft.max_length`, else the released 2048."""
    if plan.phase == "rl":
        return plan.generation.max_model_len or RELEASED_GRPO["max_total_sequence_length"]  # type: ignore[union-attr]
    return plan.algorithm.max_length or RELEASED_SFT["max_total_sequence_length"]  # type: ignore[union-attr]


def _policy(plan: PhasePlan, par: Parallelism) -> dict[str, Any]:
    seq, rl = max_seq_len(plan), plan.phase == "rl"
    micro, logprob = plan.batch.micro_batch, RELEASED_GRPO["logprob_batch_size"]
    o = plan.optimizer
    model = plan.model.init_from or plan.model.name_or_path
    policy: dict[str, Any] = {
        "model_name": model,
        "tokenizer": {"name": model},
        "train_global_batch_size": plan.batch.global_batch,
        "train_micro_batch_size": micro,
        "logprob_batch_size": logprob,
        "max_total_sequence_length": seq,
        "precision": plan.execution.dtype,
        "offload_optimizer_for_logprob": False,
        "max_grad_norm": o.max_grad_norm,
        "dtensor_cfg": _dtensor(plan, par),
        "megatron_cfg": {"enabled": False},
        # released: dynamic batching for GRPO (variable completion lengths), off for SFT; packing refused for VLMs
        "dynamic_batching": {"enabled": True, "train_mb_tokens": seq * micro, "logprob_mb_tokens": seq * logprob,
                             "sequence_length_round": 64} if rl else {"enabled": False},
        "sequence_packing": {"enabled": False},
        "make_sequence_length_divisible_by": par.policy_tp,
        "optimizer": {"name": "torch.optim.AdamW", "kwargs": {
            "lr": o.learning_rate, "weight_decay": o.weight_decay, "betas": [o.adam_beta1, o.adam_beta2],
            "eps": (RELEASED_GRPO if rl else RELEASED_SFT)["adam_eps"], "foreach": False, "fused": False}},
    }
    sched, _ = lr_schedule(o.lr_scheduler_type, o.warmup_steps, max_steps_or_none(plan), o.warmup_start_factor)
    if sched is not None:  # v0.7.0's DTensor set-up iterates policy.scheduler whenever the key exists
        policy["scheduler"] = sched
    if rl:
        policy["generation"] = _generation(plan, seq)
    return policy


def _generation(plan: PhasePlan, seq: int) -> dict[str, Any]:
    g = plan.generation
    assert g is not None
    return {
        "backend": "vllm", "max_new_tokens": g.max_completion_length, "temperature": g.temperature,
        "top_p": g.top_p, "top_k": g.top_k or None, "stop_token_ids": None, "stop_strings": None,
        "vllm_cfg": {"async_engine": False, "precision": plan.execution.dtype, "kv_cache_dtype": "auto",
                     "tensor_parallel_size": g.tensor_parallel_size, "pipeline_parallel_size": 1,
                     "expert_parallel_size": 1, "gpu_memory_utilization": g.gpu_memory_utilization,
                     "max_model_len": seq, "enforce_eager": False,
                     "skip_tokenizer_init": False},   # required False for VLMs (contract: the driver checks it)
        # vlm_grpo_3B.yaml: a multimodal processor cache > 0 failed at validation ("cache not found")
        "vllm_kwargs": {"mm_processor_cache_gb": 0},
        "colocated": {"enabled": True, "resources": {"gpus_per_node": None, "num_nodes": None}},
    }


def _data(plan: PhasePlan, data: DataPlan) -> dict[str, Any]:
    # num_workers 0: the driver loads its batches itself. A DataLoader worker is forked from the driver after Ray has
    # started its threads (init_ray comes before setup), and forking a threaded process is what died of a glibc
    # double free in CI; v0.7.0 offers no other start method. Our rows are small JSON records and images are
    # decoded once per datum: the driver's time goes to generation and training, not loading.
    out: dict[str, Any] = {"max_input_seq_length": max_seq_len(plan), "shuffle": True, "num_workers": 0}
    if plan.phase == "rl":
        # typed NotRequired in v0.7.0, but grpo.setup reads data["use_multiple_dataloader"] directly
        out["use_multiple_dataloader"] = False
    return {**out, **data_entries(data, plan.phase)}


def _logger(plan: PhasePlan, run_dir: str) -> dict[str, Any]:
    lg = plan.logging
    return {
        "log_dir": f"{run_dir}/logs", "num_val_samples_to_print": RELEASED_GRPO["num_val_samples_to_print"],
        "wandb_enabled": "wandb" in lg.report_to, "tensorboard_enabled": "tensorboard" in lg.report_to,
        "mlflow_enabled": False, "swanlab_enabled": False, "monitor_gpus": True,
        # logging.wandb_mode: the driver sets WANDB_MODE from the plan (an explicit environment setting wins)
        "wandb": {"project": lg.wandb_project, "name": f"{plan.name}-{plan.phase}"},
        # v0.7.0 ignores tensorboard.log_dir: it always writes under <log_dir>/exp_NNN/tensorboard
        "tensorboard": {},
        "gpu_monitoring": {"collection_interval": 10, "flush_interval": 10},
    }


def save_period(plan: PhasePlan) -> int:
    """The recipe's `logging.save_steps` (v0.7.0 keeps a checkpoint saved off a validation step out of the metric's
    top-k ranking, with a warning: the shipped recipes save on validation steps)."""
    return plan.logging.save_steps


def _checkpointing(plan: PhasePlan, run_dir: str, data: DataPlan) -> dict[str, Any]:
    # A fixed checkpoint_dir is what resumes: NeMo-RL restarts from the newest step_N in it.
    metric, higher = checkpoint_metric(data, plan.phase)
    return {"enabled": True, "checkpoint_dir": f"{run_dir}/checkpoints", "metric_name": metric,
            "higher_is_better": higher, "keep_top_k": plan.logging.save_total_limit, "save_period": save_period(plan),
            "checkpoint_must_save_by": None, "model_save_format": "safetensors",
            "save_consolidated": True, "save_optimizer": True}


def _validation(plan: PhasePlan, cap: int) -> tuple[int, int]:
    """(validation period, rows used) of a phase; period 0 turns validation off, as NeMo-RL requires without a
    validation set. Rows default to `cap` when the recipe says "all" (NeMo-RL needs a count)."""
    val = plan.validation
    if plan.data.eval_split is None:
        return 0, cap
    return val.every_steps or 0, val.max_samples or cap


def _grpo(plan: PhasePlan) -> dict[str, Any]:
    a = plan.rl
    adv = adv_estimator(a.baseline, a.std)
    period, samples = _validation(plan, RELEASED_GRPO["max_val_samples"])
    epochs, steps = step_budget(plan)
    return {
        "num_prompts_per_step": plan.batch.prompts_per_step,
        "num_generations_per_prompt": a.num_generations,
        "max_rollout_turns": 1, "max_num_epochs": epochs, "max_num_steps": steps,
        **adv,
        # v0.7.0's advantage estimator reads these, not the two above (which reach it only through the
        # interpolation in the shipped base YAML, absent here): set explicitly to the same values. The std the
        # estimator divides by (rl.advantage.std) is handed to it by the driver's per-view wrapper.
        "adv_estimator": {"name": "grpo", **adv, "minus_baseline": True},
        "val_period": period, "val_at_start": False, "val_at_end": False,
        "max_val_samples": samples, "val_batch_size": min(samples, RELEASED_GRPO["val_batch_size"]),
        "seed": plan.logging.seed, "overlong_filtering": a.mask_truncated_completions,
        "advantage_clip_low": None, "advantage_clip_high": None,
        "use_dynamic_sampling": a.dynamic_sampling,
        # the draw size: prompts_per_step x this many prompts per generation batch (rl.dynamic_sampling)
        "batch_multiplier": a.batch_multiplier if a.dynamic_sampling else 1,
        # the same number of generation batches per step as TRL's refill rounds (recipe_values.max_gen_batches)
        "dynamic_sampling_max_gen_batches": max_gen_batches(a.max_refill_rounds, a.dynamic_sampling),
        # DAPO overlong shaping: penalty grows linearly over the last `buffer` tokens before max_response_length
        "reward_shaping": {"enabled": a.overlong, "overlong_buffer_length": a.buffer_length,
                           "overlong_buffer_penalty": a.penalty, "max_response_length": a.max_response_length,
                           "stop_properly_penalty_coef": None},
        "reward_scaling": {"enabled": False, "source_min": 0.0, "source_max": 1.0, "target_min": 0.0,
                           "target_max": 1.0},
        "seq_logprob_error_threshold": None,
        "async_grpo": {"enabled": False, "max_trajectory_age_steps": 1},
    }


def _loss(plan: PhasePlan) -> dict[str, Any]:
    a, ratio = plan.rl, importance_sampling(plan)
    return {
        "reference_policy_kl_penalty": a.beta, "reference_policy_kl_type": a.kl_estimator,
        "kl_input_clamp_value": RELEASED_GRPO["kl_input_clamp_value"],
        "kl_output_clamp_value": RELEASED_GRPO["kl_output_clamp_value"],
        "ratio_clip_min": a.epsilon, "ratio_clip_max": a.epsilon_high, "ratio_clip_c": None,
        "token_level_loss": token_level(a.loss_type),
        "use_on_policy_kl_approximation": False,
        "use_importance_sampling_correction": ratio is not None,
        "truncated_importance_sampling_ratio": ratio, "force_on_policy_ratio": False,
    }


def data_parallel(nodes: int, gpus_per_node: int, policy_tp: int) -> int:
    """The data-parallel policy ranks of a cluster (the processes the plan's global batch is shared by)."""
    return nodes * gpus_per_node // policy_tp


def sft_val_batch(dp: int) -> int:
    """The released validation batch (8) rounded up to a multiple of the data-parallel size: v0.7.0's SFT
    validation calls ``policy.train(gbs=<batch>)``, which asserts the batch divides among the ranks."""
    released = RELEASED_SFT["val_global_batch_size"]
    return -(-released // dp) * dp


def _cluster(nodes: int, gpus_per_node: int) -> dict[str, int]:
    return {"gpus_per_node": gpus_per_node, "num_nodes": nodes}


def _common(plan: PhasePlan, settings: DriverSettings, nodes: int, gpus_per_node: int,
            run_dir: str | None) -> tuple[dict[str, Any], DataPlan]:
    refuse(plan)
    par = parallelism(plan.model.name_or_path, gpus_per_node)
    dp = data_parallel(nodes, gpus_per_node, par.policy_tp)
    if dp != plan.batch.world_size:
        raise NemoRefusal(f"the plan shares its batch over {plan.batch.world_size} processes, but --nodes {nodes} x "
                          f"--gpus-per-node {gpus_per_node} gives {dp} data-parallel policy ranks (tensor parallel "
                          f"{par.policy_tp}): resolve the plan for this cluster (`spatialiq recipes nemo-rl`)")
    data = plan_data(plan, settings.recipe)
    run_dir = run_dir or f"{plan.logging.output_dir}/nemo_rl/{plan.phase}"
    return {SECTION: {**settings.model_dump(), "plan": plan.record()}, "policy": _policy(plan, par),
            "data": _data(plan, data), "logger": _logger(plan, run_dir),
            "checkpointing": _checkpointing(plan, run_dir, data), "cluster": _cluster(nodes, gpus_per_node)}, data


def grpo_config(plan: PhasePlan, settings: DriverSettings, nodes: int, gpus_per_node: int,
                run_dir: str | None = None) -> Built:
    """The complete GRPO/DAPO config (validation on the exact-match environment when the recipe validates)."""
    common, data = _common(plan, settings, nodes, gpus_per_node, run_dir)
    config = {SECTION: common.pop(SECTION), "grpo": _grpo(plan), "loss_fn": _loss(plan), "policy": common.pop("policy"),
              "data": common.pop("data"), "env": env_entries(data), **common}
    notes = ["rl: one GRPO group per view: `spatialiq nemo rl` replaces NeMo-RL v0.7.0's grouping by prompt "
             "token ids (under which all views of a batch, one question and one image size, are one group) "
             "for the baseline, the advantages and the dynamic-sampling filter; see docs/cluster.md"]
    if plan.model.init_from is None:
        notes.append("rl.init_from is not set: RL starts from (and KL-anchors to) the base model, not an SFT-CoT "
                     "checkpoint; pass --set rl.init_from=HF_DIR (spatialiq nemo convert output)")
    return Built(config, "grpo", notes)


def sft_config(plan: PhasePlan, settings: DriverSettings, nodes: int, gpus_per_node: int,
               run_dir: str | None = None) -> Built:
    """The complete SFT config (assistant-token loss; checkpoints chosen by validation loss; early stopping by the
    driver, `nemo.early_stop`)."""
    common, data = _common(plan, settings, nodes, gpus_per_node, run_dir)
    on = data.val_split is not None
    val_batch = sft_val_batch(plan.batch.world_size)
    period, samples = _validation(plan, 0)
    epochs, steps = step_budget(plan)
    sft = {"max_num_epochs": epochs, "max_num_steps": steps, "val_period": period,
           "val_batches": -(-samples // val_batch) if on and samples else 0,   # 0: all
           "val_global_batch_size": val_batch, "val_micro_batch_size": 1,
           "val_at_start": on, "val_at_end": on, "seed": plan.logging.seed, "only_unmask_final": False}
    config = {SECTION: common.pop(SECTION), "sft": sft, **common}
    return Built(config, "sft", [])
