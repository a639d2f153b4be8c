"""RL on NeMo-RL v0.7.0's own loop makes the tiny model better, and a sign error in the advantages is caught.

One seed of ``bench/bench_learning_nemo.py``: from the session's SFT warm-up, the DAPO-tight RL phase through
``grpo_train`` (``_learning.rl_run``) against two controls through the same code: ``frozen`` (learning rate 1e-12:
the same rollouts, rewards and logs, weights that cannot move) and ``flipped`` (v0.7.0's advantages negated).
Deterministic on the CPU for a fixed seed.

The margin is taken from the benchmark's seed-to-seed spread, not tuned to pass: ``MARGIN`` is three times the
standard deviation across seeds of the lift measured by the benchmark in this setting (see ``SEED_SPREAD``). The
sign-flipped run must fall below it: a flipped advantage, a loss over prompt tokens, a reward that never reaches the
trainer or a refit that never lands all leave the reward where the frozen control is, or lower.
"""

from __future__ import annotations

from typing import Any

import _learning
import pytest

SETTING = _learning.Setting()
SEED = 0
SEED_SPREAD = 0.02
"""Standard deviation across seeds of the last-third lift over the frozen control, measured by
``bench/bench_learning_nemo.py --seeds 0 1 2`` in ``SETTING`` (the closing note of the change that added this test
gives the run)."""
MARGIN = 3 * SEED_SPREAD


@pytest.fixture(scope="module")
def curves(warm: _learning.WarmUp) -> dict[str, Any]:
    root = warm.root / "learning"
    return {v: _learning.rl_run(root, warm.data_root, warm.hf, SETTING, v, SEED) for v in _learning.VARIANTS}


def _lift(curves: dict[str, Any], variant: str) -> float:
    """``core.learning``'s lift (the benchmark's): mean over the last third of the steps of the paired differences."""
    from spatialiq_train.core.learning import seed_lift

    return seed_lift(SEED, curves[variant]["reward"], curves["frozen"]["reward"]).lift


def test_rl_beats_the_control_that_cannot_move(curves: dict[str, Any]) -> None:
    assert all(len(curves[v]["reward"]) == SETTING.steps for v in _learning.VARIANTS)
    lift = _lift(curves, "rl")
    assert lift > MARGIN, (lift, curves["rl"]["reward"], curves["frozen"]["reward"])


def test_flipped_advantages_fall_below_the_margin(curves: dict[str, Any]) -> None:
    lift = _lift(curves, "flipped")
    assert lift < MARGIN, (lift, curves["flipped"]["reward"], curves["frozen"]["reward"])
    assert _lift(curves, "rl") - lift > MARGIN
