"""The one integrity rule for ground truth read from a dataset (benchmark-spec 4.2-4.3, generation's records).

Every reader of a dataset's truth (``traces``, ``eval sample``, ``eval score``, ``reward analyze``, sweeps,
``fidelity``) reads it through ``spatialiq_train.core.dataset.iter_views``, which applies these checks:

* :func:`validate_gt`: each view's fields have the schema's types, the required ones are present, and the integer
  relations of section 4.3 that its fields allow hold (:data:`RELATIONS`: ``total_blocks == task_main``,
  ``task5 + num_hidden_blocks == task_main``, ...);
* :func:`check_constant_fields`: task2, task3, task4 and task9 are the same across the views of one structure;
* :func:`recorded_mismatches`: the bytes read are the bytes ``spatialiq gen`` recorded in its shard completion
  records (``shards/*.done.json``): each leaf ``gt.json`` read from the folders, or, for a dataset holding only
  the parquet shards, each shard read;
* :func:`truth_digest`: one sha256 naming the truth of a list of views (the dataset identity a completions file
  records), the same for the folder and the parquet form of a dataset.

Generation checks its fresh truth against the same :data:`RELATIONS` (``data_gen.truth.check_invariants``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import read_json, sha256_file

GT_INT_FIELDS: tuple[str, ...] = (
    "task_main", "task2", "task3", "task4", "total_blocks", "num_hidden_blocks", "num_columns", "num_layers",
    "task5", "task6", "task7", "task8", "task9", "task10", "task11",
)
"""The integer ground-truth fields (``task_main`` .. ``task11``), each a parquet column, in the gt.json order."""
CONSTANT_FIELDS: tuple[str, ...] = ("task2", "task3", "task4", "task9")
"""Fields constant across all leaf views of a structure (benchmark-spec 4.3)."""
SHARDS_DIR = "shards"
MISSING = "missing"
"""What :class:`Mismatch` ``found`` says for a recorded file that is not on disk."""


class DatasetError(UserError, ValueError):
    """A dataset file or row that is not what the schema says; the message names the file/row, key and fix."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """No dataset (or no views of the asked split) where one was expected."""


class GroundTruthError(DatasetError):
    """Ground truth that breaks the schema or an invariant; the message names where and what."""


Relation = tuple[str, tuple[str, ...], Callable[[Mapping[str, Any]], bool]]

RELATIONS: tuple[Relation, ...] = (
    ("task5 + num_hidden_blocks == task_main", ("task5", "num_hidden_blocks", "task_main"),
     lambda g: g["task5"] + g["num_hidden_blocks"] == g["task_main"]),
    ("total_blocks == task_main", ("total_blocks", "task_main"), lambda g: g["total_blocks"] == g["task_main"]),
    ("num_columns == task3", ("num_columns", "task3"), lambda g: g["num_columns"] == g["task3"]),
    ("num_layers == task4", ("num_layers", "task4"), lambda g: g["num_layers"] == g["task4"]),
    ("task5 >= 1", ("task5",), lambda g: g["task5"] >= 1),
    ("task2 >= 1", ("task2",), lambda g: g["task2"] >= 1),
    ("task6 <= task7", ("task6", "task7"), lambda g: g["task6"] <= g["task7"]),
    ("task6 <= task2", ("task6", "task2"), lambda g: g["task6"] <= g["task2"]),
    ("task7 <= task2 * (task4 - 1)", ("task7", "task2", "task4"),
     lambda g: g["task7"] <= g["task2"] * (g["task4"] - 1)),
    ("task2 <= task3", ("task2", "task3"), lambda g: g["task2"] <= g["task3"]),
    ("task2 + task7 <= task5", ("task2", "task7", "task5"), lambda g: g["task2"] + g["task7"] <= g["task5"]),
    ("task10 <= task5", ("task10", "task5"), lambda g: g["task10"] <= g["task5"]),
    ("task11 <= task5", ("task11", "task5"), lambda g: g["task11"] <= g["task5"]),
    ("task8 <= num_hidden_blocks", ("task8", "num_hidden_blocks"), lambda g: g["task8"] <= g["num_hidden_blocks"]),
    ("task8 == 0 iff num_hidden_blocks == 0", ("task8", "num_hidden_blocks"),
     lambda g: (g["task8"] == 0) == (g["num_hidden_blocks"] == 0)),
    ("task8 <= task5", ("task8", "task5"), lambda g: g["task8"] <= g["task5"]),
    ("1 <= task9 <= task3", ("task9", "task3"), lambda g: 1 <= g["task9"] <= g["task3"]),
    ("task_main <= task3 * task4", ("task_main", "task3", "task4"),
     lambda g: g["task_main"] <= g["task3"] * g["task4"]),
)
"""The integer relations of benchmark-spec 4.3 (all 3,000 released views satisfy them), with the fields each reads."""


def count_relations(gt: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(relation, holds) for every relation of :data:`RELATIONS` (``gt`` holds every field; generation's check)."""
    return [(text, rule(gt)) for text, _, rule in RELATIONS]


