"""What every paper table shares: responder groups, task ids and names, display names, pooled columns, statistics.

A *group* is the official analysis's responder set: ``text`` (the zero-shot responders and the human) or
``trained_text`` (the trained checkpoints, their zero-shot backbone and the human). Each responder's group is the
one recorded with it or given (``ResponderTable.group``, see :mod:`eval.groups`), never guessed from its name (the
official script's name-prefix rule put a model released as ``mine`` among the zero-shot responders). Responders keep
the order of their files' names (the order the official script reads them), and
several tables depend on it (pooled row order feeds the seeded permutation and bootstrap draws).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from eval.groups import in_group, require_groups
from eval.paper import pvalues
from eval.rawcsv import PANDAS_NA_STRINGS, ResponderTable
from spatialiq_train.core.tasks import TASKS

GROUPS: tuple[str, ...] = ("text", "trained_text")
TASK_COLUMNS: tuple[str, ...] = tuple(t.csv_column for t in TASKS.values())
"""Raw task columns in the paper's order (task1, task9, task3, task4, task5, task2, task6, task7, task8, main,
task10, task11), from ``TASKS``."""
HIERARCHY_COLUMNS: tuple[str, ...] = (*(f"task{i}" for i in range(1, 12)), "main")
"""The Appendix F module's column order (task1..task11, main): the task order of the within-structure camera table."""
QUERY_TEXT: dict[str, str] = {
    "task1": "What object category composes the stacked structure?",
    "task9": "How many non-laterally-adjacent clusters of objects are present?",
    "task3": "How many columns are in the stacked structure?",
    "task4": "How many horizontal layers are in the stacked structure?",
    "task5": "How many visible objects are present?",
    "task2": "How many objects are in the top-most layer?",
    "task6": "How many visible objects directly support the top-most object(s)?",
    "task7": "How many visible objects are in columns supporting the top-most object(s)?",
    "task8": "How many hidden objects must exist to support the visible structure?",
    "main": "How many objects are in the stacked structure in total?",
    "task10": "Which objects are visible in the adjacent view but not the reference view?",
    "task11": "Which objects are visible in the opposite view but not the reference view?",
}
"""Table 5: the paper's short query text per task (the prompts themselves are in spatialiq_train.core.prompts)."""
_PLAIN_CAPITALISED = ("claude", "qwen", "gemini", "kimi")
_CQ_FAMILIES = {"qwen": "Qwen", "claude": "Claude", "gemini": "Gemini"}
_SPECIAL_NAMES = {"human": "Human", "vla-0": "VLA-0", "qwen-image-edit": "Qwen Image Edit",
                  "gemini-image": "Gemini Image"}


def paper_task_id(column: str) -> str:
    """Raw column -> the paper's id: S-tags become ``TaskN`` (task9 -> Task2), T-tags ``TargetN`` (main -> Target1)."""
    for task in TASKS.values():
        if task.csv_column == column:
            tag = task.paper_tag
            return ("Task" if tag.startswith("S") else "Target") + tag[1:]
    return column


def task_name(column: str) -> str:
    for task in TASKS.values():
        if task.csv_column == column:
            return task.name
    return column


def display_name(model: str) -> str:
    """The published label of a responder.

    ``human`` -> Human; a ``gpt``/``glm`` prefix is upper-cased with the rest of the name (gpt4CQ -> GPT4CQ);
    ``qwen3b*`` -> Qwen3B; a qwen/claude/gemini name with an ``NCQ`` choice count -> e.g. "Qwen 3CQ";
    claude, qwen, gemini, kimi -> capitalised; vla-0 -> VLA-0; the two image editors by name; any other
    responder (vla0, the trained checkpoints) keeps its file name. Case-insensitive like the official rule.
    """
    m = model.lower()
    if m in ("human", "vla-0", "qwen-image-edit", "gemini-image"):
        return _SPECIAL_NAMES[m]
    if m.startswith(("gpt", "glm")):
        return m[:3].upper() + model[3:].upper()
    if m.startswith("qwen3b"):
        return "Qwen3B"
    for family, label in _CQ_FAMILIES.items():
        if m.startswith(family) and "cq" in m:
            count = re.search(r"([345])cq", m)
            if count:
                return f"{label} {count.group(1)}CQ"
    return m.capitalize() if m in _PLAIN_CAPITALISED else model


