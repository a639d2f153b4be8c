"""Divergence stops the run: a non-finite parameter, loss or gradient norm ends training with an error naming the
phase, step and metric, before that step is saved (issue 20)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from _train_support import one_thread, tiny_model_dir, tiny_recipe, write_traces

from spatialiq_train.core.errors import EXIT_FAILURE
from spatialiq_train.train.divergence import DivergenceError, non_finite_metric, non_finite_parameter

one_thread()


def test_non_finite_log_values_are_named() -> None:
    assert non_finite_metric({"loss": 0.5, "grad_norm": 1.0}) is None
    assert non_finite_metric({"loss": math.nan, "grad_norm": 1.0}) == ("train/loss", pytest.approx(math.nan,
                                                                                                    nan_ok=True))
    assert non_finite_metric({"loss": 0.1, "grad_norm": math.inf}) == ("train/grad_norm", math.inf)
    assert non_finite_metric({"learning_rate": math.inf}) is None  # only the watched metrics


def test_non_finite_parameter_is_named() -> None:
    import torch

    layer = torch.nn.Linear(2, 2)
    assert non_finite_parameter(layer.named_parameters()) is None
    with torch.no_grad():
        layer.bias[1] = math.inf
    assert non_finite_parameter(layer.named_parameters()) == "bias"


def test_a_nan_parameter_stops_sft_at_its_step_before_saving(tmp_path: Path) -> None:
    import torch
    from transformers import TrainerCallback

    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.sft import sft_phase

    class Poison(TrainerCallback):  # what a learning rate far too large does to the weights
        def on_optimizer_step(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step == 1:  # the second optimizer step
                with torch.no_grad():
                    next(model.parameters()).fill_(math.nan)

    rng = np.random.default_rng(2)
    traces = write_traces(tmp_path, "warmup", 8, rng, answer=lambda i: i % 10)
    recipe = tiny_recipe([f"data.traces_dir={traces}", f"data.data_root={tmp_path}", "sft.optimizer.max_steps=4",
                          "logging.save_steps=1", "logging.report_to=[]"])
    with pytest.raises(DivergenceError, match=r"sft diverged at step 2: parameter \S+ is not finite") as info:
        run_phase(sft_phase(), recipe, tmp_path / "sft", model_path=tiny_model_dir(), callbacks=[Poison()])
    assert info.value.exit_code == EXIT_FAILURE
    assert (tmp_path / "sft" / "checkpoint-1").is_dir() and not (tmp_path / "sft" / "checkpoint-2").exists()
    assert not (tmp_path / "sft" / "final").exists()
