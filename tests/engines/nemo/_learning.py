"""Learning on NeMo-RL v0.7.0's own loop, on the CPU: SFT warm-up, then DAPO-tight RL against controls.

Shared by the engine-contract test (``test_learning.py``, one seed) and the benchmark
(``bench/bench_learning_nemo.py``, several seeds). Every run goes through ``spatialiq nemo sft|rl`` (the driver,
v0.7.0's ``setup`` and training loops) with the CPU workers of ``_cpu_workers.py``. The variants differ in one
thing each:

* ``rl``: the recipe's DAPO-tight RL;
* ``frozen``: the same, at a learning rate of 1e-12 (the smallest the recipe accepts: the policy cannot move);
* ``flipped``: the same as ``rl``, with v0.7.0's advantage estimator's output negated (a sign error in the
  advantages, the failure the test must catch). Its reward can collapse until every view's samples agree; v0.7.0
  then stops the run at the dynamic-sampling cap (the driver's exit 3), and the rest of its curve is what the last
  batches scored (``stopped_at`` records the step).

Each variant's per-step mean reward is the recipe's reward before the overlong shaping (0-1 scale: 0.1 format +
0.9 integer distance), averaged over every sample the step generated (every dynamic-sampling batch), as
``dynamic_sampling`` receives it; its validation accuracy on held-out views (``validation/accuracy``) is read back
from its TensorBoard events.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _cpu_workers import LOG, CpuGeneration, CpuPolicy, reset_log
from _nemo_support import write_all_traces, write_config
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.nemo import driver
from spatialiq_train.nemo.driver import DynamicSamplingCapError

VARIANTS = ("rl", "frozen", "flipped")
FROZEN_LR = 1e-12
SFT_SETS = ("sft.optimizer.learning_rate=3e-3", "sft.optimizer.max_steps=30", "sft.optimizer.num_train_epochs=20",
            "sft.optimizer.per_device_train_batch_size=8", "sft.optimizer.gradient_accumulation_steps=1",
            "sft.validation.every_steps=15", "sft.validation.max_samples=8", "logging.save_steps=15",
            "logging.report_to=[tensorboard]")
"""Enough warm-up for the tiny model to write `<answer>N</answer>` most of the time, so rewards vary."""


@dataclass(frozen=True)
class Setting:
    """One RL setting: steps, learning rate, generations per view, completion budget."""

    steps: int = 16
    learning_rate: float = 1e-3
    generations: int = 4
    max_completion: int = 24
    overlong_buffer: int = 8
    validate_every: int = 4

    def rl_sets(self, lr: float, seed: int) -> tuple[str, ...]:
        return (f"rl.num_generations={self.generations}", f"rl.optimizer.max_steps={self.steps}",
                "rl.optimizer.num_train_epochs=1000", f"rl.optimizer.learning_rate={lr}",
                "rl.optimizer.warmup_steps=0", f"generation.max_completion_length={self.max_completion}",
                f"rl.overlong.buffer_length={self.overlong_buffer}",
                f"rl.overlong.max_response_length={self.max_completion}",
                f"rl.validation.every_steps={self.validate_every}", "rl.validation.max_samples=8",
                f"logging.save_steps={self.validate_every}", "sft.validation.early_stopping_patience=null",
                "logging.report_to=[tensorboard]", f"run.seed={seed}")


@contextmanager
def cpu_workers() -> Iterator[None]:
    """v0.7.0's two GPU workers replaced by the CPU ones, for the duration of the block."""
    import nemo_rl.algorithms.grpo as grpo
    import nemo_rl.algorithms.sft as sft

    saved = (grpo.Policy, sft.Policy, grpo.VllmGeneration)
    grpo.Policy, sft.Policy, grpo.VllmGeneration = CpuPolicy, CpuPolicy, CpuGeneration
    try:
        yield
    finally:
        grpo.Policy, sft.Policy, grpo.VllmGeneration = saved


