"""Score sampled completions against benchmark ground truth: every metric of metrics.md in one JSON.

Parsing is the shared :mod:`spatialiq_train.core.parsing` under one of two rules (``parse``): ``official``
(default; the official evaluators' reading: ``parse_trace_official`` for from-trace mode,
``parse_integer_answer_official`` for independent mode) or ``strict`` (``parse_trace`` /
``parse_integer_answer``). The hierarchy columns, the 2x2, composition, per-task accuracy
and breakdowns use the first sample (acc@1), exactly as the released per-view files do; that sample
is also exported as ``eval_raw_<name>_text.csv``.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eval.breakdowns import object_counting_breakdowns
from eval.completions import Completion, Key
from eval.decoding import decoding_metrics
from eval.faithfulness import consistent_mask, invariants_hold, trace_audit
from eval.hierarchy import CONVENTIONS, Convention, composition, summary_row, summation_2x2
from eval.rawcsv import META_COLUMNS, TASK_ORDER, ResponderTable
from eval.sample import Mode
from eval.stats import accuracy
from spatialiq_train.core.dataset import View
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.parsing import (
    OFFICIAL_RULE,
    STRICT_RULE,
    ParsedTrace,
    ParseRule,
    parse_integer_answer,
    parse_integer_answer_official,
    trace_parser,
)
from spatialiq_train.core.tasks import COT_LINE_TASKS, INTEGER_TASKS, SCORED_COT_LINES, get_task

log = logging.getLogger(__name__)

TRACE_TASKS: tuple[str, ...] = tuple(COT_LINE_TASKS[n] for n in SCORED_COT_LINES)
PARSE_RULE_TEXT: dict[str, str] = {"official": OFFICIAL_RULE, "strict": STRICT_RULE}
FAR_FACTOR = 10
"""With k inferred, a sample index at or beyond ``FAR_FACTOR * k + FAR_SLACK`` is refused as corrupt."""
FAR_SLACK = 100
_MAX_STORED = 1e18
"""Predictions are stored as float64; larger magnitudes (wrong for any ground truth) are stored as +-1e18."""


def column_of(task: str) -> str:
    """Released column prefix of a task id (``task_main`` -> ``main``)."""
    return get_task(task).csv_column


@dataclass
class SampledPredictions:
    """Parsed predictions, ``(scenes, k)`` per released task column, NaN where absent or unparseable."""

    scenes: list[View]
    k: int
    mode: Mode
    pred: dict[str, np.ndarray]
    gt: dict[str, np.ndarray]
    line_visible: np.ndarray | None = None
    line_hidden: np.ndarray | None = None
    self_consistency: np.ndarray | None = None
    """from-trace: :attr:`ParsedTrace.self_consistent` per trace as 1.0/0.0, NaN when undefined or absent."""
    counts: dict[str, int] = field(default_factory=dict)
    parse: ParseRule = "official"

    @property
    def coverage(self) -> float:
        """Share of scenes with at least one scored completion (NaN without scenes)."""
        return self.counts.get("scenes_covered", 0) / len(self.scenes) if self.scenes else math.nan


def resolve_k(completions: Mapping[Key, Completion], k: int | None, source: object = "the completions") -> int:
    """``k`` checked against the file, or inferred as the most common number of completions per view and task.

    An explicit ``k`` above what any view holds is refused (it would only add absent samples). With ``k``
    inferred, a sample index far beyond it (:data:`FAR_FACTOR`) is refused naming its line: such a line is
    corrupt or from another run, and honouring it would allocate per missing index.
    """
    per_key = Counter((c.view, c.task) for c in completions.values())
    if not per_key:
        return k or 1
    if k is not None:
        largest = max(per_key.values())
        if k > largest:
            raise UserError(f"--k {k}: no view holds more than {largest} completion(s) for a task in {source}; "
                            f"pass --k {largest} or less, or leave --k out to use the most common count")
        return k
    frequency = Counter(per_key.values())
    inferred = max(frequency, key=lambda n: (frequency[n], n))
    far = FAR_FACTOR * inferred + FAR_SLACK
    for c in completions.values():
        if c.sample >= far:
            where = f"line {c.line}" if c.line else f"view {c.view!r} task {c.task!r}"
            raise UserError(f"{source}: {where}: sample index {c.sample} is far beyond the {inferred} completion(s) "
                            f"per view and task the file holds (most common count); the line is corrupt or from "
                            f"another run: remove it, or pass --k to score the first k samples and ignore it")
    beyond = [c for c in completions.values() if c.sample >= inferred]
    if beyond:
        largest = max(per_key.values())
        first = min(beyond, key=lambda c: (c.line, c.key))
        advice = (f"pass --k {largest} to score up to {largest} samples per view" if largest > inferred else
                  f"no view holds more than {inferred} completion(s), so their numbering has gaps (first: "
                  f"{f'line {first.line}' if first.line else repr(first.view)}, sample {first.sample}); renumber "
                  f"them 0..{inferred - 1} to score them")
        log.warning("%s: %d completion(s) have a sample index >= the inferred k = %d (the most common count per "
                    "view and task) and are ignored; %s", source, len(beyond), inferred, advice)
    return inferred


def _stored(value: int) -> float:
    return float(value) if abs(value) <= _MAX_STORED else math.copysign(_MAX_STORED, value)


def infer_mode(completions: Mapping[Key, Completion]) -> Mode:
    """from-trace when every completion answers Object Counting, else independent."""
    return "from-trace" if all(c.task == "task_main" for c in completions.values()) else "independent"


def _gt_array(scenes: Sequence[View], task: str) -> np.ndarray:
    return np.array([float(s.gt[task]) if s.gt.get(task) is not None else math.nan for s in scenes])


def collect_predictions(scenes: Sequence[View], completions: Mapping[Key, Completion], mode: Mode | None = None,
                        k: int | None = None, parse: ParseRule = "official") -> SampledPredictions:
    """Parse every completion into per-task prediction arrays; count absent and unparseable ones. ``k`` defaults
    to :func:`resolve_k`'s inference; ``parse`` picks the parse rule (module docstring)."""
    mode = mode or infer_mode(completions)
    k = resolve_k(completions, k) if k is None else k
    parse_trace = trace_parser(parse)
    parse_integer = parse_integer_answer_official if parse == "official" else parse_integer_answer
    row = {s.view: i for i, s in enumerate(scenes)}
    if mode == "from-trace":
        asked = ["task_main"]
        columns = [*TRACE_TASKS, "task_main"]
    else:
        known = {c.task for c in completions.values() if c.task in INTEGER_TASKS}
        asked = sorted(known, key=lambda t: TASK_ORDER.index(column_of(t)))
        columns = asked
    shape = (len(scenes), k)
    pred = {column_of(t): np.full(shape, np.nan) for t in columns}
    gt = {column_of(t): _gt_array(scenes, t) for t in columns}
    line_visible, line_hidden, consistency = ((np.full(shape, np.nan) if mode == "from-trace" else None)
                                              for _ in range(3))
    counts = {"completions": 0, "unknown_view_or_task": 0, "beyond_k": 0, "unparseable": 0}
    traces: dict[str, ParsedTrace] = {}  # identical texts (frequent among k samples) are parsed once
    covered: set[int] = set()
    for c in completions.values():
        i = row.get(c.view)
        if i is None or c.task not in asked:
            counts["unknown_view_or_task"] += 1
            continue
        if c.sample >= k:
            counts["beyond_k"] += 1
            continue
        counts["completions"] += 1
        covered.add(i)
        if mode == "independent":
            value = parse_integer(c.text)
            if value is None:
                counts["unparseable"] += 1
            else:
                pred[column_of(c.task)][i, c.sample] = _stored(value)
            continue
        trace = traces.get(c.text)
        if trace is None:
            trace = traces[c.text] = parse_trace(c.text)
        counts["unparseable"] += trace.pred is None
        for task, value in ((t, trace.tasks.get(t)) for t in TRACE_TASKS):
            if value is not None:
                pred[task][i, c.sample] = _stored(value)
        if trace.pred is not None:
            pred["main"][i, c.sample] = _stored(trace.pred)
        if trace.total_line is not None:
            line_visible[i, c.sample], line_hidden[i, c.sample] = trace.total_line[0], trace.total_line[1]
        if trace.self_consistent is not None:
            consistency[i, c.sample] = float(trace.self_consistent)
    counts["expected"] = len(scenes) * k * len(asked)
    counts["absent"] = counts["expected"] - counts["completions"]
    counts["scenes_covered"] = len(covered)
    return SampledPredictions(list(scenes), k, mode, pred, gt, line_visible, line_hidden, consistency, counts, parse)


