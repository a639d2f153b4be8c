"""``spatialiq eval paper-tables``: the official analysis's 24 text-side tables (``tables/``, :mod:`eval.paper`),
their figures (``figures/``), and this project's own summary files beside them.

The summary files (``summary*.csv``, ``summation_2x2.csv``, ``composition.csv``, ``task_accuracy.csv``) follow
these conventions, which reproduce the published numbers:

* the conditional convention is chosen per responder group (recorded or given, :mod:`eval.groups`; never from
  the name): ``trained_text`` responders (the trained-checkpoint rows of Table 4, with their zero-shot backbone)
  use ``dependent_given_prerequisite``; ``text`` responders and the human (group ``both``) use
  ``prerequisite_given_dependent``. A caller may force one convention for all models.
* Groups: ``trained_text`` responders form the ``trained_text`` group, ``text`` ones the ``text`` group; the
  human (``both``) is reported in both groups (Figures 7/27, 22/28 and Tables 1/4 all carry it).
* Accuracies exclude missing predictions from their denominators (Gemini's Visible n = 2999);
  the summation 2x2 and composition use only rows where task5, task8 and main all exist.
* ``mental_rotation_mean`` is the mean of task10 and task11 accuracies, present only when a
  responder has both (zero-shot and human rows); trained rows leave it empty.
"""

from __future__ import annotations

from pathlib import Path

from eval.groups import in_group, require_groups
from eval.hierarchy import (
    CONVENTIONS,
    SUMMARY_COLUMNS,
    composition,
    summary_row,
    summation_2x2,
)
from eval.paper import accuracy
from eval.paper.accuracy import convention_for
from eval.paper.common import display_name, full_precision, make_group
from eval.rawcsv import ResponderTable, read_raw_dir
from spatialiq_train.core.io import atomic_write_text, csv_text
from spatialiq_train.core.tasks import TASKS

TASK_LABELS: tuple[tuple[str, str], ...] = tuple(
    (("Task" if t.paper_tag.startswith("S") else "Target") + t.paper_tag[1:], t.csv_column)
    for t in TASKS.values() if t.id != "task1"
)
"""Table 6 row labels (the paper's S/T numbering: S2 -> Task2, T1 -> Target1) and the released task column each
reads, in the paper's order, from ``TASKS``: Task2/task9 ... Task9/task8, Target1/main, Target2a/task10,
Target2b/task11."""
SUMMARY_CSV_COLUMNS: tuple[str, ...] = ("model", *SUMMARY_COLUMNS)
PUBLISHED_SUMMARY_COLUMNS: tuple[str, ...] = ("model", "display_name", *SUMMARY_COLUMNS, "mental_rotation_mean")
SUMMATION_COLUMNS: tuple[str, ...] = (
    "group", "model", "display_name", "visible_correct", "hidden_correct", "cell", "main_accuracy", "main_correct",
    "main_incorrect", "n", "share_of_scenes", "overall_main_accuracy", "overall_main_correct", "overall_n",
)
COMPOSITION_CSV_COLUMNS: tuple[str, ...] = (
    "group", "model", "display_name", "prediction_correlation_r", "prediction_correlation_p", "exact_match_rate",
    "both_wrong_exact_match_rate", "mean_absolute_residual", "residual_bias", "both_wrong_n", "n",
)
TASK_ACCURACY_COLUMNS: tuple[str, ...] = (
    "group", "model", "display_name", "task", "source_task", "task_name", "accuracy", "n_correct", "n_incorrect",
    "n", "binom_se", "ci_low_wilson", "ci_high_wilson", "chance_level", "chance_adjusted_accuracy",
    "chance_adjusted_ci_low", "chance_adjusted_ci_high", "above_chance_p",
)


def summary_rows(tables: dict[str, ResponderTable], override: str | None = None) -> list[dict[str, object]]:
    rows = []
    for model, table in tables.items():
        conv = convention_for(table.group, override)
        row: dict[str, object] = {"model": model, "display_name": display_name(model), "convention": conv}
        row.update(summary_row(table, conv))
        rows.append(row)
    return rows


def summation_rows(tables: dict[str, ResponderTable]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for group in ("text", "trained_text"):
        for model in sorted(tables):
            if in_group(tables[model].group, group):
                for cell in summation_2x2(tables[model]):
                    rows.append({"group": group, "model": model, "display_name": display_name(model), **cell})
    return rows


def composition_rows(tables: dict[str, ResponderTable]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for group in ("text", "trained_text"):
        for model in sorted(tables):
            if in_group(tables[model].group, group):
                rows.append({"group": group, "model": model, "display_name": display_name(model),
                             **composition(tables[model])})
    return rows


def task_accuracy_rows(tables: dict[str, ResponderTable]) -> list[dict[str, object]]:
    """Table 6 and Figure 25 as built for the official tables (:func:`eval.paper.accuracy.task_accuracy_rows`), in
    one file: groups ``text`` then ``trained_text``, responders sorted by name, tasks in ``TASK_LABELS`` order
    (Object Categorization, task1, is left out)."""
    order = {task: i for i, (_, task) in enumerate(TASK_LABELS)}
    rows: list[dict[str, object]] = []
    for group in ("text", "trained_text"):
        built = [r for r in accuracy.task_accuracy_rows(make_group(tables, group)) if r["source_task"] in order]
        rows += sorted(built, key=lambda r: (str(r["model"]), order[str(r["source_task"])]))
    return rows


def both_convention_rows(tables: dict[str, ResponderTable]) -> list[dict[str, object]]:
    """Every responder's summary under each conditional convention, one row per (model, convention)."""
    return [{"model": m, "display_name": display_name(m), "convention": conv, **summary_row(t, conv)}
            for m, t in tables.items() for conv in CONVENTIONS]


def write_paper_tables(raw_dir: str | Path, out_dir: str | Path, override: str | None = None,
                       figures: bool = True, groups: dict[str, str] | None = None,
                       published: bool = False) -> list[Path]:
    """Read every raw file in ``raw_dir``; write the official tables to ``out_dir/tables`` (figures to
    ``out_dir/figures`` unless ``figures`` is False) and this project's summary files to ``out_dir``. Responder
    groups come from ``groups``, the folder's record or (``published``) the published groups (:mod:`eval.groups`);
    a responder with none is refused before anything is written."""
    from eval.paper.tables import write_tables

    tables = read_raw_dir(raw_dir, groups, published)
    require_groups({m: t.group for m, t in tables.items()}, raw_dir)
    out = Path(out_dir)
    summaries = summary_rows(tables, override)
    files = {
        "summary.csv": (SUMMARY_CSV_COLUMNS, summaries),
        "summary_published.csv": (PUBLISHED_SUMMARY_COLUMNS + ("convention",), summaries),
        "summary_both_conventions.csv": (("model", "display_name", "convention", *SUMMARY_COLUMNS),
                                         both_convention_rows(tables)),
        "summation_2x2.csv": (SUMMATION_COLUMNS, summation_rows(tables)),
        "composition.csv": (COMPOSITION_CSV_COLUMNS, composition_rows(tables)),
        "task_accuracy.csv": (TASK_ACCURACY_COLUMNS, task_accuracy_rows(tables)),
    }
    written = write_tables(tables, out, figures=figures)
    for name, (columns, rows) in files.items():
        atomic_write_text(out / name, csv_text(columns, rows, full_precision))
        written.append(out / name)
    return written
