"""The kind of a trace record or folder (``cot`` or ``plain``), read from the records themselves.

A CoT record (``data_gen.traces.view_records``) opens with the CoT system turn; a plain record has no system turn.
Used to refuse writing one kind of traces over a folder of the other, and by the model card of a release.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRACE_NAMES: tuple[str, ...] = ("train", "val", "warmup", "rl", "benchmark")
"""The trace files ``spatialiq traces`` writes (``<name>.jsonl``)."""


def record_kind(record: dict[str, Any]) -> str:
    """``cot`` when the record's messages hold a system turn, else ``plain``."""
    messages = record.get("messages") or []
    return "cot" if any(isinstance(m, dict) and m.get("role") == "system" for m in messages) else "plain"


def file_kind(path: Path) -> str | None:
    """The kind of the first readable record of a JSONL trace file; None when the file holds none."""
    with Path(path).open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "messages" in record:
                return record_kind(record)
    return None


def folder_kind(folder: Path) -> tuple[str, Path] | None:
    """(kind, file) of the first trace file in ``folder`` that holds a record; None when there is none."""
    for name in TRACE_NAMES:
        path = Path(folder) / f"{name}.jsonl"
        if path.is_file():
            kind = file_kind(path)
            if kind is not None:
                return kind, path
    return None
