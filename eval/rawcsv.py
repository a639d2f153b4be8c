"""The released per-view results layout, ``eval_raw_<model>_text.csv``: reading, validating, writing.

One row per benchmark view. Columns: ``view``, ``object_type``, the structure/view ground truth
(``total_blocks``, ``num_hidden_blocks``, ``num_columns``, ``num_layers``), then per task column
prefix ``X`` (``task2`` .. ``task11``, ``main`` for Object Counting) the triple ``X`` (1 correct,
0 wrong, empty = no parseable answer), ``X_pred`` and ``X_gt``. Extra columns (the human file's
``X_pred_raw`` and ``X_manual``) are ignored. A missing value is held as NaN.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eval.plaincsv import PlainCsv, read_plain
from spatialiq_train.core.errors import InputError, UserError
from spatialiq_train.core.io import atomic_write_text, csv_text
from spatialiq_train.core.tasks import TASKS

META_COLUMNS: tuple[str, ...] = ("total_blocks", "num_hidden_blocks", "num_columns", "num_layers")
"""Ground-truth columns between ``object_type`` and the first task column."""
TASK_ORDER: tuple[str, ...] = (
    *sorted((t.csv_column for t in TASKS.values() if t.csv_column != "main"), key=lambda c: int(c[len("task"):])),
    "main",
)
"""Task column prefixes in the released column order (task1..task11 by number, then main), from ``TASKS``."""
RAW_PATTERN = re.compile(r"^eval_raw_(?P<model>.+)_text\.csv$")
MODEL_COLUMN = "model"
"""An optional column naming the responder of each row (a predictions file holding several responders)."""
HUMAN_FILE = "eval_raw_human_frq.csv"
"""The released human free-response file; read as model ``human`` (its ``X_pred`` is the adjudicated answer)."""


@dataclass
class ResponderTable:
    """One responder's per-view results (acc@1 sample for sampled responders)."""

    name: str
    views: list[str]
    object_type: list[str]
    meta: dict[str, np.ndarray] = field(default_factory=dict)
    """``total_blocks`` etc., float arrays (NaN = missing)."""
    correct: dict[str, np.ndarray] = field(default_factory=dict)
    """Task prefix -> 1.0 / 0.0 / NaN."""
    pred: dict[str, np.ndarray] = field(default_factory=dict)
    gt: dict[str, np.ndarray] = field(default_factory=dict)
    source: str = ""
    group: str | None = None
    """Responder group (``eval.groups``): text, trained_text or both; None when not recorded or given."""

    @property
    def tasks(self) -> list[str]:
        """Task prefixes present, in the released order (task1, which is never scored in text, excluded)."""
        return [t for t in TASK_ORDER if t in self.correct and t != "task1"]

    def __len__(self) -> int:
        return len(self.views)


def model_name_from_file(path: str | Path) -> str | None:
    """``eval_raw_<model>_text.csv`` -> ``<model>``; the human file -> ``human``; anything else -> None."""
    name = Path(path).name
    if name == HUMAN_FILE:
        return "human"
    m = RAW_PATTERN.match(name)
    return m.group("model") if m else None


class RawCsvError(InputError):
    """A raw results file that cannot be read as released: the message names the file, line and column."""


class RawDirError(UserError, FileNotFoundError):
    """A raw results folder that is missing or holds no ``eval_raw_*`` file."""


PANDAS_NA_STRINGS: frozenset[str] = frozenset({
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA",
    "NULL", "NaN", "None", "n/a", "nan", "null"})
"""Cells that the official analysis (pandas ``read_csv``) reads as missing; an ``object_type`` among them has no
object type (it drops out of the per-object tables)."""


