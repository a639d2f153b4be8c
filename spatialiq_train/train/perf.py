"""Throughput of a TRL training phase, logged as perf/* (`core.throughput`) in every metrics row: tokens/s in
total and per device, MFU where the device's peak is known, peak memory, seconds per step and, for RL, the time
spent generating and scoring rollouts versus the rest of the step.

The callback times each optimizer step (``on_step_begin`` to ``on_step_end``, the GPU synchronised first) and reads
the token count TRL logs (``num_tokens``: prompt + completion tokens over all processes, no padding). Generation time
is measured by wrapping the trainer's ``_generate_and_score_completions`` (dynamic sampling's refills included).
It runs before the metrics callback, adding its values to the same log event, so metrics.jsonl, TensorBoard and
wandb get them under the same names.
"""

from __future__ import annotations

import time
from typing import Any

from spatialiq_train.core import throughput as tp


def peak_memory_gb() -> float:
    """Peak accelerator memory allocated by this process, GiB; on the CPU the peak resident set."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def device_name() -> str:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.get_device_name()
    return "cpu"


def count_parameters(model: Any) -> int:
    """All parameters (a LoRA model's base weights included: they run forward and backward), ZeRO-3 partitions
    counted whole."""
    return int(sum(getattr(p, "ds_numel", 0) or p.numel() for p in model.parameters()))


def _sync() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def make_perf_callback() -> Any:
    """The perf/* callback; `attach_perf` gives it the model's size, the FLOP factor and the device count."""
    from transformers import TrainerCallback

    class PerfCallback(TrainerCallback):
        def __init__(self) -> None:
            self.factor = 6
            self.parameters = 0
            self.devices = 1
            self.peak: float | None = None
            self.generation_s = 0.0
            self.rl = False
            self._reset()
            self._t0 = 0.0
            self._tokens: float | None = None

        def _reset(self) -> None:
            self.step_s, self.steps, self.generation_s = 0.0, 0, 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            self._t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            _sync()
            self.step_s += time.perf_counter() - self._t0
            self.steps += 1

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
            if not logs or "train_runtime" in logs or "num_tokens" not in logs:
                return
            tokens = float(logs["num_tokens"])
            if self._tokens is not None and self.steps:
                logs.update(tp.perf_row(
                    tokens=tokens - self._tokens, seconds=self.step_s, devices=self.devices, factor=self.factor,
                    parameters=self.parameters, peak=self.peak, peak_memory_gb=peak_memory_gb(),
                    generation_s=self.generation_s if self.rl else None, steps=self.steps))
            else:
                logs[tp.PERF_PEAK_MEMORY_GB] = peak_memory_gb()
            self._tokens = tokens
            self._reset()

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            # a fresh run starts at 0 tokens; after a resume the first logged count only sets the baseline
            self._tokens = 0.0 if state.global_step == 0 else None
            self._reset()

    return PerfCallback()


def attach_perf(trainer: Any, plan: Any) -> Any:
    """Configure the trainer's perf callback (model size, FLOP factor, devices, peak) and, for RL, time the
    generation; returns the callback (None when the trainer has none)."""
    cb = next((c for c in trainer.callback_handler.callbacks if type(c).__name__ == "PerfCallback"), None)
    if cb is None:
        return None
    cb.parameters = count_parameters(trainer.model)
    cb.devices = plan.batch.world_size
    cb.peak = tp.peak_tflops(device_name())
    if plan.phase == "rl":
        args = trainer.args
        cb.rl = True
        cb.factor = tp.rl_flops_factor_trl(plan.rl.beta, args.gradient_accumulation_steps,
                                           args.steps_per_generation, args.num_iterations,
                                           bool(getattr(args, "use_vllm", False)
                                                and getattr(args, "vllm_importance_sampling_correction", False)))
        original = trainer._generate_and_score_completions

        def timed(inputs: Any) -> Any:
            _sync()
            t0 = time.perf_counter()
            try:
                return original(inputs)
            finally:
                _sync()
                cb.generation_s += time.perf_counter() - t0

        trainer._generate_and_score_completions = timed
    else:
        cb.factor = tp.flops_factor("sft")
    return cb