def broken_relations(gt: Mapping[str, Any]) -> list[str]:
    """The relations of :data:`RELATIONS` whose fields ``gt`` holds as integers and that do not hold (pure)."""
    return [text for text, fields, rule in RELATIONS
            if all(_is_int(gt.get(f)) for f in fields) and not rule(gt)]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_gt(gt: Any, source: str | Path, required: Iterable[str] = ("task_main",), *, row: int | None = None
                ) -> dict[str, Any]:
    """Check (and return) the ground truth of a view read from ``source``: :data:`GT_INT_FIELDS` integer or null,
    ``task1`` a string or null, ``required`` integers, and every relation its fields allow holding; a
    GroundTruthError names source (row), key or relation, and the fix."""
    at = f" (row {row})" if row is not None else ""
    if not isinstance(gt, dict):
        raise GroundTruthError(f"{source}: expected a JSON object of ground-truth fields, got {type(gt).__name__}{at}")
    for key in GT_INT_FIELDS:
        value = gt.get(key)
        if value is not None and not _is_int(value):
            raise GroundTruthError(f"{source}: key {key!r} must be an integer or null, got {value!r}{at}")
    if gt.get("task1") is not None and not isinstance(gt["task1"], str):
        raise GroundTruthError(f"{source}: key 'task1' must be a string or null, got {gt['task1']!r}{at}")
    for key in required:
        if key not in gt:
            raise GroundTruthError(f"{source}: key {key!r} missing; expected an integer (a gt.json written by "
                                   f"spatialiq gen has every field of {', '.join(GT_INT_FIELDS)}){at}")
        if not _is_int(gt[key]):
            raise GroundTruthError(f"{source}: key {key!r} must be an integer, got {gt[key]!r}{at}")
    broken = broken_relations(gt)
    if broken:
        values = ", ".join(f"{k}={gt[k]}" for k in GT_INT_FIELDS if _is_int(gt.get(k)))
        raise GroundTruthError(f"{source}: broken ground-truth relation(s) {'; '.join(broken)} ({values}){at}; "
                               "the truth was edited or damaged: regenerate it (`spatialiq gen` with the same "
                               "arguments repairs a generated dataset)")
    return gt


def check_constant_fields(views: Iterable[tuple[Any, str, Mapping[str, Any]]]) -> None:
    """``(structure key, view, gt)`` triples: :data:`CONSTANT_FIELDS` equal across the views of one structure key,
    else a GroundTruthError naming both views, the field and the values."""
    first: dict[Any, tuple[str, Mapping[str, Any]]] = {}
    for sid, view, gt in views:
        if sid not in first:
            first[sid] = (view, gt)
            continue
        other, seen = first[sid]
        for key in CONSTANT_FIELDS:
            if _is_int(gt.get(key)) and _is_int(seen.get(key)) and gt[key] != seen[key]:
                raise GroundTruthError(
                    f"{view}: {key} = {gt[key]} but {other} of the same structure {_key_text(sid)} has {seen[key]}; "
                    f"{key} is the same in every view of a structure (benchmark-spec 4.3): the truth was edited or "
                    "damaged")


def _key_text(key: Any) -> str:
    """A structure key as the message shows it: ``(split, id)`` -> ``id (split)``."""
    if isinstance(key, tuple) and len(key) == 2:
        return f"{key[1]} ({key[0]})" if key[0] else str(key[1])
    return str(key)


@dataclass(frozen=True)
class Mismatch:
    """A recorded file whose bytes are not the recorded ones."""

    path: str
    """Relative to the dataset root."""
    expected: str
    found: str
    """sha256 of the bytes on disk, or ``missing``."""

    def line(self) -> str:
        return f"{self.path}: expected sha256 {self.expected}, found {self.found}"


