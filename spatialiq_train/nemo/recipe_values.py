"""Every value the NeMo-RL config takes from a project recipe, read in one place.

`values_from_recipe` is the only code in spatialiq_train.nemo that reads `Recipe` fields; when recipe field
names change, only this module adapts. Where a recipe has no field for a value the paper's released
configuration has, the released value is used (`RELEASED_*`, each naming its source):
NVIDIA/Spatial-IQ `training/configs/grpo_spatialiq.yaml` (GRPO) and `training/configs/sft_spatialiq.yaml` (SFT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from spatialiq_train.recipes import Recipe

# --- released values the recipe schema has no field for ---------------------------------------------------------
# Source: NVIDIA/Spatial-IQ training/configs/grpo_spatialiq.yaml (the paper's released GRPO configuration).
RELEASED_GRPO: dict[str, Any] = {
    "num_prompts_per_step": 8,              # grpo.num_prompts_per_step
    "use_leave_one_out_baseline": True,     # grpo.use_leave_one_out_baseline
    "batch_multiplier": 2,                  # grpo.batch_multiplier (dynamic sampling draws 2 x 8 prompts)
    "max_num_steps": 500,                   # grpo.max_num_steps (used when the recipe trains "by epochs")
    "val_period": 20,                       # grpo.val_period
    "max_val_samples": 64,                  # grpo.max_val_samples
    "val_batch_size": 64,                   # grpo.val_batch_size
    "kl_input_clamp_value": 20.0,           # loss_fn.kl_input_clamp_value
    "kl_output_clamp_value": 10.0,          # loss_fn.kl_output_clamp_value
    "max_total_sequence_length": 2048,      # policy.max_total_sequence_length
    "train_micro_batch_size": 1,            # policy.train_micro_batch_size
    "logprob_batch_size": 4,                # policy.logprob_batch_size
    "generation_batch_size": 32,            # policy.generation_batch_size
    "warmup_start_factor": 0.1,             # policy.scheduler[0]: LinearLR start_factor 0.1 -> 1.0
    "adam_betas": [0.9, 0.999],             # policy.optimizer.kwargs.betas
    "adam_eps": 1e-8,                       # policy.optimizer.kwargs.eps
    # policy.generation.vllm_cfg.gpu_memory_utilization. The recipe's rl.vllm_gpu_memory_utilization (0.3) is
    # tuned for TRL's colocate mode, where the training model stays resident while vLLM generates; NeMo-RL
    # offloads the policy before generation, so the released 0.6 applies.
    "vllm_gpu_memory_utilization": 0.6,
    "num_val_samples_to_print": 5,          # logger.num_val_samples_to_print
}
# Source: NVIDIA/Spatial-IQ training/configs/sft_spatialiq.yaml (the paper's released SFT configuration).
RELEASED_SFT: dict[str, Any] = {
    "train_global_batch_size": 16,          # policy.train_global_batch_size
    "max_num_steps": 1_000_000,             # sft.max_num_steps (epochs decide)
    "val_period": 50,                       # sft.val_period
    "val_batches": 4,                       # sft.val_batches
    "val_global_batch_size": 8,             # sft.val_global_batch_size
    "adam_betas": [0.9, 0.98],              # policy.optimizer.kwargs.betas
    "adam_eps": 1e-8,
    # data.add_generation_prompt: false (the assistant header is part of the trained assistant turn)
    "add_generation_prompt": False,
}


@dataclass(frozen=True)
class NemoValues:
    """What the NeMo-RL config builders need from a recipe, named for NeMo-RL's concepts."""

    recipe_name: str
    base_model: str
    rl_init: str | None
    min_pixels: int
    max_pixels: int
    freeze_vision: bool
    lora: dict[str, Any] | None
    traces_dir: str
    data_root: str
    sft_split: str
    rl_split: str
    eval_split: str | None
    seed: int
    output_dir: str
    # SFT
    sft_lr: float
    sft_weight_decay: float
    sft_scheduler: str
    sft_warmup: float
    sft_epochs: int
    sft_max_steps: int | None
    sft_max_grad_norm: float
    sft_assistant_only: bool
    # RL
    rl_lr: float
    rl_weight_decay: float
    rl_scheduler: str
    rl_warmup: float
    rl_epochs: int
    rl_max_steps: int | None
    rl_max_grad_norm: float
    num_generations: int
    token_level_loss: bool
    clip_low: float
    clip_high: float
    kl_beta: float
    kl_type: str
    normalize_rewards: bool
    overlong_filtering: bool
    dynamic_sampling: bool
    max_gen_batches: int
    overlong_shaping: bool
    overlong_buffer: int
    overlong_penalty: float
    # generation
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int | None
    # reward and logging
    reward_weights: dict[str, Any]
    wandb: bool
    tensorboard: bool
    wandb_project: str
    save_period: int
    keep_top_k: int | None


