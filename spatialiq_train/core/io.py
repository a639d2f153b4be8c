"""Small file helpers used everywhere: atomic writes, file digests and dataset-root path checks."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from csv import writer as csv_writer
from io import StringIO
from pathlib import Path
from typing import Any

from spatialiq_train.core.errors import InputError

_NUMBER_RUN = re.compile(r"(\d+)", re.ASCII)


def natural_key(relpath: str) -> tuple[tuple[int, str | int], ...]:
    """Sort key for paths with numbers compared as numbers (``sample_99`` before ``sample_100``)."""
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in _NUMBER_RUN.split(relpath) if p)


def hash_file(h: Any, path: str | Path, chunk: int = 1 << 20) -> Any:
    """Feed a file's bytes, ``chunk`` bytes at a time, into the hashlib object ``h``; returns ``h``."""
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h


def sha256_file(path: str | Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    return hash_file(hashlib.sha256(), path).hexdigest()


def _file_mode() -> int:
    """0o666 less the process umask: the mode ``open(path, "w")`` would have given."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename.

    A reader never sees a half-written file, and an interrupted write leaves no file at ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, _file_mode())  # mkstemp creates 0600; outputs get the usual umask-based mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def dumps_json(obj: Any) -> str:
    """The project's canonical JSON text: indent 2, UTF-8, trailing newline."""
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, dumps_json(obj))


_SNIPPET_SIDE = 30
"""Characters of the offending line shown on each side of a JSON error."""


def json_error_text(exc: json.JSONDecodeError, where: str, *, one_line: bool = False) -> str:
    """One line for a JSON parse error: ``where``, line, column, the reason and the text around the error.

    The snippet is the offending line cut to a window around the column with ``<<here>>`` at the error,
    so a mistake in the middle of a long or minified file is shown where it is, not cut off; an error at the
    very end says the text stops early (a file cut short by an interrupted write). ``one_line`` text (a JSONL
    row, whose ``where`` already names the file line, or an option value) is located by column only; a file by
    line and column.
    """
    doc, pos = exc.doc, exc.pos
    spot = f"column {exc.colno}" if one_line else f"line {exc.lineno}, column {exc.colno}"
    if not doc[pos:].strip():
        last_line = doc.rstrip().rsplit("\n", 1)[-1]
        return (f"{where}: invalid JSON at {spot}: {exc.msg}; the text ends before the JSON value does "
                f"(a file cut short?), it stops at {last_line[-_SNIPPET_SIDE:]!r}")
    start = doc.rfind("\n", 0, pos) + 1
    end = doc.find("\n", pos)
    end = len(doc) if end < 0 else end
    left = doc[max(start, pos - _SNIPPET_SIDE):pos]
    right = doc[pos:min(end, pos + _SNIPPET_SIDE)]
    left = ("..." if pos - _SNIPPET_SIDE > start else "") + left
    right = right + ("..." if pos + _SNIPPET_SIDE < end else "")
    return f"{where}: invalid JSON at {spot}: {exc.msg}, at {left}<<here>>{right}"


def loads_json(text: str, where: str, *, one_line: bool = False) -> Any:
    """``json.loads`` whose error is an InputError naming ``where`` (a file, a file and line, or an option) and the
    spot (``one_line``: a JSONL row or an option value, located by column)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(json_error_text(exc, where, one_line=one_line)) from None


def read_text(path: str | Path, what: str = "") -> str:
    """A UTF-8 text file; invalid UTF-8 is an InputError naming the file and the byte offset.

    ``what`` (e.g. ``"recipe"``) prefixes the path in the message.
    """
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        label = f"{what} {path}" if what else str(path)
        raise InputError(f"{label}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start} is "
                         f"invalid: {exc.reason}); save the file as UTF-8") from None


def read_json(path: str | Path) -> Any:
    """Read a JSON file; a parse error names the file, line, column and shows the text around the error."""
    return loads_json(read_text(path), str(path))


def resolve_inside(root: str | Path, relpath: str | Path) -> Path:
    """``root / relpath``, refusing absolute paths and paths that escape ``root`` (``..``, symlinks)."""
    root_p = Path(root).resolve()
    rel = Path(relpath)
    if rel.is_absolute():
        raise InputError(f"path {str(relpath)!r} must be relative to the dataset root {root}")
    full = (root_p / rel).resolve()
    if full != root_p and root_p not in full.parents:
        raise InputError(f"path {str(relpath)!r} escapes the dataset root {root}")
    return full


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def check_model_source(value: str | Path, what: str) -> str:
    """A checkpoint folder that exists, or something shaped like a hub id (``org/name``); else a clear error.

    Without this, a mistyped local path reaches transformers and comes back as a misleading hub error.
    """
    text = str(value)
    if Path(text).exists() or (not text.startswith((".", "/", "~")) and _HUB_ID.fullmatch(text)):
        return text
    raise FileNotFoundError(f"{what} {text}: no such checkpoint folder (and not a hub id of the form org/name)")


# ---------------------------------------------------------------------------------------------- tables
# The project's one CSV writer and one markdown-table helper.


def csv_text(columns: Sequence[str], rows: Iterable[Sequence[object] | Mapping[str, object]],
             cell: Callable[[object], str] = str) -> str:
    """The project's one CSV writer: a header row, then each row's values through ``cell``; ``\n`` line ends.

    A row is a sequence in column order, or a mapping read by column name (a missing key is ``None``).
    """
    out = StringIO()
    writer = csv_writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        values = [row.get(c) for c in columns] if isinstance(row, Mapping) else row
        writer.writerow([cell(v) for v in values])
    return out.getvalue()


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], cell: Callable[[object], str] = str) -> str:
    """The project's one markdown-table helper: a GitHub table of ``rows``, each value through ``cell``."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
