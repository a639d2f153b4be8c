"""`spatialiq_train.nemo.driver.StepWatch`: what v0.7.0's loop logs decides whether the RL phase learned nothing."""

from __future__ import annotations

from typing import Any

import numpy as np

from spatialiq_train.nemo.driver import StepWatch


class Logger:
    """The one method of NeMo-RL's ``Logger`` the watch wraps; keeps what reaches it."""

    def __init__(self) -> None:
        self.got: list[tuple[str | None, int, dict[str, Any]]] = []

    def log_metrics(self, metrics: dict[str, Any], step: int, prefix: str | None = "", step_metric: str | None = None,
                    step_finished: bool = False) -> None:
        self.got.append((prefix, step, metrics))


def _run(steps: list[tuple[float, float]]) -> tuple[StepWatch, Logger]:
    """Each step logs its rollouts (natural_termination_rate) then its training metrics (grad_norm), as v0.7.0 does."""
    logger, watch = Logger(), StepWatch()
    watch.attach(logger)
    for step, (terminated, norm) in enumerate(steps, start=1):
        logger.log_metrics({"natural_termination_rate": terminated, "mean_gen_tokens_per_sample": 24.0}, step,
                           prefix="train")
        logger.log_metrics({"grad_norm": np.array(norm), "loss": np.array(0.0)}, step, prefix="train")
        logger.log_metrics({"accuracy": 0.5}, step, prefix="validation")
    return watch, logger


def test_every_metric_still_reaches_the_logger() -> None:
    _, logger = _run([(1.0, 0.5), (1.0, 0.2)])
    assert [(p, s) for p, s, _ in logger.got] == [("train", 1), ("train", 1), ("validation", 1),
                                                  ("train", 2), ("train", 2), ("validation", 2)]


def test_a_phase_that_moved_the_weights_is_quiet() -> None:
    watch, _ = _run([(0.2, 0.0), (0.9, 0.3)])
    assert watch.learned_nothing(24) is None


def test_clipped_completions_are_named_with_the_knobs() -> None:
    watch, _ = _run([(0.0, 0.0), (0.1, 0.0)])
    cause = watch.learned_nothing(24)
    assert cause is not None
    assert "none of its 2 steps updated the weights" in cause
    assert "95% of the completions were cut at generation.max_completion_length=24" in cause
    assert "policy.generation.max_new_tokens" in cause


def test_a_zero_gradient_without_clipping_is_named_as_such() -> None:
    watch, _ = _run([(1.0, 0.0)])
    cause = watch.learned_nothing(24)
    assert cause is not None and "every step's gradient was zero" in cause
