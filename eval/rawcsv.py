"""The released per-view results layout, ``eval_raw_<model>_text.csv``: reading, validating, writing.

One row per benchmark view. Columns: ``view``, ``object_type``, the structure/view ground truth
(``total_blocks``, ``num_hidden_blocks``, ``num_columns``, ``num_layers``), then per task column
prefix ``X`` (``task2`` .. ``task11``, ``main`` for Object Counting) the triple ``X`` (1 correct,
0 wrong, empty = no parseable answer), ``X_pred`` and ``X_gt``. Extra columns (the human file's
``X_pred_raw`` and ``X_manual``) are ignored. A missing value is held as NaN.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spatialiq_train.errors import InputError
from spatialiq_train.io import atomic_write_text
from spatialiq_train.tasks import TASKS

META_COLUMNS: tuple[str, ...] = ("total_blocks", "num_hidden_blocks", "num_columns", "num_layers")
"""Ground-truth columns between ``object_type`` and the first task column."""
TASK_ORDER: tuple[str, ...] = (
    *sorted((t.csv_column for t in TASKS.values() if t.csv_column != "main"), key=lambda c: int(c[len("task"):])),
    "main",
)
"""Task column prefixes in the released column order (task1..task11 by number, then main), from ``TASKS``."""
RAW_PATTERN = re.compile(r"^eval_raw_(?P<model>.+)_text\.csv$")
HUMAN_FILE = "eval_raw_human_frq.csv"
"""The released human free-response file; read as model ``human`` (its ``X_pred`` is the adjudicated answer)."""


class RawCsvError(InputError):
    """A released-layout CSV (or folder of them) that cannot be read; the message names the file, line and column."""


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


def _cell(value: str, path: Path, line: int, column: str, binary: bool = False) -> float:
    text = value.strip()
    if text == "":
        return math.nan
    try:
        number = float(text)
    except ValueError:
        raise RawCsvError(f"{path}: line {line}, column {column!r}: {value!r} is not a number (or empty)") from None
    if not math.isfinite(number) or number != int(number):
        raise RawCsvError(f"{path}: line {line}, column {column!r}: {value!r} is not an integer")
    if binary and number not in (0.0, 1.0):
        raise RawCsvError(f"{path}: line {line}, column {column!r}: correctness must be 0, 1 or empty, got {value!r}")
    return number


def _check_header(header: list[str], path: Path) -> list[str]:
    for required in ("view", "object_type", *META_COLUMNS):
        if required not in header:
            raise RawCsvError(f"{path}: line 1: header lacks column {required!r} (released layout: view, object_type, "
                             f"{', '.join(META_COLUMNS)}, then taskN, taskN_pred, taskN_gt per task)")
    tasks = [t for t in TASK_ORDER if t in header]
    for t in tasks:
        for suffix in ("_pred", "_gt"):
            if t + suffix not in header:
                raise RawCsvError(f"{path}: line 1: column {t!r} has no partner column {t + suffix!r}")
    if "main" not in tasks:
        raise RawCsvError(f"{path}: line 1: header lacks the Object Counting column 'main'")
    return tasks


def read_raw_csv(path: str | Path, name: str | None = None) -> ResponderTable:
    """Read one released-layout CSV; any malformed row raises a ValueError naming the file and line."""
    path = Path(path)
    name = name or model_name_from_file(path) or path.stem
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise RawCsvError(f"{path}: line 1: empty file, expected a header row") from None
        except csv.Error as exc:
            raise RawCsvError(f"{path}: line {reader.line_num}: {exc}") from None
        tasks = _check_header(header, path)
        index = {c: i for i, c in enumerate(header)}
        views: list[str] = []
        objects: list[str] = []
        columns = [*META_COLUMNS] + [t + s for t in tasks for s in ("", "_pred", "_gt")]
        values: dict[str, list[float]] = {c: [] for c in columns}
        binary = set(tasks)
        try:
            for row in reader:
                line = reader.line_num
                if not row:
                    continue
                if len(row) != len(header):
                    raise RawCsvError(f"{path}: line {line}: {len(row)} fields, the header has {len(header)}")
                views.append(row[index["view"]])
                objects.append(row[index["object_type"]])
                for c in columns:
                    values[c].append(_cell(row[index[c]], path, line, c, binary=c in binary))
        except csv.Error as exc:
            raise RawCsvError(f"{path}: line {reader.line_num}: {exc}") from None
    arrays = {c: np.asarray(v, dtype=np.float64) for c, v in values.items()}
    return ResponderTable(
        name=name, views=views, object_type=objects,
        meta={c: arrays[c] for c in META_COLUMNS},
        correct={t: arrays[t] for t in tasks},
        pred={t: arrays[t + "_pred"] for t in tasks},
        gt={t: arrays[t + "_gt"] for t in tasks},
        source=str(path),
    )


def read_raw_dir(directory: str | Path) -> dict[str, ResponderTable]:
    """Every ``eval_raw_<model>_text.csv`` (and the human ``eval_raw_human_frq.csv``) in ``directory``, by model."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"raw results folder {directory} does not exist")
    tables: dict[str, ResponderTable] = {}
    for path in sorted(directory.iterdir()):
        model = model_name_from_file(path)
        if model is None or not path.is_file():
            continue
        if model in tables:
            raise RawCsvError(f"{path}: model {model!r} already read from {tables[model].source}")
        tables[model] = read_raw_csv(path, model)
    if not tables:
        raise FileNotFoundError(f"no eval_raw_<model>_text.csv files in {directory}")
    return tables


def _fmt(x: float) -> str:
    return "" if math.isnan(x) else str(int(x))


def raw_csv_text(table: ResponderTable) -> str:
    """The table in the released column layout (integers, empty = missing)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    tasks = table.tasks
    writer.writerow(["view", "object_type", *META_COLUMNS] + [t + s for t in tasks for s in ("", "_pred", "_gt")])
    for i, view in enumerate(table.views):
        row = [view, table.object_type[i]] + [_fmt(table.meta[c][i]) for c in META_COLUMNS]
        for t in tasks:
            row += [_fmt(table.correct[t][i]), _fmt(table.pred[t][i]), _fmt(table.gt[t][i])]
        writer.writerow(row)
    return out.getvalue()


def write_raw_csv(path: str | Path, table: ResponderTable) -> None:
    """Write ``table`` atomically in the released layout."""
    atomic_write_text(path, raw_csv_text(table))
