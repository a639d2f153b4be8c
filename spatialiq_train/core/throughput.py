"""One FLOP accounting for every training run and benchmark (pure): FLOPs per parameter per token, tokens per
step, tokens/s, MFU against the device's dense bf16 peak, and the RL generation/training split.

FLOPs per parameter per token (the dense 2 x parameters per token of a forward pass, PaLM's convention, attention
score FLOPs left out as verl and EasyR1 also leave them at these lengths):

- 6: a training pass, forward (2) + backward (4): SFT;
- 8: RL with a KL reference: the policy's 6 + the reference model's forward (2);
- 10: RL that also recomputes the old policy's log-probabilities (+2): TRL does when a generation batch serves
  more than one optimizer step, when ``num_iterations`` > 1, or when vLLM's importance-sampling correction is on;
  NeMo-RL always does (its ``prev_logprobs`` pass).

Tokens are those the model processes, prompt (image tokens included) + completion, padding excluded: TRL's
``num_tokens`` counts exactly these. MFU = factor x parameters x tokens/s / (devices x peak FLOP/s).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

PEAK_BF16_TFLOPS: dict[str, float] = {
    "GB300": 2500.0,
    "GB200": 2500.0,
    "B300": 2250.0,
    "B200": 2250.0,
    "H200": 989.0,
    "H100": 989.0,
    "H800": 989.0,
    "H20": 148.0,
    "L40S": 362.0,
    "A100": 312.0,
    "A800": 312.0,
    "A10G": 125.0,
}
"""Dense (no sparsity) bf16 tensor-core peak TFLOP/s per device, by a substring of its CUDA device name, longest
matched first ("GB200" before "B200"). H100/H200 SXM 989, A100 312, B200 2250, GB200/GB300 2500 per GPU (vendor
data sheets, dense figures: half of the sparse ones)."""

PERF_TOKENS_PER_S = "perf/tokens_per_s"
PERF_TOKENS_PER_S_PER_GPU = "perf/tokens_per_s_per_gpu"
PERF_MFU = "perf/mfu"
PERF_PEAK_MEMORY_GB = "perf/peak_memory_gb"
PERF_STEP_S = "perf/step_s"
PERF_GENERATION_S = "perf/generation_s"
PERF_TRAINING_S = "perf/training_s"
PERF_GENERATION_SHARE = "perf/generation_share"

PERF_METRICS: dict[str, str] = {
    PERF_TOKENS_PER_S: "tokens (prompt + completion, no padding) processed per second over all devices, since the "
                       "previous logged step",
    PERF_TOKENS_PER_S_PER_GPU: "perf/tokens_per_s divided by the number of devices (processes)",
    PERF_MFU: "model FLOPs utilisation: FLOPs per parameter per token x parameters x tokens/s over the devices' "
              "dense bf16 peak (core.throughput; only where the device's peak is known)",
    PERF_PEAK_MEMORY_GB: "peak accelerator memory allocated on this process so far, GiB (CPU: peak resident set)",
    PERF_STEP_S: "wall seconds per optimizer step since the previous logged step",
    PERF_GENERATION_S: "RL: seconds per step spent generating and scoring rollouts",
    PERF_TRAINING_S: "RL: seconds per step spent outside generation (log-probabilities, loss, backward, optimizer)",
    PERF_GENERATION_SHARE: "RL: generation seconds / step seconds",
}
"""The perf/* names every training phase logs (both engines), and what each measures."""


def flops_factor(phase: str, *, reference: bool = False, old_logprobs: bool = False) -> int:
    """FLOPs per parameter per token of one training step: 6 (SFT), + 2 with a reference forward, + 2 with an
    old-log-probability forward (RL)."""
    if phase not in ("sft", "rl"):
        raise ValueError(f"phase must be 'sft' or 'rl', got {phase!r}")
    if phase == "sft":
        return 6
    return 6 + (2 if reference else 0) + (2 if old_logprobs else 0)


def trl_recomputes_old_logprobs(gradient_accumulation_steps: int, steps_per_generation: int, num_iterations: int,
                                vllm_importance_sampling: bool = False) -> bool:
    """Whether TRL's GRPOTrainer runs the old-policy forward (trl GRPOTrainer._generate_and_score_completions: a
    generation batch reused across optimizer steps or iterations, or vLLM's importance-sampling correction)."""
    return (gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0
            or vllm_importance_sampling)


def rl_flops_factor_trl(beta: float, gradient_accumulation_steps: int, steps_per_generation: int,
                        num_iterations: int, vllm_importance_sampling: bool = False) -> int:
    """The RL factor of a TRL run: the reference forward when ``beta`` != 0, the old-logp forward when TRL runs it."""
    return flops_factor("rl", reference=beta != 0, old_logprobs=trl_recomputes_old_logprobs(
        gradient_accumulation_steps, steps_per_generation, num_iterations, vllm_importance_sampling))


def sequence_tokens(prompt_tokens: int, completion_tokens: int) -> int:
    """Tokens one sequence puts through the model: its prompt (image tokens included) and its completion."""
    if prompt_tokens < 0 or completion_tokens < 0:
        raise ValueError(f"token counts must be >= 0 (got {prompt_tokens}, {completion_tokens})")
    return prompt_tokens + completion_tokens


def step_tokens(prompt_tokens: int, completion_tokens: int, sequences: int) -> int:
    """Tokens one optimizer step trains on: ``sequences`` sequences of the given prompt and completion lengths."""
    if sequences < 0:
        raise ValueError(f"sequences must be >= 0 (got {sequences})")
    return sequences * sequence_tokens(prompt_tokens, completion_tokens)


def step_flops(factor: int, parameters: int, tokens: float) -> float:
    """Model FLOPs of a step: factor x parameters x tokens."""
    return float(factor) * parameters * tokens


def peak_tflops(device_name: str, table: Mapping[str, float] = PEAK_BF16_TFLOPS) -> float | None:
    """The dense bf16 peak of a device from its name (longest matching key), None when unknown (CPU included)."""
    name = device_name.upper()
    for key in sorted(table, key=len, reverse=True):
        if key.upper() in name:
            return table[key]
    return None


def mfu(factor: int, parameters: int, tokens_per_s: float, peak: float | None, devices: int = 1) -> float | None:
    """Model FLOPs utilisation over ``devices`` devices of ``peak`` TFLOP/s each; None without a known peak or
    a finite rate."""
    if not peak or devices < 1 or not math.isfinite(tokens_per_s) or tokens_per_s < 0:
        return None
    return step_flops(factor, parameters, tokens_per_s) / (devices * peak * 1e12)


def perf_row(*, tokens: float, seconds: float, devices: int, factor: int, parameters: int, peak: float | None,
             peak_memory_gb: float | None = None, generation_s: float | None = None,
             steps: int = 1) -> dict[str, float]:
    """The perf/* values of an interval: ``tokens`` processed (all devices) in ``seconds`` over ``steps`` optimizer
    steps, ``generation_s`` of them spent generating (RL). Values that cannot be computed are left out."""
    out: dict[str, float] = {}
    if seconds > 0 and steps > 0:
        rate = tokens / seconds
        out[PERF_TOKENS_PER_S] = rate
        out[PERF_TOKENS_PER_S_PER_GPU] = rate / max(devices, 1)
        out[PERF_STEP_S] = seconds / steps
        util = mfu(factor, parameters, rate, peak, devices)
        if util is not None:
            out[PERF_MFU] = util
        if generation_s is not None:
            out[PERF_GENERATION_S] = generation_s / steps
            out[PERF_TRAINING_S] = max(seconds - generation_s, 0.0) / steps
            out[PERF_GENERATION_SHARE] = min(generation_s / seconds, 1.0)
    if peak_memory_gb is not None:
        out[PERF_PEAK_MEMORY_GB] = peak_memory_gb
    return out