def found_sha256(path: Path) -> str:
    """sha256 of a file's bytes, or ``missing``."""
    return sha256_file(path) if path.is_file() else MISSING


def file_mismatches(root: Path, files: Mapping[str, str]) -> list[Mismatch]:
    """The recorded files whose bytes differ from their recorded sha256."""
    found = ((rel, expected, found_sha256(root / rel)) for rel, expected in files.items())
    return [Mismatch(rel, expected, digest) for rel, expected, digest in found if digest != expected]


def recorded_sha256(root: str | Path) -> dict[str, str]:
    """``{path relative to root: sha256}`` from every shard completion record under ``root/shards``: each shard's
    parquet and each per-view file; {} for a dataset without records (the released benchmark)."""
    root = Path(root)
    out: dict[str, str] = {}
    for done in sorted((root / SHARDS_DIR).glob("*.done.json")):
        record = read_json(done)
        if not isinstance(record, dict):
            raise DatasetError(f"{done}: a completion record must be a JSON object; the file is not one written by "
                               "spatialiq gen (delete it and rerun gen for its shard)")
        if isinstance(record.get("parquet"), str) and isinstance(record.get("sha256"), str):
            out[record["parquet"]] = record["sha256"]
        files = record.get("files")
        if isinstance(files, dict):
            out.update({str(rel): str(h) for rel, h in files.items()})
    return out


def recorded_mismatches(root: str | Path, read: Iterable[str], recorded: Mapping[str, str] | None = None,
                        under: str | None = None) -> list[Mismatch]:
    """The files a reader takes its truth from (``read``: paths relative to ``root``) that differ from their record,
    plus, when ``under`` is given, every recorded ``gt.json`` below that folder that is gone."""
    root = Path(root)
    recorded = recorded_sha256(root) if recorded is None else recorded
    wanted = {rel: recorded[rel] for rel in read if rel in recorded}
    if under is not None:
        prefix = "" if under in ("", ".") else under.rstrip("/") + "/"
        wanted.update({rel: h for rel, h in recorded.items() if rel.startswith(prefix) and rel.endswith("/gt.json")})
    return file_mismatches(root, dict(sorted(wanted.items())))


def refuse_mismatches(root: Path, bad: list[Mismatch]) -> None:
    """A GroundTruthError naming the first mismatch, how many more there are, and the repair."""
    if not bad:
        return
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    image = bad[0].path.endswith(".png")
    harm = ("the model would be shown a damaged or different picture (a truncated or replaced file)" if image
            else "its ground truth would be wrong")
    raise GroundTruthError(f"{root}: {bad[0].path} does not match the sha256 recorded when it was generated "
                           f"(expected {bad[0].expected}, found {bad[0].found}){more}; {harm}: `spatialiq gen "
                           f"--verify --out {root}` lists them, a `spatialiq gen` rerun with the same arguments "
                           "repairs them")


def refuse_damaged_files(root: str | Path, paths: Iterable[str | Path]) -> int:
    """Refuse (GroundTruthError naming the first) any of ``paths`` (absolute, or relative to ``root``) whose bytes
    differ from the sha256 ``spatialiq gen`` recorded for it under ``root``; files without a record pass. Returns
    how many were checked. Readers call it before their work (docs/trust.md, "checked on read")."""
    root = Path(root)
    recorded = recorded_sha256(root)
    if not recorded:
        return 0
    resolved = root.resolve()
    rels = []
    for path in paths:
        p = Path(path)
        try:
            rels.append((p.resolve() if p.is_absolute() else (root / p).resolve()).relative_to(resolved).as_posix())
        except ValueError:
            continue
    wanted = {rel: recorded[rel] for rel in rels if rel in recorded}
    refuse_mismatches(root, file_mismatches(root, dict(sorted(wanted.items()))))
    return len(wanted)


def truth_digest(views: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """sha256 over ``(view, integer truth and task1)`` of each view, in the given order: the identity of the truth
    a list of views carries (equal for the folder and the parquet form of the same dataset)."""
    digest = hashlib.sha256()
    for view, gt in views:
        fields = {k: gt.get(k) for k in (*GT_INT_FIELDS, "task1") if gt.get(k) is not None}
        digest.update(f"{view}\t{json.dumps(fields, sort_keys=True)}\n".encode())
    return digest.hexdigest()
