"""The built-in rewards: per-sample pure scorers and their batched, registered forms.

Formulas (docs/rewards.md has the full table):

* ``format``: 1 when the completion holds exactly one well-formed ``<answer>...</answer>`` pair:
  exactly one ``<answer>`` and exactly one ``</answer>``, the opening tag first (so no nesting).
  Tags are exact and case-sensitive; text before and after the pair is allowed.
* ``integer_distance``: ``max(0, 1 - |y_hat - y| / max(|y|, 5))``, ``y_hat`` the integer the
  tags hold (ASCII digits, optional ``-``, whitespace around it allowed); 0 unless ``format`` is 1
  and the tags hold an integer (the gate).
* ``exact_match``: 1 when the gated ``y_hat`` equals ``y``.
* ``stepwise``: the share of CoT lines 2..10 whose value equals the view's ground truth.
* ``consistency``: strict self-consistency: 1 when the trace's own visible (line 6) + hidden
  (line 10) equals its tagged answer and its total line states exactly that sum (a stricter variant
  of evaluation's :func:`spatialiq_train.core.parsing.trace_self_consistent`).
* ``overlong(max_len, cache)``: DAPO's soft overlong penalty, in [-1, 0].
* ``default`` = 0.1 format + 0.9 integer_distance.

Every batched reward scores each sample inside ``try``: a failure scores 0 and is counted by
:mod:`reward.errors`. A missing or mis-sized column is a configuration error and raises at once.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

from reward.errors import record_error
from reward.registry import register, register_combination, register_factory
from spatialiq_train.core.parsing import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    parse_cot_lines,
    parse_trace,
    tag_integer,
    trace_self_consistent,
)
from spatialiq_train.core.tasks import COT_LINE_TASKS, SCORED_COT_LINES

_OPEN_LEN = len(ANSWER_OPEN)
_TAG_TAIL = "answer>"
STEPWISE_FIELDS: tuple[str, ...] = (*(COT_LINE_TASKS[n] for n in SCORED_COT_LINES), "num_hidden_blocks")
"""Ground-truth columns ``stepwise`` compares, in CoT line order 2..10."""


# --- per-sample scorers (pure) ---------------------------------------------------------------


def answer_span(text: str) -> str | None:
    """The content of the single well-formed answer pair, or None when ``format`` is 0.

    A handful of ``str.find`` calls (no Python-level loop over the text), so linear and fast: the
    common path scans the text before the tags once, for the tail ``answer>`` both tags share.
    """
    first = text.find(_TAG_TAIL)
    if first < 0:
        return None
    if first >= 1 and text[first - 1] == "<":  # the first tag is an opening one, so no closing tag precedes it
        start = first - 1
    else:  # the first tail belongs to a closing tag (invalid) or to neither tag (rare, e.g. text starting "answer>")
        if first >= 2 and text[first - 2 : first] == "</":
            return None
        start = text.find(ANSWER_OPEN, first)
        if start < 0 or text.find(ANSWER_CLOSE, 0, start) >= 0:
            return None
    body = start + _OPEN_LEN
    end = text.find(ANSWER_CLOSE, body)
    if end < 0:
        return None
    if text.find(ANSWER_OPEN, body) >= 0 or text.find(ANSWER_CLOSE, end + 1) >= 0:  # a second tag of either kind
        return None
    return text[body:end]


def gated_integer(text: str) -> int | None:
    """The integer ``y_hat`` inside the single well-formed answer pair, else None (the gate)."""
    content = answer_span(text)
    return None if content is None else tag_integer(content)


def as_int(value: Any, column: str) -> int:
    """A ground-truth value as int: ints (not bools) and integer strings pass; anything else is an error."""
    if type(value) is int:  # the hot path
        return value
    if isinstance(value, bool):
        raise ValueError(f"column {column!r}: expected an integer, got the bool {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdecimal() and value.strip().isascii():
        return int(value)
    raise ValueError(f"column {column!r}: expected an integer, got {value!r}")


def _text(completion: Any) -> str:
    if not isinstance(completion, str):
        raise TypeError(f"a completion must be a string, got {type(completion).__name__}")
    return completion


def format_score(completion: str) -> float:
    return 0.0 if answer_span(_text(completion)) is None else 1.0


def integer_distance_score(completion: str, answer: int) -> float:
    y = as_int(answer, "answer")
    y_hat = gated_integer(_text(completion))
    if y_hat is None:
        return 0.0
    return max(0.0, 1.0 - abs(y_hat - y) / max(abs(y), 5))


def exact_match_score(completion: str, answer: int) -> float:
    y = as_int(answer, "answer")
    return 1.0 if gated_integer(_text(completion)) == y else 0.0


def stepwise_score(completion: str, truth: dict[str, Any]) -> float:
    """Equal credit (1/n) for each CoT line 2..10 whose value equals its ground truth.

    ``truth`` maps the :data:`STEPWISE_FIELDS` to integers; fields whose truth is None are left out
    of ``n``; with none left the score is 0.
    """
    tasks, hidden, _ = parse_cot_lines(_text(completion))
    said = {**tasks, "num_hidden_blocks": hidden}
    n = hits = 0
    for field in STEPWISE_FIELDS:
        gt = truth.get(field)
        if gt is None:
            continue
        n += 1
        hits += said.get(field) == as_int(gt, field)
    return hits / n if n else 0.0


def consistency_score(completion: str) -> float:
    """Strict self-consistency: 1 when line 6 + line 10 = the tagged answer and the total line says so.

    Built on the evaluation's predicate :func:`spatialiq_train.core.parsing.trace_self_consistent` (answer =
    the total line's visible + hidden) and stricter than it: the answer is the gated tag integer (no
    total-line or last-integer fallback), lines 6 and 10 must state the total line's two terms, and the
    total line's ``= N`` must be the answer too.
    """
    text = _text(completion)
    answer = gated_integer(text)
    if answer is None:
        return 0.0
    parsed = parse_trace(text)
    total = parsed.total_line
    if not trace_self_consistent(answer, total) or total is None:
        return 0.0
    return 1.0 if (parsed.tasks.get("task5"), parsed.hidden, answer) == total else 0.0


def overlong_penalty(length: int, max_len: int, cache: int) -> float:
    """DAPO soft overlong punishment: 0 up to ``max_len - cache``, then linear down to -1 at ``max_len``, -1 beyond."""
    soft = max_len - cache
    if length <= soft:
        return 0.0
    if length <= max_len:
        return (soft - length) / cache
    return -1.0


# --- batching with counted errors --------------------------------------------------------------


def _column(columns: dict[str, Any], name: str, n: int, reward: str) -> Sequence[Any]:
    if name not in columns or columns[name] is None:
        raise ValueError(f"reward {reward!r} needs the column {name!r}; got columns {sorted(columns)}")
    values = columns[name]
    if len(values) != n:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(values)} values for {n} completions")
    return values


def _score_each(reward: str, fn: Callable[..., float], completions: Sequence[Any], *cols: Sequence[Any]) -> list[float]:
    out: list[float] = []
    for args in zip(completions, *cols, strict=True):
        try:
            out.append(fn(*args))
        except Exception as exc:  # noqa: BLE001 - counted by record_error, scored 0, never hidden
            record_error(reward, exc)
            out.append(0.0)
    return out


@register("format")
def format_reward(completions: list[str], **columns: Any) -> list[float]:
    """1 if the completion holds exactly one well-formed <answer>...</answer> pair, else 0."""
    return _score_each("format", format_score, completions)


@register("integer_distance")
def integer_distance_reward(completions: list[str], *, answer: list[int], **columns: Any) -> list[float]:
    """max(0, 1 - |y_hat - y| / max(|y|, 5)), gated: 0 unless format is 1 and the tags hold an integer."""
    gt = _column({"answer": answer}, "answer", len(completions), "integer_distance")
    return _score_each("integer_distance", integer_distance_score, completions, gt)


@register("exact_match")
def exact_match_reward(completions: list[str], *, answer: list[int], **columns: Any) -> list[float]:
    """1 if the gated answer-tag integer equals the ground truth, else 0."""
    gt = _column({"answer": answer}, "answer", len(completions), "exact_match")
    return _score_each("exact_match", exact_match_score, completions, gt)


@register("stepwise")
def stepwise_reward(completions: list[str], **columns: Any) -> list[float]:
    """Share of CoT lines 2..10 whose value equals the view's ground truth (equal weights)."""
    n = len(completions)
    cols = [_column(columns, f, n, "stepwise") for f in STEPWISE_FIELDS]
    truths = [dict(zip(STEPWISE_FIELDS, row, strict=True)) for row in zip(*cols, strict=True)] if n else []
    return _score_each("stepwise", stepwise_score, completions, truths)


