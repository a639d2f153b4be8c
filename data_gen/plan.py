"""Which structures a generation run holds, and in which order (the run's plan).

Candidates ``index = 0, 1, 2, ...`` are sampled from ``structure_rng(seed, index)``. A candidate joins
the run only if ``splits.split_of`` of its ``structure_id`` is the run's split (so benchmark and train
never share a structure, also across separate runs), and a candidate whose ``structure_id`` was
already accepted earlier in the run is skipped (duplicates are rare, mostly tiny structures). The
first ``structures`` accepted candidates are the run, numbered ``sample_idx`` 1..N in that order. With ``parts``
(train split only: a count per part of ``splits.part_of``, e.g. ``{"warmup": 2, "rl": 4}``) a candidate joins only
while its part still has room, so a run can hold just the structures a training recipe reads.

Candidates are independent, so their ids are computed in batches (in parallel when a map over a
process pool is given); the filter runs in index order, so the plan never depends on the workers.
The plan is stored as ``<out>/plan.json`` (candidate index and structure id per sample) so shards
and Slurm array tasks do not repeat the scan; it holds no height maps, which are re-sampled from
(seed, index) and checked against the recorded id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_gen import structure
from spatialiq_train.core import splits
from spatialiq_train.core.io import atomic_write_text, read_json

log = logging.getLogger(__name__)

PLAN_FILE = "plan.json"
MAX_BATCH = 64
"""Most candidates per task of the parallel scan."""

MapFn = Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]


@dataclass(frozen=True)
class PlannedStructure:
    sample_idx: int
    index: int
    """Candidate index: the structure is ``sample_structure(structure_rng(seed, index))``."""
    structure_id: str

    def height_map(self, seed: int) -> np.ndarray:
        """Re-sample the height map; a mismatch with the recorded id is an error (stale plan.json)."""
        hmap = structure.sample_structure(structure.structure_rng(seed, self.index))
        sid = structure.structure_id(hmap)
        if sid != self.structure_id:
            raise ValueError(f"{PLAN_FILE}: candidate {self.index} gives structure {sid}, the plan says "
                             f"{self.structure_id}; delete the output directory and generate again")
        return hmap


def candidate_ids(batch: tuple[int, int, int]) -> list[str]:
    """Structure ids of candidates ``start .. stop-1`` of ``seed``; ``batch`` is (seed, start, stop)."""
    seed, start, stop = batch
    return [structure.structure_id(structure.sample_structure(structure.structure_rng(seed, i)))
            for i in range(start, stop)]


PART_SHARES: dict[str, float] = {
    "val": splits.VAL_FRACTION,
    "warmup": (1 - splits.VAL_FRACTION) * splits.WARMUP_FRACTION,
    "rl": (1 - splits.VAL_FRACTION) * (1 - splits.WARMUP_FRACTION),
}
"""Expected share of each part among train structures (sizes the scan's batches only)."""


def accepted(seed: int, split: str, n: int, map_fn: MapFn = map, tick: Callable[[int], None] | None = None,
             width: int = 8, parts: dict[str, int] | None = None) -> list[tuple[int, str]]:
    """(candidate index, structure id) of the run's first ``n`` structures, in sample_idx order.

    ``parts`` (train split only) caps the structures taken from each part of ``splits.part_of``; its counts sum
    to ``n``.
    """
    if parts is not None and (split != "train" or sum(parts.values()) != n):
        raise ValueError(f"parts {parts} need split 'train' and counts summing to {n}")
    room = dict(parts) if parts is not None else None
    seen: set[str] = set()
    out: list[tuple[int, str]] = []
    start, limit = 0, 1000 * n + 100_000
    while len(out) < n:
        if start > limit:
            raise ValueError(f"only {len(out)} of {n} structures of split {split!r} in {start} candidates")
        share = splits.BENCHMARK_FRACTION if split == "benchmark" else 1 - splits.BENCHMARK_FRACTION
        if room is not None:
            share *= min(PART_SHARES[p] for p, left in room.items() if left > 0)
        size = min(MAX_BATCH, max(4, int(1.1 * (n - len(out)) / share / width) + 1))
        batches = [(seed, s, s + size) for s in range(start, start + width * size, size)]
        for (_, s, _), ids in zip(batches, map_fn(candidate_ids, batches), strict=True):
            for index, sid in enumerate(ids, start=s):
                if len(out) == n or splits.split_of(sid) != split:
                    continue
                if room is not None and room.get(part := splits.part_of(sid), 0) <= 0:
                    continue
                if sid in seen:
                    log.debug("candidate %d repeats structure %s; skipped", index, sid)
                    continue
                seen.add(sid)
                if room is not None:
                    room[part] -= 1
                out.append((index, sid))
                if tick:
                    tick(1)
        start += width * size
    return out


def load_or_make(out: Path, seed: int, split: str, n: int, map_fn: MapFn = map,
                 tick: Callable[[int], None] | None = None, width: int = 8,
                 parts: dict[str, int] | None = None) -> list[PlannedStructure]:
    """The run's plan from ``out/plan.json``, computing and writing it first when absent."""
    path = out / PLAN_FILE
    if path.exists():
        data = read_json(path)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object with keys seed, split, structures, entries")
        if (data.get("seed"), data.get("split"), data.get("structures"), data.get("parts")) != (seed, split, n, parts):
            held = f" (parts {data['parts']})" if data.get("parts") else ""
            raise ValueError(f"{path} belongs to another run (seed {data.get('seed')}, split {data.get('split')}, "
                             f"{data.get('structures')} structures{held}); use a new output directory")
        entries = _entries(data, path, n)
    else:
        entries = [list(e) for e in accepted(seed, split, n, map_fn, tick, width, parts)]
        body = ",\n".join(json.dumps(e) for e in entries)
        held = f', "parts": {json.dumps(parts)}' if parts is not None else ""
        atomic_write_text(path, f'{{"seed": {seed}, "split": "{split}", "structures": {n}{held}, "entries": [\n'
                                f'{body}\n]}}\n')
    return [PlannedStructure(i + 1, int(index), str(sid)) for i, (index, sid) in enumerate(entries)]


def _entries(data: dict, path: Path, n: int) -> list:
    """The plan's ``entries``: ``n`` pairs [candidate index, structure id]; errors name the file and the key."""
    if "entries" not in data:
        raise ValueError(f"{path}: key 'entries' missing; delete the file to recompute the plan")
    entries = data["entries"]
    if not isinstance(entries, list) or len(entries) != n:
        size = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise ValueError(f"{path}: key 'entries' must list {n} [index, structure_id] pairs, got {size}; "
                         "delete the file to recompute the plan")
    for row, entry in enumerate(entries):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)
                and isinstance(entry[1], str)):
            raise ValueError(f"{path}: entries[{row}] must be [candidate index, structure id], got {entry!r}")
    return entries