def check_coverage(preds: SampledPredictions, min_coverage: float, source: object) -> str | None:
    """Raise UserError when fewer than ``min_coverage`` of the scenes have a completion; a warning text when
    most scenes are absent (returned, not raised, when ``min_coverage`` was lowered to allow it); else None."""
    covered, total = preds.counts.get("scenes_covered", 0), len(preds.scenes)
    share = preds.coverage
    said = f"{source} covers {covered} of {total} scenes ({share:.1%})"
    if total and share < min_coverage:
        raise UserError(f"{said}, below --min-coverage {min_coverage:g}: every accuracy would describe a different "
                        f"subset. Sample the rest (`spatialiq eval sample` resumes the file), check --data/--split, "
                        f"or pass --min-coverage {math.floor(share * 100) / 100:g} to score this subset")
    if total and share < 0.5:
        return (f"{said}: most scenes are absent, and every headline accuracy (acc@1, maj@k, pass@k) counts an "
                f"absent scene as wrong; coverage@1 and acc@1_answered (n beside it) describe the answered ones")
    return None


def require_matches(preds: SampledPredictions, completions: Mapping[Key, Completion], data_root: object) -> None:
    """Raise ValueError when completions exist but none matched a scene and task (scores would be all NaN).

    The usual cause is a completions file sampled from another ``--data`` root or split, so the error
    names one unmatched view key, one scene key of ``data_root`` and the root itself.
    """
    if not completions or preds.counts.get("completions", 0) > 0:
        return
    example = next(iter(completions.values()))
    scene = preds.scenes[0].view if preds.scenes else "(no scenes)"
    raise UserError(
        f"none of the {len(completions)} completions matches a scene of data root {data_root} "
        f"(mode {preds.mode}); e.g. view {example.view!r} task {example.task!r} is not there, while the "
        f"root has views like {scene!r}; pass the --data (and --split) the completions were sampled from"
    )


