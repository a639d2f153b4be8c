"""The paper's released GRPO hyperparameters as NeMo-RL config values, and where a generated config departs.

Source: NVIDIA/Spatial-IQ `training/configs/grpo_spatialiq.yaml` (the configuration the paper's DAPO runs used):
8 prompts x 8 generations per step, leave-one-out baseline with per-prompt reward normalisation, dynamic sampling
drawing 2x the prompts for at most 10 extra generation batches, KL 0.05 (k3, clamps 20/10), clip 0.2/0.28,
token-level loss, AdamW lr 5e-7 weight decay 0.01, LinearLR 0.1 -> 1 over 50 steps then constant, 500 steps,
validation every 20, global batch 64, 2048 total tokens, 1024 new tokens at temperature 1.0, top-p 1.0.
"""

from __future__ import annotations

from typing import Any

PAPER_GRPO: dict[str, Any] = {
    "grpo.num_prompts_per_step": 8,
    "grpo.num_generations_per_prompt": 8,
    "grpo.use_leave_one_out_baseline": True,
    "grpo.normalize_rewards": True,
    "grpo.adv_estimator.use_leave_one_out_baseline": True,
    "grpo.adv_estimator.normalize_rewards": True,
    "grpo.use_dynamic_sampling": True,
    "grpo.batch_multiplier": 2,
    "grpo.dynamic_sampling_max_gen_batches": 10,
    "grpo.max_num_steps": 500,
    "grpo.val_period": 20,
    "loss_fn.reference_policy_kl_penalty": 0.05,
    "loss_fn.reference_policy_kl_type": "k3",
    "loss_fn.kl_input_clamp_value": 20.0,
    "loss_fn.kl_output_clamp_value": 10.0,
    "loss_fn.ratio_clip_min": 0.2,
    "loss_fn.ratio_clip_max": 0.28,
    "loss_fn.token_level_loss": True,
    "policy.optimizer.name": "torch.optim.AdamW",
    "policy.optimizer.kwargs.lr": 5e-7,
    "policy.optimizer.kwargs.weight_decay": 0.01,
    "policy.scheduler": [
        {"name": "torch.optim.lr_scheduler.LinearLR", "kwargs": {"start_factor": 0.1, "end_factor": 1.0,
                                                                 "total_iters": 50}},
        {"name": "torch.optim.lr_scheduler.ConstantLR", "kwargs": {"factor": 1.0, "total_iters": 10**10}},
        {"milestones": [50]},
    ],
    "policy.train_global_batch_size": 64,
    "policy.max_total_sequence_length": 2048,
    "policy.generation.max_new_tokens": 1024,
    "policy.generation.temperature": 1.0,
    "policy.generation.top_p": 1.0,
}


def get_path(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def deviations(config: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, value in `config`, paper value) for every paper hyperparameter the config sets differently."""
    out = []
    for key, paper in PAPER_GRPO.items():
        try:
            got = get_path(config, key)
        except KeyError:
            got = "<absent>"
        if got != paper:
            out.append((key, got, paper))
    return out