class RewardLog:
    """Per optimizer step, the mean unshaped reward of all samples it generated (every dynamic-sampling batch)."""

    def __init__(self) -> None:
        self.per_step: list[float] = []
        self.pending: list[float] = []

    @contextmanager
    def installed(self) -> Iterator[None]:
        import nemo_rl.algorithms.grpo as grpo

        real = grpo.dynamic_sampling

        def dynamic_sampling(repeated_batch: Any, *args: Any, **kwargs: Any) -> Any:
            rewards = repeated_batch.get("unshaped_total_reward", repeated_batch["total_reward"])
            self.pending.extend(float(r) for r in rewards)
            out = real(repeated_batch, *args, **kwargs)
            if out[1]:  # the batch is complete: this optimizer step trains on it
                self.per_step.append(sum(self.pending) / len(self.pending))
                self.pending.clear()
            return out

        grpo.dynamic_sampling = dynamic_sampling
        try:
            yield
        finally:
            grpo.dynamic_sampling = real


@contextmanager
def flipped_advantages() -> Iterator[None]:
    """v0.7.0's advantage estimator, its advantages negated."""
    import nemo_rl.algorithms.grpo as grpo

    real = grpo._create_advantage_estimator

    def create(master_config: Any) -> Any:
        estimator = real(master_config)
        compute = estimator.compute_advantage
        estimator.compute_advantage = lambda *a, **k: -compute(*a, **k)
        return estimator

    grpo._create_advantage_estimator = create
    try:
        yield
    finally:
        grpo._create_advantage_estimator = real


def run_driver(phase: str, cfg: Path) -> None:
    """``spatialiq nemo PHASE --config CFG`` in this process (Ray connections closed around it)."""
    import ray

    ray.shutdown()
    try:
        driver.run(phase, cfg, ())
    finally:
        ray.shutdown()


def scalars(log_dir: Path, name: str) -> dict[int, float]:
    """A scalar of a run's TensorBoard events, by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict[int, float] = {}
    for events in sorted(log_dir.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events))
        acc.Reload()
        if name in acc.Tags().get("scalars", []):
            found.update({e.step: e.value for e in acc.Scalars(name)})
    return found


@dataclass(frozen=True)
class WarmUp:
    """The SFT warm-up: its traces, its config as written, what the policy's train calls returned, its HF copy."""

    root: Path
    data_root: Path
    written: dict[str, Any]
    train: list[dict[str, Any]]
    hf: Path


def warm_up(root: Path, rows: int = 64) -> WarmUp:
    """Traces, the SFT warm-up through ``sft_train``, and its conversion by ``spatialiq nemo convert``."""
    data_root = write_all_traces(root / "data", rows=rows)
    cfg, written = write_config("dapo_tight_7b", "sft", data_root, root / "sft", gpus=1, extra=SFT_SETS)
    reset_log()
    with cpu_workers():
        run_driver("sft", cfg)
    train = list(LOG["train"])
    hf = root / "sft_hf"
    result = CliRunner().invoke(app, ["nemo", "convert", "--checkpoint", written["checkpointing"]["checkpoint_dir"],
                                      "--out", str(hf)])
    if result.exit_code != 0:
        raise RuntimeError(f"nemo convert failed: {result.output}")
    return WarmUp(root, data_root, written, train, hf)


def rl_run(root: Path, data_root: Path, hf: Path, setting: Setting, variant: str, seed: int) -> dict[str, Any]:
    """One RL variant; returns its config, per-step rewards and validation accuracy."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    lr = FROZEN_LR if variant == "frozen" else setting.learning_rate
    out = root / f"{variant}-seed{seed}"
    cfg, written = write_config("dapo_tight_7b", "rl", data_root, out, gpus=1,
                                extra=(*setting.rl_sets(lr, seed), f"rl.init_from={hf}"))
    reset_log()
    log = RewardLog()
    stopped_at = None
    with cpu_workers(), log.installed(), flipped_advantages() if variant == "flipped" else nullcontext():
        try:
            run_driver("rl", cfg)
        except DynamicSamplingCapError:
            # every view's samples agreed for the recipe's refill rounds and v0.7.0 stopped the run (exit 3): the
            # policy's reward for the rest of the budget is what those last batches scored
            stopped_at = len(log.per_step) + 1
            log.per_step += [sum(log.pending) / len(log.pending)] * (setting.steps - len(log.per_step))
    log_dir = Path(written["logger"]["log_dir"])
    return {"variant": variant, "seed": seed, "config": cfg, "written": written, "reward": log.per_step,
            "stopped_at": stopped_at, "val_accuracy": scalars(log_dir, "validation/accuracy")}