def first_sample_table(preds: SampledPredictions, name: str) -> ResponderTable:
    """The acc@1 sample as a released-layout table.

    Where the answer is missing, sub-task correctness is NaN (the published tables leave it out of that task's
    denominator) and Object Counting (``main``) correctness is 0: the headline counts no answer as wrong, as the
    released GLM file does. Correctness is NaN wherever the ground truth is missing.
    """
    scenes = preds.scenes
    meta = {c: _gt_array(scenes, c) for c in META_COLUMNS}
    correct, pred, gt = {}, {}, {}
    for column, p in preds.pred.items():
        first = p[:, 0]
        g = preds.gt[column]
        ok = ~np.isnan(g) if column == "main" else ~np.isnan(first) & ~np.isnan(g)
        correct[column] = np.where(ok, (first == g).astype(np.float64), np.nan)
        pred[column], gt[column] = first, g
    return ResponderTable(name, [s.view for s in scenes], [s.object_type for s in scenes], meta, correct, pred, gt)


def _verifier_scores(preds: SampledPredictions) -> dict[str, np.ndarray]:
    if preds.mode != "from-trace" or preds.self_consistency is None or preds.line_hidden is None:
        return {}
    consistent = consistent_mask(preds.self_consistency)
    invariants = invariants_hold({t: preds.pred[t] for t in TRACE_TASKS}, preds.line_hidden)
    return {"self_consistent": consistent.astype(float),
            "self_consistent_and_invariants": (consistent & invariants).astype(float)}


