"""A vision token sampled in a completion, through v0.7.0's real ``grpo_train``: the driver masks it.

Qwen2.5-VL's forward pass fails when ``input_ids`` hold more ``<|image_pad|>`` tokens than the images give features.
v0.7.0 feeds every sampled completion back through the policy (``get_logprobs``) and cannot tell vLLM not to sample
the token, so a single such sample stops the run; ``spatialiq_train.nemo.placeholders`` (installed by the driver)
replaces it and leaves that sample out of the loss, and stops the run when more than 1 % of a rollout's samples hold
one (on a real model: a failed refit or dummy weights). One GRPO step each, from the loop tests' warm-up, with the
CPU generation drawing ``<|image_pad|>`` as the first sample's first token (1 of 4 samples): at the shipped 1 % the
run stops naming the causes; with the limit raised above 25 % the step trains, the sample's loss weight is 0 and the
step's metric records the share; with the guard taken out, the same step fails in the policy's forward pass.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import _learning
import pytest
from _cpu_workers import LOG, CpuGeneration, reset_log
from _nemo_support import write_config

from spatialiq_train.nemo import placeholders

SETS = ("rl.num_generations=2", "rl.optimizer.max_steps=1", "rl.optimizer.learning_rate=1e-3",
        "rl.optimizer.warmup_steps=0", "generation.max_completion_length=6", "rl.overlong.enabled=false",
        "rl.dynamic_sampling.enabled=false", "logging.save_steps=1000", "sft.validation.early_stopping_patience=null")


def _step(warm: _learning.WarmUp, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    cfg, _ = write_config("dapo_tight_7b", "rl", warm.data_root, out, gpus=1, extra=(*SETS, f"rl.init_from={warm.hf}"))
    monkeypatch.setattr(CpuGeneration, "inject", AutoTokenizer.from_pretrained(warm.hf).convert_tokens_to_ids(
        "<|image_pad|>"))
    reset_log()
    with _learning.cpu_workers():
        _learning.run_driver("rl", cfg, ("grpo.num_prompts_per_step=2", "policy.train_global_batch_size=4"))


def test_above_the_shipped_share_the_run_stops_naming_the_causes(warm: _learning.WarmUp, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert placeholders.MAX_MASKED_SHARE == 0.01
    with pytest.raises(placeholders.VisionTokenMaskError, match=r"1 of 4 sampled completions \(25.0%\).*failed refit"):
        _step(warm, tmp_path / "stopped", monkeypatch)
    assert not [r for r in LOG["train"] if not r["eval_mode"]]  # stopped before any update


def test_a_sampled_image_token_is_masked_and_the_step_trains(warm: _learning.WarmUp, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    import nemo_rl.algorithms.grpo as grpo

    seen: list[Any] = []
    real = grpo.ClippedPGLossFn.__call__

    def loss(self: Any, *args: Any, **kwargs: Any) -> Any:
        data = kwargs["data"] if "data" in kwargs else args[1]
        seen.append(data["sample_mask"].clone())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(grpo.ClippedPGLossFn, "__call__", loss)
    monkeypatch.setattr(placeholders, "MAX_MASKED_SHARE", 0.3)
    with caplog.at_level(logging.WARNING, logger="spatialiq_train.nemo.placeholders"):
        _step(warm, tmp_path / "guarded", monkeypatch)
    steps = [r for r in LOG["train"] if not r["eval_mode"]]
    assert len(steps) == 1
    assert "1 of 4 sampled completions held a vision token" in caplog.text
    masks = [float(v) for m in seen for v in m.flatten()]
    assert 0.0 in masks and 1.0 in masks, masks  # the drawn sample is out of the loss, the others are in
    share = _learning.scalars(tmp_path / "guarded", "train/" + placeholders.MASKED_SHARE_METRIC)
    assert share == {1: pytest.approx(0.25)}


def test_without_the_guard_v070_fails_on_that_sample(warm: _learning.WarmUp, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placeholders.VisionTokenGuard, "installed", lambda self: nullcontext())
    with pytest.raises(ValueError, match="Image features and image tokens do not match"):
        _step(warm, tmp_path / "unguarded", monkeypatch)
