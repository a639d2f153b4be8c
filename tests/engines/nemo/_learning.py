"""Learning on NeMo-RL v0.7.0's own loop, on the CPU: SFT warm-up, then DAPO-tight RL against controls.

Shared by the engine-contract tests (``test_learning.py``: one seed; ``test_training_loops.py``: the loops) and the
benchmark (``bench/bench_learning_nemo.py``, several seeds). Every run goes through ``spatialiq nemo sft|rl`` (the
driver, v0.7.0's ``setup`` and training loops) on a config ``spatialiq recipes nemo-rl`` wrote from
``recipes/tiny_cpu.yaml`` (the recipe the TRL learning benchmark ships), with the CPU workers of
``_cpu_workers.py``. The variants differ in one thing each:

* ``rl``: the recipe's DAPO-tight RL;
* ``frozen``: the same, at a learning rate of 1e-12 (the smallest the recipe accepts: the policy cannot move);
* ``flipped``: the same as ``rl``, with v0.7.0's advantage estimator's output negated (a sign error in the
  advantages, the failure a learning test must catch). Its reward can collapse until every view's samples agree;
  v0.7.0 then stops the run at the dynamic-sampling cap (the driver's exit 3), and the rest of its curve is what the
  last batches scored (``stopped_at`` records the step).

The generated config takes its batch from the recipe (``rl.prompts_per_step`` x ``rl.num_generations``: tiny_cpu's 4
prompts x 8 completions, the TRL batch) and its learning rate from the recipe, with no driver override. Each variant's
per-step mean reward is the recipe's reward before the overlong shaping (0-1 scale: 0.1 format + 0.9 integer
distance), averaged over every sample the step generated (every dynamic-sampling batch), as ``dynamic_sampling``
receives it; its held-out accuracy (``validation/accuracy``), when validation is on, is read back from its TensorBoard
events.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from _cpu_workers import LOG, CpuGeneration, CpuPolicy, reset_log
from _nemo_support import tiny_model, write_all_traces, write_config
from _train_support import write_traces
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.nemo import driver
from spatialiq_train.nemo.driver import DynamicSamplingCapError

RECIPE = "tiny_cpu"
VARIANTS = ("rl", "frozen", "flipped")
FROZEN_LR = 1e-12
LOOP_SFT_SETS = ("sft.optimizer.learning_rate=3e-3", "sft.optimizer.max_steps=30",
                 "sft.optimizer.num_train_epochs=20", "sft.optimizer.global_batch_size=8",
                 "sft.validation.every_steps=15",
                 "sft.validation.max_samples=8", "logging.save_steps=15", "logging.report_to=[tensorboard]")
"""The loop tests' SFT warm-up (``dapo_tight_7b``'s SFT phase): validation and checkpoints inside the loop."""


@dataclass(frozen=True)
class Data:
    """What a learning run reads: the traces folder (``<split>.jsonl``) and the root its image paths are under."""

    traces: Path
    root: Path

    def sets(self) -> tuple[str, ...]:
        return f"data.traces_dir={self.traces}", f"data.data_root={self.root}"


def synthetic_data(root: Path) -> Data:
    """The CI data, as the TRL learning test's (``tests/test_learning.py``): random 56 px images, a warm-up split
    whose answers spread over 4..9, an RL split (and 8 held-out views) whose answer is always 8. What RL can learn
    is to write the format reliably and to say 8, not to count."""
    rng = np.random.default_rng(7)
    write_traces(root, "warmup", 32, rng, answer=lambda i: 4 + i % 6)
    write_traces(root, "val", 8, rng, answer=lambda i: 8, start=1000)
    traces = write_traces(root, "rl", 64, rng, answer=lambda i: 8)
    return Data(traces, root)


@dataclass(frozen=True)
class Setting:
    """One learning setting on ``recipes/tiny_cpu.yaml``: the recipe's RL knobs unless named here."""

    steps: int = 48
    learning_rate: float | None = None
    """None: the recipe's (tiny_cpu: 5e-4), as generated."""
    prompts_per_step: int | None = None
    """None: the recipe's batch (tiny_cpu: 4 prompts x 8), as generated; else rl.prompts_per_step."""
    generations: int = 8
    validate_every: int = 0
    sft_steps: int = 100
    sft_learning_rate: float = 2e-3
    extra: tuple[str, ...] = field(default=())

    def sft_sets(self) -> tuple[str, ...]:
        return (f"sft.optimizer.max_steps={self.sft_steps}", f"sft.optimizer.learning_rate={self.sft_learning_rate}",
                f"logging.save_steps={self.sft_steps}",
                "data.eval_split=null", "logging.report_to=[tensorboard]")

    def rl_sets(self, lr: float | None, seed: int) -> tuple[str, ...]:
        held_out = (("data.eval_split=val", f"rl.validation.every_steps={self.validate_every}",
                     "rl.validation.max_samples=8") if self.validate_every else ("data.eval_split=null",))
        rate = () if lr is None else (f"rl.optimizer.learning_rate={lr}",)
        batch = () if self.prompts_per_step is None else (f"rl.prompts_per_step={self.prompts_per_step}",)
        return (f"rl.num_generations={self.generations}", f"rl.optimizer.max_steps={self.steps}", *rate, *batch,
                f"logging.save_steps={self.steps}", "logging.report_to=[tensorboard]", f"run.seed={seed}",
                *held_out, *self.extra)

    def driver_overrides(self) -> tuple[str, ...]:
        """None: the generated config carries the recipe's batch (rl.prompts_per_step x rl.num_generations) and
        learning rate; kept for callers that pass it on."""
        return ()


