"""Did a NeMo-RL v0.7.0 GRPO run update the weights at all? What its loop logs and generates, per step.

:class:`StepWatch` reads each step's ``grad_norm`` from what ``grpo_train`` gives its ``Logger`` (prefix ``train``)
and, from each training rollout (``grpo.run_multi_turn_rollout`` with the run's training environments, not the
validation ones), the share of completions cut at the new-token budget: as many generated tokens as
``policy.generation.max_new_tokens`` and no stop token at the end. (v0.7.0's own rollout metrics do not say it: its
``natural_termination_rate`` counts episodes the environment ended, always all of them in a single-turn task, and
``truncation_rate`` counts sequences over ``max_total_sequence_length``.) The rows it builds use the project's
metric names, so :func:`spatialiq_train.core.learning.idle_rl_cause` (the rule the TRL path applies to its
metrics.jsonl) decides and words the warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

log = logging.getLogger(__name__)

NEMO_KNOBS = ("(recipe keys: regenerate the NeMo-RL config with `spatialiq recipes nemo-rl --set`, or override "
              "policy.generation.max_new_tokens, grpo.num_generations_per_prompt and "
              "grpo.dynamic_sampling_max_gen_batches here)")


def clipped_share(message_logs: Iterable[Any], max_new_tokens: int, stop_ids: Iterable[int]) -> float | None:
    """The share of samples whose generated (assistant) tokens fill the budget without ending in a stop token."""
    stops = {int(t) for t in stop_ids}
    clipped = total = 0
    for messages in message_logs:
        generated = [int(t) for m in messages if m.get("role") == "assistant" for t in m["token_ids"].tolist()]
        total += 1
        clipped += len(generated) >= max_new_tokens and (not generated or generated[-1] not in stops)
    return clipped / total if total else None


class StepWatch:
    """Each step's gradient norm and clipped share; :meth:`learned_nothing` says whether any step moved."""

    def __init__(self, max_new_tokens: int, stop_ids: Iterable[int]) -> None:
        self.max_new_tokens = int(max_new_tokens)
        self.stop_ids = tuple(int(t) for t in stop_ids)
        self.grad_norm: dict[int, float] = {}
        self.clipped: dict[int, float] = {}
        self._pending: list[float] = []

    def record(self, metrics: dict[str, Any], step: int, prefix: str | None) -> None:
        """A ``log_metrics`` call: a training step's ``grad_norm`` closes the step and takes its rollouts' shares."""
        import numpy as np

        if prefix != "train" or "grad_norm" not in metrics:
            return
        self.grad_norm[int(step)] = float(np.max(np.asarray(metrics["grad_norm"], dtype=np.float64)))
        if self._pending:
            self.clipped[int(step)] = sum(self._pending) / len(self._pending)
            self._pending.clear()

    def record_rollout(self, batch: Any) -> None:
        share = clipped_share(batch["message_log"], self.max_new_tokens, self.stop_ids)
        if share is not None:
            self._pending.append(share)

    def attach(self, logger: Any) -> None:
        """Record what ``logger`` is given from now on, then pass it on unchanged."""
        real = logger.log_metrics

        def log_metrics(metrics: dict[str, Any], step: int, prefix: str | None = "", *args: Any,
                        **kwargs: Any) -> Any:
            self.record(metrics, step, prefix)
            return real(metrics, step, prefix, *args, **kwargs)

        logger.log_metrics = log_metrics

    def rollouts_of(self, task_to_env: Any) -> AbstractContextManager[None]:
        """v0.7.0's rollouts watched for the block: calls with ``task_to_env`` (training, not validation) are
        recorded."""
        from spatialiq_train.nemo.rollouts import after_each_rollout

        def record(batch: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            envs = kwargs["task_to_env"] if "task_to_env" in kwargs else (args[3] if len(args) > 3 else None)
            if envs is task_to_env:
                self.record_rollout(batch)

        return after_each_rollout(record)

    def rows(self) -> list[dict[str, Any]]:
        from spatialiq_train.core.metrics import ROLLOUT_CLIPPED_SHARE, TRAIN_GRAD_NORM

        rows = []
        for step, norm in sorted(self.grad_norm.items()):
            row: dict[str, Any] = {"phase": "rl", "step": step, TRAIN_GRAD_NORM: norm}
            if step in self.clipped:
                row[ROLLOUT_CLIPPED_SHARE] = self.clipped[step]
            rows.append(row)
        return rows

    def learned_nothing(self) -> str | None:
        """The warning when no step this run took updated the weights (logged), else None."""
        from spatialiq_train.core.learning import idle_rl_cause

        cause = idle_rl_cause(self.rows(), self.max_new_tokens)
        if cause is None:
            return None
        cause = f"{cause} {NEMO_KNOBS}"
        log.warning("%s", cause)
        return cause
