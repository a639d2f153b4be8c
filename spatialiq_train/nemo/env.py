"""Reward environments for NeMo-RL v0.7.0: the training reward and the exact-match validation reward.

NeMo-RL builds each environment as a Ray actor from the class path registered for its name, passing one
positional ``cfg`` (``config.env[<name>]``), and calls ``step(message_log_batch, metadata)`` with each sample's
turns reduced to ``role``/``content`` and its ``extra_env_info`` (:mod:`spatialiq_train.nemo.data`) as metadata.
``step`` returns an ``EnvironmentReturn``: observations, metadata, next stop strings, rewards (one weighted total
per sample: a 2-D reward tensor would be summed without weights), done flags and answers. Observations are empty
(a non-empty one is appended to the sequence and can mark the sample truncated) and every sample is done after
one turn.

Scoring is the reward core's (:mod:`reward.nemo`), so a recipe's ``reward.weights`` give the same numbers here as
through the TRL adapter. NeMo-RL has no channel for an environment's own metrics (``global_post_process_and_metrics``
is never called), so each ``step`` keeps its metrics under the project's names (:mod:`spatialiq_train.core.metrics`):
``reward/<name>/{mean,std,errors}`` per term, ``reward/total/...``, ``reward/exact_match/mean`` (rollout accuracy)
and, for the validation environment, ``eval/exact_match``. They are appended to ``cfg["metrics_file"]`` (JSONL, one
row per ``step`` call) when set, and returned by :meth:`SpatialIQEnvironment.last_metrics`. NeMo-RL's own
``validation/accuracy`` is the mean validation reward, which under :class:`ExactMatchEnvironment` is exact match.

The classes do not subclass NeMo-RL's ``EnvironmentInterface`` (that would import NeMo-RL with this module); NeMo-RL
calls them by duck typing. The Ray actor classes (``SpatialIQEnvironmentActor``, ``ExactMatchEnvironmentActor``)
are made on first attribute access, so importing this module does not import Ray.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from reward.registry import RewardSpec, resolve_reward
from spatialiq_train.core.metrics import ACCURACY_REWARD, EVAL_EXACT_MATCH, TOTAL_REWARD, reward_metric

TRAIN_ENV = "spatialiq"
"""Environment name of the training reward (the recipe's ``reward.weights``)."""
VAL_ENV = "spatialiq_exact_match"
"""Environment name of the validation reward (exact match, so ``val:accuracy`` selects checkpoints by accuracy)."""
ACTOR_CLASSES: dict[str, str] = {
    TRAIN_ENV: "spatialiq_train.nemo.env.SpatialIQEnvironmentActor",
    VAL_ENV: "spatialiq_train.nemo.env.ExactMatchEnvironmentActor",
}
"""Environment name -> the fully qualified Ray actor class NeMo-RL creates for it."""
CONFIG_KEYS = frozenset({"reward", "metrics_file", "name", "num_workers"})
"""Keys an environment config may hold (``num_workers`` is accepted and unused: scoring takes microseconds)."""


class _EnvironmentReturn(NamedTuple):
    """Field for field NeMo-RL's ``EnvironmentReturn`` (used when NeMo-RL is not importable)."""

    observations: list[dict[str, str]]
    metadata: list[Any]
    next_stop_strings: list[list[str] | None]
    rewards: Any
    terminateds: Any
    answers: list[str | None] | None


def environment_return(**fields: Any) -> Any:
    """NeMo-RL's ``EnvironmentReturn`` when importable, else the same-shaped named tuple."""
    try:
        from nemo_rl.environments.interfaces import EnvironmentReturn
    except ImportError:
        return _EnvironmentReturn(**fields)
    return EnvironmentReturn(**fields)


def _stats(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    return float(statistics.fmean(values)), float(statistics.pstdev(values))


def score_batch(message_logs: Sequence[Any], metadata: Sequence[Mapping[str, Any]],
                reward: RewardSpec) -> tuple[list[float], dict[str, list[float]], dict[str, int]]:
    """(weighted totals, each term's unweighted scores, samples each term scored 0 after an error)."""
    from reward.errors import error_counts
    from reward.nemo import score_message_logs_components

    before = error_counts()
    comps = score_message_logs_components(message_logs, metadata, reward)
    after = error_counts()
    totals = comps.pop("total")
    errors = {name: after.get(name, 0) - before.get(name, 0) for name in comps}
    return totals, comps, errors


def batch_metrics(totals: Sequence[float], components: Mapping[str, Sequence[float]],
                  errors: Mapping[str, int]) -> dict[str, float]:
    """``reward/<name>/{mean,std,errors}`` per term and ``reward/total/{mean,std}``."""
    metrics: dict[str, float] = {}
    for name, values in components.items():
        mean, std = _stats(values)
        metrics[reward_metric(name, "mean")] = mean
        metrics[reward_metric(name, "std")] = std
        metrics[reward_metric(name, "errors")] = float(errors.get(name, 0))
    mean, std = _stats(totals)
    metrics[reward_metric(TOTAL_REWARD, "mean")] = mean
    metrics[reward_metric(TOTAL_REWARD, "std")] = std
    return metrics


def check_config(cfg: Mapping[str, Any] | None, env_name: str) -> dict[str, Any]:
    """The environment config as a dict; unknown keys are refused by name (NeMo-RL would ignore a typo)."""
    if cfg is None:
        return {}
    if not isinstance(cfg, Mapping):
        raise ValueError(f"env.{env_name}: expected a mapping, got {type(cfg).__name__}")
    unknown = sorted(set(cfg) - CONFIG_KEYS)
    if unknown:
        valid = ", ".join(sorted(CONFIG_KEYS))
        raise ValueError(f"env.{env_name}: unknown key(s) {', '.join(unknown)}; valid: {valid}")
    return dict(cfg)


class SpatialIQEnvironment:
    """The training reward: the weighted reward of ``cfg["reward"]`` (default: the paper's reward)."""

    default_name = TRAIN_ENV
    default_reward: RewardSpec = "default"

    def __init__(self, cfg: Mapping[str, Any] | None = None) -> None:
        cfg = check_config(cfg, self.default_name)
        self.name: str = str(cfg.get("name") or self.default_name)
        self.reward_spec: RewardSpec = cfg.get("reward") or self.default_reward
        resolve_reward(self.reward_spec)  # an unknown reward name fails when the actor starts, not mid-run
        self.metrics_file: str | None = cfg.get("metrics_file")
        self.calls = 0
        self._last: dict[str, float] = {}

    def metrics(self, message_logs: Sequence[Any], metadata: Sequence[Mapping[str, Any]], totals: Sequence[float],
                components: Mapping[str, Sequence[float]], errors: Mapping[str, int]) -> dict[str, float]:
        """This batch's metrics; rollout accuracy is added when exact match is not a term of the reward."""
        metrics = batch_metrics(totals, components, errors)
        if ACCURACY_REWARD not in components:
            _, comps, errs = score_batch(message_logs, metadata, ACCURACY_REWARD)
            metrics.update({k: v for k, v in batch_metrics([], comps, errs).items() if k.startswith("reward/exact")})
        return metrics

    def step(self, message_log_batch: list[list[dict[str, Any]]], metadata: list[dict[str, Any]]) -> Any:
        """Score the last assistant turn of each sample; empty observations, every sample done."""
        import torch

        totals, components, errors = score_batch(message_log_batch, metadata, self.reward_spec)
        self.calls += 1
        self._last = self.metrics(message_log_batch, metadata, totals, components, errors)
        if self.metrics_file:
            self._append({"call": self.calls, "env": self.name, "samples": len(totals), **self._last})
        n = len(message_log_batch)
        return environment_return(
            observations=[{"role": "environment", "content": ""} for _ in range(n)],
            metadata=list(metadata),
            next_stop_strings=[None] * n,
            rewards=torch.tensor(totals, dtype=torch.float32),
            terminateds=torch.ones(n, dtype=torch.float32),
            answers=None,
        )

    def _append(self, row: dict[str, Any]) -> None:
        path = Path(str(self.metrics_file))
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")

    def last_metrics(self) -> dict[str, float]:
        """The metrics of the latest ``step`` call (empty before the first)."""
        return dict(self._last)

    def global_post_process_and_metrics(self, batch: Any) -> tuple[Any, dict[str, float]]:
        """Part of NeMo-RL's interface; its GRPO loop never calls it. Returns the latest step's metrics."""
        return batch, self.last_metrics()

    def shutdown(self) -> None:
        """Called by NeMo-RL at teardown; nothing to release."""


class ExactMatchEnvironment(SpatialIQEnvironment):
    """The validation reward: 1 when the gated answer equals the ground truth, else 0."""

    default_name = VAL_ENV
    default_reward: RewardSpec = ACCURACY_REWARD

    def __init__(self, cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__(cfg)
        if self.reward_spec != ACCURACY_REWARD:
            raise ValueError(f"env.{self.name}.reward: the validation environment scores {ACCURACY_REWARD!r} "
                             f"(checkpoint selection tracks accuracy), got {self.reward_spec!r}")

    def metrics(self, message_logs: Sequence[Any], metadata: Sequence[Mapping[str, Any]], totals: Sequence[float],
                components: Mapping[str, Sequence[float]], errors: Mapping[str, int]) -> dict[str, float]:
        metrics = super().metrics(message_logs, metadata, totals, components, errors)
        metrics[EVAL_EXACT_MATCH] = metrics[reward_metric(ACCURACY_REWARD, "mean")]
        return metrics


_ACTORS = {"SpatialIQEnvironmentActor": SpatialIQEnvironment, "ExactMatchEnvironmentActor": ExactMatchEnvironment}
_actor_cache: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """The Ray actor classes, made on first access (so that importing this module does not import Ray)."""
    if name not in _ACTORS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _actor_cache:
        import ray

        # Scoring is pure and deterministic: a restarted actor, or a retried step, gives the same rewards.
        _actor_cache[name] = ray.remote(max_restarts=-1, max_task_retries=-1)(_ACTORS[name])
    return _actor_cache[name]
