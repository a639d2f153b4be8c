"""Divergence stops the run: the first non-finite loss, gradient norm or parameter ends training with an error.

With a learning rate far too large every tensor becomes NaN within a step or two, yet transformers' default
``logging_nan_inf_filter`` hides the NaN loss from the log and the run would end as a success. The phase runner
therefore logs non-finite losses as they are (``trainer_common`` turns the filter off) and installs
:func:`make_divergence_callback`: after every optimizer step (before any checkpoint of that step is saved) it
checks the parameters, and every log event's loss and gradient norm. The error, a :class:`DivergenceError`
(a JobFailure: exit status 1), names the phase, the step and the metric or parameter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from spatialiq_train.core import metrics as m
from spatialiq_train.core.errors import JobFailure

WATCHED: dict[str, str] = {"loss": m.TRAIN_LOSS, "grad_norm": m.TRAIN_GRAD_NORM}
"""TRL log key -> the metric name an error reports."""


class DivergenceError(JobFailure):
    """Training produced a non-finite loss, gradient norm or parameter; the message names step and metric."""


def non_finite_metric(logs: Mapping[str, Any]) -> tuple[str, float] | None:
    """(metric name, value) of the first watched log value that is a non-finite number, else None (pure)."""
    for key, name in WATCHED.items():
        value = logs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and not math.isfinite(value):
            return name, float(value)
    return None


def non_finite_parameter(named_parameters: Iterable[tuple[str, Any]]) -> str | None:
    """The name of the first parameter tensor holding a NaN or infinity, else None.

    Runs after every optimizer step, so it reads one flag per device back to the host, not one per tensor."""
    import torch

    by_device: dict[Any, list[tuple[str, Any]]] = {}
    for name, param in named_parameters:
        if param.numel():
            by_device.setdefault(param.device, []).append((name, param))
    with torch.no_grad():
        for items in by_device.values():
            finite = torch.stack([torch.isfinite(param).all() for _, param in items])
            if not bool(finite.all()):
                return items[int((~finite).nonzero()[0, 0])][0]
    return None


def divergence_message(phase: str, step: int, what: str, learning_rate: float | None) -> str:
    """The error text: phase, step, what went non-finite, and what to change (pure)."""
    hint = f" (learning rate {learning_rate:g})" if learning_rate is not None else ""
    return (f"{phase} diverged at step {step}: {what}; training stopped before saving this step{hint}. Lower "
            f"{phase}.optimizer.learning_rate or max_grad_norm and resume, or start again from an earlier checkpoint")


def make_divergence_callback(phase: str) -> Any:
    """A `TrainerCallback` raising :class:`DivergenceError` at the first non-finite parameter, loss or grad norm."""
    from transformers import TrainerCallback

    class DivergenceCallback(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
            name = non_finite_parameter(model.named_parameters()) if model is not None else None
            if name is not None:
                raise DivergenceError(divergence_message(phase, state.global_step, f"parameter {name} is not finite",
                                                         args.learning_rate))

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
            hit = non_finite_metric(logs or {})
            if hit is not None:
                raise DivergenceError(divergence_message(phase, state.global_step, f"{hit[0]} is {hit[1]}",
                                                         args.learning_rate))

    return DivergenceCallback()
