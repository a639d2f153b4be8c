"""GRPO under the DAPO recipe with TRL's GRPOTrainer (plus our dynamic sampling), rewards from `reward/`.

Recipe keys -> TRL: clip-higher `rl.epsilon`/`rl.epsilon_high` -> `epsilon`/`epsilon_high`; token-level loss
`rl.loss_type: dapo`; KL anchor `rl.beta` (TRL's per-token KL is the k3 estimator) against the reference model
TRL loads from the same path as the policy, i.e. the SFT-CoT initialisation; overlong reward shaping
`rl.overlong` -> `trl.rewards.get_soft_overlong_punishment` as an extra reward term; advantages `rl.advantage` ->
`train.advantages.RecipeAdvantageMixin` (the per-view rule NeMo-RL runs use too); dynamic sampling
`rl.dynamic_sampling` -> `DynamicSamplingGRPOTrainer`. Generation uses colocated vLLM when it is installed and
the recipe's `vllm` section asks for it, else transformers' `generate`. The shared phase runner (`train.phase`) does
the rest: optimizer section, validation, resume, export.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spatialiq_train.core.recipe_model import VLLM_TO_GRPO, Recipe
from spatialiq_train.train import common, phase

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

        over = recipe.rl.overlong
        max_len, buffer = over.max_response_length or recipe.generation.max_completion_length, over.buffer_length
        shaping = get_soft_overlong_punishment(max_len, buffer)
        pairs.append((shaping, recipe.rl.overlong.penalty))
        filter_mask.append(False)
    if "exact_match" not in names:
        from reward.trl import make_trl_reward

        pairs.append((make_trl_reward("exact_match", name="exact_match"), 0.0))
        filter_mask.append(False)
    return RewardSetup([f for f, _ in pairs], [float(w) for _, w in pairs], filter_mask)


def vllm_usable(recipe: Recipe) -> bool:
    return recipe.vllm.enabled and common.on_gpu(recipe) and importlib.util.find_spec("vllm") is not None


def vllm_args(recipe: Recipe) -> dict[str, Any]:
    """`use_vllm` and the `vllm` section as trl.GRPOConfig keywords (VLLM_TO_GRPO, one to one)."""
    if not vllm_usable(recipe):
        return {"use_vllm": False}
    v = recipe.vllm.model_dump()
    return {"use_vllm": True, **{grpo: v[key] for key, grpo in VLLM_TO_GRPO.items()}}


def _grpo_kwargs(recipe: Recipe, reward_weights: list[float]) -> dict[str, Any]:
    r, g = recipe.rl, recipe.generation
    keys = ("steps_per_generation", "num_generations", "num_iterations", "loss_type", "epsilon", "epsilon_high",
            "beta", "mask_truncated_completions")
    # scale_rewards "none": TRL's own advantages are replaced by the recipe's (rl.advantage, train.advantages)
    return {**{k: getattr(r, k) for k in keys}, "scale_rewards": "none", **g.model_dump(), **vllm_args(recipe),
            "reward_weights": reward_weights, "log_completions": False}


def _config_class(**kwargs: Any) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(**kwargs)


def _make_trainer(recipe: Recipe, rewards: RewardSetup, frozen: bool = False) -> Any:
    def make(model_path: str, args: Any, train_dataset: Any, eval_dataset: Any, processor: Any,
             callbacks: list[Any]) -> Any:
        from spatialiq_train.train.data import with_pixel_budget
        from spatialiq_train.train.dynamic_sampling import build_dynamic_sampling_trainer_class

        ds = recipe.rl.dynamic_sampling
        # colocated vLLM re-processes raw images with the checkpoint's own budget: hand both sides images already
        # at the recipe's target size, so the trainer and vLLM count the same image tokens
        fitted = with_pixel_budget(train_dataset, recipe.model.min_pixels, recipe.model.max_pixels)
        return build_dynamic_sampling_trainer_class()(
            model=model_path,  # a path, so TRL can build the reference model from it when beta > 0
            reward_funcs=rewards.funcs, args=args, train_dataset=fitted, eval_dataset=eval_dataset,
            processing_class=processor, peft_config=common.lora_config(recipe), callbacks=callbacks,
            dynamic_sampling=ds.enabled, max_refill_rounds=ds.max_refill_rounds,
            filter_reward_mask=rewards.filter_mask, frozen=frozen,
            advantage=(recipe.rl.advantage.baseline, recipe.rl.advantage.std))

    return make


def rl_phase(recipe: Recipe, rewards: RewardSetup | None = None, frozen: bool = False) -> phase.PhaseSpec:
    """The RL phase; `frozen` makes it the control of a learning curve (rollouts and rewards, no update)."""
    rewards = rewards or reward_setup(recipe)
    return phase.PhaseSpec(name="rl", config_class=_config_class,
                           phase_kwargs=lambda r: _grpo_kwargs(r, rewards.weights),
                           make_trainer=_make_trainer(recipe, rewards, frozen),
                           eval_batch_size=lambda r: r.rl.num_generations)


def grpo_config(recipe: Recipe, output_dir: str | Path, reward_weights: list[float]) -> Any:
    """The TRL `GRPOConfig` for the recipe's `rl`, `vllm` and `generation` sections."""
    weights_only = RewardSetup(funcs=[], weights=list(reward_weights), filter_mask=[])
    return phase.phase_config(rl_phase(recipe, weights_only), recipe, output_dir)


