"""Completion parsing shared by rewards and evaluation (metrics.md section 1, benchmark-spec 6.3/6.4).

Every function here is pure, never raises on any string, and runs in time linear in the text
(no regular expression that can backtrack across the whole completion). Only ASCII digits count
as digits: ``"٣"`` is not an answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from spatialiq_train.core.tasks import COT_LINE_TASKS, SCORED_COT_LINES

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
_INT_REVERSED = re.compile(r"[0-9]+-?", re.ASCII)
_MAX_DIGITS = 18  # longer digit runs are no answer (and int() of a huge run is slow or refused)
_NON_RE_SPACE = "\x1c\x1d\x1e\x1f"  # ASCII characters str.isspace() accepts but re's ASCII \s does not
_TOTAL_LINE = re.compile(r"the total is\s+(-?[0-9]+)\s*\+\s*(-?[0-9]+)\s*=\s*(-?[0-9]+)", re.ASCII | re.IGNORECASE)
_COT_LINE_VALUE = re.compile(r"\s*([0-9]{1,2})\)(?:.*(?<![0-9])([0-9]+)[^0-9]*\Z|)", re.ASCII | re.DOTALL)
"""A CoT line's label ``N)`` (group 1) and its last digit run (group 2; None when the rest has no digit).

``.*`` runs to the end of the line and backtracks: positions after the last run fail at ``[0-9]+``, positions
inside it at the look-behind, so the scan is linear and finds the run a reversed search would.
"""
_VALUE_LINE_KEYS = {f"{p}{n}": n for n in (*SCORED_COT_LINES, 10) for p in ("", "0") if len(f"{p}{n}") <= 2}
"""CoT line labels whose value is read ("2".."10", "02".."09"), to their line numbers."""
_BOX_TOKENS = ("<|begin_of_box|>", "<|end_of_box|>")


def strip_think(text: str) -> str:
    """Remove ``<think>...</think>`` spans, GLM box tokens and stray ``</think>`` (benchmark-spec 6.4)."""
    out: list[str] = []
    pos = 0
    while True:
        start = text.find("<think>", pos)
        if start < 0:
            out.append(text[pos:])
            break
        end = text.find("</think>", start)
        if end < 0:  # an unclosed <think> swallows the rest, as a non-greedy regex would not match it
            out.append(text[pos:start])
            out.append(text[start + len("<think>"):])
            break
        out.append(text[pos:start])
        pos = end + len("</think>")
    cleaned = "".join(out).replace("</think>", "")
    for token in _BOX_TOKENS:
        cleaned = cleaned.replace(token, "")
    return cleaned


def _to_int(digits: str) -> int | None:
    # Guard int() against multi-megabyte digit runs (Python refuses > 4300 digits anyway).
    if len(digits.lstrip("-")) > _MAX_DIGITS:
        return None
    return int(digits)


def _whole_int_text(text: str) -> str | None:
    r"""``text`` without surrounding whitespace if that is ``-?[0-9]{1,18}``, else None.

    Callers get what the regex ``\s*(-?[0-9]+)\s*`` (ASCII, fullmatch) followed by
    :func:`_to_int` gave them, without its costs: that regex backtracks through a megabyte of
    spaces (about 0.1 s) and ``str.isdigit`` on a megabyte of digits takes about 10 ms, so runs
    over 18 digits are refused by length first (they were refused by ``_to_int`` anyway, and the
    last-integer fallback refuses them too). ``str.strip()`` also removes non-ASCII whitespace and
    ``\x1c``-``\x1f``, so the removed padding is checked to hold ASCII ``\s`` only.
    """
    stripped = text.strip()
    digits = stripped[1:] if stripped.startswith("-") else stripped
    if not (0 < len(digits) <= _MAX_DIGITS and digits.isascii() and digits.isdigit()):
        return None
    if len(stripped) != len(text):
        lead = len(text) - len(text.lstrip())
        pad = text[:lead] + text[lead + len(stripped) :]
        if not pad.isascii() or any(c in pad for c in _NON_RE_SPACE):
            return None
    return stripped


def last_integer(text: str) -> int | None:
    """The last ASCII integer in ``text``, or None."""
    if len(text) > 256:  # long text: find the last digit with C-speed rfind, then parse a short window
        end = max(map(text.rfind, "0123456789"))
        if end < 0:
            return None
        text = text[max(0, end - _MAX_DIGITS - 2) : end + 1]  # longer runs are refused by _to_int either way
    m = _INT_REVERSED.search(text[::-1])  # the first match in the reversed text is the last integer
    return None if m is None else _to_int(m.group(0)[::-1])


def parse_integer_answer(text: str) -> int | None:
    """Independent-mode prediction: strip think spans; the whole text if it is an integer, else the last integer."""
    if not isinstance(text, str):
        return None
    body = strip_think(text)
    whole = _whole_int_text(body)
    if whole is not None:
        return _to_int(whole)
    return last_integer(body)


def answer_tag_contents(text: str) -> list[str]:
    """The raw contents of every complete, non-nested ``<answer>...</answer>`` pair, in order."""
    contents: list[str] = []
    pos = 0
    while True:
        start = text.find(ANSWER_OPEN, pos)
        if start < 0:
            return contents
        body_start = start + len(ANSWER_OPEN)
        end = text.find(ANSWER_CLOSE, body_start)
        if end < 0:
            return contents
        inner_open = text.rfind(ANSWER_OPEN, body_start, end)
        if inner_open >= 0:  # nested or repeated opening tag: keep the innermost pair
            body_start = inner_open + len(ANSWER_OPEN)
        contents.append(text[body_start:end])
        pos = end + len(ANSWER_CLOSE)


def tag_integer(content: str) -> int | None:
    """The integer held by an answer tag's content (surrounding whitespace allowed), else None."""
    whole = _whole_int_text(content)
    return None if whole is None else _to_int(whole)


