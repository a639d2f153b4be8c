"""Replay: a training split mixed from several trace sources with weights (``data.sources``), batch by batch.

The rule (pure, seeded, independent of the process count). Source ``i`` has share ``p_i = w_i / sum(w)``, held as
an exact fraction. A global batch of ``B`` rows (SFT: ``sft.optimizer.global_batch_size`` sequences; RL:
``rl.prompts_per_step`` prompts) gives source ``i`` either ``floor(B p_i)`` or ``floor(B p_i) + 1`` rows: every
source gets its floor, and the ``r = B - sum floor(B p_i)`` rows left go to the sources owed most. Each source's
credit grows by its fractional part ``B p_i - floor(B p_i)`` every batch; among the sources with positive credit,
the ``r`` whose credit would reach 1 soonest (smallest ``(1 - credit) / fraction``; ties: the earlier source) get
one row more and their credit falls by 1 (Tijdeman's rule for the chairman assignment problem). After any number
``b`` of batches, source ``i`` has had within one row of ``b B p_i`` rows (credit stays inside (-1, 1)).

Inside a batch the slots are shuffled with a generator seeded by ``(seed, batch)``; each source's rows are taken in
the order of a permutation seeded by ``(seed, source, pass)``, a new pass (a fresh permutation) starting when a
source runs out. The mixed split holds as many batches as it takes to use the first source's rows once,
``ceil(n_0 / (B p_0))``, or as many as the phase's step budget when that is longer (``min_batches``): the passes
then go on, so a second pass over the first source is a fresh permutation and fresh batches, not a repeat of the
first. The trainer then reads the rows in this order (TRL: sequential sampler, no shuffle), so optimizer step ``s``
trains on batch ``s`` whatever the number of processes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict

from spatialiq_train.core.recipe_types import Num

if TYPE_CHECKING:
    from spatialiq_train.core.traces import Mode

MIX_STREAM = 0x5EED_313
"""Mixed into every seed here so mixing orders do not coincide with other generators seeded from ``run.seed``."""


def _usable_weight(weight: float) -> float:
    if not math.isfinite(weight) or weight <= 0:
        raise ValueError(f"weight {weight} must be a finite number above 0 (the source's share is weight / sum)")
    return weight


class TraceSource(BaseModel):
    """One entry of ``data.sources``: a trace folder from ``spatialiq traces`` and its weight in every batch."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    traces_dir: str
    """Folder holding the phase's split files (``<sft_split>.jsonl``, ``<rl_split>.jsonl``)."""
    weight: Annotated[Num, AfterValidator(_usable_weight)]
    """Relative weight; the source's share of every global batch is weight / sum of weights."""
    data_root: str | None = None
    """Dataset root its image paths are relative to (None: ``data.data_root``)."""


def check_sources(sources: Sequence[TraceSource], traces_dir: str) -> None:
    """Recipe-level rules of ``data.sources`` (empty: no mixing): two or more folders, each once, one of them
    ``data.traces_dir`` (the run's own traces, where the validation split and the structure checks are read)."""
    if not sources:
        return
    if len(sources) < 2:
        raise ValueError(f"data.sources lists one source ({sources[0].traces_dir!r}); mixing needs two or more (one "
                         "source is data.traces_dir: set that and leave data.sources empty)")
    dirs = [s.traces_dir for s in sources]
    for i, d in enumerate(dirs):
        if d in dirs[:i]:
            raise ValueError(f"data.sources[{i}].traces_dir {d!r} is listed twice; give each folder once")
    if traces_dir not in dirs:
        raise ValueError(f"data.sources: no entry is data.traces_dir ({traces_dir!r}); list it with its weight (the "
                         "run's own traces: its validation split and structure checks are read there)")


def shares(weights: Sequence[float]) -> list[Fraction]:
    """Exact shares ``w_i / sum(w)`` (floats read exactly, so every machine computes the same quotas)."""
    if not weights:
        raise ValueError("no weights")
    exact = [Fraction(_usable_weight(float(w))) for w in weights]
    total = sum(exact)
    return [w / total for w in exact]


def batch_quotas(weights: Sequence[float], batch_size: int, n_batches: int) -> np.ndarray:
    """Rows per source in each global batch, shape ``(n_batches, len(weights))``: the rule of the module doc."""
    if batch_size < 1 or n_batches < 0:
        raise ValueError(f"batch_size must be >= 1 and n_batches >= 0 (got {batch_size}, {n_batches})")
    ideal = [batch_size * p for p in shares(weights)]
    floor = [math.floor(x) for x in ideal]
    frac = [x - f for x, f in zip(ideal, floor, strict=True)]
    extra = batch_size - sum(floor)
    credit = [Fraction(0)] * len(ideal)
    out = np.empty((n_batches, len(ideal)), dtype=np.int64)
    for b in range(n_batches):
        credit = [c + f for c, f in zip(credit, frac, strict=True)]
        # the owed (positive credit) by deadline first; the others after them keep every batch at batch_size rows
        # even where the owed were too few (the sources with a fractional part number at least extra + 1)
        chosen = sorted((i for i in range(len(ideal)) if frac[i] > 0),
                        key=lambda i: (credit[i] <= 0, (1 - credit[i]) / frac[i], i))[:extra]
        for i in chosen:
            credit[i] -= 1
        out[b] = floor
        out[b, chosen] += 1
    return out