def write_tiny_config(phase: str, data: Data, out: Path, sets: Sequence[str]) -> tuple[Path, dict[str, Any]]:
    """``spatialiq recipes nemo-rl tiny_cpu`` on one node and one GPU, as a user runs it."""
    cfg = out / f"{RECIPE}-{phase}.yaml"
    args = ["recipes", "nemo-rl", RECIPE, "--out", str(cfg), "--phase", phase, "--nodes", "1", "--gpus-per-node", "1"]
    for item in (*data.sets(), "model.tiny=false", f"model.name_or_path={tiny_model()}",
                 f"run.output_dir={out / 'run'}", *sets):
        args += ["--set", item]
    result = CliRunner().invoke(app, args)
    _drop_closed_handlers()
    if result.exit_code != 0:
        raise RuntimeError(f"spatialiq recipes nemo-rl failed: {result.output}")
    return cfg, yaml.safe_load(cfg.read_text(encoding="utf-8"))


def _drop_closed_handlers() -> None:
    """Logging handlers the CLI set up on CliRunner's captured streams, closed once it returns: without this every
    later log record prints a 'Logging error' traceback."""
    import logging

    for logger in (logging.getLogger(), *(logging.getLogger(n) for n in logging.root.manager.loggerDict)):
        for handler in list(getattr(logger, "handlers", [])):
            stream = getattr(handler, "stream", None)
            if stream is not None and getattr(stream, "closed", False):
                logger.removeHandler(handler)


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


TINY_MODEL_VISION_SHARE = 0.1
"""The limit on completions masked for a sampled vision token in the tiny model's RL runs. The driver's shipped
limit (1 %, ``placeholders.MAX_MASKED_SHARE``) is for a trained Qwen2.5-VL, where such samples mean a broken
rollout; the tiny policy (a 950-token vocabulary, 4 of them vision tokens, a short warm-up) samples one now and then
as a matter of course (1 of the 64 samples of a generation batch stopped the learning run at the shipped limit).
``test_placeholders.py`` tests the shipped limit."""


@contextmanager
def tiny_model_vision_limit() -> Iterator[None]:
    """:data:`TINY_MODEL_VISION_SHARE` as the driver's vision-token limit, for the block."""
    from spatialiq_train.nemo import placeholders

    saved = placeholders.MAX_MASKED_SHARE
    placeholders.MAX_MASKED_SHARE = TINY_MODEL_VISION_SHARE
    try:
        yield
    finally:
        placeholders.MAX_MASKED_SHARE = saved


class RewardLog:
    """Per optimizer step, the mean unshaped reward of all samples it generated (every dynamic-sampling batch)."""

    def __init__(self) -> None:
        self.per_step: list[float] = []
        self.pending: list[float] = []
        self.step_samples: list[int] = []
        """Per optimizer step, how many samples it generated (the rows of the environment's metrics file it spans)."""

    @contextmanager
    def installed(self) -> Iterator[None]:
        import nemo_rl.algorithms.grpo as grpo

        real = grpo.dynamic_sampling

        @functools.wraps(real)  # v0.7.0's signature, which the per-view grouping's patch check compares
        def dynamic_sampling(repeated_batch: Any, *args: Any, **kwargs: Any) -> Any:
            rewards = repeated_batch.get("unshaped_total_reward", repeated_batch["total_reward"])
            self.pending.extend(float(r) for r in rewards)
            out = real(repeated_batch, *args, **kwargs)
            if out[1]:  # the batch is complete: this optimizer step trains on it
                self.per_step.append(sum(self.pending) / len(self.pending))
                self.step_samples.append(len(self.pending))
                self.pending.clear()
            return out

        dynamic_sampling.__wrapped__ = real  # type: ignore[attr-defined]  # the driver checks v0.7.0's signature
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


