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

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spatialiq_train.core.plan import PhasePlan, RlAlgorithm
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.core.resolve import algorithm
from spatialiq_train.train import common, mapper, phase
from spatialiq_train.train.plan import machine_plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewardSetup:
    """TRL reward functions with their weights, and which of them decide the dynamic-sampling filter."""

    funcs: list[Callable[..., list[float | None]]]
    weights: list[float]
    filter_mask: list[bool]


def reward_setup(subject: Recipe | PhasePlan,
                 base: Sequence[tuple[Callable[..., Any], float]] | None = None) -> RewardSetup:
    """The plan's reward terms (`train.mapper.reward_terms`) as TRL reward functions: the recipe's weighted rewards
    (from `reward.trl`, or `base` pairs), the overlong shaping term and a weight-0 `exact_match` whose logged mean
    is the accuracy. Only the recipe's own terms drive the dynamic-sampling filter (as in NeMo-RL, the filter reads
    the reward before shaping). Of a recipe, only its RL algorithm is resolved (no hardware decides the terms)."""
    rl = subject.rl if isinstance(subject, PhasePlan) else algorithm(subject, "rl")
    if not isinstance(rl, RlAlgorithm):  # pragma: no cover - algorithm(..., "rl") is always one
        raise TypeError("reward_setup needs an RL algorithm")
    terms = mapper.reward_terms(rl)
    if base is None:
        from reward.trl import make_trl_reward_funcs

        funcs, weights = make_trl_reward_funcs(dict(rl.weights))
        pairs = list(zip(funcs, weights, strict=True))
    else:
        pairs = list(base)
    filter_mask = [True] * len(pairs)
    names = {getattr(f, "__name__", "") for f, _ in pairs}
    extra = [t for t in terms if not t[2]]
    for name, weight, _ in extra:
        if name == "soft_overlong_punishment":
            from trl.rewards import get_soft_overlong_punishment

            pairs.append((get_soft_overlong_punishment(*mapper.overlong_window(rl)), weight))
        elif name not in names:
            from reward.trl import make_trl_reward

            pairs.append((make_trl_reward(name, name=name), weight))
        else:
            continue
        filter_mask.append(False)
    return RewardSetup([f for f, _ in pairs], [float(w) for _, w in pairs], filter_mask)


def _config_class(**kwargs: Any) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(**kwargs)


def _make_trainer(rewards: RewardSetup | None, frozen: bool = False) -> Any:
    def make(plan: PhasePlan, model_path: str, args: Any, train_dataset: Any, eval_dataset: Any, processor: Any,
             callbacks: list[Any]) -> Any:
        from spatialiq_train.train.data import with_pixel_budget
        from spatialiq_train.train.dynamic_sampling import build_dynamic_sampling_trainer_class

        settings = mapper.trainer_settings(plan)
        setup = rewards or reward_setup(plan)
        enabled, rounds, multiplier = settings["dynamic_sampling"]
        # colocated vLLM re-processes raw images with the checkpoint's own budget: hand both sides images already
        # at the recipe's target size, so the trainer and vLLM count the same image tokens
        fitted = with_pixel_budget(train_dataset, *settings["pixels"])
        return build_dynamic_sampling_trainer_class()(
            model=model_path,  # a path, so TRL can build the reference model from it when beta > 0
            reward_funcs=setup.funcs, args=args, train_dataset=fitted, eval_dataset=eval_dataset,
            processing_class=processor, peft_config=common.lora_config(settings), callbacks=callbacks,
            dynamic_sampling=enabled, max_refill_rounds=rounds, batch_multiplier=multiplier,
            filter_reward_mask=setup.filter_mask, frozen=frozen, advantage=settings["advantage"])

    return make


def rl_phase(recipe: Recipe | None = None, rewards: RewardSetup | None = None,
             frozen: bool = False) -> phase.PhaseSpec:
    """The RL phase, for `phase.run_phase` and `phase.build_phase_trainer` (the trainer is a
    `DynamicSamplingGRPOTrainer`; the policy path is also the KL reference). `rewards` the caller's own reward
    functions (default: the plan's); `frozen` makes it the control of a learning curve: the same rollouts, rewards
    and logs at the unchanged weights, no loss or update (`dynamic_sampling.DynamicSamplingMixin.compute_loss`).
    Unless frozen, a run whose steps updated no weight warns, naming the cause and the knobs
    (`core.learning.idle_rl_cause`); `rl_learned_nothing` returns that message for the CLI's summary."""
    total = None
    if rewards is not None and rewards.funcs:  # the terms that drive the filter are the recipe's own: summed
        terms = zip(rewards.funcs, rewards.weights, rewards.filter_mask, strict=True)
        total = {getattr(f, "__name__", f"reward{i}"): w for i, (f, w, keep) in enumerate(terms) if keep}
    return phase.PhaseSpec(name="rl", config_class=_config_class, make_trainer=_make_trainer(rewards, frozen),
                           reward_weights=list(rewards.weights) if rewards is not None else None,
                           total_weights=total or None, after_run=None if frozen else _warn_if_idle)


def _warn_if_idle(output_dir: Path) -> None:
    """The idle-phase warning of an RL run (not of its control): the cause and the knobs (`rl_learned_nothing`)."""
    if cause := rl_learned_nothing(output_dir):
        log.warning("%s", cause)


def grpo_config(recipe: Recipe, output_dir: str | Path, reward_weights: list[float] | None = None,
                model_path: str | None = None) -> Any:
    """The TRL `GRPOConfig` a run of the recipe's RL phase trains with on this machine (`machine_plan`)."""
    weights_only = None if reward_weights is None else RewardSetup([], list(reward_weights), [])
    return phase.phase_config(rl_phase(rewards=weights_only), machine_plan(recipe, "rl", model_path), output_dir)


def rl_learned_nothing(output_dir: str | Path) -> str | None:
    """Why the RL phase under `output_dir` updated no weight (from its metrics.jsonl and the completion budget of
    its plan.json), or None when it did (or the phase has no plan record yet)."""
    import json

    from spatialiq_train.core.learning import idle_rl_cause
    from spatialiq_train.core.metrics import read_metrics
    from spatialiq_train.train.plan import PLAN_FILE

    plan = Path(output_dir) / PLAN_FILE
    if not plan.is_file():
        return None
    budget = (json.loads(plan.read_text(encoding="utf-8")).get("generation") or {}).get("max_completion_length")
    if not isinstance(budget, int):  # a plan.json of an earlier version: no generation record
        return None
    return idle_rl_cause(read_metrics(Path(output_dir) / "metrics.jsonl"), budget)