def trace_self_consistent(answer: int | None, total_line: tuple[int, int, int] | None) -> bool | None:
    """Trace self-consistency (metrics.md section 7), the project's one definition.

    True when the final ``answer`` equals the trace's own visible + hidden, the first two terms of
    its total line "The total is a + b = N"; None (undefined) when the answer or the total line is
    absent. Evaluation reads it through :attr:`ParsedTrace.self_consistent`; the ``consistency``
    reward is a stricter variant built on it (reward/functions.py, docs/rewards.md).
    """
    if answer is None or total_line is None:
        return None
    return total_line[0] + total_line[1] == answer


@dataclass(frozen=True)
class ParsedTrace:
    """What a from-trace completion says."""

    pred: int | None
    """The responder's Object Counting answer: the answer tag, else the total line, else the last integer."""
    pred_source: str
    """``tag``, ``total_line``, ``last_integer`` or ``missing``."""
    tasks: dict[str, int | None] = field(default_factory=dict)
    """Sub-task values from CoT lines 2..9 (last integer on the line), keyed by task id."""
    hidden: int | None = None
    """Line 10, the trace's hidden count (not a scored task)."""
    total_line: tuple[int, int, int] | None = None
    """``(visible, hidden, total)`` from "The total is a + b = N", if present."""

    @property
    def self_consistent(self) -> bool | None:
        """Whether the final answer equals the trace's own visible + hidden (:func:`trace_self_consistent`)."""
        return trace_self_consistent(self.pred, self.total_line)


COT_WINDOW = 16 * 1024
"""Characters of a completion searched for CoT lines and the total line. A 1024-token completion is a few KiB,
so real traces fit with room to spare, and a megabyte of adversarial text costs no more than 16 KiB of lines
(the answer tag and the last-integer fallback still read the whole text)."""