@register("consistency")
def consistency_reward(completions: list[str], **columns: Any) -> list[float]:
    """1 if the trace's visible (line 6) + hidden (line 10) equals its tagged answer and total line."""
    return _score_each("consistency", consistency_score, completions)


def _lengths(completions: Sequence[Any], columns: dict[str, Any]) -> list[Any]:
    """Token counts from ``completion_ids`` (or ``completion_lengths``), else character counts."""
    n = len(completions)
    ids = columns.get("completion_ids")
    if ids is not None:
        return [len(x) for x in _column(columns, "completion_ids", n, "overlong")]
    if columns.get("completion_lengths") is not None:
        return list(_column(columns, "completion_lengths", n, "overlong"))
    return [len(_text(c)) if isinstance(c, str) else c for c in completions]


@register_factory("overlong")
def overlong(max_len: int, cache: int) -> Callable[..., list[float]]:
    """DAPO overlong penalty: 0 to max_len - cache, linear to -1 at max_len, -1 beyond (tokens, else characters)."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 0:
        raise ValueError(f"overlong: max_len must be a positive int, got {max_len!r}")
    if isinstance(cache, bool) or not isinstance(cache, int) or not 0 <= cache < max_len:
        raise ValueError(f"overlong: cache must be an int in [0, max_len), got {cache!r} with max_len={max_len}")

    def overlong_reward(completions: list[str], **columns: Any) -> list[float]:
        lengths = _lengths(completions, columns)

        def one(length: Any) -> float:
            return overlong_penalty(as_int(length, "completion length"), max_len, cache)

        return _score_each("overlong", one, lengths)

    overlong_reward.reward_name = "overlong"  # type: ignore[attr-defined]
    overlong_reward.__doc__ = f"DAPO overlong penalty with max_len={max_len}, cache={cache}."
    return overlong_reward


register_combination("default", {"format": 0.1, "integer_distance": 0.9})
