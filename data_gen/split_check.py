"""Split leakage check over one or more generated datasets (``spatialiq check-splits``).

Every structure is read wherever it is recorded: each ``scene.json`` of the per-view layout (split =
the first folder below the dataset root) and each parquet row under ``<dataset>/data/`` (split and
partitions from its columns). A leak is:

* one structure recorded in both ``train`` and ``benchmark`` (in any of the datasets);
* one train structure recorded in both ``train`` and ``val``, or in both ``warmup`` and ``rl``;
* a recorded split or partition that disagrees with ``splits.split_of`` / ``splits.partition_of``
  (this is how a benchmark sample folder copied into a train dataset is caught even alone).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from data_gen import folding_gen, structure
from spatialiq_train.core import splits
from spatialiq_train.core.dataset import (
    DatasetNotFoundError,
    iter_scene_files,
    iter_shard_rows,
    parquet_shards,
    read_scene,
)


def split_of_path(root: str | Path, path: str | Path) -> str:
    """The first folder of ``path`` below ``root``: the split name in our layout (``eval_set`` in the released one)."""
    return Path(path).resolve().relative_to(Path(root).resolve()).parts[0]


@dataclass(frozen=True)
class Record:
    """One place a structure is recorded."""

    structure_id: str
    split: str
    """``train``/``benchmark`` in our layout; other names (e.g. the released ``eval_set``) are not checked."""
    where: str
    partitions: tuple[tuple[str, str], ...] = ()
    """Recorded (kind, partition) pairs, e.g. (("trainval", "val"), ("dapo", "rl")); parquet rows only."""


@dataclass(frozen=True)
class Leak:
    structure_id: str
    reason: str
    first: str
    second: str = ""

    def __str__(self) -> str:
        where = f"{self.first} and {self.second}" if self.second else self.first
        return f"structure {self.structure_id}: {self.reason}: {where}"


@dataclass
class SplitReport:
    records: int = 0
    structures: dict[str, set[str]] = field(default_factory=dict)
    leaks: list[Leak] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Files whose recorded ``structure_id`` differs from the one recomputed from their ``height_map``."""

    def summary(self) -> str:
        per = ", ".join(f"{name} {len(ids)}" for name, ids in sorted(self.structures.items()))
        status = f"{len(self.leaks)} leak(s)" if self.leaks else "no leaks"
        bad = f"; {len(self.problems)} problem(s)" if self.problems else ""
        return f"checked {self.records} records; structures per split: {per or 'none'}; {status}{bad}"


def scene_records(root: Path, problems: list[str] | None = None) -> Iterator[Record]:
    """Records from every ``scene.json`` under ``root``.

    The structure id is always recomputed from ``height_map`` (a recorded id is never trusted); a recorded
    ``structure_id`` that differs is appended to ``problems``, naming the file.
    """
    for path in iter_scene_files(root):
        scene = read_scene(path)
        sid = structure.structure_id(scene["height_map"])
        recorded = scene.get("structure_id")
        if recorded is not None and recorded != sid and problems is not None:
            problems.append(f"{path}: recorded structure_id {recorded!r} differs from {sid!r}, the id of its "
                            "height_map (the file was edited or copied from elsewhere)")
        yield Record(sid, split_of_path(root, path), str(path.parent))


def parquet_records(root: Path) -> Iterator[Record]:
    """Records from the parquet rows under ``root/data`` (one per distinct structure, split and partitions)."""
    for path in parquet_shards(root):
        seen: set[tuple] = set()
        for row in iter_shard_rows(path, columns=["structure_id", "split", "trainval", "dapo", "view"]):
            sid, split, tv, dapo, view = row["structure_id"], row["split"], row["trainval"], row["dapo"], row["view"]
            parts = tuple((k, v) for k, v in (("trainval", tv), ("dapo", dapo)) if v is not None)
            key = (sid, split, parts)
            if key not in seen:
                seen.add(key)
                yield Record(sid, split, f"{path}:{view}", parts)


def find_leaks(records: Iterable[Record]) -> list[Leak]:
    """All leaks among ``records`` (see the module docstring), in a stable order."""
    by_sid: dict[str, list[Record]] = defaultdict(list)
    leaks: list[Leak] = []
    for rec in records:
        by_sid[rec.structure_id].append(rec)
        if rec.split in splits.SPLITS and splits.split_of(rec.structure_id) != rec.split:
            leaks.append(Leak(rec.structure_id, f"recorded in {rec.split} but split_of gives "
                                                f"{splits.split_of(rec.structure_id)}", rec.where))
        for kind, name in rec.partitions:
            if rec.split == "train" and splits.partition_of(rec.structure_id, kind) != name:
                leaks.append(Leak(rec.structure_id, f"recorded in {kind} partition {name} but partition_of gives "
                                                    f"{splits.partition_of(rec.structure_id, kind)}", rec.where))
    for sid, recs in by_sid.items():
        first_by_split: dict[str, Record] = {}
        for rec in recs:
            first_by_split.setdefault(rec.split, rec)
        if "train" in first_by_split and "benchmark" in first_by_split:
            leaks.append(Leak(sid, "in both train and benchmark", first_by_split["train"].where,
                              first_by_split["benchmark"].where))
        for kind, (small, large, _) in splits.PARTITIONS.items():
            seen: dict[str, Record] = {}
            for rec in recs:
                for k, name in rec.partitions:
                    if k == kind and rec.split == "train":
                        seen.setdefault(name, rec)
            if small in seen and large in seen:
                leaks.append(Leak(sid, f"in both {large} and {small}", seen[large].where, seen[small].where))
    return leaks


def check_splits(dirs: Iterable[str | Path]) -> SplitReport:
    """Read every structure of the given datasets and report leaks; a missing directory is a DatasetNotFoundError."""
    records: list[Record] = []
    problems: list[str] = []
    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            raise DatasetNotFoundError(f"{root}: not a directory (expected a dataset written by spatialiq gen)")
        records.extend(scene_records(root, problems))
        records.extend(parquet_records(root))
        records.extend(Record(*e) for e in folding_gen.split_entries(root, problems))  # paper folding (docs/folding.md)
    report = SplitReport(records=len(records), problems=problems)
    for rec in records:
        report.structures.setdefault(rec.split, set()).add(rec.structure_id)
    report.leaks = find_leaks(records)
    return report
