"""GRPO under the DAPO recipe with TRL's GRPOTrainer (plus our dynamic sampling), rewards from `reward/`.

Recipe keys -> TRL: clip-higher `rl.epsilon`/`rl.epsilon_high` -> `epsilon`/`epsilon_high`; token-level loss
`rl.loss_type: dapo`; KL anchor `rl.beta` (TRL's per-token KL is the k3 estimator) against the reference model
TRL loads from the same path as the policy, i.e. the SFT-CoT initialisation; overlong reward shaping
`rl.overlong` -> `trl.rewards.get_soft_overlong_punishment` as an extra reward term; dynamic sampling
`rl.dynamic_sampling` -> `DynamicSamplingGRPOTrainer`. Generation uses colocated vLLM when it is installed and
the recipe asks for it, else transformers' `generate`.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spatialiq_train.recipes import Recipe
from spatialiq_train.train import common

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewardSetup:
    """TRL reward functions with their weights, and which of them decide the dynamic-sampling filter."""

    funcs: list[Callable[..., list[float | None]]]
    weights: list[float]
    filter_mask: list[bool]


def reward_setup(recipe: Recipe, base: Sequence[tuple[Callable[..., Any], float]] | None = None) -> RewardSetup:
    """The recipe's weighted rewards (from `reward.trl`, or `base` pairs), plus the overlong shaping term and a
    weight-0 `exact_match` term whose logged mean is the accuracy. Only the recipe's own terms drive the
    dynamic-sampling filter (as in NeMo-RL, the filter reads the reward before shaping)."""
    if base is None:
        from reward.trl import make_trl_reward_funcs

        funcs, weights = make_trl_reward_funcs(dict(recipe.reward.weights))
        pairs = list(zip(funcs, weights, strict=True))
    else:
        pairs = list(base)
    filter_mask = [True] * len(pairs)
    names = {getattr(f, "__name__", "") for f, _ in pairs}
    if recipe.rl.overlong.enabled:
        from trl.rewards import get_soft_overlong_punishment

        max_len, buffer = recipe.generation.max_completion_length, recipe.rl.overlong.buffer_length
        shaping = get_soft_overlong_punishment(max_len, buffer)
        pairs.append((shaping, recipe.rl.overlong.penalty))
        filter_mask.append(False)
    if "exact_match" not in names:
        from reward.trl import make_trl_reward

        pairs.append((make_trl_reward("exact_match", name="exact_match"), 0.0))
        filter_mask.append(False)
    return RewardSetup([f for f, _ in pairs], [float(w) for _, w in pairs], filter_mask)


def vllm_usable(recipe: Recipe) -> bool:
    return recipe.rl.use_vllm and common.on_gpu(recipe) and importlib.util.find_spec("vllm") is not None


def grpo_config(recipe: Recipe, output_dir: str | Path, reward_weights: list[float]) -> Any:
    """The TRL `GRPOConfig` for the recipe's `rl` and `generation` sections."""
    from trl import GRPOConfig

    r, g = recipe.rl, recipe.generation
    use_vllm = vllm_usable(recipe)
    extra: dict[str, Any] = {}
    if use_vllm:
        extra = {"vllm_mode": r.vllm_mode, "vllm_gpu_memory_utilization": r.vllm_gpu_memory_utilization}
    return GRPOConfig(
        **common.trainer_common(recipe, Path(output_dir), r.gradient_checkpointing),
        **extra,
        learning_rate=r.learning_rate,
        lr_scheduler_type=r.lr_scheduler_type,
        warmup_steps=r.warmup_steps,
        num_train_epochs=r.num_train_epochs,
        max_steps=r.max_steps,
        per_device_train_batch_size=r.per_device_train_batch_size,
        gradient_accumulation_steps=r.gradient_accumulation_steps,
        steps_per_generation=r.steps_per_generation,
        num_generations=r.num_generations,
        num_iterations=r.num_iterations,
        loss_type=r.loss_type,
        epsilon=r.epsilon,
        epsilon_high=r.epsilon_high,
        beta=r.beta,
        scale_rewards=r.scale_rewards,
        mask_truncated_completions=r.mask_truncated_completions,
        weight_decay=r.weight_decay,
        max_grad_norm=r.max_grad_norm,
        max_completion_length=g.max_completion_length,
        temperature=g.temperature,
        top_p=g.top_p,
        top_k=g.top_k,
        use_vllm=use_vllm,
        reward_weights=reward_weights,
        model_init_kwargs=common.model_init_kwargs(recipe),
        log_completions=False,
    )


def build_rl_trainer(
    recipe: Recipe,
    model_path: str,
    train_dataset: Any,
    output_dir: str | Path,
    rewards: RewardSetup | None = None,
    callbacks: list[Any] | None = None,
) -> tuple[Any, Any]:
    """(DynamicSamplingGRPOTrainer, processor). `model_path` is the policy init and the KL reference."""
    from spatialiq_train.train.dynamic_sampling import build_dynamic_sampling_trainer_class
    from spatialiq_train.train.logging import make_metrics_callback

    out = Path(output_dir)
    rewards = rewards or reward_setup(recipe)
    processor = common.load_processor_for(recipe, model_path)
    trainer_cls = build_dynamic_sampling_trainer_class()
    ds = recipe.rl.dynamic_sampling
    trainer = trainer_cls(
        model=model_path,  # a path, so TRL can build the reference model from it when beta > 0
        reward_funcs=rewards.funcs,
        args=grpo_config(recipe, out, rewards.weights),
        train_dataset=train_dataset,
        processing_class=processor,
        peft_config=common.lora_config(recipe),
        callbacks=[make_metrics_callback(out / "metrics.jsonl", "rl"), *(callbacks or [])],
        dynamic_sampling=ds.enabled,
        max_refill_rounds=ds.max_refill_rounds,
        filter_reward_mask=rewards.filter_mask,
    )
    if recipe.model.freeze_vision:
        common.freeze_vision_tower(trainer.model)
    return trainer, processor


def run_rl(
    recipe: Recipe,
    output_dir: str | Path,
    model_path: str | None = None,
    train_dataset: Any = None,
    final_dir: str | Path | None = None,
    rewards: RewardSetup | None = None,
    callbacks: list[Any] | None = None,
) -> Path:
    """Train (resuming from the newest checkpoint under `output_dir`) and export to `final_dir`
    (default `output_dir/final`). The policy starts from `model_path`, else `rl.init_from`, else the base model."""
    from spatialiq_train.io import check_model_source
    from spatialiq_train.train.data import load_split

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    d = recipe.data
    if model_path is None and recipe.rl.init_from is not None:
        model_path = check_model_source(recipe.rl.init_from, "rl.init_from")
    model_path = model_path or common.ensure_base_model(recipe, out)
    if train_dataset is None:
        train_dataset = load_split(d.traces_dir, d.rl_split, d.data_root, "rl", d.max_examples)
    trainer, processor = build_rl_trainer(recipe, model_path, train_dataset, out, rewards, callbacks)
    return common.train_and_export(trainer, processor, out, Path(final_dir) if final_dir else None, "RL")
