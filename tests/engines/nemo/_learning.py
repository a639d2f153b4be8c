"""Learning on NeMo-RL v0.7.0's own loop, on the CPU: SFT warm-up, then DAPO-tight RL against controls.

Shared by the engine-contract test (``test_learning.py``, one seed) and the benchmark
(``bench/bench_learning_nemo.py``, several seeds). Every run goes through ``spatialiq nemo sft|rl`` (the driver,
v0.7.0's ``setup`` and training loops) with the CPU workers of ``_cpu_workers.py``. The variants differ in one
thing each:

* ``rl``: the recipe's DAPO-tight RL;
* ``frozen``: the same, at a learning rate of 1e-12 (the smallest the recipe accepts: the policy cannot move);
* ``flipped``: the same as ``rl``, with v0.7.0's advantage estimator's output negated (a sign error in the
  advantages, the failure the test must catch).

Each variant's per-step mean reward (``train/reward`` as v0.7.0 logs it: the mean total reward of the step's
generation batch, 0-1 scale) and validation accuracy (``validation/accuracy``, held-out views) are read back from
its TensorBoard events.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _cpu_workers import LOG, CpuGeneration, CpuPolicy, reset_log
from _nemo_support import write_all_traces, write_config
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.nemo import driver

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

    steps: int = 8
    learning_rate: float = 1e-3
    generations: int = 4
    max_completion: int = 10
    validate_every: int = 2

    def rl_sets(self, lr: float, seed: int) -> tuple[str, ...]:
        return (f"rl.num_generations={self.generations}", f"rl.optimizer.max_steps={self.steps}",
                f"rl.optimizer.learning_rate={lr}", "rl.optimizer.warmup_steps=0",
                f"generation.max_completion_length={self.max_completion}", "rl.overlong.buffer_length=4",
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
    with cpu_workers():
        if variant == "flipped":
            with flipped_advantages():
                run_driver("rl", cfg)
        else:
            run_driver("rl", cfg)
    log_dir = Path(written["logger"]["log_dir"])
    reward = scalars(log_dir, "train/reward")
    return {"variant": variant, "seed": seed, "config": cfg, "written": written,
            "reward": [reward[s] for s in sorted(reward)], "val_accuracy": scalars(log_dir, "validation/accuracy")}


def last_third_mean(series: list[float]) -> float:
    """Mean of the last third of the steps (at least one)."""
    k = max(1, len(series) // 3)
    return sum(series[-k:]) / k
