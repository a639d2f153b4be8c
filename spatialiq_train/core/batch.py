"""The recipe's global batch split over the processes of a run (pure).

A recipe states the optimisation, not the hardware: SFT trains ``sft.optimizer.global_batch_size`` sequences per
optimizer step; RL trains ``rl.prompts_per_step`` prompts x ``rl.num_generations`` completions per step (the
released ``train_global_batch_size`` and ``num_prompts_per_step``, as NeMo-RL states them). What TRL needs per
process is derived here from the number of processes and a micro-batch size (sequences per forward/backward on one
device): ``per_device_train_batch_size`` = micro-batch, ``gradient_accumulation_steps`` = the process's share of the
global batch / micro-batch, and for RL ``steps_per_generation`` = the accumulation (one generation batch, the whole
global batch, per optimizer step). A global batch that the processes cannot share evenly is refused with the
nearest valid choices; it is never rounded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

MicroSource = Literal["recipe", "whole share", "memory plan", "GPU default"]
"""Where the micro-batch came from: the recipe's ``micro_batch_size``, the process's whole share (no accumulation:
the CPU default), the GPU memory plan (`core.memory_plan`), or 1 on a GPU whose model shape or memory is unknown."""


class BatchError(ValueError):
    """The global batch cannot be split as asked; the message names the recipe key and the valid choices."""


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` in increasing order."""
    if n < 1:
        raise ValueError(f"divisors of {n}: need a positive whole number")
    return [d for d in range(1, n + 1) if n % d == 0]