def group_models(tables: dict[str, ResponderTable], group: str) -> list[str]:
    """The responders of ``group`` in file order (a responder of group ``both``, the human, is in each); a
    responder without a recorded group is refused, naming it."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; valid: {', '.join(GROUPS)}")
    require_groups({m: t.group for m, t in tables.items()}, "responder groups")
    return [m for m, t in tables.items() if in_group(t.group, group)]


@dataclass
class Pool:
    """Rows of several responders stacked in responder order (the official ``pd.concat``)."""

    model: np.ndarray
    """Responder index into ``Group.models`` per row."""
    view: np.ndarray
    """View code per row (codes index ``Group.view_names``, sorted as strings)."""
    values: dict[str, np.ndarray]
    """Task column -> correctness per row (NaN where missing or where the responder lacks the column)."""

    def take(self, keep: np.ndarray) -> Pool:
        return Pool(self.model[keep], self.view[keep], {k: v[keep] for k, v in self.values.items()})


@dataclass
class Group:
    """One responder group with view codes shared by its responders."""

    name: str
    tables: dict[str, ResponderTable]
    view_names: list[str] = field(init=False)
    codes: dict[str, np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        self.view_names = sorted({v for t in self.tables.values() for v in t.views})
        lookup = {v: i for i, v in enumerate(self.view_names)}
        self.codes = {m: np.fromiter(map(lookup.__getitem__, t.views), np.int64, len(t)) for m, t in
                      self.tables.items()}

    @property
    def models(self) -> list[str]:
        return list(self.tables)

    @property
    def n_views(self) -> int:
        return len(self.view_names)

    def has(self, model: str, task: str) -> bool:
        return task in self.tables[model].correct

    def any_has(self, task: str) -> bool:
        return any(task in t.correct for t in self.tables.values())

    def col(self, model: str, task: str) -> np.ndarray:
        """Correctness of ``task`` for ``model``; all NaN when the responder has no such column."""
        table = self.tables[model]
        return table.correct[task] if task in table.correct else np.full(len(table), np.nan)

    def pool(self, tasks: Iterable[str], models: Sequence[str] | None = None) -> Pool:
        names = self.models if models is None else list(models)
        tasks = list(tasks)
        index = {m: i for i, m in enumerate(self.models)}
        model = np.concatenate([np.full(len(self.tables[m]), index[m]) for m in names])
        view = np.concatenate([self.codes[m] for m in names])
        values = {t: np.concatenate([self.col(m, t) for m in names]) for t in tasks}
        return Pool(model, view, values)


def make_group(tables: dict[str, ResponderTable], group: str) -> Group:
    return Group(group, {m: tables[m] for m in group_models(tables, group)})


def object_types(table: ResponderTable) -> np.ndarray:
    """Object type per row, ``None`` where the cell is one pandas reads as missing."""
    return np.array([None if o in PANDAS_NA_STRINGS else o for o in table.object_type], dtype=object)


# ---------------------------------------------------------------------------------------------- statistics


def mean_ignore_nan(values: Iterable[float]) -> float:
    arr = np.asarray(list(values), dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else math.nan


def present(values: np.ndarray) -> np.ndarray:
    return values[~np.isnan(values)]


def pearson(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Pearson r and two-sided p over rows where both are finite; NaN with < 3 rows or a constant side."""
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 3 or x.min() == x.max() or y.min() == y.max():
        return math.nan, math.nan
    return pvalues.pearsonr(x, y)


def view_means(view: np.ndarray, values: np.ndarray, n_views: int) -> np.ndarray:
    """Mean of ``values`` per view code (rows must be non-NaN); NaN for a view without rows."""
    counts = np.bincount(view, minlength=n_views)
    sums = np.bincount(view, weights=values, minlength=n_views)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


def fe_pearson(view: np.ndarray, x: np.ndarray, y: np.ndarray, n_views: int) -> tuple[float, float]:
    """Within-view (scene fixed-effect) Pearson r and p: both sides demeaned per view over rows where both exist.

    NaN with fewer than 3 such rows or a side without variation after demeaning.
    """
    keep = ~np.isnan(x) & ~np.isnan(y)
    if keep.sum() < 3:
        return math.nan, math.nan
    v, x, y = view[keep], x[keep], y[keep]
    return pearson(x - view_means(v, x, n_views)[v], y - view_means(v, y, n_views)[v])


def varying_views(view: np.ndarray, values: np.ndarray, n_views: int) -> np.ndarray:
    """Boolean per view code: the non-NaN ``values`` of that view are not all equal (max - min > 0)."""
    keep = ~np.isnan(values)
    lo = np.full(n_views, np.inf)
    hi = np.full(n_views, -np.inf)
    np.minimum.at(lo, view[keep], values[keep])
    np.maximum.at(hi, view[keep], values[keep])
    return hi - lo > 0


def cut(values: np.ndarray, edges: Sequence[float], labels: Sequence[str]) -> np.ndarray:
    """``pandas.cut`` with right-closed bins ``(edges[i], edges[i+1]]``: the label per value, "nan" outside."""
    ids = np.searchsorted(np.asarray(edges, dtype=np.float64), values, side="left")
    out = np.full(values.shape, "nan", dtype=object)
    ok = ~np.isnan(values) & (ids > 0) & (ids < len(edges))
    out[ok] = np.asarray(labels, dtype=object)[ids[ok] - 1]
    return out


# ---------------------------------------------------------------------------------------------- CSV text


def full_precision(value: object) -> str:
    """A CSV cell as the official tables write it: floats at full precision (repr), NaN and None empty."""
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    return str(value)
