"""The completion parser: hand-checked cases, and equivalence of the fast integer helpers with the
regular-expression definitions they replace (metrics.md section 1, benchmark-spec 6.4)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spatialiq_train.parsing import (
    answer_tag_contents,
    last_integer,
    parse_integer_answer,
    parse_trace,
    strip_think,
    tag_integer,
    trace_self_consistent,
)
from spatialiq_train.tasks import fill_cot_template

# The definitions as first written: a whole-text integer by regex, the last integer by a regex over the
# reversed text, and a refusal of runs over 18 digits.
_REF_WHOLE = re.compile(r"\s*(-?[0-9]+)\s*", re.ASCII)
_REF_REVERSED = re.compile(r"[0-9]+-?", re.ASCII)


def _ref_to_int(digits: str) -> int | None:
    return None if len(digits.lstrip("-")) > 18 else int(digits)


def ref_last_integer(text: str) -> int | None:
    m = _REF_REVERSED.search(text[::-1])
    return None if m is None else _ref_to_int(m.group(0)[::-1])


def ref_tag_integer(content: str) -> int | None:
    m = _REF_WHOLE.fullmatch(content)
    return _ref_to_int(m.group(1)) if m else None


def ref_parse_integer_answer(text: str) -> int | None:
    body = strip_think(text)
    m = _REF_WHOLE.fullmatch(body)
    return _ref_to_int(m.group(1)) if m else ref_last_integer(body)


_ALPHABET = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\xa0", "\u3000", "\u0663", "\uff15", "-", "x",
             "0", "1", "7", "9", "<think>", "</think>"]
_PIECES = st.lists(st.sampled_from(_ALPHABET), max_size=30).map("".join)
_LONG = st.builds(lambda a, n, b: a + "9" * n + b, _PIECES, st.integers(0, 40), _PIECES)
_ANY = st.one_of(_PIECES, _LONG, st.text(max_size=80), st.builds(lambda p, n: p * n, _PIECES, st.integers(0, 40)))


@settings(max_examples=1500, deadline=None)
@given(text=_ANY)
def test_fast_integer_helpers_equal_the_regex_definitions(text: str) -> None:
    assert tag_integer(text) == ref_tag_integer(text)
    assert last_integer(text) == ref_last_integer(text)
    assert parse_integer_answer(text) == ref_parse_integer_answer(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" 12 ", 12),
        ("\n-3\t", -3),
        ("12 blocks", None),
        ("\xa012", None),  # non-ASCII whitespace is not \s under re.ASCII
        ("\x1c12", None),
        ("\u0661\u0662", None),
        ("9" * 18, int("9" * 18)),
        ("9" * 19, None),
        (" " * 1_000_000 + "x", None),  # the case the regex needed ~0.1 s for
        ("1" * 1_000_000, None),
    ],
)
def test_tag_integer_cases(text: str, expected: int | None) -> None:
    assert tag_integer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x" * 300 + "a 12 b -7 c", -7),
        ("x" * 300 + "12-3", -3),
        ("x" * 300 + "9" * 25, None),
        ("x" * 300 + "-" + "9" * 18, -int("9" * 18)),
        ("y" * 300 + "1" + "x" * 300, 1),
        ("\u0663" * 400, None),
    ],
)
def test_last_integer_long_text_window(text: str, expected: int | None) -> None:
    assert last_integer(text) == expected == ref_last_integer(text)


def test_parse_trace_reads_every_line() -> None:
    gt = dict(task1="blocks", task2=4, task3=8, task4=2, task5=11, task6=3, task7=3, task8=1, task9=3,
              num_hidden_blocks=1, task_main=12)
    parsed = parse_trace(fill_cot_template(gt))
    assert parsed.answer == 12 and parsed.answer_source == "tag"
    assert parsed.tasks == {k: gt[k] for k in ("task3", "task4", "task2", "task9", "task5", "task7", "task6", "task8")}
    assert parsed.hidden == 1 and parsed.total_line == (11, 1, 12) and parsed.self_consistent is True


def test_trace_self_consistency_is_answer_equals_visible_plus_hidden() -> None:
    assert trace_self_consistent(12, (11, 1, 12)) is True
    assert trace_self_consistent(12, (11, 1, 99)) is True  # the stated "= N" is not part of the definition
    assert trace_self_consistent(13, (11, 1, 12)) is False
    assert trace_self_consistent(None, (11, 1, 12)) is None and trace_self_consistent(12, None) is None
    text = "The total is 9 + 2 = 11.\n<answer>12</answer>"
    assert parse_trace(text).self_consistent is False
    assert parse_trace("The total is 9 + 2 = 11.").self_consistent is True  # answer from the total line
    assert parse_trace("<answer>11</answer>").self_consistent is None


# parse_trace as first written (before one regex per line replaced the match + last_integer pair).
_REF_COT_LINE = re.compile(r"\s*([0-9]{1,2})\)", re.ASCII)
_REF_TOTAL = re.compile(r"the total is\s+(-?[0-9]+)\s*\+\s*(-?[0-9]+)\s*=\s*(-?[0-9]+)", re.ASCII | re.IGNORECASE)
_REF_LINES = {2: "task3", 3: "task4", 4: "task2", 5: "task9", 6: "task5", 7: "task7", 8: "task6", 9: "task8"}


def ref_parse_trace(text: str) -> tuple[object, ...]:
    values: dict[int, int | None] = {}
    total = None
    for line in text.splitlines():
        m = _REF_COT_LINE.match(line)
        if m:
            number = int(m.group(1))
            if (number in _REF_LINES or number == 10) and number not in values:
                values[number] = ref_last_integer(line[m.end():])
            continue
        if total is None and "total" in line.lower():
            t = _REF_TOTAL.search(line)
            if t:
                parts = [_ref_to_int(g) for g in t.groups()]
                if None not in parts:
                    total = tuple(parts)
    answer, source = None, "missing"
    for content in reversed(answer_tag_contents(text)):
        value = ref_tag_integer(content)
        if value is None:
            value = ref_last_integer(content)
        if value is not None:
            answer, source = value, "tag"
            break
    if answer is None and total is not None:
        answer, source = total[2], "total_line"
    if answer is None:
        answer = ref_last_integer(text)
        source = "last_integer" if answer is not None else "missing"
    return answer, source, {t: values.get(n) for n, t in _REF_LINES.items()}, values.get(10), total


_COT_PIECES = st.sampled_from([
    "2)", "6) ", "10)", " 9)", "02)", "1)", "11)", "123)", "\n", "\r\n", "\x0b", "\u2028", " ", "\t", ".", ": ",
    "-", "--", "x", "0", "7", "42", "9" * 17, "9" * 19, "\u0663", "The total is ", "the TOTAL is\t", " + ", " = ", "+",
    "=", "<answer>", "</answer>", "y" * 300,
])
_COT_TEXT = st.one_of(
    st.lists(_COT_PIECES, max_size=40).map("".join),
    st.text(max_size=120),
    st.builds(lambda gt, cut, junk: fill_cot_template(gt)[:cut] + junk,
              st.fixed_dictionaries({k: st.integers(0, 30) for k in (
                  "task2", "task3", "task4", "task5", "task6", "task7", "task8", "task9", "num_hidden_blocks",
                  "task_main")} | {"task1": st.just("blocks")}),
              st.integers(0, 1000), st.lists(_COT_PIECES, max_size=6).map("".join)),
)


@settings(max_examples=2000, deadline=None)
@given(text=_COT_TEXT)
def test_parse_trace_equals_its_first_implementation(text: str) -> None:
    got = parse_trace(text)
    assert (got.answer, got.answer_source, got.tasks, got.hidden, got.total_line) == ref_parse_trace(text)


def test_cot_lines_are_read_from_the_window_only() -> None:
    from spatialiq_train.parsing import COT_WINDOW

    lines = "2) The number of columns in the object structure is: 7.\nThe total is 1 + 2 = 3.\n"
    late = "x\n" * (COT_WINDOW // 2) + lines
    parsed = parse_trace(late)
    assert parsed.tasks["task3"] is None and parsed.total_line is None
    assert parsed.answer == 3 and parsed.answer_source == "last_integer"  # the fallbacks still read everything
    early = "2) The number of columns in the object structure is: 7.\n" + "x\n" * COT_WINDOW
    assert parse_trace(early).tasks["task3"] == 7


@settings(max_examples=300, deadline=None)
@given(text=_COT_TEXT)
def test_parse_cot_lines_agrees_with_parse_trace(text: str) -> None:
    from spatialiq_train.parsing import parse_cot_lines

    full = parse_trace(text)
    assert parse_cot_lines(text) == (full.tasks, full.hidden, full.total_line)