def run_driver(phase: str, cfg: Path, overrides: Sequence[str] = ()) -> None:
    """``spatialiq nemo PHASE --config CFG [OVERRIDES]`` in this process (Ray connections closed around it), with
    the data loading the config ships (``data.num_workers`` 0: batches loaded in the driver process)."""
    import ray

    ray.shutdown()
    try:
        driver.run(phase, cfg, tuple(overrides))
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


def convert(checkpoint_dir: str | Path, out: Path) -> Path:
    """``spatialiq nemo convert`` of a run's newest checkpoint to a Hugging Face folder."""
    result = CliRunner().invoke(app, ["nemo", "convert", "--checkpoint", str(checkpoint_dir), "--out", str(out)])
    _drop_closed_handlers()
    if result.exit_code != 0:
        raise RuntimeError(f"nemo convert failed: {result.output}")
    return out


@dataclass(frozen=True)
class WarmUp:
    """An SFT warm-up: its data, its config as written, what the policy's train calls returned, its HF copy."""

    root: Path
    data: Data
    written: dict[str, Any]
    train: list[dict[str, Any]]
    hf: Path

    @property
    def data_root(self) -> Path:
        return self.data.root


def loop_warm_up(root: Path, rows: int = 64) -> WarmUp:
    """The loop tests' warm-up: ``dapo_tight_7b``'s SFT phase through ``sft_train`` on every split's traces (answers
    cycling through ``_nemo_support.ANSWERS``), validated and checkpointed inside the loop, then converted."""
    data_root = write_all_traces(root / "data", rows=rows)
    cfg, written = write_config("dapo_tight_7b", "sft", data_root, root / "sft", gpus=1, extra=LOOP_SFT_SETS)
    reset_log()
    with cpu_workers():
        run_driver("sft", cfg)
    train = list(LOG["train"])
    hf = convert(written["checkpointing"]["checkpoint_dir"], root / "sft_hf")
    return WarmUp(root, Data(data_root / "traces", data_root), written, train, hf)


def learning_warm_up(root: Path, data: Data, setting: Setting) -> WarmUp:
    """The learning runs' warm-up: ``tiny_cpu``'s SFT phase through ``sft_train`` on the warm-up split (the
    setting's steps and learning rate), then converted."""
    cfg, written = write_tiny_config("sft", data, root / "sft", setting.sft_sets())
    reset_log()
    with cpu_workers():
        run_driver("sft", cfg)
    train = list(LOG["train"])
    hf = convert(written["checkpointing"]["checkpoint_dir"], root / "sft_hf")
    return WarmUp(root, data, written, train, hf)


def rl_run(root: Path, data: Data, init: Path, setting: Setting, variant: str, seed: int) -> dict[str, Any]:
    """One RL variant from the HF checkpoint ``init``; returns its config, per-step rewards and held-out accuracy."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    lr = FROZEN_LR if variant == "frozen" else setting.learning_rate
    out = root / f"{variant}-seed{seed}"
    cfg, written = write_tiny_config("rl", data, out, (*setting.rl_sets(lr, seed), f"rl.init_from={init}"))
    reset_log()
    log = RewardLog()
    stopped_at = None
    with (cpu_workers(), tiny_model_vision_limit(), log.installed(),
          flipped_advantages() if variant == "flipped" else nullcontext()):
        try:
            run_driver("rl", cfg, setting.driver_overrides())
        except DynamicSamplingCapError:
            # every view's samples agreed for the recipe's refill rounds and v0.7.0 stopped the run (exit 3): the
            # policy's reward for the rest of the budget is what those last batches scored
            stopped_at = len(log.per_step) + 1
            log.per_step += [sum(log.pending) / len(log.pending)] * (setting.steps - len(log.per_step))
    log_dir = Path(written["logger"]["log_dir"])
    return {"variant": variant, "seed": seed, "config": cfg, "written": written, "reward": log.per_step,
            "stopped_at": stopped_at, "val_accuracy": scalars(log_dir, "validation/accuracy"),
            "vision_share": scalars(log_dir, "train/vision_token_masked_share"),
            "train": list(LOG["train"]), "step_samples": list(log.step_samples),
            "env_metrics": sorted(log_dir.rglob("spatialiq_metrics.jsonl"))}
