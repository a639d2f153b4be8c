"""GRPO advantages per view: the one rule both engines train with (`rl.advantage` of a recipe).

A view's ``G`` completions form one group. The advantage of sample ``i`` is ``r_i - b_i``, divided by ``s_i`` when
the recipe normalises and ``s_i > 0``:

* baseline ``b_i``: ``group_mean`` (the mean of the view's valid samples) or ``leave_one_out`` (the mean of the
  view's *other* valid samples, RLOO);
* std ``s_i``: ``none`` (no division), ``group`` (the view's sample std, Bessel-corrected) or ``leave_one_out`` (the
  Bessel-corrected std of the view's *other* valid samples, as NeMo-RL v0.7.0's
  ``calculate_baseline_and_std_per_prompt`` computes it with ``leave_one_out_baseline``).

The arithmetic is v0.7.0's, term for term, so the NeMo-RL wrapper can hand v0.7.0's estimator these numbers: a
``G x G`` mask matrix (all ones, or ones off the diagonal) times the valid rewards, divided by the valid count (minus
one when leaving one out); a view with at most one valid sample gets baseline = reward (advantage 0) and std 0; a std
that is 0 or not a number (a leave-one-out std over one other sample) is 0, and a sample with std 0 is not divided
(v0.7.0's ``GRPOAdvantageEstimator``: ``advantage / (std + 1e-6)`` where ``std > 0``). Invalid (masked) samples do
not enter any view's statistics; they still get a baseline (they carry no loss).

Pure numpy in float64; callers convert. Used by ``spatialiq_train.train.advantages`` (TRL) and
``spatialiq_train.nemo.grouping`` (NeMo-RL's per-view wrapper).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Baseline = Literal["group_mean", "leave_one_out"]
Std = Literal["none", "group", "leave_one_out"]
BASELINES: tuple[str, ...] = ("group_mean", "leave_one_out")
STDS: tuple[str, ...] = ("none", "group", "leave_one_out")
SCALE_REWARDS_AS_ADVANTAGE = {"group": "{baseline: group_mean, std: group}",
                              "none": "{baseline: group_mean, std: none}",
                              "batch": "(none: a batch-wide std is not offered)"}
"""The retired `rl.scale_rewards` values as `rl.advantage` (its refusal names them)."""
STD_EPSILON = 1e-6
"""Added to a positive std before dividing (NeMo-RL v0.7.0's ``GRPOAdvantageEstimator``)."""

__all__ = ["BASELINES", "SCALE_REWARDS_AS_ADVANTAGE", "STDS", "STD_EPSILON", "Baseline", "Std", "advantages",
           "baseline_and_std", "refuse_scale_rewards"]


def _views(values: Sequence[float] | np.ndarray, group_size: int, what: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1 (got {group_size})")
    if v.size % group_size:
        raise ValueError(f"{v.size} {what} do not split into views of {group_size} samples")
    return v.reshape(-1, group_size)


def _moments(r: np.ndarray, valid: np.ndarray, leave_one_out: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per view and sample: (mean, mean of squares, count) over the valid samples, the sample itself left out when
    ``leave_one_out`` (v0.7.0's mask matrix and divisor)."""
    g = r.shape[1]
    matrix = np.ones((g, g)) - (np.eye(g) if leave_one_out else 0.0)
    count = valid.sum(axis=1, keepdims=True) - float(leave_one_out)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = (r * valid) @ matrix.T / count
        square = (r * r * valid) @ matrix.T / count
    return mean, square, np.broadcast_to(count, r.shape)


def baseline_and_std(rewards: Sequence[float] | np.ndarray, group_size: int, baseline: Baseline, std: Std,
                     valid: Sequence[float] | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, std) per sample, flat, for consecutive views of ``group_size`` samples (see the module docstring).
    ``std`` is all zeros for ``std="none"``."""
    if baseline not in BASELINES:
        raise ValueError(f"advantage baseline {baseline!r}: use one of {', '.join(BASELINES)}")
    if std not in STDS:
        raise ValueError(f"advantage std {std!r}: use one of {', '.join(STDS)}")
    r = _views(rewards, group_size, "rewards")
    v = np.ones_like(r) if valid is None else (_views(valid, group_size, "valid flags") != 0).astype(np.float64)
    if v.shape != r.shape:
        raise ValueError(f"{v.size} valid flags for {r.size} rewards")
    few = v.sum(axis=1, keepdims=True) <= 1
    base, _, _ = _moments(r, v, baseline == "leave_one_out")
    base = np.where(few, r, base)
    spread = np.zeros_like(r)
    if std != "none":
        mean, square, n = _moments(r, v, std == "leave_one_out")
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = np.sqrt((square - mean * mean) * (n / (n - 1)))
        spread = np.where(few | ~np.isfinite(spread), 0.0, spread)
    return base.reshape(-1), spread.reshape(-1)


def advantages(rewards: Sequence[float] | np.ndarray, group_size: int, baseline: Baseline, std: Std,
               valid: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """The advantage of every sample, flat (float64): ``r - b``, divided by ``s + 1e-6`` where ``s > 0`` unless
    ``std`` is ``none``."""
    base, spread = baseline_and_std(rewards, group_size, baseline, std, valid)
    adv = np.asarray(rewards, dtype=np.float64).reshape(-1) - base
    if std == "none":
        return adv
    positive = spread > 0
    adv[positive] = adv[positive] / (spread[positive] + STD_EPSILON)
    return adv


def refuse_scale_rewards(rl: object) -> object:
    """The recipe's `rl` mapping unchanged, or a ValueError when it names the retired `scale_rewards`."""
    if isinstance(rl, dict) and "scale_rewards" in rl:
        old = rl["scale_rewards"]
        spelled = {"true": "group", "false": "none"}.get(str(old).lower(), str(old))  # TRL's booleans
        same = SCALE_REWARDS_AS_ADVANTAGE.get(spelled, "(see docs/training.md)")
        raise ValueError(f"rl.scale_rewards is retired: the advantage is rl.advantage {{baseline: group_mean | "
                         f"leave_one_out, std: none | group | leave_one_out}}; scale_rewards {old} was rl.advantage "
                         f"{same}")
    return rl