def _cot_lines(body: str) -> tuple[dict[int, int | None], tuple[int, int, int] | None]:
    values: dict[int, int | None] = {}
    total: tuple[int, int, int] | None = None
    for line in body[:COT_WINDOW].splitlines():
        m = _COT_LINE_VALUE.match(line)  # one match per line: the CoT label and last_integer of the rest
        if m:
            number = _VALUE_LINE_KEYS.get(m.group(1))
            if number is not None and number not in values:
                digits = m.group(2)
                if digits is None or len(digits) > _MAX_DIGITS:
                    values[number] = None
                else:
                    values[number] = -int(digits) if line[m.start(2) - 1] == "-" else int(digits)
            continue
        if total is None and "total" in line.lower():
            t = _TOTAL_LINE.search(line)
            if t:
                parts = [_to_int(g) for g in t.groups()]
                if None not in parts:
                    total = (parts[0], parts[1], parts[2])  # type: ignore[assignment]
    return values, total


def parse_cot_lines(text: str) -> tuple[dict[str, int | None], int | None, tuple[int, int, int] | None]:
    """Only the trace's lines: (sub-task values of lines 2..9 by task id, line 10, the total line). Never raises.

    What :func:`parse_trace` reports for these, without looking for the final answer (cheaper for rewards that
    score the lines alone).
    """
    values, total = _cot_lines(text) if isinstance(text, str) else ({}, None)
    return {COT_LINE_TASKS[n]: values.get(n) for n in SCORED_COT_LINES}, values.get(10), total


def parse_trace(text: str) -> ParsedTrace:
    """Parse a CoT completion into its final answer and per-line sub-task values. Never raises."""
    if not isinstance(text, str):
        return ParsedTrace(None, "missing")
    values, total = _cot_lines(text)
    tasks = {COT_LINE_TASKS[n]: values.get(n) for n in SCORED_COT_LINES}
    answer, source = None, "missing"
    for content in reversed(answer_tag_contents(text)):
        value = tag_integer(content)
        if value is None:
            value = last_integer(content)
        if value is not None:
            answer, source = value, "tag"
            break
    if answer is None and total is not None:
        answer, source = total[2], "total_line"
    if answer is None:
        answer = last_integer(text)
        source = "last_integer" if answer is not None else "missing"
    return ParsedTrace(answer, source, tasks, values.get(10), total)


# --- The official trained-checkpoint evaluator's rules (NVIDIA/Spatial-IQ
# evaluation/trained_ckpts/evaluate_text_ckpts.py, "cot" mode), restated. Unlike the rules above these use
# Python's Unicode ``\d``/``\s`` and no digit cap, because the official script does.
ParseRule = Literal["official", "strict"]
PARSE_RULES: tuple[ParseRule, ...] = ("official", "strict")
OFFICIAL_RULE = (
    "official (evaluate_text_ckpts.py): answer = the first case-insensitive <answer>INT</answer> whose content is an "
    "integer, else the first 'the total is a + b = N' (any case and spacing) N, else the last integer outside think "
    "spans; sub-tasks = the last integer on the first line starting 'N)' for N = 2..9, lines 2-5 only with their "
    "template wording ('The number of columns' / 'layers' / 'objects in the top-most' / 'distinct clusters')"
)
STRICT_RULE = (
    "strict (spatialiq_train.core.parsing.parse_trace): answer = the last <answer>...</answer> pair holding a number "
    "(exact-case tags; the whole content if an integer, else its last integer), else the total line's N, else the "
    "last integer; sub-tasks = the last integer on the first line labelled 'N)' or '0N)', any wording; ASCII digits "
    "and at most 18 of them"
)
_OFFICIAL_TAG = re.compile(r"<answer>\s*(-?\d+)\s*</answer>", re.IGNORECASE)
_OFFICIAL_TOTAL = re.compile(r"the\s+total\s+is\s+-?\d+\s*\+\s*-?\d+\s*=\s*(-?\d+)", re.IGNORECASE)
_OFFICIAL_LABEL = re.compile(r"\s*([2-9])\)")
_OFFICIAL_WORDING = {
    n: re.compile(r"\s*The number of " + words, re.IGNORECASE)
    for n, words in ((2, "columns"), (3, "layers"), (4, "objects in the top-most"), (5, "distinct clusters"))
}
"""Lines 2-5 are recognised by label and wording; lines 6-9 by their label alone."""
_OFFICIAL_INT_REVERSED = re.compile(r"\d+-?")
_OFFICIAL_TOKENS = re.compile(r"<\|begin_of_box\|>|<\|end_of_box\|>|</think>")