def _token_level(loss_type: str) -> bool:
    """TRL loss_type -> NeMo-RL loss_fn.token_level_loss (dapo/bnpo: mean over tokens; grpo: per sequence)."""
    if loss_type in ("dapo", "bnpo"):
        return True
    if loss_type == "grpo":
        return False
    raise ValueError(f"rl.loss_type {loss_type!r} has no NeMo-RL equivalent (use dapo, bnpo or grpo)")


def _normalize(scale_rewards: str) -> bool:
    """TRL scale_rewards -> NeMo-RL grpo.normalize_rewards (per-prompt std)."""
    if scale_rewards == "batch":
        raise ValueError("rl.scale_rewards 'batch' has no NeMo-RL equivalent (use group or none)")
    return scale_rewards == "group"


def _steps(value: int) -> int | None:
    return value if value > 0 else None


def values_from_recipe(recipe: Recipe) -> NemoValues:
    """Read the recipe once; raises ValueError (naming the recipe key) for a value NeMo-RL cannot express."""
    m, d, s, r, g = recipe.model, recipe.data, recipe.sft, recipe.rl, recipe.generation
    lora = m.lora
    return NemoValues(
        recipe_name=recipe.name, base_model=m.name_or_path, rl_init=r.init_from,
        min_pixels=m.min_pixels, max_pixels=m.max_pixels, freeze_vision=m.freeze_vision,
        lora={"r": lora.r, "alpha": lora.alpha, "dropout": lora.dropout, "target_modules": list(lora.target_modules)}
        if lora.enabled else None,
        traces_dir=d.traces_dir, data_root=d.data_root, sft_split=d.sft_split, rl_split=d.rl_split,
        eval_split=d.eval_split, seed=recipe.run.seed, output_dir=recipe.run.output_dir,
        sft_lr=s.learning_rate, sft_weight_decay=s.weight_decay, sft_scheduler=s.lr_scheduler_type,
        sft_warmup=s.warmup_steps, sft_epochs=math.ceil(s.num_train_epochs), sft_max_steps=_steps(s.max_steps),
        sft_max_grad_norm=s.max_grad_norm, sft_assistant_only=s.assistant_only_loss,
        rl_lr=r.learning_rate, rl_weight_decay=r.weight_decay, rl_scheduler=r.lr_scheduler_type,
        rl_warmup=r.warmup_steps, rl_epochs=math.ceil(r.num_train_epochs), rl_max_steps=_steps(r.max_steps),
        rl_max_grad_norm=r.max_grad_norm, num_generations=r.num_generations,
        token_level_loss=_token_level(r.loss_type), clip_low=r.epsilon, clip_high=r.epsilon_high,
        kl_beta=r.beta, kl_type=r.kl_estimator, normalize_rewards=_normalize(r.scale_rewards),
        overlong_filtering=r.mask_truncated_completions, dynamic_sampling=r.dynamic_sampling.enabled,
        # NeMo-RL keeps generating while batches so far <= the cap (grpo.py, v0.7.0), so a cap of N allows N
        # batches after the first: the recipe's extra rounds. At the cap NeMo-RL raises (config.py explains).
        max_gen_batches=r.dynamic_sampling.max_refill_rounds,
        overlong_shaping=r.overlong.enabled, overlong_buffer=r.overlong.buffer_length,
        overlong_penalty=r.overlong.penalty,
        max_new_tokens=g.max_completion_length, temperature=g.temperature, top_p=g.top_p,
        top_k=g.top_k or None,
        reward_weights=dict(recipe.reward.weights),
        wandb="wandb" in recipe.logging.report_to, tensorboard="tensorboard" in recipe.logging.report_to,
        wandb_project=recipe.logging.wandb_project, save_period=recipe.logging.save_steps,
        keep_top_k=recipe.logging.save_total_limit,
    )


def traces_file(values: NemoValues, split: str) -> str:
    """The traces JSONL of one split (`spatialiq traces` writes train/val/warmup/rl.jsonl)."""
    return str(PurePosixPath(values.traces_dir) / f"{split}.jsonl")