def _bad_cell(values: tuple[str, ...], lines: list[int], path: Path, column: str, binary: bool) -> RawCsvError:
    """The error for the first cell of ``values`` that is not an integer (0/1 for correctness) or empty."""
    for value, line in zip(values, lines, strict=True):
        text = value.strip()
        if text == "":
            continue
        try:
            number = float(text)
        except ValueError:
            return RawCsvError(f"{path}: line {line}, column {column!r}: {value!r} is not a number (or empty)")
        if not math.isfinite(number) or number != int(number):
            return RawCsvError(f"{path}: line {line}, column {column!r}: {value!r} is not an integer")
        if binary and number not in (0.0, 1.0):
            return RawCsvError(
                f"{path}: line {line}, column {column!r}: correctness must be 0, 1 or empty, got {value!r}")
    return RawCsvError(f"{path}: column {column!r}: unreadable values")


def _integer_or_empty(value: str) -> float:
    """A cell's number: NaN when blank; ValueError unless it is a finite integer."""
    text = value.strip()
    if text == "":
        return math.nan
    number = float(text)
    if not math.isfinite(number) or number != int(number):
        raise ValueError(value)
    return number


def _column(values: tuple[str, ...], lines: list[int], path: Path, column: str, binary: bool,
            memo: dict[str, float]) -> np.ndarray:
    """One numeric column as float64 (NaN = empty), checked to hold integers (0/1 for correctness).

    ``memo`` maps cell text to its number across the columns of one file, so each distinct text is parsed once.
    """
    try:
        for text in set(values).difference(memo):
            memo[text] = _integer_or_empty(text)
    except ValueError:
        raise _bad_cell(values, lines, path, column, binary) from None
    numbers = np.fromiter(map(memo.__getitem__, values), np.float64, len(values))
    if binary and bool(((numbers != 0) & (numbers != 1) & ~np.isnan(numbers)).any()):
        raise _bad_cell(values, lines, path, column, binary)
    return numbers


def _check_header(header: list[str], path: Path) -> list[str]:
    for required in ("view", "object_type", *META_COLUMNS):
        if required not in header:
            raise RawCsvError(f"{path}: line 1: header lacks column {required!r} (released layout: view, "
                              f"object_type, {', '.join(META_COLUMNS)}, then taskN, taskN_pred, taskN_gt per task)")
    tasks = [t for t in TASK_ORDER if t in header]
    for t in tasks:
        for suffix in ("_pred", "_gt"):
            if t + suffix not in header:
                raise RawCsvError(f"{path}: line 1: column {t!r} has no partner column {t + suffix!r}")
    if "main" not in tasks:
        raise RawCsvError(f"{path}: line 1: header lacks the Object Counting column 'main'")
    return tasks


