"""Plain CSV files located and parsed with numpy: ASCII, no quote characters, one record per line.

``csv.reader`` makes a Python string of every cell (two million for the 17 published raw files, about 0.4 s of
CPU). A plain file's cells are instead found from the positions of its commas and line ends, and its integer
cells are parsed digit by digit in numpy; only the text columns asked for become strings. A file outside the
plain form gives None, so callers fall back to the ``csv`` module, which stays the reference for what a file
says (and for the wording of every error).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

COMMA, NEWLINE, MINUS, ZERO = 44, 10, 45, 48
MAX_DIGITS = 15
"""Longer integer cells are left to the ``csv`` path (every integer up to 15 digits is exact in float64)."""


@dataclass(frozen=True)
class PlainCsv:
    """Header and cell bounds of a plain CSV file: data cell (row, column) is ``text[start:end]``."""

    header: list[str]
    text: str
    data: np.ndarray
    """The file's bytes (line ends as ``\\n``), uint8."""
    start: np.ndarray
    """(N, C) offset of each data cell."""
    end: np.ndarray
    """(N, C) offset one past each data cell."""

    @property
    def n_rows(self) -> int:
        return int(self.start.shape[0])

    def strings(self, column: int) -> list[str]:
        """The cells of ``column`` as text, as ``csv.reader`` gives them."""
        text = self.text
        return [text[s:e] for s, e in zip(self.start[:, column].tolist(), self.end[:, column].tolist(), strict=True)]

    def integers(self, columns: list[int]) -> np.ndarray | None:
        """(len(columns), N) float64 values of ``columns`` when every cell is empty (NaN) or an optional ``-`` and
        1 to 15 ASCII digits (the values ``float(cell)`` gives, ``-0`` included); None when any cell is not."""
        start, end = self.start.T[columns], self.end.T[columns]
        if start.size == 0:
            return np.zeros((len(columns), 0))
        negative = (end > start) & (self.data[np.minimum(start, self.data.size - 1)] == MINUS)
        start = start + negative
        length = end - start
        if length.max() > MAX_DIGITS or bool((negative & (length == 0)).any()):
            return None
        number = np.zeros(start.shape, dtype=np.int64)
        last = self.data.size - 1
        for place in range(int(length.max())):  # digit by digit, left to right
            inside = place < length
            digit = self.data[np.minimum(start + place, last)] - np.uint8(ZERO)  # uint8: below '0' wraps above 9
            if bool((inside & (digit > 9)).any()):
                return None
            number = np.where(inside, number * 10 + digit, number)
        values = number.astype(np.float64)
        values[negative] *= -1.0
        values[length == 0] = np.nan
        return values


def read_plain(path: Path) -> PlainCsv | None:
    """The file as :class:`PlainCsv`, or None unless it is ASCII without quotes or NUL bytes, has a header and at
    least one data row, no blank line, line ends ``\\n`` or ``\\r\\n`` (no lone ``\\r``), and the header's number
    of fields on every row."""
    raw = path.read_bytes()
    if not raw.isascii() or b'"' in raw or b"\0" in raw:
        return None
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n")
        if b"\r" in raw:  # a lone carriage return ends a line for the csv module
            return None
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if not raw or raw.startswith(b"\n") or b"\n\n" in raw or b"\n" not in raw:
        return None
    text = raw.decode("ascii")
    header = text[:text.index("\n")].split(",")
    data = np.frombuffer(raw, dtype=np.uint8)
    body = len(header[0]) + sum(len(h) + 1 for h in header[1:]) + 1
    seps = np.flatnonzero((data[body:] == COMMA) | (data[body:] == NEWLINE)) + body
    seps = np.append(seps, data.size)  # the last row's end
    n_cols = len(header)
    if seps.size % n_cols:
        return None
    end = seps.reshape(-1, n_cols)
    if bool((data[end[:, :-1]] != COMMA).any()) or bool((data[end[:-1, -1]] != NEWLINE).any()):
        return None
    start = np.empty_like(end)
    start[:, 1:] = end[:, :-1] + 1
    start[0, 0] = body
    start[1:, 0] = end[:-1, -1] + 1
    return PlainCsv(header, text, data, start, end)
