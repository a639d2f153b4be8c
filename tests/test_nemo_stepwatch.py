"""`spatialiq_train.nemo.watch.StepWatch`: what v0.7.0's loop logs and generates decides whether RL learned nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spatialiq_train.nemo.watch import StepWatch, clipped_share

STOP, BUDGET = 2, 4


class Logger:
    """The one method of NeMo-RL's ``Logger`` the watch wraps; keeps what reaches it."""

    def __init__(self) -> None:
        self.got: list[tuple[str | None, int, dict[str, Any]]] = []

    def log_metrics(self, metrics: dict[str, Any], step: int, prefix: str | None = "", step_metric: str | None = None,
                    step_finished: bool = False) -> None:
        self.got.append((prefix, step, metrics))


def _batch(completions: list[list[int]]) -> dict[str, Any]:
    return {"message_log": [[{"role": "user", "token_ids": torch.tensor([7, 8, 9])},
                             {"role": "assistant", "token_ids": torch.tensor(c)}] for c in completions]}


CUT = [5, 6, 7, 8]          # fills the budget, no stop token: cut
DONE = [5, 6, STOP]         # stopped
FULL_STOP = [5, 6, 7, STOP]  # fills the budget with its stop token: not cut


def test_clipped_share_counts_completions_that_fill_the_budget_without_stopping() -> None:
    assert clipped_share(_batch([CUT, DONE, FULL_STOP, CUT])["message_log"], BUDGET, [STOP]) == 0.5
    assert clipped_share([], BUDGET, [STOP]) is None


def _run(steps: list[tuple[list[list[int]], float]]) -> tuple[StepWatch, Logger]:
    """Each step generates (rollout), logs its training metrics (grad_norm), then validates, as v0.7.0 does."""
    logger, watch = Logger(), StepWatch(BUDGET, [STOP])
    watch.attach(logger)
    for step, (completions, norm) in enumerate(steps, start=1):
        watch.record_rollout(_batch(completions))
        logger.log_metrics({"natural_termination_rate": 1.0}, step, prefix="train")
        logger.log_metrics({"grad_norm": np.array(norm), "loss": np.array(0.0)}, step, prefix="train")
        logger.log_metrics({"accuracy": 0.5}, step, prefix="validation")
    return watch, logger


def test_every_metric_still_reaches_the_logger() -> None:
    _, logger = _run([([DONE], 0.5), ([DONE], 0.2)])
    assert [(p, s) for p, s, _ in logger.got] == [("train", 1), ("train", 1), ("validation", 1),
                                                  ("train", 2), ("train", 2), ("validation", 2)]


def test_a_phase_that_moved_the_weights_is_quiet() -> None:
    watch, _ = _run([([CUT, CUT], 0.0), ([DONE, CUT], 0.3)])
    assert watch.learned_nothing() is None


def test_clipped_completions_are_named_with_the_knobs() -> None:
    watch, _ = _run([([CUT, CUT], 0.0), ([CUT, DONE], 0.0)])
    assert [r["rollout/clipped_share"] for r in watch.rows()] == [1.0, 0.5]
    cause = watch.learned_nothing()
    assert cause is not None
    assert "none of its 2 steps updated the weights" in cause
    assert "75% of the completions were cut at generation.max_completion_length=4" in cause
    assert "policy.generation.max_new_tokens" in cause


def test_a_zero_gradient_without_clipping_is_named_as_such() -> None:
    watch, _ = _run([([DONE, FULL_STOP], 0.0)])
    cause = watch.learned_nothing()
    assert cause is not None and "every step's gradient was zero" in cause
