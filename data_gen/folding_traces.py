"""Trace files for the paper-folding task family (``spatialiq fold traces``), in the trace schema every engine reads
(docs/traces.md): the user turn holds the sheet image and the task's text, the assistant turn the target.

* ``plain``: :func:`spatialiq_train.core.folding_answers.answer_text`: the unfolding codes, the holes, the count;
* ``cot``: :func:`spatialiq_train.core.folding_answers.cot_text`: each unfolding step in order with the holes
  seen after it, then the same answer.

Both are derived from the simulator, never from the record's stated result (the record is checked against the
simulator first, and a record that disagrees is an error naming it). Each row carries ``family`` (``folding``),
``answer`` (the number of holes, for the integer rewards), ``holes`` (the result's hole records as JSON text, for
``hole_partial`` and ``hole_exact``), ``unfolding``, ``structure_id`` and ``task_id``; rows go to ``val``,
``warmup``, ``rl`` and ``train`` (``warmup`` + ``rl``) by the task's recorded part, and to ``benchmark``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data_gen.folding_gen import iter_tasks
from data_gen.traces import build_messages, write_traces
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.folding_answers import answer_text, cot_text
from spatialiq_train.core.folding_records import check_record

FAMILY = "folding"
KINDS = ("plain", "cot")


def task_row(folder: Path, root: Path, record: dict[str, Any], kind: str) -> dict[str, Any]:
    """The trace row of one generated task."""
    check = check_record(record, 1)
    where = folder / "record.json"
    if check.simulated is None or not check.agrees:
        raise InputError(
            f"{where}: the record disagrees with the simulator ({check.error or check.as_line()['agree']})"
            "; regenerate it with `spatialiq fold gen`"
        )
    sim = check.simulated
    target = answer_text(sim.holes, sim.unfolding) if kind == "plain" else cot_text(sim.stages, sim.unfolding)
    image = (folder / str(record.get("image", "sheet.png"))).relative_to(root).as_posix()
    prompt = record.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise InputError(f"{where}: no 'prompt' text (write the task with `spatialiq fold gen`)")
    return {
        "messages": build_messages(prompt, image, target),
        "view": folder.relative_to(root).as_posix(),
        "structure_id": str(record.get("structure_id", "")),
        "answer": len(sim.holes),
        "task_id": FAMILY,
        "family": FAMILY,
        "holes": json.dumps([h.as_record() for h in sim.holes]),
        "unfolding": list(sim.unfolding),
    }


def build_fold_traces(root: Path, kind: str) -> dict[str, list[dict[str, Any]]]:
    """Trace rows per file name (``val``, ``warmup``, ``rl``, ``train``, ``benchmark``) of every task under root."""
    if kind not in KINDS:
        raise InputError(f"--kind {kind!r}; valid: {', '.join(KINDS)}")
    files: dict[str, list[dict[str, Any]]] = {}
    for folder, record in iter_tasks(root):
        row = task_row(folder, root, record, kind)
        split, part = record.get("split"), record.get("part")
        names = ["benchmark"] if split == "benchmark" else ["val"] if part == "val" else ["train", str(part)]
        for name in names:
            files.setdefault(name, []).append(row)
    if not files:
        raise InputError(f"--data {root}: no tasks (OUT/<split>/<id>/record.json, written by `spatialiq fold gen`)")
    return files


def write_fold_traces(root: Path, out: Path, kind: str) -> dict[str, int]:
    """Write the trace files; returns the row count per file."""
    return write_traces(out, build_fold_traces(root, kind))
