"""Split and partition membership, decided by the structure alone.

A structure's split (``benchmark`` or ``train``) and its partitions inside ``train`` are pure
functions of its ``structure_id`` (a content hash of the height map), so two separate runs can
never put one structure on both sides, and disjointness is checkable anywhere downstream.
Each decision hashes the id with its own salt, so the partitions are independent of each other.
"""

from __future__ import annotations

import hashlib
from typing import Literal

Split = Literal["train", "benchmark"]
SPLITS: tuple[Split, ...] = ("train", "benchmark")

BENCHMARK_FRACTION = 0.10
"""Share of all structures reserved for the benchmark split."""
VAL_FRACTION = 0.10
"""Share of train structures in the val partition (train/val 90/10)."""
WARMUP_FRACTION = 0.10
"""Share of train structures in the DAPO-tight SFT warm-up partition (warm-up/RL 10/90)."""

PARTITIONS: dict[str, tuple[str, str, float]] = {
    # kind: (name of the small side, name of the large side, share of the small side)
    "trainval": ("val", "train", VAL_FRACTION),
    "dapo": ("warmup", "rl", WARMUP_FRACTION),
}


def _unit(structure_id: str, salt: str) -> float:
    digest = hashlib.sha256(f"{salt}:{structure_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(structure_id: str) -> Split:
    """``benchmark`` for a fixed 10% of all structures, ``train`` for the rest."""
    return "benchmark" if _unit(structure_id, "split") < BENCHMARK_FRACTION else "train"


def partition_of(structure_id: str, kind: str) -> str:
    """The partition of a train structure: kind ``trainval`` -> train|val, kind ``dapo`` -> warmup|rl."""
    try:
        small, large, share = PARTITIONS[kind]
    except KeyError:
        raise ValueError(f"unknown partition kind {kind!r}; valid: {', '.join(PARTITIONS)}") from None
    return small if _unit(structure_id, kind) < share else large
