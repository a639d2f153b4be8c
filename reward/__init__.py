"""Rewards for GRPO/DAPO on Spatial-IQ completions: pure functions, a registry, engine adapters.

``get_reward("default")`` is the paper's reward (0.1 format + 0.9 gated integer distance).
:mod:`reward.trl` adapts any reward to TRL's signature and :mod:`reward.nemo` to a NeMo-RL
environment's ``step``; docs/rewards.md lists every name and formula.
"""

from __future__ import annotations

from reward import folding as _folding  # noqa: F401  (registers the paper-folding rewards)
from reward import functions as _functions  # noqa: F401  (registers the built-in rewards)
from reward.errors import error_counts, reset_errors, total_errors
from reward.registry import (
    Combination,
    RewardFn,
    combine,
    components_of,
    get_reward,
    list_rewards,
    register,
    register_combination,
    register_factory,
    resolve_reward,
)

__all__ = [
    "Combination",
    "RewardFn",
    "combine",
    "components_of",
    "error_counts",
    "get_reward",
    "list_rewards",
    "register",
    "register_combination",
    "register_factory",
    "reset_errors",
    "resolve_reward",
    "total_errors",
]