def batches_for(first_rows: int, weights: Sequence[float], batch_size: int) -> int:
    """Global batches in the mixed split: enough to use the first source's rows once, ``ceil(n_0 / (B p_0))``."""
    if first_rows < 1:
        raise ValueError(f"the first source holds {first_rows} rows")
    return math.ceil(Fraction(first_rows) / (batch_size * shares(weights)[0]))


def mixed_order(sizes: Sequence[int], weights: Sequence[float], batch_size: int, seed: int,
                n_batches: int | None = None) -> list[tuple[int, int]]:
    """``(source, row)`` for every row of the mixed split, in training order: batch after batch of ``batch_size``
    rows holding :func:`batch_quotas`, slots shuffled per batch, each source's rows in seeded passes."""
    if len(sizes) != len(weights):
        raise ValueError(f"{len(sizes)} sources but {len(weights)} weights")
    if min(sizes, default=0) < 1:
        raise ValueError(f"every source needs rows (sizes {list(sizes)})")
    n_batches = batches_for(sizes[0], weights, batch_size) if n_batches is None else n_batches
    quotas = batch_quotas(weights, batch_size, n_batches)
    taken = [0] * len(sizes)
    passes: dict[tuple[int, int], np.ndarray] = {}

    def next_row(source: int) -> int:
        n_pass, at = divmod(taken[source], sizes[source])
        if (source, n_pass) not in passes:
            passes[(source, n_pass)] = np.random.default_rng([MIX_STREAM, 0, seed, source, n_pass]).permutation(
                sizes[source])
        taken[source] += 1
        return int(passes[(source, n_pass)][at])

    order: list[tuple[int, int]] = []
    for b in range(n_batches):
        slots = np.repeat(np.arange(len(sizes)), quotas[b])
        np.random.default_rng([MIX_STREAM, 1, seed, b]).shuffle(slots)
        order += [(int(s), next_row(int(s))) for s in slots]
    return order


def trace_kind(example: dict[str, Any]) -> str:
    """``cot`` when the example's prompt opens with a system turn (the CoT traces), else ``plain``."""
    return "cot" if any(turn.get("role") == "system" for turn in example["prompt"]) else "plain"


def read_sources(sources: Sequence[TraceSource], split: str, data_root: str, mode: Mode,
                 limit: int | None = None) -> list[list[dict[str, Any]]]:
    """Each source's ``<split>.jsonl`` as trainer examples (``core.traces.load_examples``), checked: the folder
    exists and every source holds the same trace kind. Errors name the ``data.sources[i]`` entry."""
    from spatialiq_train.core.traces import TraceError, load_examples

    read: list[list[dict[str, Any]]] = []
    for i, source in enumerate(sources):
        key = f"data.sources[{i}].traces_dir"
        if not Path(source.traces_dir).is_dir():
            raise TraceError(f"{key}: {source.traces_dir} is not a folder (write traces there with "
                             f"`spatialiq traces --out {source.traces_dir}`)")
        try:
            examples = load_examples(source.traces_dir, split, source.data_root or data_root, mode, limit)
        except TraceError as exc:
            raise TraceError(f"{key}: {exc.message}") from None
        kinds = {trace_kind(ex) for ex in examples}
        first = trace_kind(read[0][0]) if read else None
        if len(kinds) > 1 or (first is not None and kinds != {first}):
            raise TraceError(f"{key}: {source.traces_dir}/{split}.jsonl holds {' and '.join(sorted(kinds))} traces "
                             f"but data.sources[0] holds {first or 'both'}; mix traces of one kind (cot with cot, "
                             "plain with plain)")
        read.append(examples)
    return read


def mixed_examples(sources: Sequence[TraceSource], split: str, data_root: str, mode: Mode, batch_size: int,
                   seed: int, limit: int | None = None, min_batches: int = 0) -> list[dict[str, Any]]:
    """The phase's training rows mixed from ``sources`` in :func:`mixed_order`'s order: one pass over the first
    source, or ``min_batches`` global batches when that is more (the step budget: the passes continue). Every row
    carries every column any source has (a column a source lacks is None there)."""
    read = read_sources(sources, split, data_root, mode, limit)
    weights = [s.weight for s in sources]
    n_batches = max(batches_for(len(read[0]), weights, batch_size), min_batches)
    order = mixed_order([len(r) for r in read], weights, batch_size, seed, n_batches)
    columns = list(dict.fromkeys(key for rows in read for row in rows for key in row))
    return [{key: read[s][row].get(key) for key in columns} for s, row in order]
