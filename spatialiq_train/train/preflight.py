"""Checks that run before any training: everything the RL phase needs, so that a two-phase run fails in seconds
rather than after its SFT warm-up.

The reward-name check (`reward.registry.check_reward_names`) lives with the rewards. `check_rl_ready` builds the RL
reward functions and scores one sample row with them, reads the RL split, loads the policy's model config, and
builds the GRPO config. The held-out check of the validation split is `train.held_out.check_validation_held_out` (the
phase runner calls it too, and this module imports the RL phase, which imports the phase runner).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.plan import PhasePlan

log = logging.getLogger(__name__)

SAMPLE_COMPLETION = "<answer>0</answer>"


class PreflightError(UserError):
    """Something the RL phase needs is missing or broken; the message names it and what would be right."""


def _columns_of(row: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: [v] for k, v in row.items() if k not in ("prompt", "images", "completion")}


def check_rewards_on_row(rewards: Any, row: dict[str, Any], where: str) -> None:
    """Score one sample completion of `row` with every reward function; each must give one number (or None)."""
    completion = [{"role": "assistant", "content": SAMPLE_COMPLETION}]
    for fn in rewards.funcs:
        name = getattr(fn, "__name__", repr(fn))
        try:
            out = fn(prompts=[row.get("prompt")], completions=[completion], completion_ids=[[0, 1, 2]],
                     **_columns_of(row))
        except Exception as exc:  # noqa: BLE001 - any failure here would stop the RL phase; name it now
            raise PreflightError(f"reward {name!r} fails on {where} ({type(exc).__name__}: {exc}); fix the reward "
                                 "or its columns before training") from exc
        values = list(out) if isinstance(out, list | tuple) else None
        if values is None or len(values) != 1 or not (values[0] is None or isinstance(values[0], int | float)):
            raise PreflightError(f"reward {name!r} returned {out!r} for one completion of {where}; a TRL reward "
                                 "returns a list with one number (or None) per completion")
        if values[0] is not None and not math.isfinite(values[0]):
            raise PreflightError(f"reward {name!r} returned {values[0]} on {where}; rewards must be finite")


def check_model_config(model_path: str, what: str) -> None:
    """The policy's config loads (a folder with config.json, or a hub id in the local cache or reachable)."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(model_path)
    except (OSError, ValueError) as exc:
        raise PreflightError(f"{what} {model_path}: its model config does not load ({exc})") from None


def check_rl_ready(plan: PhasePlan, rl_dir: str | Path, model_path: str | None, rl_dataset: Any = None,
                   rewards: Any = None) -> None:
    """Build and check what the RL phase of `plan` needs (rewards on a sample row, data, model config, GRPO config).
    A `model_path` of None is the tiny model not yet built (its config is ours): its config is not loaded."""
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import phase_config
    from spatialiq_train.train.rl import reward_setup, rl_phase

    d = plan.data
    rewards = rewards or reward_setup(plan)
    if rl_dataset is None:
        rl_dataset = load_split(d.traces_dir, d.train_split, d.data_root, "rl", 1)
    where = f"the first row of the {d.train_split!r} split"
    check_rewards_on_row(rewards, rl_dataset[0], where)
    if model_path is not None:
        check_model_config(model_path, "rl.init_from" if plan.model.init_from else "model")
    phase_config(rl_phase(rewards=rewards), plan, rl_dir)
    log.info("RL preflight passed: %d reward functions, data, model config and GRPO config", len(rewards.funcs))