def score_predictions(preds: SampledPredictions, name: str, convention: Convention) -> dict[str, Any]:
    """Every number for one responder (JSON-ready apart from NaN, see :func:`jsonable`)."""
    table = first_sample_table(preds, name)
    verifiers = _verifier_scores(preds)
    decoding = {}
    for column, p in preds.pred.items():
        decoding[column] = decoding_metrics(p, preds.gt[column])
        if column == "main":
            for label, scores in verifiers.items():
                sel = decoding_metrics(p, preds.gt[column], scores)
                decoding[column][f"selected@{preds.k}[{label}]"] = sel[f"selected@{preds.k}"]
                decoding[column]["n"][f"selected@{preds.k}[{label}]"] = len(preds.scenes)  # type: ignore[index]
                decoding[column]["correct"][f"selected@{preds.k}[{label}]"] = sel["correct"][  # type: ignore[index]
                    f"selected@{preds.k}"]
                decoding[column]["selection_rule"] = sel["selection_rule"]
    out: dict[str, Any] = {
        "name": name, "mode": preds.mode, "k": preds.k, "scenes": len(preds.scenes), "convention": convention,
        "parse": preds.parse, "parse_rule": PARSE_RULE_TEXT[preds.parse],
        "coverage": {"scenes": len(preds.scenes), "scenes_covered": preds.counts.get("scenes_covered", 0),
                     "share": preds.coverage},
        "counts": preds.counts,
        "object_counting": decoding.get("main", {}),
        "decoding": decoding,
        **table_metrics(table, convention),
    }
    if preds.mode == "from-trace" and preds.self_consistency is not None:
        out["faithfulness"] = trace_audit(
            preds.pred["main"], preds.gt["main"], {t: preds.pred[t] for t in TRACE_TASKS},
            {t: preds.gt[t] for t in TRACE_TASKS}, preds.self_consistency)
    return out


def table_metrics(table: Any, convention: Convention) -> dict[str, Any]:
    """The per-task, summary, summation and composition numbers of one responder's first-sample table."""
    return {
        "per_task": {c: accuracy(table.correct[c]).as_dict() for c in table.tasks},
        "summary": summary_row(table, convention),
        "summary_by_convention": {c: summary_row(table, c) for c in CONVENTIONS},
        "summation_2x2": summation_2x2(table),
        "composition": composition(table) if "task5" in table.pred and "task8" in table.pred else {},
        "breakdowns": object_counting_breakdowns(table) if "main" in table.correct else {},
    }


RAW_PARSE_RULE = "as recorded in the predictions file (its X_pred columns; nothing is re-parsed)"


def score_table(table: ResponderTable, convention: Convention) -> dict[str, Any]:
    """Every number :func:`score_predictions` gives, for a responder read from a released-layout predictions file
    (one answer per view and task: k = 1, the recorded predictions; no traces, so no faithfulness audit)."""
    decoding: dict[str, Any] = {c: decoding_metrics(table.pred[c][:, None], table.gt[c]) for c in table.tasks}
    answered = int((~np.isnan(table.pred["main"])).sum()) if "main" in table.pred else 0
    return {
        "name": table.name, "mode": "predictions", "k": 1, "scenes": len(table), "convention": convention,
        "parse": "recorded", "parse_rule": RAW_PARSE_RULE, "source": table.source,
        "coverage": {"scenes": len(table), "scenes_covered": len(table), "share": 1.0 if len(table) else math.nan},
        "counts": {"completions": len(table), "unparseable": len(table) - answered, "absent": 0,
                   "unknown_view_or_task": 0, "scenes_covered": len(table), "expected": len(table)},
        "object_counting": decoding.get("main", {}),
        "decoding": decoding,
        **table_metrics(table, convention),
    }


def jsonable(obj: Any) -> Any:
    """NaN/inf -> None and numpy scalars -> Python numbers, recursively."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


RUN_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+-")
"""The characters of a responder (run) name: it becomes part of file names. slurm/eval.sh checks the same rule
(``[A-Za-z0-9._+-]``, not only dots) when it plans a job, so a name scoring would refuse never gets sampled."""


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a responder name (None when it can): empty, only dots, or a character outside
    :data:`RUN_NAME_CHARS`."""
    if not name or name.strip(".") == "" or any(c not in RUN_NAME_CHARS for c in name):
        return "use ASCII letters, digits and . _ + - only, not only dots (it becomes part of file names)"
    return None
