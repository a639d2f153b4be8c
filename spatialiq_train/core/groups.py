"""GRPO groups: which completions of a view count as one group, and whether its rewards vary.

Both training backends decide dynamic sampling (DAPO: drop a view whose samples all score alike) with
:func:`filter_groups`, so a reward grid keeps the same views on TRL (`spatialiq_train.train.dynamic_sampling`) and on
NeMo-RL (`spatialiq_train.nemo.grouping`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

REWARD_STD_TOL = 1e-6
"""A group whose reward range is at most this is treated as constant (float noise from weighted sums)."""


def filter_groups(rewards: Sequence[float] | np.ndarray, group_size: int, tol: float = REWARD_STD_TOL) -> np.ndarray:
    """Per-completion keep mask: True for every completion of a group whose rewards vary by more than `tol`.

    `rewards` holds consecutive groups of `group_size` completions of the same prompt. NaN rewards (unscorable
    completions) are ignored; a group with fewer than two scored completions is dropped.
    """
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (got {group_size})")
    if r.size % group_size:
        raise ValueError(f"{r.size} rewards do not split into groups of {group_size}")
    groups = r.reshape(-1, group_size)
    scored = ~np.isnan(groups)
    hi = np.where(scored, groups, -np.inf).max(axis=1)
    lo = np.where(scored, groups, np.inf).min(axis=1)
    varies = (scored.sum(axis=1) >= 2) & ((hi - lo) > tol)
    return np.repeat(varies, group_size)
