"""Data parallelism helpers: which prompts each rank draws for a dynamic-sampling refill, and counters summed over
ranks.

Refill draws are pure functions of (seed, step, generation, round, rank, world size): every rank computes the same
refill order for a generation and takes its own slice of it, so no two ranks (and no two rounds of the same
generation) draw the same prompt until the order has used up the whole dataset. Nothing here talks to other
processes except `sum_over_ranks`, which all-reduces through accelerate when there is more than one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

REFILL_STREAM = 0x5EF111
"""Mixed into the refill seed so refill orders do not coincide with other generators seeded from `run.seed`."""


def refill_order(n_rows: int, length: int, seed: int, step: int, generation: int = 0) -> np.ndarray:
    """At least `length` dataset row indices in a deterministic order for one generation of one step.

    Whole permutations of `range(n_rows)` are concatenated, so an index repeats only after every row was listed.
    """
    if n_rows < 1:
        raise ValueError(f"cannot draw refill prompts from an empty dataset (n_rows={n_rows})")
    if min(length, seed, step, generation) < 0:
        raise ValueError(f"length, seed, step and generation must be >= 0 (got {length}, {seed}, {step}, {generation})")
    rng = np.random.default_rng([REFILL_STREAM, seed, step, generation])
    reps = max(1, -(-length // n_rows))
    return np.concatenate([rng.permutation(n_rows) for _ in range(reps)])


def refill_slot(round_: int, rank: int, world: int) -> int:
    """Position of (round, rank) in a generation's refill order, in units of one rank's draw."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of {world} processes")
    if round_ < 0:
        raise ValueError(f"refill round must be >= 0 (got {round_})")
    return round_ * world + rank


def refill_indices(
    n_rows: int, n_groups: int, *, seed: int, step: int, round_: int, rank: int, world: int, generation: int = 0
) -> list[int]:
    """The `n_groups` dataset rows that `rank` of `world` draws in refill round `round_` (0-based).

    Rank r takes slice `round_ * world + r` of the generation's refill order: disjoint from every other rank's
    and from its own earlier rounds while `(round_ + 1) * world * n_groups <= n_rows`.
    """
    if n_groups < 0:
        raise ValueError(f"n_groups must be >= 0 (got {n_groups})")
    start = refill_slot(round_, rank, world) * n_groups
    order = refill_order(n_rows, start + n_groups, seed, step, generation)
    return [int(i) for i in order[start : start + n_groups]]


def sum_over_ranks(accelerator: Any, values: Sequence[float]) -> list[float]:
    """`values` summed element-wise over all processes (all-reduce); unchanged with one process.

    Every process must call this with the same number of values at the same point (it is a collective).
    """
    vals = [float(v) for v in values]
    if getattr(accelerator, "num_processes", 1) <= 1:
        return vals
    import torch

    local = torch.tensor(vals, dtype=torch.float64, device=accelerator.device)
    return [float(v) for v in accelerator.reduce(local, reduction="sum").tolist()]


def end_process_group() -> None:
    """End torch.distributed's process groups at the successful end of a launched command, all ranks together (a
    no-op when none): a barrier, then ``destroy_process_group``.

    A rank that tears its gloo group down, or exits with it alive, while its peer is still busy on the group's
    connections can abort in gloo's teardown ("terminate called without an active exception", SIGABRT) after all
    its work is done and saved; the launcher then reports the job failed and kills the other ranks. The barrier
    makes every rank reach the end before any tears down (the order PyTorch's shutdown notes ask for). Called on
    success only: after an exception another rank may still wait in a collective, and the barrier would wait for a
    rank that never comes.
    """
    import sys

    if "torch" not in sys.modules:  # nothing imported torch: no group to end
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
