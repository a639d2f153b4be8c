"""The task catalogue and the benchmark prompts built from it.

Task ids follow the released dataset (``task1``..``task11``, ``task_main``); the paper's
S1..S9/T1/T2 tags are kept as metadata only (benchmark-spec section 4.0). Prompt text comes
verbatim from :mod:`spatialiq_train.core.prompts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spatialiq_train.core import prompts
from spatialiq_train.core.dataset import COT_FIELDS

Dialect = Literal["training", "type1"]
DIALECTS: tuple[Dialect, ...] = ("training", "type1")


@dataclass(frozen=True)
class Task:
    """One benchmark task."""

    id: str
    """Task id as in gt.json (``task_main`` for Object Counting)."""
    paper_tag: str
    """The paper's tag (S1..S9, T1, T2a, T2b)."""
    name: str
    """The paper's display name."""
    csv_column: str
    """Column prefix in the released ``eval_raw_*_text.csv`` files (``main`` for task_main)."""
    cot_line: int | None
    """Number of the CoT template line that states this task's value, if any."""
    images: int = 1
    """How many images the prompt carries (task10/task11 take this view and its partner)."""


TASKS: dict[str, Task] = {
    t.id: t
    for t in (
        Task("task1", "S1", "Object Categorization", "task1", 1),
        Task("task9", "S2", "Cluster Count", "task9", 5),
        Task("task3", "S3", "Column Count", "task3", 2),
        Task("task4", "S4", "Layer Count", "task4", 3),
        Task("task5", "S5", "Visible Object Count", "task5", 6),
        Task("task2", "S6", "Top Layer", "task2", 4),
        Task("task6", "S7", "Direct Support", "task6", 8),
        Task("task7", "S8", "Support Column", "task7", 7),
        Task("task8", "S9", "Hidden Object Count", "task8", 9),
        Task("task_main", "T1", "Object Counting", "main", None),
        Task("task10", "T2a", "Mental Rotation 90", "task10", None, images=2),
        Task("task11", "T2b", "Mental Rotation 180", "task11", None, images=2),
    )
}
"""Every task, in the paper's order (S1..S9, T1, T2)."""

INTEGER_TASKS: tuple[str, ...] = tuple(t for t in TASKS if t != "task1")
"""Tasks whose answer is an integer (all but task1)."""

COT_LINE_TASKS: dict[int, str] = {t.cot_line: t.id for t in TASKS.values() if t.cot_line is not None}
"""CoT line number -> task id (line 10, the hidden count, maps to no task; it is ``num_hidden_blocks``)."""

SCORED_COT_LINES: tuple[int, ...] = (2, 3, 4, 5, 6, 7, 8, 9)
"""Lines that the benchmark's CoT evaluation scores (metrics.md section 1)."""

_TYPE1_KEY = {"task_main": "main"}


def get_task(task_id: str) -> Task:
    """Return the task with ``task_id``; ``main`` is accepted for ``task_main``."""
    key = "task_main" if task_id == "main" else task_id
    try:
        return TASKS[key]
    except KeyError:
        raise KeyError(f"unknown task {task_id!r}; valid: {', '.join(TASKS)}") from None


def build_prompt(task_id: str, dialect: Dialect = "training") -> str:
    """The benchmark's user prompt for one task.

    ``training`` is the dialect of the released ``prepare_data.py`` (blocks, upper-case
    definitions); ``type1`` is ``inference/prompt_text_Type1.json`` (objects), used to
    evaluate base models. task11 has no training prompt; asking for it is an error.
    """
    task = get_task(task_id)
    if dialect == "training":
        if task.id not in prompts.TRAINING_QUESTIONS:
            raise KeyError(f"task {task.id!r} has no training-dialect prompt; use dialect='type1'")
        defs = "" if task.id == "task1" else prompts.TRAINING_DEFINITIONS
        return prompts.TRAINING_CRITICAL_INSTRUCTION + defs + prompts.TRAINING_QUESTIONS[task.id]
    if dialect == "type1":
        template = prompts.TYPE1_TEMPLATES[_TYPE1_KEY.get(task.id, task.id)]
        return template.format_map(
            {"CRITICAL_INSTRUCTION": prompts.TYPE1_CRITICAL_INSTRUCTION, "DEFINITIONS": prompts.TYPE1_DEFINITIONS}
        )
    raise ValueError(f"unknown prompt dialect {dialect!r}; valid: {', '.join(DIALECTS)}")


def fill_cot_template(gt: dict[str, object], mask_final_answer: str | None = None) -> str:
    """The SFT-CoT target for one view, filled from its ground truth.

    ``mask_final_answer`` replaces both places ``task_main`` appears (the total line and the
    answer tag) with the placeholder, as ``prepare_data.py --cot-mask-final-answer`` does.
    """
    missing = [f for f in COT_FIELDS if gt.get(f) is None]
    if missing:
        raise KeyError(f"ground truth lacks {', '.join(missing)} needed by the CoT template")
    values = {f: gt[f] for f in COT_FIELDS}
    if mask_final_answer is not None:
        values["task_main"] = mask_final_answer
    return prompts.COT_TARGET_TEMPLATE.format_map(values)
