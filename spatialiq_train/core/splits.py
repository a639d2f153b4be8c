"""Split and partition membership, decided by the structure alone.

A structure's split (``benchmark`` or ``train``) and its part inside ``train`` are pure functions of its
``structure_id`` (a content hash of the height map), so two separate runs can never put one structure on both
sides, and disjointness is checkable anywhere downstream.

:func:`part_of` is the one partition of the train split into three named parts, disjoint by construction:
``val`` (held-out validation, :data:`VAL_FRACTION` of train structures), ``warmup`` (the DAPO-tight SFT warm-up,
:data:`WARMUP_FRACTION` of the rest) and ``rl`` (everything else). The trace file ``train`` is ``warmup`` + ``rl``.
It is built from two hash draws of the id, which the generator records per structure as the ``trainval`` and
``dapo`` columns (:func:`partition_of`, kept as recorded); ``part_of`` decides ``val`` first, so a structure whose
``dapo`` draw says warm-up or RL but whose ``trainval`` draw says val is in ``val`` only.
:func:`check_held_out` refuses trace splits where an evaluation split shares a structure with a training split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from spatialiq_train.core.errors import InputError, UserError
from spatialiq_train.core.io import loads_json, read_text

Split = Literal["train", "benchmark"]
SPLITS: tuple[Split, ...] = ("train", "benchmark")
Part = Literal["val", "warmup", "rl"]
PARTS: tuple[Part, ...] = ("val", "warmup", "rl")
"""The three disjoint parts of the train split (:func:`part_of`)."""
PART_FILES: dict[str, tuple[Part, ...]] = {"train": ("warmup", "rl"), "val": ("val",), "warmup": ("warmup",),
                                           "rl": ("rl",)}
"""Train-split trace file name -> the parts it holds (``train`` = everything but ``val``)."""

BENCHMARK_FRACTION = 0.10
"""Share of all structures reserved for the benchmark split."""
VAL_FRACTION = 0.10
"""Share of train structures in the val part (train/val 90/10)."""
WARMUP_FRACTION = 0.10
"""Share of the non-val train structures in the DAPO-tight SFT warm-up part (warm-up/RL 10/90 of them: about
9 % and 81 % of all train structures)."""

PARTITIONS: dict[str, tuple[str, str, float]] = {
    # recorded draw: (name of the small side, name of the large side, share of the small side)
    "trainval": ("val", "train", VAL_FRACTION),
    "dapo": ("warmup", "rl", WARMUP_FRACTION),
}


class HeldOutError(UserError):
    """An evaluation split shares structures with a training split; the message names both files and the count."""


def _unit(structure_id: str, salt: str) -> float:
    digest = hashlib.sha256(f"{salt}:{structure_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(structure_id: str) -> Split:
    """``benchmark`` for a fixed 10% of all structures, ``train`` for the rest."""
    return "benchmark" if _unit(structure_id, "split") < BENCHMARK_FRACTION else "train"


def partition_of(structure_id: str, kind: str) -> str:
    """A recorded hash draw of a train structure: ``trainval`` -> train|val, ``dapo`` -> warmup|rl.

    These are the generator's per-structure columns. The part a structure is trained or validated on is
    :func:`part_of`, which combines both draws so that ``val`` shares no structure with ``warmup`` or ``rl``.
    """
    try:
        small, large, share = PARTITIONS[kind]
    except KeyError:
        raise ValueError(f"unknown partition kind {kind!r}; valid: {', '.join(PARTITIONS)}") from None
    return small if _unit(structure_id, kind) < share else large


def part_of(structure_id: str) -> Part:
    """The one partition of a train structure: ``val``, else ``warmup`` or ``rl`` (disjoint by construction)."""
    return part_from_draws(partition_of(structure_id, "trainval"), partition_of(structure_id, "dapo"))


def part_from_draws(trainval: str, dapo: str) -> Part:
    """The part two draws (as recorded in the ``trainval`` and ``dapo`` columns) put a structure in: ``val`` first."""
    for kind, value in (("trainval", trainval), ("dapo", dapo)):
        if value not in PARTITIONS[kind][:2]:
            raise ValueError(f"recorded {kind} {value!r} is not one of {', '.join(PARTITIONS[kind][:2])}")
    if trainval == "val":
        return "val"
    return "warmup" if dapo == "warmup" else "rl"


def _structure_ids(path: Path) -> set[str]:
    """The ``structure_id`` of every row of a trace JSONL file (rows without one are ignored)."""
    if not path.is_file():
        raise HeldOutError(f"trace file {path} does not exist (write it with `spatialiq traces --out {path.parent}`)")
    ids: set[str] = set()
    for lineno, line in enumerate(read_text(path, "trace file").splitlines(), start=1):
        if not line.strip():
            continue
        row = loads_json(line, f"{path}:{lineno}", one_line=True)
        if not isinstance(row, dict):
            raise InputError(f"{path}:{lineno}: expected a JSON object (a trace record)")
        sid = row.get("structure_id")
        if sid is not None:
            ids.add(str(sid))
    return ids


def check_split_names(eval_split: str | None, train_splits: Sequence[str]) -> None:
    """The part of :func:`check_held_out` that needs no file: a training split named as the evaluation split."""
    if eval_split is not None and eval_split in train_splits:
        raise HeldOutError(f"data.eval_split {eval_split!r} is also a training split; validate on a held-out split "
                           f"(val is disjoint from warmup and rl by construction)")


def check_held_out(traces_dir: str | Path, eval_split: str | None, train_splits: Sequence[str]) -> None:
    """Refuse an evaluation split that shares a structure with any training split, naming the files and the count.

    ``traces_dir`` holds ``<split>.jsonl`` trace files; ``eval_split`` None (no validation) passes. A training split
    equal to ``eval_split`` is refused outright. Raises :class:`HeldOutError` (a UserError).
    """
    if eval_split is None:
        return
    root = Path(traces_dir)
    check_split_names(eval_split, train_splits)
    held = _structure_ids(root / f"{eval_split}.jsonl")
    for split in dict.fromkeys(train_splits):
        shared = held & _structure_ids(root / f"{split}.jsonl")
        if shared:
            raise HeldOutError(
                f"{root / f'{eval_split}.jsonl'} shares {len(shared)} of its {len(held)} structures with training "
                f"split {split!r} ({root / f'{split}.jsonl'}), e.g. {min(shared)}: validation would reward memorised "
                "prompts. Rewrite the traces with `spatialiq traces` (val is disjoint from warmup and rl by "
                "construction) or set data.eval_split to a split that shares no structure")


def check_sources_held_out(traces_dir: str | Path, eval_split: str | None, train_splits: Sequence[str],
                           sources: Sequence[str | Path]) -> None:
    """Replay (``data.sources``): no source's training splits share a structure with the validation split of
    ``traces_dir`` (the run's own folder, checked by :func:`check_held_out`, is skipped). A :class:`HeldOutError`
    names the ``data.sources[i].traces_dir`` entry, its file and a shared structure; ``eval_split`` None passes."""
    if eval_split is None or not sources:
        return
    root = Path(traces_dir)
    val = root / f"{eval_split}.jsonl"
    held = _structure_ids(val)
    for i, source in enumerate(sources):
        folder = Path(source)
        if folder.resolve() == root.resolve():
            continue
        key = f"data.sources[{i}].traces_dir"
        for split in dict.fromkeys(train_splits):
            path = folder / f"{split}.jsonl"
            if not path.is_file():
                raise HeldOutError(f"{key}: trace file {path} does not exist (a source holds the phase's training "
                                   f"split; write it with `spatialiq traces --out {folder}`)")
            if shared := held & _structure_ids(path):
                raise HeldOutError(
                    f"{key}: {path} holds {len(shared)} of the {len(held)} structures of the validation split "
                    f"{val}, e.g. {min(shared)}: replaying them would reward memorised prompts at validation. Drop "
                    "those structures from the source, or validate on a split that shares none (data.eval_split)")