def _read_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, data rows and their line numbers; an empty file or a wrong field count is refused."""
    rows: list[list[str]] = []
    lines: list[int] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise RawCsvError(f"{path}: line 1: empty file, expected a header row") from None
        except csv.Error as exc:
            raise RawCsvError(f"{path}: line {reader.line_num}: {exc}") from None
        try:
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise RawCsvError(f"{path}: line {reader.line_num}: {len(row)} fields, the header has "
                                      f"{len(header)}")
                rows.append(row)
                lines.append(reader.line_num)
        except csv.Error as exc:
            raise RawCsvError(f"{path}: line {reader.line_num}: {exc}") from None
    return header, rows, lines


def _check_unique_views(views: list[str], lines: list[int], path: Path) -> None:
    if len(set(views)) == len(views):
        return
    seen: dict[str, int] = {}
    for view, line in zip(views, lines, strict=True):
        if view in seen:
            raise RawCsvError(f"{path}: line {line}, column 'view': view {view!r} repeats line {seen[view]}; "
                              "each benchmark view must have exactly one row")
        seen[view] = line


def _check_flags(task: str, arrays: dict[str, np.ndarray], lines: list[int], path: Path) -> None:
    """Where ``X_pred`` and ``X_gt`` both exist, correctness ``X`` must be present and equal ``X_pred == X_gt``."""
    flag, pred, gt = arrays[task], arrays[task + "_pred"], arrays[task + "_gt"]
    both = ~np.isnan(pred) & ~np.isnan(gt)
    expected = (pred == gt).astype(np.float64)
    wrong = both & (np.isnan(flag) | (flag != expected))
    if not wrong.any():
        return
    i = int(np.flatnonzero(wrong)[0])
    got = "empty" if math.isnan(flag[i]) else str(int(flag[i]))
    raise RawCsvError(
        f"{path}: line {lines[i]}, column {task!r}: correctness is {got} but {task}_pred = {int(pred[i])} and "
        f"{task}_gt = {int(gt[i])}, so it must be {int(expected[i])}")


def read_raw_csv(path: str | Path, name: str | None = None) -> ResponderTable:
    """Read one released-layout CSV; a malformed file raises :class:`RawCsvError` naming the file and line.

    Refused: a missing or unpartnered column, a wrong field count, a non-integer value, correctness other than
    0/1/empty, a header-only file, a view on two rows, and correctness that contradicts ``X_pred == X_gt``
    where both exist (an unparsed answer, ``X_pred`` empty, may be scored 0 or left empty). A plain file (ASCII,
    no quotes, one record per line, as released) is read with numpy (:mod:`eval.plaincsv`); any other file, and a
    plain file with a bad cell, is read with the ``csv`` module, which words the error.
    """
    path = Path(path)
    name = name or model_name_from_file(path) or path.stem
    plain = read_plain(path)
    table = None if plain is None else _plain_table_of(path, name, plain)
    if table is not None:
        return table
    header, rows, lines = _read_rows(path)
    return _table_of(path, name, header, rows, lines)


def _wanted(tasks: list[str]) -> list[str]:
    return [*META_COLUMNS] + [t + s for t in tasks for s in ("", "_pred", "_gt")]


def _plain_table_of(path: Path, name: str, plain: PlainCsv) -> ResponderTable | None:
    """The table of a plain file (:mod:`eval.plaincsv`) whose numeric cells are all integers or empty and whose
    correctness cells are 0, 1 or empty; None otherwise (the ``csv`` path then reads it and names the bad cell)."""
    tasks = _check_header(plain.header, path)
    index = {c: i for i, c in enumerate(plain.header)}
    lines = list(range(2, plain.n_rows + 2))  # one record per line, no blank line
    views = plain.strings(index["view"])
    _check_unique_views(views, lines, path)
    wanted = _wanted(tasks)
    values = plain.integers([index[c] for c in wanted])
    if values is None:
        return None
    flags = values[[c in tasks for c in wanted]]
    if bool(((flags != 0) & (flags != 1) & ~np.isnan(flags)).any()):
        return None
    arrays = dict(zip(wanted, values, strict=True))
    return _assemble(path, name, tasks, views, plain.strings(index["object_type"]), arrays, lines)


def _table_of(path: Path, name: str, header: list[str], rows: list[list[str]], lines: list[int]) -> ResponderTable:
    tasks = _check_header(header, path)
    if not rows:
        raise RawCsvError(f"{path}: no data rows, only the header; expected one row per benchmark view")
    index = {c: i for i, c in enumerate(header)}
    columns = list(zip(*rows, strict=True))
    views = list(columns[index["view"]])
    _check_unique_views(views, lines, path)
    memo: dict[str, float] = {}
    arrays = {c: _column(columns[index[c]], lines, path, c, c in tasks, memo) for c in _wanted(tasks)}
    return _assemble(path, name, tasks, views, list(columns[index["object_type"]]), arrays, lines)


def _assemble(path: Path, name: str, tasks: list[str], views: list[str], object_type: list[str],
              arrays: dict[str, np.ndarray], lines: list[int]) -> ResponderTable:
    for t in tasks:
        _check_flags(t, arrays, lines, path)
    return ResponderTable(
        name=name, views=views, object_type=object_type,
        meta={c: arrays[c] for c in META_COLUMNS},
        correct={t: arrays[t] for t in tasks},
        pred={t: arrays[t + "_pred"] for t in tasks},
        gt={t: arrays[t + "_gt"] for t in tasks},
        source=str(path),
    )


def read_prediction_files(paths: Sequence[str | Path], name: str | None = None) -> dict[str, ResponderTable]:
    """Responders from released-layout CSVs (``eval_raw_*``-style: per task ``X``, ``X_pred``, ``X_gt``). A file with a
    ``model`` column holds one responder per value (its rows grouped by it, line numbers kept); a file without one
    is one responder named ``name``, else by its ``eval_raw_<model>_text.csv`` name, else its stem. A responder found
    twice is refused, naming both files."""
    tables: dict[str, ResponderTable] = {}
    for path in map(Path, paths):
        if not path.is_file():
            raise RawCsvError(f"{path}: no such file; give eval_raw_<model>_text.csv-style prediction files")
        header, rows, lines = _read_rows(path)
        if MODEL_COLUMN in header:
            at = header.index(MODEL_COLUMN)
            groups: dict[str, tuple[list[list[str]], list[int]]] = {}
            for row, line in zip(rows, lines, strict=True):
                if not row[at].strip():
                    raise RawCsvError(f"{path}: line {line}, column {MODEL_COLUMN!r}: empty responder name")
                groups.setdefault(row[at].strip(), ([], []))[0].append(row)
                groups[row[at].strip()][1].append(line)
            found = {m: _table_of(path, m, header, r, ln) for m, (r, ln) in groups.items()}
        else:
            table = _table_of(path, name or model_name_from_file(path) or path.stem, header, rows, lines)
            found = {table.name: table}
        for model, table in found.items():
            if model in tables:
                raise RawCsvError(f"{path}: responder {model!r} already read from {tables[model].source}")
            tables[model] = table
    return tables


def read_raw_dir(directory: str | Path, groups: Mapping[str, str] | None = None,
                 published: bool = False) -> dict[str, ResponderTable]:
    """Every ``eval_raw_<model>_text.csv`` (and the human ``eval_raw_human_frq.csv``) in ``directory``, by model,
    each with its responder group from ``groups``, the folder's record or (``published``) the published groups
    (``eval.groups.resolve_groups``; None where unknown)."""
    from eval.groups import resolve_groups

    directory = Path(directory)
    if not directory.is_dir():
        raise RawDirError(f"raw results folder {directory} does not exist")
    tables: dict[str, ResponderTable] = {}
    for path in sorted(directory.iterdir()):
        model = model_name_from_file(path)
        if model is None or not path.is_file():
            continue
        if model in tables:
            raise RawCsvError(f"{path}: model {model!r} already read from {tables[model].source}")
        tables[model] = read_raw_csv(path, model)
    if not tables:
        raise RawDirError(f"no eval_raw_<model>_text.csv files (nor {HUMAN_FILE}) in {directory}")
    resolved = resolve_groups({m: Path(t.source) for m, t in tables.items()}, directory, groups, published, HUMAN_FILE)
    for model, table in tables.items():
        table.group = resolved[model]
    return tables


def _fmt(x: float) -> str:
    return "" if math.isnan(x) else str(int(x))


def raw_csv_text(table: ResponderTable) -> str:
    """The table in the released column layout (integers, empty = missing)."""
    tasks = table.tasks
    rows = []
    for i, view in enumerate(table.views):
        row = [view, table.object_type[i]] + [_fmt(table.meta[c][i]) for c in META_COLUMNS]
        for t in tasks:
            row += [_fmt(table.correct[t][i]), _fmt(table.pred[t][i]), _fmt(table.gt[t][i])]
        rows.append(row)
    return csv_text(["view", "object_type", *META_COLUMNS] + [t + s for t in tasks for s in ("", "_pred", "_gt")],
                    rows)


def write_raw_csv(path: str | Path, table: ResponderTable) -> None:
    """Write ``table`` atomically in the released layout."""
    atomic_write_text(path, raw_csv_text(table))
