"""Every value the NeMo-RL config takes from a project recipe, read in one place.

`values_from_recipe` is the only code in spatialiq_train.nemo that reads `Recipe` fields; when recipe field
names change, only this module adapts. Where a recipe has no field for a value the paper's released
configuration has, the released value is used (`RELEASED_*`, each naming its source):
NVIDIA/Spatial-IQ `training/configs/grpo_spatialiq.yaml` (GRPO) and `training/configs/sft_spatialiq.yaml` (SFT).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from spatialiq_train.core.recipe_model import Recipe

# --- released values the recipe schema has no field for ---------------------------------------------------------
# Source: NVIDIA/Spatial-IQ training/configs/grpo_spatialiq.yaml (the paper's released GRPO configuration).
RELEASED_GRPO: dict[str, Any] = {
    "num_prompts_per_step": 8,              # grpo.num_prompts_per_step (when rl.prompts_per_step is null)
    # grpo.batch_multiplier (dynamic sampling draws 2 x 8 prompts per generation batch). The recipe has no field:
    # TRL refills with one ordinary batch per round and cannot express it.
    "batch_multiplier": 2,
    "max_num_steps": 500,                   # grpo.max_num_steps (used when the recipe trains "by epochs")
    "max_val_samples": 64,                  # grpo.max_val_samples (when rl.validation.max_samples is null: all)
    "val_batch_size": 64,                   # grpo.val_batch_size (at most; fewer when max_val_samples is smaller)
    "kl_input_clamp_value": 20.0,           # loss_fn.kl_input_clamp_value
    "kl_output_clamp_value": 10.0,          # loss_fn.kl_output_clamp_value
    "max_total_sequence_length": 2048,      # policy.max_total_sequence_length (when vllm.max_model_len is null)
    "train_micro_batch_size": 1,            # policy.train_micro_batch_size
    "logprob_batch_size": 4,                # policy.logprob_batch_size
    "adam_eps": 1e-8,                       # policy.optimizer.kwargs.eps
    # policy.generation.vllm_cfg.gpu_memory_utilization. The recipe's vllm.gpu_memory_utilization is tuned for
    # TRL's colocate mode, where the training model stays resident while vLLM generates (0.3 in the DAPO-paper
    # experiments); NeMo-RL offloads the policy before generation, so the released 0.6 applies.
    "vllm_gpu_memory_utilization": 0.6,
    "num_val_samples_to_print": 5,          # logger.num_val_samples_to_print
}
# Source: NVIDIA/Spatial-IQ training/configs/sft_spatialiq.yaml (the paper's released SFT configuration).
RELEASED_SFT: dict[str, Any] = {
    "train_global_batch_size": 16,          # policy.train_global_batch_size (sft.optimizer.global_batch_size null)
    "max_num_steps": 1_000_000,             # sft.max_num_steps (epochs decide)
    "val_global_batch_size": 8,             # sft.val_global_batch_size (sft.val_batches: max_samples / 8)
    "adam_eps": 1e-8,
}


@dataclass(frozen=True)
class PhaseValues:
    """One phase's optimizer, schedule, step budget and validation (`sft.*` or `rl.*` of the recipe)."""

    lr: float
    weight_decay: float
    betas: tuple[float, float]
    scheduler: str
    warmup: float
    """Below 1: a fraction of the steps; from 1: a number of steps."""
    warmup_start: float
    """The linear warm-up's first learning-rate factor (0: from zero, as transformers' warm-up)."""
    epochs: int
    max_steps: int | None
    max_grad_norm: float
    val_every: int | None
    """Validate every this many steps (None: no validation in this phase)."""
    val_samples: int | None
    """Validation rows used (None: all)."""


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
    max_seq_len: int
    traces_dir: str
    data_root: str
    sft_split: str
    rl_split: str
    eval_split: str | None
    max_examples: int | None
    seed: int
    output_dir: str
    sft: PhaseValues
    rl: PhaseValues
    sft_assistant_only: bool
    # RL
    num_generations: int
    token_level_loss: bool
    clip_low: float
    clip_high: float
    kl_beta: float
    kl_type: str
    adv_baseline: str
    """`rl.advantage.baseline`: group_mean | leave_one_out (spatialiq_train.core.advantages)."""
    adv_std: str
    """`rl.advantage.std`: none | group | leave_one_out."""
    prompts_per_step: int
    """`rl.prompts_per_step` (the released 8 when null): the GRPO global batch is this x num_generations."""
    sft_global_batch: int
    """`sft.optimizer.global_batch_size` (the released 16 when null)."""
    rl_micro_batch: int
    sft_micro_batch: int
    """`*.optimizer.micro_batch_size` (the released 1 when null)."""
    overlong_filtering: bool
    dynamic_sampling: bool
    max_gen_batches: int
    overlong_shaping: bool
    overlong_buffer: int
    overlong_penalty: float
    overlong_max_len: int
    """Where the overlong window ends (`rl.overlong.max_response_length`, else the completion budget)."""
    truncated_is_ratio: float | None
    """`loss_fn.truncated_importance_sampling_ratio` with the correction on; None = no correction (as released)."""
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