def build_rl_trainer(
    recipe: Recipe,
    model_path: str,
    train_dataset: Any,
    output_dir: str | Path,
    rewards: RewardSetup | None = None,
    callbacks: list[Any] | None = None,
    eval_dataset: Any = None,
) -> tuple[Any, Any]:
    """(DynamicSamplingGRPOTrainer, processor). `model_path` is the policy init and the KL reference."""
    return phase.build_phase_trainer(rl_phase(recipe, rewards), recipe, model_path, train_dataset, output_dir,
                                     eval_dataset, callbacks)


def run_rl(
    recipe: Recipe,
    output_dir: str | Path,
    model_path: str | None = None,
    train_dataset: Any = None,
    final_dir: str | Path | None = None,
    rewards: RewardSetup | None = None,
    callbacks: list[Any] | None = None,
    eval_dataset: Any = None,
    extend: bool = False,
    frozen: bool = False,
) -> Path:
    """Train (resuming from the newest checkpoint under `output_dir`) and export to `final_dir`
    (default `output_dir/final`). The policy starts from `model_path`, else `rl.init_from`, else the base model.
    A finished run is complete; a larger step budget needs `extend` (`phase.run_phase`). `frozen` runs the control
    of a learning curve: the same rollouts, rewards and logs at the unchanged weights, no loss or update
    (`dynamic_sampling.DynamicSamplingMixin.compute_loss`).

    When no step updated the weights, the phase warns, naming the cause and the knobs
    (`core.learning.idle_rl_cause`); `rl_learned_nothing` returns that message for the CLI's summary."""
    if model_path is None and recipe.rl.init_from is not None:
        model_path = common.check_init_from(recipe.rl.init_from)
    final = phase.run_phase(rl_phase(recipe, rewards, frozen), recipe, output_dir, model_path, train_dataset,
                            eval_dataset, final_dir, callbacks, extend)
    if not frozen and (cause := rl_learned_nothing(recipe, output_dir)):
        log.warning("%s", cause)
    return final


def rl_learned_nothing(recipe: Recipe, output_dir: str | Path) -> str | None:
    """Why the RL phase under `output_dir` updated no weight (from its metrics.jsonl), or None when it did."""
    from spatialiq_train.core.learning import idle_rl_cause
    from spatialiq_train.core.metrics import read_metrics

    return idle_rl_cause(read_metrics(Path(output_dir) / "metrics.jsonl"), recipe.generation.max_completion_length)