def nearest_multiples(value: int, factor: int) -> list[int]:
    """The multiples of ``factor`` nearest to ``value`` (below and above; one when ``value`` is one)."""
    below, above = (value // factor) * factor, -(-value // factor) * factor
    return sorted({m for m in (below, above) if m > 0}) or [factor]


def _join(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


@dataclass(frozen=True)
class BatchPlan:
    """One phase's batch on ``world_size`` processes: the recipe's global batch and what each process runs."""

    phase: str
    global_batch: int
    """Sequences (SFT) or completions (RL) per optimizer step, over all processes."""
    world_size: int
    micro_batch: int
    """Sequences per forward/backward on one process (TRL's per_device_train_batch_size)."""
    accumulation: int
    """Micro-batches per optimizer step on one process (TRL's gradient_accumulation_steps)."""
    micro_source: MicroSource
    prompts_per_step: int | None = None
    num_generations: int | None = None

    @property
    def per_process(self) -> int:
        """Sequences (completions) one process trains per optimizer step."""
        return self.global_batch // self.world_size

    @property
    def steps_per_generation(self) -> int | None:
        """RL: TRL micro-steps served by one generation batch (the whole global batch per optimizer step)."""
        return self.accumulation if self.phase == "rl" else None

    def trl_args(self) -> dict[str, Any]:
        """The TRL config keywords this plan decides."""
        out: dict[str, Any] = {"per_device_train_batch_size": self.micro_batch,
                               "gradient_accumulation_steps": self.accumulation}
        if self.phase == "rl":
            out["steps_per_generation"] = self.steps_per_generation
        return out

    def record(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict (the run's batch record)."""
        return {**asdict(self), "per_process": self.per_process, "steps_per_generation": self.steps_per_generation}

    def describe(self) -> str:
        """One line for the start of a run."""
        what = (f"{self.prompts_per_step} prompts x {self.num_generations} generations = {self.global_batch} "
                "completions" if self.phase == "rl" else f"{self.global_batch} sequences")
        return (f"{self.phase} batch: {what} per optimizer step = {self.world_size} process(es) x micro-batch "
                f"{self.micro_batch} ({self.micro_source}) x {self.accumulation} accumulation step(s)"
                + (f", {self.steps_per_generation} step(s) per generation batch" if self.phase == "rl" else ""))


def _split_micro(phase: str, share: int, world: int, micro: int | None, key: str, unit: str) -> tuple[int, int]:
    """(micro-batch, accumulation) for a process's ``share``; ``micro`` None means the whole share."""
    if micro is None:
        return share, 1
    if micro < 1 or share % micro:
        valid = divisors(share)
        raise BatchError(f"{key} = {micro} does not divide the {share} {unit} each of {world} process(es) trains "
                         f"per {phase.upper()} step: valid micro-batch sizes are {_join(valid)}")
    return micro, share // micro


def sft_batch(global_batch: int, world_size: int, micro_batch: int | None,
              micro_source: MicroSource | None = None) -> BatchPlan:
    """The SFT plan: ``global_batch`` sequences per step shared by ``world_size`` processes in micro-batches of
    ``micro_batch`` (None: each process's whole share, no accumulation)."""
    if world_size < 1:
        raise BatchError(f"world size must be >= 1, got {world_size}")
    if global_batch % world_size:
        raise BatchError(
            f"sft.optimizer.global_batch_size = {global_batch} sequences cannot be shared evenly by {world_size} "
            f"processes: the nearest valid global batches are {_join(nearest_multiples(global_batch, world_size))}, "
            f"or run on {_join(divisors(global_batch))} process(es)")
    share = global_batch // world_size
    micro, accum = _split_micro("sft", share, world_size, micro_batch, "sft.optimizer.micro_batch_size", "sequences")
    source: MicroSource = micro_source or ("whole share" if micro_batch is None else "recipe")
    return BatchPlan("sft", global_batch, world_size, micro, accum, source)


def rl_batch(prompts_per_step: int, num_generations: int, world_size: int, micro_batch: int | None,
             micro_source: MicroSource | None = None, whole_groups: bool = True) -> BatchPlan:
    """The RL plan: ``prompts_per_step`` x ``num_generations`` completions per step. With ``whole_groups`` (TRL)
    each process generates whole groups (dynamic sampling filters groups per process), so the prompts are shared
    evenly by the processes; without (NeMo-RL, which gathers the rollouts first) the completions are;
    ``micro_batch`` completions per forward/backward (None: the process's whole share)."""
    if world_size < 1:
        raise BatchError(f"world size must be >= 1, got {world_size}")
    total = prompts_per_step * num_generations
    if not whole_groups and total % world_size:
        raise BatchError(
            f"the global batch rl.prompts_per_step x rl.num_generations = {total} completions must divide evenly "
            f"among {world_size} data-parallel ranks: choose values whose product is a multiple of {world_size}, "
            f"or run on {_join(divisors(total))} rank(s)")
    if whole_groups and prompts_per_step % world_size:
        raise BatchError(
            f"rl.prompts_per_step = {prompts_per_step} cannot be shared evenly by {world_size} processes (each "
            "process generates whole groups of rl.num_generations completions): the nearest valid values are "
            f"{_join(nearest_multiples(prompts_per_step, world_size))}, or run on "
            f"{_join(divisors(prompts_per_step))} process(es)")
    share = total // world_size
    micro, accum = _split_micro("rl", share, world_size, micro_batch, "rl.optimizer.micro_batch_size",
                                "completions")
    source: MicroSource = micro_source or ("whole share" if micro_batch is None else "recipe")
    return BatchPlan("rl", prompts_per_step * num_generations, world_size, micro, accum, source,
                     prompts_per_step, num_generations)


def old_keys_message(phase: str, per_device: int, accumulation: int, num_generations: int | None = None,
                     steps_per_generation: int | None = None, processes: int = 8) -> str:
    """Why ``per_device_train_batch_size`` / ``gradient_accumulation_steps`` are refused, and the new keys that
    reproduce the old global batch on ``processes`` processes (what the shipped recipes assumed)."""
    old = per_device * accumulation * processes
    head = (f"{phase}.optimizer.per_device_train_batch_size and gradient_accumulation_steps are no longer recipe "
            "keys (the recipe states the global batch; the per-device batch and accumulation are derived from the "
            "number of processes)")
    if phase == "sft":
        return (f"{head}: the old values give {per_device} x {accumulation} x {processes} = {old} sequences on "
                f"{processes} processes; write sft.optimizer.global_batch_size: {old} and, for the same per-device "
                f"micro-batch, sft.optimizer.micro_batch_size: {per_device}")
    g = num_generations or 1
    per_gen = per_device * (steps_per_generation or accumulation) * processes
    prompts = f"{per_gen // g}" if per_gen % g == 0 else f"{per_gen / g:g} (not whole: pick a whole number)"
    return (f"{head}: the old values give {per_device} x {steps_per_generation or accumulation} x {processes} = "
            f"{per_gen} completions per generation on {processes} processes; write rl.prompts_per_step: {prompts} "
            f"(with rl.num_generations: {g}) and, for the same per-device micro-batch, "
            f"rl.optimizer.micro_batch_size: {per_device}")


RETIRED_BATCH_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps")
"""Optimizer keys the recipe no longer states (derived here); a recipe naming one is refused."""


def retired_keys_message(phase: str, section: dict[str, Any]) -> str | None:
    """Why a phase section (``sft`` or ``rl``, as written) holding a retired batch key is refused, else None."""
    opt = section.get("optimizer") or {}
    if not isinstance(opt, dict) or not any(k in opt for k in RETIRED_BATCH_KEYS):
        under_opt = isinstance(opt, dict) and "steps_per_generation" in opt
        if phase == "rl" and ("steps_per_generation" in section or under_opt):
            key = "rl.optimizer.steps_per_generation" if under_opt else "rl.steps_per_generation"
            return (f"{key} is no longer a recipe key: one generation batch of rl.prompts_per_step "
                    "x rl.num_generations completions serves one optimizer step, and the micro-steps per generation "
                    "are derived (core.batch); remove the key")
        return None

    def whole(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    spg = section.get("steps_per_generation")
    return old_keys_message(phase, whole(opt.get("per_device_train_batch_size", 1)),
                            whole(opt.get("gradient_accumulation_steps", 1)),
                            whole(section.get("num_generations", 16)) if phase == "rl" else None,
                            whole(spg) if spg is not None else None)


def check_batch_fits(plan: BatchPlan, rows: int, where: str, batch_multiplier: int = 1) -> None:
    """Refuse a global batch the training rows cannot fill once: SFT needs ``global_batch`` rows, RL
    ``prompts_per_step`` x ``batch_multiplier`` (dynamic sampling's draw) prompts, after ``data.max_examples`` and
    any filtering; otherwise the loaders of both engines, which keep whole batches only, would train no step."""
    if plan.phase == "sft":
        need, key, unit = plan.global_batch, "sft.optimizer.global_batch_size", "sequences"
    else:
        need, key, unit = (plan.prompts_per_step or 0) * batch_multiplier, "rl.prompts_per_step", "prompts"
    if rows < need:
        draw = f" x rl.dynamic_sampling.batch_multiplier {batch_multiplier}" if batch_multiplier > 1 else ""
        raise BatchError(f"{key} = {need // batch_multiplier}{draw} {unit} per step is larger than {where}, which "
                         f"has {rows} rows (after data.max_examples and filtering): no whole batch, no step; set "
                         f"{key} to at most {rows // batch_multiplier} or train on more rows")