def adv_estimator(baseline: str, std: str) -> dict[str, bool]:
    """`rl.advantage` -> v0.7.0's `grpo.adv_estimator` switches: `use_leave_one_out_baseline` picks the baseline,
    `normalize_rewards` whether the estimator divides. Which std it divides by (group or leave-one-out) is not a
    v0.7.0 key (it ties the std to the baseline): the driver's per-view wrapper hands the estimator the recipe's
    (`grouping.per_view_groups`)."""
    return {"use_leave_one_out_baseline": baseline == "leave_one_out", "normalize_rewards": std != "none"}


def max_gen_batches(refill_rounds: int, enabled: bool) -> int:
    """`rl.dynamic_sampling.max_refill_rounds` -> `grpo.dynamic_sampling_max_gen_batches`: the same number.

    NeMo-RL v0.7.0 (`grpo_train` / `dynamic_sampling` in nemo_rl/algorithms/grpo.py) counts a step's generation
    batches from 1 and, while the batch is short after batch k, generates again if k <= the cap and raises
    otherwise: a cap of N allows N + 1 generation batches, the first and N more. TRL's refill rounds are the
    rounds after the first generation, so N rounds are also N + 1 batches. NeMo-RL asserts the cap is above 0.
    """
    if enabled and refill_rounds < 1:
        raise ValueError(f"rl.dynamic_sampling.max_refill_rounds {refill_rounds}: NeMo-RL needs at least 1 (its "
                         "grpo.dynamic_sampling_max_gen_batches must be > 0); set rl.dynamic_sampling.enabled false "
                         "for one generation batch per step")
    return refill_rounds


def _steps(value: int) -> int | None:
    return value if value > 0 else None


def _phase(section: Any) -> PhaseValues:
    opt, val = section.optimizer, section.validation
    return PhaseValues(
        lr=opt.learning_rate, weight_decay=opt.weight_decay, betas=(opt.adam_beta1, opt.adam_beta2),
        scheduler=opt.lr_scheduler_type, warmup=opt.warmup_steps, warmup_start=opt.warmup_start_factor,
        epochs=math.ceil(opt.num_train_epochs), max_steps=_steps(opt.max_steps), max_grad_norm=opt.max_grad_norm,
        val_every=val.every_steps, val_samples=val.max_samples,
    )


