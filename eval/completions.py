"""The completions file: one JSON object per line, keyed by (view, task, sample index), append-only.

Record: ``{"view": str, "task": str, "sample": int, "text": str}`` (plus optional ``finish_reason``).
:func:`eval.sample.run_sampling` appends the completions of each finished engine batch (``batch_size``
requests: 256 by default with vLLM, 4 with transformers) and fsyncs them, so an interrupted run loses
at most the batch in flight, up to ``batch_size`` requests of k completions each (a smaller
``--batch-size`` loses less and batches less); :func:`load_completions` drops a half-written last line (and
:func:`repair_tail` cuts it off before appending) so a resumed run never repeats a finished completion. A last line
that lacks only its newline but parses as a JSON object is whole and is read like any other.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from spatialiq_train.core.errors import InputError, UserError
from spatialiq_train.core.io import loads_json

log = logging.getLogger(__name__)

Key = tuple[str, str, int]


@dataclass(frozen=True)
class Completion:
    view: str
    task: str
    sample: int
    text: str
    finish_reason: str | None = None
    line: int = field(default=0, compare=False)
    """Line number in the file it was read from (0 when not read from a file); error messages name it."""

    @property
    def key(self) -> Key:
        return (self.view, self.task, self.sample)

    def to_json(self) -> str:
        obj: dict[str, object] = {"view": self.view, "task": self.task, "sample": self.sample, "text": self.text}
        if self.finish_reason is not None:
            obj["finish_reason"] = self.finish_reason
        return json.dumps(obj, ensure_ascii=False)


def _parse(line: str, path: Path, lineno: int) -> Completion:
    obj = loads_json(line, f"{path}: line {lineno}", one_line=True)
    if not isinstance(obj, dict):
        raise InputError(f"{path}: line {lineno}: expected an object with view, task, sample, text")
    view, task, sample, text = obj.get("view"), obj.get("task"), obj.get("sample"), obj.get("text")
    if not isinstance(view, str) or not isinstance(task, str):
        raise InputError(f"{path}: line {lineno}: 'view' and 'task' must be strings")
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise InputError(f"{path}: line {lineno}: 'sample' must be a non-negative integer, got {sample!r}")
    if text is not None and not isinstance(text, str):
        raise InputError(f"{path}: line {lineno}: 'text' must be a string or null")
    reason = obj.get("finish_reason")
    return Completion(view, task, sample, text if text is not None else "", reason if isinstance(reason, str) else None,
                      lineno)


def load_completions(path: str | Path) -> dict[Key, Completion]:
    """Every completion in ``path`` by key (first occurrence wins); a truncated last line is ignored."""
    path = Path(path)
    if not path.exists():
        return {}
    raw = path.read_bytes()
    # the half-written last line is set aside as bytes, before decoding: an interrupted append can stop inside a
    # multi-byte character, which is no reason to refuse the complete lines before it
    cut = raw.rfind(b"\n") + 1
    body, tail = raw[:cut], raw[cut:]
    if complete_tail(tail):  # a whole last line that only lacks its newline (written by hand or another tool)
        body, tail = raw + b"\n", b""
    if tail.strip():
        log.warning("%s: ignoring a half-written last line (interrupted run)", path)
    try:
        data = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = body[:exc.start].count(b"\n") + 1
        raise InputError(f"{path}: line {lineno}: not valid UTF-8 (byte {body[exc.start]:#04x} at offset {exc.start}); "
                         "a completions file is UTF-8 JSON lines: remove or re-encode that line") from None
    complete = data.split("\n")[:-1]
    out: dict[Key, Completion] = {}
    repeats: list[tuple[int, Key]] = []
    for lineno, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        rec = _parse(line, path, lineno)
        if rec.key in out:
            repeats.append((lineno, rec.key))
            continue
        out[rec.key] = rec
    if repeats:
        log.warning("%s", repeats_summary(path, repeats))
    return out


def repeats_summary(path: Path, repeats: list[tuple[int, Key]]) -> str:
    """One warning line for every repeated (view, task, sample) key of a file, however many there are."""
    lineno, key = repeats[0]
    more = f" and {len(repeats) - 1} more line(s)" if len(repeats) > 1 else ""
    return (f"{path}: {len(repeats)} line(s) repeat an earlier (view, task, sample) key (first: line {lineno}, "
            f"{key}{more}); keeping the first completion of each key")


def load_for_scoring(path: str | Path, option: str = "--completions") -> dict[Key, Completion]:
    """:func:`load_completions` for scoring: a missing file, or one with no complete completion, is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{option} {path}: no such file (`spatialiq eval sample` writes it)")
    records = load_completions(path)
    if not records:
        what = "is empty" if path.stat().st_size == 0 else "holds no complete completion line"
        raise UserError(f"{option} {path}: the file {what}; there is nothing to score (sample into it with "
                        f"`spatialiq eval sample --out` first, or point {option} at the file it wrote)")
    return records


def complete_tail(tail: bytes) -> bool:
    """Whether a last line without its newline is nevertheless whole: it parses as a JSON object. A line cut by an
    interrupted append never does (an object's text is valid only up to its closing brace)."""
    if not tail.strip():
        return False
    try:
        return isinstance(json.loads(tail.decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        return False


def repair_tail(path: str | Path) -> None:
    """Make ``path`` end on a fresh line before an append: a half-written last line is cut off, a whole one that
    lacks only its newline gets it (:func:`load_completions` counts it as done)."""
    path = Path(path)
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with path.open("r+b") as fh:
            if complete_tail(data[cut:]):
                fh.seek(0, os.SEEK_END)
                fh.write(b"\n")
            else:
                fh.truncate(cut)


def append_completions(path: str | Path, records: Iterable[Completion]) -> int:
    """Append records as JSON lines and fsync; returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(r.to_json() + "\n" for r in records)
    if not text:
        return 0
    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:  # a full disk: name the file (a cut last line is set aside by the resume)
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    return text.count("\n")
