"""The completion parser: hand-checked cases, and equivalence of the fast integer helpers with the
regular-expression definitions they replace (metrics.md section 1, benchmark-spec 6.4)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spatialiq_train.core.parsing import (
    answer_tag_contents,
    last_integer,
    parse_integer_answer,
    parse_trace,
    strip_think,
    tag_integer,
    trace_self_consistent,
)
from spatialiq_train.core.tasks import fill_cot_template

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
    assert parsed.pred == 12 and parsed.pred_source == "tag"
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
    assert (got.pred, got.pred_source, got.tasks, got.hidden, got.total_line) == ref_parse_trace(text)


def test_cot_lines_are_read_from_the_window_only() -> None:
    from spatialiq_train.core.parsing import COT_WINDOW

    lines = "2) The number of columns in the object structure is: 7.\nThe total is 1 + 2 = 3.\n"
    late = "x\n" * (COT_WINDOW // 2) + lines
    parsed = parse_trace(late)
    assert parsed.tasks["task3"] is None and parsed.total_line is None
    assert parsed.pred == 3 and parsed.pred_source == "last_integer"  # the fallbacks still read everything
    early = "2) The number of columns in the object structure is: 7.\n" + "x\n" * COT_WINDOW
    assert parse_trace(early).tasks["task3"] == 7


@settings(max_examples=300, deadline=None)
@given(text=_COT_TEXT)
def test_parse_cot_lines_agrees_with_parse_trace(text: str) -> None:
    from spatialiq_train.core.parsing import parse_cot_lines

    full = parse_trace(text)
    assert parse_cot_lines(text) == (full.tasks, full.hidden, full.total_line)


# --- The official trained-checkpoint evaluator's rules (evaluate_text_ckpts.py, "cot" mode) ------------------------

from spatialiq_train.core.parsing import (  # noqa: E402
    official_trace_values,
    parse_integer_answer_official,
    parse_trace_official,
    trace_parser,
)

EX_GT = dict(task1="blocks", task2=4, task3=8, task4=2, task5=11, task6=3, task7=3, task8=1, task9=3,
             num_hidden_blocks=1, task_main=12)


def _answer(text: str) -> tuple[int | None, str]:
    official = parse_trace_official(text)
    return official.pred, official.pred_source


def test_official_two_answer_tags_first_integer_tag_wins() -> None:
    text = "<answer>5</answer> on reflection <answer>7</answer>"
    assert _answer(text) == (5, "tag")
    assert parse_trace(text).pred == 7  # strict: the last tag
    later = "<answer>12</answer> then <answer>11.0</answer>"
    assert _answer(later) == (12, "tag")
    assert parse_trace(later).pred == 0  # strict: the last tag, read by its last integer
    skip = "<answer>11.0</answer> <answer> 9 </answer>"  # the first tag holding an integer
    assert _answer(skip) == (9, "tag")


def test_official_non_integer_tag_falls_back_to_the_total_line() -> None:
    trace = fill_cot_template(EX_GT).replace("<answer>12</answer>", "<answer>11.0</answer>")
    assert _answer(trace) == (12, "total_line")
    assert parse_trace(trace).pred == 0 and parse_trace(trace).pred_source == "tag"
    loose = "<think>\nTHE  TOTAL IS\n9+2 =  11.\n</think>\n<answer>eleven</answer>"  # any case, any spacing
    assert _answer(loose) == (11, "total_line")
    assert parse_trace(loose).total_line is None


def test_official_missing_tag_uses_total_line_then_last_integer_outside_think() -> None:
    trace = fill_cot_template(EX_GT).replace("<answer>12</answer>", "")
    assert _answer(trace) == (12, "total_line")
    assert _answer("<think>I see 3 columns</think>so four, 4 blocks") == (4, "last_integer")
    assert _answer("<think>I see 3 columns</think><answer>eleven</answer>") == (None, "missing")
    assert parse_trace("<think>I see 3 columns</think><answer>eleven</answer>").pred == 3  # strict reads think
    assert _answer("1<think>2") == (2, "last_integer")  # an unclosed think span is kept, tag text and all
    assert _answer("7<|end_of_box|>5") == (75, "last_integer")  # box tokens removed before the search
    assert _answer("") == (None, "missing") and _answer(None) == (None, "missing")  # type: ignore[arg-type]


def test_official_answer_tag_is_case_insensitive_and_unicode() -> None:
    assert _answer("<ANSWER>7</Answer>") == (7, "tag")
    assert parse_trace("<ANSWER>7</Answer>").pred_source == "last_integer"  # strict: exact-case tags only
    assert _answer("<answer>\u0661\u0662</answer>") == (12, "tag")  # Python's \d, as the official script
    assert _answer("<answer>" + "9" * 30 + "</answer>") == (int("9" * 30), "tag")  # no digit cap
    huge = "<answer>" + "9" * 5000 + "</answer>"
    assert _answer(huge) == (None, "missing")  # beyond int(): the official script skips the tag; no crash here


def test_official_sub_task_lines_need_their_exact_wording() -> None:
    base = fill_cot_template(EX_GT)
    assert official_trace_values(base)[2] == parse_trace(base).tasks == {
        "task3": 8, "task4": 2, "task2": 4, "task9": 3, "task5": 11, "task7": 3, "task6": 3, "task8": 1}
    variants = {
        "2) Number of columns: 7": None,  # wording differs: not recognised
        "2. The number of columns in the object structure is: 7": None,  # label needs ")"
        "02) The number of columns in the object structure is: 7": None,  # strict accepts "02)"
        "  2)the NUMBER OF COLUMNS is 7": 7,  # any case, spaces optional after the label
        "2) The number of columns in the object structure is: ": 2,  # no value: the label's own 2 is the last int
    }
    for line, expected in variants.items():
        assert official_trace_values(line)[2]["task3"] == expected, line
    assert parse_trace("02) The number of columns is: 7").tasks["task3"] == 7
    assert parse_trace("2) Number of columns: 7").tasks["task3"] == 7
    # lines 6-9 are recognised by their label alone; the first line with a value wins
    assert official_trace_values("6) visible: 10\n6) visible: 11")[2]["task5"] == 10
    assert official_trace_values("7) anything at all -2")[2]["task7"] == -2
    assert official_trace_values("10) hidden: 4\n1) blocks: 3")[2] == dict.fromkeys(official_trace_values("")[2])


def test_official_trace_keeps_line_ten_and_total_for_the_audit() -> None:
    parsed = parse_trace_official(fill_cot_template(EX_GT))
    assert parsed.hidden == 1 and parsed.total_line == (11, 1, 12) and parsed.self_consistent is True
    assert trace_parser("official") is parse_trace_official and trace_parser("strict") is parse_trace
    with pytest.raises(ValueError, match="official, strict"):
        trace_parser("loose")  # type: ignore[arg-type]


def test_official_independent_answer_is_the_last_integer_outside_think() -> None:
    assert parse_integer_answer_official("<think>5</think> it is 7 or 8") == 8
    assert parse_integer_answer_official("<think>5</think>none") is None
    assert parse_integer_answer_official("\u0663") == 3 and parse_integer_answer("\u0663") is None


# The rules restated as the official script states them: one pattern per scored line, tried in order.
_OFFICIAL_REF_LINES = [(task, re.compile(rf"^\s*{n}\){words}", re.IGNORECASE)) for task, n, words in (
    ("task3", 2, r"\s*The number of columns"), ("task4", 3, r"\s*The number of layers"),
    ("task2", 4, r"\s*The number of objects in the top-most"), ("task9", 5, r"\s*The number of distinct clusters"),
    ("task5", 6, ""), ("task7", 7, ""), ("task6", 8, ""), ("task8", 9, ""))]


def _ref_int(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
        return None


def ref_official(raw: str) -> tuple[int | None, dict[str, int | None]]:
    tasks: dict[str, int | None] = {t: None for t, _ in _OFFICIAL_REF_LINES}
    for line in raw.splitlines():
        for task, pattern in _OFFICIAL_REF_LINES:
            if tasks[task] is None and pattern.search(line):
                nums = re.findall(r"-?\d+", line)
                tasks[task] = _ref_int(nums[-1]) if nums else None
                break
    m = re.search(r"<answer>\s*(-?\d+)\s*</answer>", raw, re.IGNORECASE)
    answer = _ref_int(m.group(1)) if m else None
    if answer is None:
        m = re.search(r"the\s+total\s+is\s+-?\d+\s*\+\s*-?\d+\s*=\s*(-?\d+)", raw, re.IGNORECASE)
        answer = _ref_int(m.group(1)) if m else None
    if answer is None:
        body = re.sub(r"<\|begin_of_box\|>|<\|end_of_box\|>|</think>", "",
                      re.sub(r"<think>.*?</think>", "", raw, flags=re.DOTALL))
        nums = re.findall(r"-?\d+", body)
        answer = _ref_int(nums[-1]) if nums else None
    return answer, tasks


_OFFICIAL_PIECES = ["2)", "3) ", " 4)", "5)", "6)", "7)", "9)", "02)", "The number of columns", "the number of LAYERS",
                    "The number of objects in the top-most", "The number of distinct clusters", " is: ", "\n", "\r\n",
                    "<answer>", "</answer>", "<ANSWER>", "<think>", "</think>", "<|end_of_box|>", "The total is ",
                    "the  total\nis", " + ", "+", " = ", "=", "-", ".", "0", "3", "11", "\u0663", "\xa0", "x"]
_OFFICIAL_TEXT = st.one_of(st.lists(st.sampled_from(_OFFICIAL_PIECES), max_size=40).map("".join),
                           st.builds(lambda gt, cut: fill_cot_template(gt)[:cut],
                                     st.just(EX_GT), st.integers(0, 900)))


@settings(max_examples=1500, deadline=None)
@given(text=_OFFICIAL_TEXT)
def test_official_parser_equals_the_official_rules(text: str) -> None:
    answer, _, tasks = official_trace_values(text)
    assert (answer, tasks) == ref_official(text)
