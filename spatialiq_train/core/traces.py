"""Trace files (``<traces_dir>/<split>.jsonl`` from ``spatialiq traces``): the row schema and the reader.

A trace row holds chat `messages` (optional system, user with an image path relative to the data root and the
prompt text, assistant target), plus `answer`, `structure_id`, `task_id` and ground-truth fields. The reader turns
each row into a conversational example, checked row by row: the messages keep their typed content parts in the
trace's order, each image part a placeholder ``{"type": "image"}``, and an `images` list holds the absolute paths
in placeholder order. Both training backends read traces through it: TRL (``train.data.load_split``) and NeMo-RL
(``nemo.data.load_rows``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from spatialiq_train.core.dataset import REWARD_FIELDS
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.families import family_of
from spatialiq_train.core.io import loads_json, resolve_inside
from spatialiq_train.core.truth import refuse_damaged_files

log = logging.getLogger(__name__)

Mode = Literal["sft", "rl"]
GT_COLUMNS: tuple[str, ...] = REWARD_FIELDS
"""Ground-truth fields carried into the RL dataset, beside `answer`, `task_id` and `structure_id`, when the trace
has them (the fields the trace writer copies onto every record); reward functions receive every column as a
keyword argument (e.g. the stepwise reward)."""


class TraceError(InputError):
    """A trace file or row is malformed; the message names file and line."""


def read_traces(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Read a trace JSONL file; blank lines are skipped, bad lines raise naming file and line."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"trace file {p} does not exist (write it with `spatialiq traces --out {p.parent}`)")
    rows: list[dict[str, Any]] = []
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = loads_json(line, f"{p}:{lineno}", one_line=True)
            except InputError as exc:
                raise TraceError(exc.message) from None
            if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
                raise TraceError(f"{p}:{lineno}: expected an object with a 'messages' list")
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    return rows


def _parts_of(content: Any, root: str | Path, where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A message's content as typed parts, in the trace's order, and the absolute paths of its images.

    A text part stays ``{"type": "text", "text": ...}`` (a string content is one text part); an image part becomes
    the placeholder ``{"type": "image"}`` and its path, resolved inside ``root``, goes to the returned list. This is
    the form TRL fills from the ``images`` column, and the one ``nemo.data.chat_messages`` fills with opened images.
    """
    if isinstance(content, str):
        return [{"type": "text", "text": content}], []
    if not isinstance(content, list):
        raise TraceError(f"{where}: content must be a string or a list of parts, got {type(content).__name__}")
    parts: list[dict[str, Any]] = []
    images: list[str] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image" and part.get("image"):
            images.append(str(resolve_inside(root, str(part["image"]))))
            parts.append({"type": "image"})
        else:
            raise TraceError(f"{where}: content[{j}] must be a text part or an image part with a path, got {part!r}")
    return parts, images


def trace_to_example(row: dict[str, Any], data_root: str | Path, mode: Mode, where: str = "trace") -> dict[str, Any]:
    """One trace row -> one conversational example: `prompt` (+ `completion` for SFT), `images`, RL columns.

    Message contents keep the trace's typed parts; each image part is a placeholder whose path (absolute, inside
    ``data_root``) is the matching entry of `images`. Images belong to user messages.
    """
    prompt: list[dict[str, Any]] = []
    completion: list[dict[str, Any]] = []
    images: list[str] = []
    for i, msg in enumerate(row["messages"]):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in ("system", "user", "assistant"):
            raise TraceError(f"{where}: messages[{i}] has role {role!r}; expected system, user or assistant")
        parts, paths = _parts_of(msg.get("content"), data_root, f"{where}: messages[{i}]")
        if paths and role != "user":
            raise TraceError(f"{where}: messages[{i}] ({role}) holds an image; images belong to a user message")
        images += paths
        (completion if role == "assistant" else prompt).append({"role": role, "content": parts})
    if not any(m["role"] == "user" for m in prompt):
        raise TraceError(f"{where}: no user message")
    example: dict[str, Any] = {"prompt": prompt, "images": images}
    if mode == "sft":
        if not completion:
            raise TraceError(f"{where}: SFT needs an assistant message with the target")
        example["completion"] = completion
        return example
    if "answer" not in row:
        raise TraceError(f"{where}: RL needs the integer 'answer' field")
    try:
        example["answer"] = int(row["answer"])
    except (TypeError, ValueError):
        raise TraceError(f"{where}: 'answer' must be an integer, got {row['answer']!r}") from None
    example["task_id"] = str(row.get("task_id", "task_main"))
    example["structure_id"] = str(row.get("structure_id", ""))
    for key in family_of(row, where).reward_columns:  # the task family's ground truth (core/families.py)
        if key in row:
            example[key] = row[key]
    return example


def split_file(traces_dir: str | Path, split: str) -> Path:
    return Path(traces_dir) / f"{split}.jsonl"


def load_examples(
    traces_dir: str | Path, split: str, data_root: str | Path, mode: Mode, limit: int | None = None
) -> list[dict[str, Any]]:
    """`<traces_dir>/<split>.jsonl` as trainer examples (absolute image paths), checked row by row.

    RL skips rows without an integer ``answer`` (e.g. task1 rows of a plain trace file: no verifiable answer).
    A bad row, or an image path escaping ``data_root``, is a TraceError naming the file and its row (line).
    Both engines read traces through this: TRL via ``train.data.load_split``, NeMo-RL via ``nemo.data.load_rows``.
    """
    path = split_file(traces_dir, split)
    rows = read_traces(path, limit=limit)
    if not rows:
        raise TraceError(f"{path}: no rows")
    examples: list[dict[str, Any]] = []
    for lineno, row in enumerate(rows, start=1):
        if mode == "rl" and row.get("answer") is None:
            continue
        try:
            examples.append(trace_to_example(row, data_root, mode, where=f"{path}:row {lineno}"))
        except TraceError:
            raise
        except ValueError as exc:  # an image path escaping the root (spatialiq_train.core.io.resolve_inside)
            raise TraceError(f"{path}:row {lineno}: {exc}") from None
    if len(examples) < len(rows):
        log.info("%s: %d rows without an integer answer are not RL prompts; skipped", path, len(rows) - len(examples))
    if not examples:
        raise TraceError(f"{path}: no rows usable for {mode} (RL needs rows with an integer 'answer')")
    # checked on read: every image against the sha256 `spatialiq gen` recorded under data_root, before training
    refuse_damaged_files(data_root, {str(im) for ex in examples for im in ex.get("images") or ()})
    return examples
