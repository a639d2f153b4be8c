"""SFT early stopping on the validation loss for NeMo-RL v0.7.0, which has none: the rule TRL's run applies
(transformers' ``EarlyStoppingCallback``), from the plan's ``validation.early_stopping_patience`` and
``early_stopping_min_delta``.

A validation improves when its loss is below the best so far by more than ``min_delta``; after ``patience``
validations in a row that do not, the run stops. v0.7.0's ``sft_train`` validates (the module's ``validate``),
then saves the step's checkpoint, then logs the step's training metrics; the stop is raised after that last call,
so the stopping step is validated, checkpointed and logged like any other, and the loop ends there. The validation
before the first step (``val_at_start``) is not counted: TRL validates only after training steps. The kept
checkpoints are ranked by ``val:val_loss`` (``checkpointing.keep_top_k``), so the best one stays.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class EarlyStopped(Exception):  # noqa: N818 - a signal that ends the loop, not an error
    """Raised out of ``sft_train`` once patience is spent (caught by the driver: a normal end)."""


@dataclass
class EarlyStop:
    """The counter of validations without improvement (pure: `seen` takes one validation loss)."""

    patience: int
    min_delta: float
    best: float = math.inf
    bad: int = 0
    stop: bool = False
    losses: list[float] = field(default_factory=list)

    def seen(self, loss: float) -> bool:
        """Count one validation loss; True once the run should stop."""
        self.losses.append(loss)
        if loss < self.best and abs(self.best - loss) > self.min_delta:
            self.best, self.bad = loss, 0
        else:
            self.bad += 1
        self.stop = self.bad >= self.patience
        return self.stop

    def attach(self, logger: Any) -> None:
        """Raise `EarlyStopped` after the logger records the training metrics of the stopping step."""
        original = logger.log_metrics

        def log_metrics(metrics: Any, step: int, prefix: str = "", *args: Any, **kwargs: Any) -> Any:
            out = original(metrics, step, prefix, *args, **kwargs)
            if self.stop and prefix == "train":
                raise EarlyStopped(f"early stopping at step {step}: the validation loss did not improve by more "
                                   f"than {self.min_delta} in {self.patience} validations (best {self.best:.4f})")
            return out

        logger.log_metrics = log_metrics


@contextmanager
def early_stopping(patience: int | None, min_delta: float) -> Iterator[EarlyStop | None]:
    """Count v0.7.0's SFT validations while inside (None and nothing patched when ``patience`` is None)."""
    if patience is None:
        yield None
        return
    import nemo_rl.algorithms.sft as sft_module

    counter = EarlyStop(patience, min_delta)
    original = sft_module.validate

    def validate(*args: Any, **kwargs: Any) -> Any:
        metrics, timings = original(*args, **kwargs)
        if kwargs.get("step", 1) != 0 and metrics and "val_loss" in metrics:
            counter.seen(float(metrics["val_loss"]))
        return metrics, timings

    sft_module.validate = validate
    try:
        yield counter
    finally:
        sft_module.validate = original