def importance_sampling(section: Any) -> float | None:
    """The recipe's vLLM importance-sampling correction as NeMo-RL v0.7.0 expresses it: None (off, as released), or
    the cap of its token-level truncated correction. Only TRL's `token_truncate` without a lower bound has that
    meaning; the other modes are refused, naming the key."""
    if not section.importance_sampling_correction:
        return None
    mode, low, high = (section.importance_sampling_mode, section.importance_sampling_clip_min,
                       section.importance_sampling_clip_max)
    if mode != "token_truncate" or low is not None or high is None:
        raise ValueError(f"vllm.importance_sampling_mode {mode!r} (clip_min {low}, clip_max {high}) has no NeMo-RL "
                         "v0.7.0 equivalent: it truncates token-level ratios at one cap (token_truncate with "
                         "importance_sampling_clip_max, no clip_min), or set vllm.importance_sampling_correction "
                         "false (as released)")
    return float(high)


def _rl_values(recipe: Recipe) -> dict[str, Any]:
    r = recipe.rl
    return dict(
        rl_init=r.init_from, num_generations=r.num_generations, token_level_loss=_token_level(r.loss_type),
        clip_low=r.epsilon, clip_high=r.epsilon_high, kl_beta=r.beta, kl_type=r.kl_estimator,
        adv_baseline=r.advantage.baseline, adv_std=r.advantage.std,
        prompts_per_step=r.prompts_per_step or RELEASED_GRPO["num_prompts_per_step"],
        rl_micro_batch=r.optimizer.micro_batch_size or RELEASED_GRPO["train_micro_batch_size"],
        overlong_filtering=r.mask_truncated_completions,
        dynamic_sampling=r.dynamic_sampling.enabled,
        max_gen_batches=max_gen_batches(r.dynamic_sampling.max_refill_rounds, r.dynamic_sampling.enabled),
        overlong_shaping=r.overlong.enabled, overlong_buffer=r.overlong.buffer_length,
        overlong_penalty=r.overlong.penalty,
        overlong_max_len=r.overlong.max_response_length or recipe.generation.max_completion_length,
        truncated_is_ratio=importance_sampling(recipe.vllm),
    )


def values_from_recipe(recipe: Recipe) -> NemoValues:
    """Read the recipe once; raises ValueError (naming the recipe key) for a value NeMo-RL cannot express."""
    m, d, g, lg = recipe.model, recipe.data, recipe.generation, recipe.logging
    if d.sources:
        raise ValueError(f"data.sources mixes {len(d.sources)} trace folders by weight (replay), which only the TRL "
                         "engine reads (`spatialiq train`); NeMo-RL's dataloader shuffles one split: train this recipe "
                         "with `spatialiq train`, or write one trace folder and leave data.sources empty")
    lora = m.lora
    return NemoValues(
        recipe_name=recipe.name, base_model=m.name_or_path,
        min_pixels=m.min_pixels, max_pixels=m.max_pixels, freeze_vision=m.freeze_vision,
        lora={"r": lora.r, "alpha": lora.alpha, "dropout": lora.dropout, "target_modules": list(lora.target_modules)}
        if lora.enabled else None,
        max_seq_len=recipe.vllm.max_model_len or RELEASED_GRPO["max_total_sequence_length"],
        traces_dir=d.traces_dir, data_root=d.data_root, sft_split=d.sft_split, rl_split=d.rl_split,
        eval_split=d.eval_split, max_examples=d.max_examples, seed=recipe.run.seed, output_dir=recipe.run.output_dir,
        sft=_phase(recipe.sft), rl=_phase(recipe.rl), sft_assistant_only=recipe.sft.assistant_only_loss,
        sft_global_batch=recipe.sft.optimizer.global_batch_size or RELEASED_SFT["train_global_batch_size"],
        sft_micro_batch=recipe.sft.optimizer.micro_batch_size or RELEASED_GRPO["train_micro_batch_size"],
        **_rl_values(recipe),
        max_new_tokens=g.max_completion_length, temperature=g.temperature, top_p=g.top_p, top_k=g.top_k or None,
        reward_weights=dict(recipe.reward.weights),
        wandb="wandb" in lg.report_to, tensorboard="tensorboard" in lg.report_to,
        wandb_project=lg.wandb_project, save_period=lg.save_steps, keep_top_k=lg.save_total_limit,
    )
