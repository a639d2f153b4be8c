"""The adapter interface between an external benchmark and `spatialiq eval external` (docs/transfer.md).

An adapter reads the user's local copy of a benchmark (:meth:`Adapter.load`: no download), turns each item into one
request (images + prompt + the benchmark's own system prompt), and scores the completions with the benchmark's own
answer format and metrics (:meth:`Adapter.score`). Sampling, provenance, resume and locking are the project's
(`eval.sample`, `eval.provenance`, `spatialiq_train.core.lock`): an adapter only knows its benchmark.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spatialiq_train.core.errors import InputError


class BenchmarkLayoutError(InputError):
    """A benchmark copy in the wrong layout: the message names the file, row and missing field or file."""


@dataclass(frozen=True)
class Item:
    """One question of an external benchmark, as the model will be asked it."""

    id: str
    """Stable within one data file (the same for every model scored on it): per-item files pair on it."""
    prompt: str
    system: str | None
    images: tuple[Path | bytes, ...]
    truth: dict[str, Any] = field(default_factory=dict)
    """What scoring needs (answers, reference chain, scene graph, holes, ...): JSON values only."""


@dataclass(frozen=True)
class Scored:
    """An adapter's scores: benchmark-wide metrics, the specialisation signals and one row per item."""

    primary: str
    metrics: dict[str, float | int | None]
    signals: dict[str, float | str | None]
    rows: list[dict[str, Any]]
    """``{"id", "correct": 1 | 0 | None, "scores": {...}}`` plus any fields the adapter keeps (parsed answer, ...)."""
    notes: dict[str, str] = field(default_factory=dict)
    """Metric name -> what it means, for the report."""
    breakdowns: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Accuracy by group: breakdown name -> group label -> ``{"n", "correct", "accuracy", ...}`` (metrics.json's
    ``breakdowns``, one report table each); empty for a benchmark without one."""


class Adapter(Protocol):
    """One external benchmark."""

    name: str
    max_images: int

    def load(self, data: Path, images: Path | None) -> list[Item]:
        """Every item of the user's copy, checked (layout, fields, images) before any model loads."""
        ...

    def score(self, items: list[Item], texts: dict[str, str]) -> Scored:
        """Score the first completion of each item (``texts`` by item id; a missing id is an unanswered item)."""
        ...


def items_digest(items: list[Item]) -> str:
    """One sha256 over every item's id, prompt, system prompt and truth: what a completions file was sampled on."""
    h = hashlib.sha256()
    for item in items:
        h.update(json.dumps([item.id, item.prompt, item.system, item.truth], sort_keys=True,
                            ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def data_record(name: str, data: Path, items: list[Item]) -> dict[str, Any]:
    """The dataset part of a provenance record (``truth_digest`` is what a resume compares)."""
    return {"path": str(Path(data).resolve()), "benchmark": name, "split": name, "items": len(items),
            "truth_digest": items_digest(items)}


def plain_name(name: str, where: str) -> str:
    """``name`` when it is one path component (no separator, not ``.`` or ``..``): a data file's ids name files
    under the user's folder and must not reach outside it."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise BenchmarkLayoutError(f"{where}: {name!r} is not a plain file name (an id names a file inside --images)")
    return name


def image_file(folder: Path, stem: str, where: str) -> Path:
    """``folder/stem`` with the first extension that exists (.jpg, .jpeg, .png); a BenchmarkLayoutError names
    ``where``, the file and the folder otherwise."""
    plain_name(stem, where)
    for ext in (".jpg", ".jpeg", ".png"):
        path = folder / f"{stem}{ext}"
        if path.is_file():
            return path
    raise BenchmarkLayoutError(f"{where}: image {stem}.jpg (or .jpeg, .png) is not in --images {folder}; pass the "
                               "folder that holds the benchmark's images")