def _official_int(digits: str) -> int | None:
    try:
        return int(digits)
    except ValueError:  # beyond Python's int-string limit (4300 digits): the official script skips it too
        return None


def _official_last_int(text: str) -> int | None:
    m = _OFFICIAL_INT_REVERSED.search(text[::-1])  # the first match in the reversed text is the last integer
    return None if m is None else _official_int(m.group(0)[::-1])


def _official_strip(text: str) -> str:
    """Closed ``<think>...</think>`` spans removed (an unclosed one is kept), then box tokens and ``</think>``."""
    out: list[str] = []
    pos = 0
    while (start := text.find("<think>", pos)) >= 0:
        end = text.find("</think>", start + len("<think>"))
        if end < 0:
            break
        out.append(text[pos:start])
        pos = end + len("</think>")
    out.append(text[pos:])
    return _OFFICIAL_TOKENS.sub("", "".join(out))


def official_trace_values(text: str) -> tuple[int | None, str, dict[str, int | None]]:
    """(answer, its source, sub-task values by task id) exactly as the official evaluator reads a CoT completion.

    The answer source is ``tag``, ``total_line``, ``last_integer`` or ``missing``. Never raises; where the
    official script itself would crash (a last integer of over 4300 digits) the answer is None.
    """
    tasks: dict[str, int | None] = {COT_LINE_TASKS[n]: None for n in SCORED_COT_LINES}
    if not isinstance(text, str):
        return None, "missing", tasks
    for line in text.splitlines():
        label = _OFFICIAL_LABEL.match(line)
        if label is None:
            continue
        number = int(label.group(1))
        wording = _OFFICIAL_WORDING.get(number)
        if wording is not None and wording.match(line, label.end()) is None:
            continue
        task = COT_LINE_TASKS[number]
        if tasks[task] is None:  # the first line with a value wins; a line without one leaves the task open
            tasks[task] = _official_last_int(line)
    tag = _OFFICIAL_TAG.search(text)
    answer = _official_int(tag.group(1)) if tag else None
    if answer is not None:
        return answer, "tag", tasks
    total = _OFFICIAL_TOTAL.search(text)
    answer = _official_int(total.group(1)) if total else None
    if answer is not None:
        return answer, "total_line", tasks
    answer = _official_last_int(_official_strip(text))
    return answer, "last_integer" if answer is not None else "missing", tasks


def parse_trace_official(text: str) -> ParsedTrace:
    """:func:`parse_trace` under the official evaluator's rules (:data:`OFFICIAL_RULE`). Never raises.

    The answer and the sub-task values are the official ones; line 10 and the total line (which the official
    script does not score) are read as :func:`parse_trace` reads them, for the faithfulness audit.
    """
    answer, source, tasks = official_trace_values(text)
    values, total = _cot_lines(text) if isinstance(text, str) else ({}, None)
    return ParsedTrace(answer, source, tasks, values.get(10), total)


def parse_integer_answer_official(text: str) -> int | None:
    """Independent-mode prediction as the official ``evaluation_text.py`` reads it: the last integer outside
    think spans (Unicode digits, no digit cap). Never raises."""
    return _official_last_int(_official_strip(text)) if isinstance(text, str) else None


def trace_parser(rule: ParseRule) -> Callable[[str], ParsedTrace]:
    """The from-trace parser of ``rule`` (``official`` or ``strict``); ValueError for another name."""
    parsers = {"official": parse_trace_official, "strict": parse_trace}
    if rule not in parsers:
        raise ValueError(f"unknown parse rule {rule!r}; valid: {', '.join(PARSE_RULES)}")
    return parsers[rule]
