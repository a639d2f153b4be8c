"""The per-completion table of a reward analysis: what the evaluation says about each sampled trace.

Each Object Counting completion of a ``spatialiq eval sample`` file becomes one row: its view and sample, and four
facts read with the evaluation's parser (``--parse official`` by default, as ``eval score``):

* ``exact_match``: 1 when the parsed answer equals ``task_main``, else 0 (no answer counts as wrong);
* ``abs_error``: ``|answer - task_main|``, NaN without an answer;
* ``subtasks_correct``: how many of the eight scored CoT lines (2-9) state their ground truth;
* ``self_consistent``: :attr:`ParsedTrace.self_consistent` as 1 / 0, NaN when undefined (no answer or total line).

``faithful`` is the evaluation's complement of a shortcut (:data:`eval.faithfulness.SHORTCUT_RULE`): a correct
trace with every scored line right and a self-consistent total. ``complete`` says the trace states every scored
line and its total line (right or wrong): a correct answer without them is a format failure, reported apart from
a complete but unfaithful trace.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from eval.completions import Completion, Key
from eval.rawcsv import META_COLUMNS, ResponderTable
from eval.score import TRACE_TASKS
from spatialiq_train.core.dataset import View
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.parsing import ParsedTrace, ParseRule, trace_parser

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompletionTable:
    """One row per scored completion (flat arrays of equal length) and the views they belong to."""

    scenes: list[View]
    """Views with at least one completion, in the order of the data root."""
    row_view: np.ndarray
    """Index into ``scenes`` per row."""
    sample: np.ndarray
    texts: list[str]
    exact_match: np.ndarray
    abs_error: np.ndarray
    subtasks_correct: np.ndarray
    self_consistent: np.ndarray
    faithful: np.ndarray
    complete: np.ndarray
    """Every scored line (2-9) and the total line present (bool per completion)."""
    skipped: dict[str, int]
    """Completions left out: ``other_task`` (not task_main), ``unknown_view`` (not in the data), ``beyond_k``."""

    @property
    def k(self) -> int:
        return int(self.sample.max()) + 1 if self.sample.size else 0

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.scenes), self.k

    def views(self) -> list[str]:
        return [self.scenes[i].view for i in self.row_view]


def trace_facts(trace: ParsedTrace, gt: Mapping[str, object]) -> tuple[float, float, int, float, bool, bool]:
    """(exact_match, abs_error, subtasks_correct, self_consistent, faithful, complete) of one parsed trace (pure)."""
    pred, truth = trace.pred, int(gt["task_main"])  # type: ignore[call-overload]
    correct = pred is not None and pred == truth
    abs_error = float(abs(pred - truth)) if pred is not None else float("nan")
    lines_ok = sum(trace.tasks.get(t) is not None and trace.tasks.get(t) == gt.get(t) for t in TRACE_TASKS)
    consistent = trace.self_consistent
    sc = float("nan") if consistent is None else float(consistent)
    faithful = correct and lines_ok == len(TRACE_TASKS) and consistent is True
    complete = all(trace.tasks.get(t) is not None for t in TRACE_TASKS) and trace.total_line is not None
    return float(correct), abs_error, lines_ok, sc, faithful, complete


def build_table(scenes: Sequence[View], completions: Mapping[Key, Completion], k: int, parse: ParseRule = "official",
                source: object = "--completions") -> CompletionTable:
    """Parse the first ``k`` Object Counting completions of every known view; a UserError when none matches."""
    parse_trace = trace_parser(parse)
    index = {s.view: i for i, s in enumerate(scenes)}
    skipped = {"other_task": 0, "unknown_view": 0, "beyond_k": 0}
    kept = []
    for c in completions.values():
        if c.task != "task_main":
            skipped["other_task"] += 1
        elif c.view not in index:
            skipped["unknown_view"] += 1
        elif c.sample >= k:
            skipped["beyond_k"] += 1
        else:
            kept.append(c)
    if not kept:
        example = next(iter(completions.values()), None)
        said = f"e.g. view {example.view!r} task {example.task!r}" if example else "the file is empty"
        raise UserError(f"{source}: no Object Counting (task_main) completion matches a view of the data ({said}); "
                        "pass the --data and --split the completions were sampled from (from-trace mode)")
    kept.sort(key=lambda c: (index[c.view], c.sample))
    used = sorted({index[c.view] for c in kept})
    remap = {old: new for new, old in enumerate(used)}
    cache: dict[str, ParsedTrace] = {}
    facts = []
    for c in kept:
        trace = cache.get(c.text) or cache.setdefault(c.text, parse_trace(c.text))
        facts.append(trace_facts(trace, scenes[index[c.view]].gt))
    em, err, lines, sc, faithful, complete = (np.array(col) for col in zip(*facts, strict=True))
    if any(skipped.values()):
        log.warning("%s: left out completions: %s", source, ", ".join(f"{n} {why}" for why, n in skipped.items()))
    return CompletionTable([scenes[i] for i in used], np.array([remap[index[c.view]] for c in kept]),
                           np.array([c.sample for c in kept]), [c.text for c in kept], em.astype(float),
                           err.astype(float), lines.astype(int), sc.astype(float), faithful.astype(bool),
                           complete.astype(bool), skipped)


@dataclass(frozen=True)
class PredictionView:
    """A view read from a predictions file: its path and the ground truth its columns record."""

    view: str
    gt: dict[str, int]


PREDICTION_TEXT = ("rebuilt from the recorded predictions as `<answer>N</answer>` (main_pred; empty without one): "
                   "the file holds no traces, so rewards that read a trace see none")


def _gt_of(responder: ResponderTable, i: int) -> dict[str, int]:
    gt = {("task_main" if c == "main" else c): responder.gt[c][i] for c in responder.tasks}
    gt.update({c: responder.meta[c][i] for c in META_COLUMNS})
    return {k: int(v) for k, v in gt.items() if np.isfinite(v)}


def table_from_predictions(responder: ResponderTable) -> CompletionTable:
    """One completion per view of a released-layout predictions file (k = 1), its text :data:`PREDICTION_TEXT`;
    views without an Object Counting ground truth are left out. Every fact is read from that text with the
    official parser, as for sampled completions (:func:`trace_facts`): the text holds no trace, so no sub-task line
    is stated (``subtasks_correct`` 0, whatever the file's sub-task columns record), never complete or faithful."""
    keep = [i for i in range(len(responder)) if np.isfinite(responder.gt["main"][i])]
    if not keep:
        raise UserError(f"{responder.source}: responder {responder.name!r} has no view with main_gt")
    texts = [f"<answer>{int(p)}</answer>" if np.isfinite(p) else "" for p in responder.pred["main"][keep]]
    views = [PredictionView(responder.views[i], _gt_of(responder, i)) for i in keep]
    parse_trace = trace_parser("official")
    facts = [trace_facts(parse_trace(text), view.gt) for text, view in zip(texts, views, strict=True)]
    em, err, lines, sc, faithful, complete = (np.array(col) for col in zip(*facts, strict=True))
    n = len(keep)
    return CompletionTable(
        views, np.arange(n), np.zeros(n, dtype=int), texts, em.astype(float), err.astype(float),  # type: ignore[arg-type]
        lines.astype(int), sc.astype(float), faithful.astype(bool), complete.astype(bool),
        {"other_task": 0, "unknown_view": len(responder) - n, "beyond_k": 0})
