"""Rewards: formulas at hand-computed points, robustness, registry, TRL/NeMo adapters and the CLI."""

from __future__ import annotations

import pickle
import re
from re import _parser as sre_parse  # type: ignore[attr-defined]

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import reward.functions as rf
import spatialiq_train.core.parsing as parsing
from reward import (
    Combination,
    combine,
    error_counts,
    get_reward,
    list_rewards,
    register,
    reset_errors,
    resolve_reward,
)
from reward.nemo import score_message_logs_components
from reward.trl import make_trl_reward, make_trl_reward_funcs
from spatialiq_train.cli import app
from spatialiq_train.core.tasks import fill_cot_template

EX4 = dict(task1="blocks", task2=4, task3=8, task4=2, task5=11, task6=3, task7=3, task8=1, task9=3,
           num_hidden_blocks=1, task_main=12)
GT_COLUMNS = {k: [v] for k, v in EX4.items() if k != "task1"}
GOLD = fill_cot_template(EX4)


@pytest.fixture(autouse=True)
def _clean_errors():
    reset_errors()
    yield
    reset_errors()


def score(name: str, text: str, answer: int = 12, **columns) -> float:
    cols = {**GT_COLUMNS, **columns}
    return get_reward(name)([text], answer=[answer], **cols)[0]


# --- formulas at hand-computed points ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer", "expected"),
    [
        ("<answer>12</answer>", 12, 1.0),
        ("<answer>10</answer>", 12, 1 - 2 / 12),
        ("<answer>30</answer>", 12, 0.0),  # clipped at 0
        ("<answer>2</answer>", 0, 1 - 2 / 5),  # y = 0 uses the denominator 5
        ("<answer>-2</answer>", 0, 1 - 2 / 5),
        ("<answer>5</answer>", 0, 0.0),
        ("<answer>4</answer>", 3, 1 - 1 / 5),  # |y| < 5 still uses 5
        ("<answer>-1</answer>", -3, 1 - 2 / 5),  # negative answers
        ("<answer>-5</answer>", -10, 1 - 5 / 10),
        ("<answer>5</answer>", -10, 0.0),
        ("<answer> \n12\t </answer>", 12, 1.0),  # whitespace inside the tags
        ("<think>6 + 6</think>\n<answer>11</answer> trailing words 99", 12, 1 - 1 / 12),  # trailing text allowed
        ("<answer>12</answer><answer>12</answer>", 12, 0.0),  # two pairs: format 0, so gated to 0
        ("<answer><answer>12</answer></answer>", 12, 0.0),  # nested
        ("</answer><answer>12</answer>", 12, 0.0),  # closing tag first
        ("<answer>12</answer><answer>", 12, 0.0),
        ("<answer>12", 12, 0.0),
        ("12", 12, 0.0),  # no tags: the gate
        ("<ANSWER>12</ANSWER>", 12, 0.0),  # tags are case-sensitive
        ("<answer>12.0</answer>", 12, 0.0),  # not an integer
        ("<answer>+12</answer>", 12, 0.0),
        ("<answer>twelve</answer>", 12, 0.0),
        ("<answer>12 blocks</answer>", 12, 0.0),
        ("<answer>\u0661\u0662</answer>", 12, 0.0),  # Arabic-Indic digits are not digits here
        ("<answer>\uff11\uff12</answer>", 12, 0.0),  # fullwidth digits
        ("<answer>" + "9" * 40 + "</answer>", 12, 0.0),  # huge: no integer
        ("<answer>-" + "9" * 18 + "</answer>", 12, 0.0),
    ],
)
def test_integer_distance_points(text: str, answer: int, expected: float) -> None:
    assert score("integer_distance", text, answer) == pytest.approx(expected, abs=1e-12)
    fmt = score("format", text, answer)
    assert score("default", text, answer) == pytest.approx(0.1 * fmt + 0.9 * expected, abs=1e-12)
    assert score("exact_match", text, answer) == (1.0 if expected == 1.0 else 0.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>x</answer>", 1.0),  # format only checks the pair, not its content
        ("<answer></answer>", 1.0),
        ("pre <answer>12</answer> post", 1.0),
        ("<answer>1</answer></answer>", 0.0),
        ("<answer><answer>1</answer>", 0.0),
        ("</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_format_points(text: str, expected: float) -> None:
    assert score("format", text) == expected


def test_gold_trace_scores_one_everywhere() -> None:
    for name in ("default", "format", "integer_distance", "exact_match", "stepwise", "consistency"):
        assert score(name, GOLD) == 1.0, name


def test_stepwise_weights_each_line_equally() -> None:
    one_wrong = GOLD.replace("number of layers in the object structure is: 2.", "number of layers in the object "
                             "structure is: 3.")
    hidden_wrong = GOLD.replace("the number of hidden objects is: 1.", "the number of hidden objects is: 2.")
    assert score("stepwise", one_wrong) == pytest.approx(8 / 9)
    assert score("stepwise", hidden_wrong) == pytest.approx(8 / 9)
    assert score("stepwise", "<answer>12</answer>") == 0.0
    # A view whose truth lacks a field leaves that line out of the denominator.
    assert score("stepwise", one_wrong, task4=[None]) == 1.0
    nothing = {f: [None] for f in rf.STEPWISE_FIELDS}
    assert score("stepwise", GOLD, **nothing) == 0.0


def test_consistency_uses_the_traces_own_numbers() -> None:
    wrong_but_consistent = fill_cot_template(dict(EX4, task5=9, num_hidden_blocks=2, task_main=11))
    assert score("consistency", wrong_but_consistent) == 1.0  # consistent, though wrong against the truth
    assert score("integer_distance", wrong_but_consistent) == pytest.approx(1 - 1 / 12)
    assert score("consistency", GOLD.replace("<answer>12</answer>", "<answer>13</answer>")) == 0.0
    assert score("consistency", GOLD.replace("11 + 1 = 12", "10 + 2 = 12")) == 0.0  # total line vs lines 6 and 10
    assert score("consistency", GOLD.replace("<answer>12</answer>", "")) == 0.0  # gated on the answer tag
    assert score("consistency", GOLD.replace("The total is 11 + 1 = 12.\n", "")) == 0.0


@settings(max_examples=300, deadline=None)
@given(visible=st.integers(0, 12), hidden=st.integers(0, 4), stated=st.integers(0, 20), tag=st.integers(0, 20),
       line6=st.integers(0, 12))
def test_consistency_reward_is_the_strict_variant_of_trace_self_consistency(
        visible: int, hidden: int, stated: int, tag: int, line6: int) -> None:
    text = (GOLD.replace("The total is 11 + 1 = 12", f"The total is {visible} + {hidden} = {stated}")
            .replace("<answer>12</answer>", f"<answer>{tag}</answer>")
            .replace("the number of visible objects is: 11", f"the number of visible objects is: {line6}")
            .replace("the number of hidden objects is: 1", f"the number of hidden objects is: {hidden}"))
    shared = parsing.trace_self_consistent(tag, (visible, hidden, stated))
    assert parsing.parse_trace(text).self_consistent is shared
    strict = score("consistency", text)
    assert strict == (1.0 if shared and stated == tag and line6 == visible else 0.0)


def test_overlong_penalty_values() -> None:
    fn = get_reward("overlong", max_len=100, cache=20)
    by_chars = fn(["a" * 80, "a" * 90, "a" * 100, "a" * 101], answer=[1] * 4)
    assert by_chars == [0.0, pytest.approx(-0.5), pytest.approx(-1.0), -1.0]
    # Token ids win over characters; lengths are the fallback before characters.
    assert fn(["a" * 500], answer=[1], completion_ids=[[7] * 85]) == [pytest.approx(-0.25)]
    assert fn(["a" * 500], answer=[1], completion_lengths=[50]) == [0.0]
    assert get_reward("overlong", max_len=10, cache=0)(["a" * 10, "a" * 11], answer=[1, 1]) == [0.0, -1.0]
    for bad in ({"max_len": 0, "cache": 0}, {"max_len": 10, "cache": 10}, {"max_len": 10.5, "cache": 1}):
        with pytest.raises(ValueError, match="overlong"):
            get_reward("overlong", **bad)
    with pytest.raises(ValueError, match="parameters"):
        get_reward("overlong", max_len=10)


# --- errors are counted, configuration mistakes raise ----------------------------------------------


def test_overlong_equals_trls_soft_overlong_punishment() -> None:
    trl_rewards = pytest.importorskip("trl.rewards")
    ours = get_reward("overlong", max_len=100, cache=20)
    theirs = trl_rewards.get_soft_overlong_punishment(100, 20)
    ids = [[1] * n for n in (0, 50, 80, 81, 90, 99, 100, 101, 400)]
    expected = theirs(completion_ids=ids)
    assert ours(["x"] * len(ids), answer=[1] * len(ids), completion_ids=ids) == pytest.approx(expected, abs=1e-12)
    assert expected[4] == pytest.approx(-0.5) and expected[-1] == -1.0


def test_sample_errors_score_zero_and_are_counted() -> None:
    fn = get_reward("default")
    assert fn([None, "<answer>3</answer>", "<answer>3</answer>"], answer=[3, "x", True]) == [0.0, 0.1, 0.1]
    assert error_counts() == {"format": 1, "integer_distance": 3}
    assert get_reward("integer_distance")(["<answer>3</answer>"], answer=["3"]) == [1.0]  # integer strings pass


def test_configuration_errors_raise() -> None:
    with pytest.raises(ValueError, match="'task3'"):
        get_reward("stepwise")([GOLD], answer=[12])
    with pytest.raises(ValueError, match="2 values for 1 completions"):
        get_reward("integer_distance")([GOLD], answer=[12, 12])
    with pytest.raises(TypeError):
        get_reward("integer_distance")([GOLD])


# --- robustness: never raise, never hang -----------------------------------------------------------

_PIECES = st.sampled_from(["<answer>", "</answer>", "<think>", "</think>", "-", " ", "\n", "7", "12", "x", "\u0663",
                           "2) ", "10) ", "The total is ", " + ", " = ", "\uff15"])
_TEXT = st.one_of(st.text(max_size=200), st.lists(_PIECES, max_size=40).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT, answer=st.integers(min_value=-(10**30), max_value=10**30))
def test_every_reward_is_total_and_bounded(text: str, answer: int) -> None:
    for name in ("format", "integer_distance", "exact_match", "default", "stepwise", "consistency"):
        value = score(name, text, answer)
        assert 0.0 <= value <= 1.0, name
    assert -1.0 <= get_reward("overlong", max_len=50, cache=10)([text], answer=[answer])[0] <= 0.0
    assert error_counts() == {}


@settings(max_examples=300, deadline=None)
@given(text=st.lists(_PIECES, max_size=30).map("".join))
def test_format_matches_a_reference_definition(text: str) -> None:
    once = text.count("<answer>") == 1 and text.count("</answer>") == 1
    reference = once and text.index("<answer>") < text.index("</answer>")
    assert score("format", text) == (1.0 if reference else 0.0)


def _reference_span(text: str) -> str | None:
    """docs/rewards.md's rule, written the obvious way: one <answer>, one </answer>, opening first."""
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return None
    start, end = text.index("<answer>"), text.index("</answer>")
    return text[start + len("<answer>"):end] if start < end else None


_TAG_PIECES = st.sampled_from(["<answer>", "</answer>", "answer>", "<", "/", "</", "a", "5", " ", "<answer", "nswer>"])


@settings(max_examples=1000, deadline=None)
@given(text=st.lists(_TAG_PIECES, max_size=12).map("".join))
def test_answer_span_matches_the_documented_rule_on_tag_fragments(text: str) -> None:
    assert rf.answer_span(text) == _reference_span(text)
    assert score("format", text) == (0.0 if _reference_span(text) is None else 1.0)


@pytest.mark.parametrize("text", ["answer> then <answer>5</answer>", "answer><answer>5</answer>",
                                  "/answer><answer>5</answer>", "xanswer> <answer>5</answer> tail answer>"])
def test_stray_tag_tail_before_the_pair_is_not_a_tag(text: str) -> None:
    assert score("format", text) == 1.0
    assert score("integer_distance", text, 5) == 1.0


@settings(max_examples=300, deadline=None)
@given(y_hat=st.integers(-(10**17), 10**17), y=st.integers(-(10**6), 10**6), pad=st.sampled_from(["", " ", "\n\t"]))
def test_integer_distance_matches_formula(y_hat: int, y: int, pad: str) -> None:
    text = f"reasoning <answer>{pad}{y_hat}{pad}</answer>"
    assert score("integer_distance", text, y) == pytest.approx(max(0.0, 1 - abs(y_hat - y) / max(abs(y), 5)))


def _has_nested_repeat(items, inside_repeat: bool = False) -> bool:
    repeats = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, getattr(sre_parse, "POSSESSIVE_REPEAT", None)}
    for op, av in items:
        if op in repeats:
            _lo, hi, sub = av
            unbounded = hi == sre_parse.MAXREPEAT or hi > 2
            if inside_repeat and unbounded:
                return True
            if _has_nested_repeat(sub, inside_repeat or unbounded):
                return True
        elif op == sre_parse.SUBPATTERN and _has_nested_repeat(av[-1], inside_repeat):
            return True
        elif op == sre_parse.BRANCH and any(_has_nested_repeat(b, inside_repeat) for b in av[1]):
            return True
    return False


def test_no_regex_with_nested_quantifiers() -> None:
    """Linear time structurally: no pattern the rewards use can backtrack catastrophically."""
    import reward.registry as rr

    patterns = [v for m in (parsing, rf, rr) for v in vars(m).values() if isinstance(v, re.Pattern)]
    assert len(patterns) >= 4
    for pattern in patterns:
        assert not _has_nested_repeat(sre_parse.parse(pattern.pattern, pattern.flags)), pattern.pattern
    assert _has_nested_repeat(sre_parse.parse(r"(a+)+b"))  # the checker itself catches the classic case


@pytest.mark.parametrize(
    "adversarial",
    [
        "<answer>" * 125_000,
        "<answer>" + " " * 1_000_000 + "x</answer>",
        "<answer>" + "1" * 1_000_000 + "</answer>",
        ("2) " + "9" * 100 + "\n") * 9_000 + "The total is " + "1 + " * 50_000,
        "<think>" * 70_000 + "</answer>" * 50_000,
        "\u0663" * 1_000_000,
    ],
)
def test_megabyte_adversarial_completions_score(adversarial: str) -> None:
    assert len(adversarial) >= 900_000
    for name in ("integer_distance", "stepwise", "consistency"):
        assert score(name, adversarial) == 0.0, name
    well_formed = adversarial.count("<answer>") == 1 == adversarial.count("</answer>")
    assert score("default", adversarial) == pytest.approx(0.1 if well_formed else 0.0)
    assert error_counts() == {}


# --- registry -------------------------------------------------------------------------------------


def test_registry_names_and_errors() -> None:
    names = {i.name: i.kind for i in list_rewards()}
    assert names == {"format": "reward", "integer_distance": "reward", "exact_match": "reward", "stepwise": "reward",
                     "consistency": "reward", "overlong": "factory", "default": "combination",
                     "hole_partial": "reward", "hole_exact": "reward", "folding": "combination"}
    with pytest.raises(ValueError, match="already registered"):
        register("format")(lambda completions, **c: [0.0] * len(completions))
    with pytest.raises(ValueError, match="unknown reward 'nope'; valid: consistency, default, exact_match, folding"):
        get_reward("nope")
    with pytest.raises(ValueError, match="takes no parameters"):
        get_reward("format", max_len=3)
    assert get_reward("reward.functions:format_reward") is rf.format_reward
    with pytest.raises(ValueError, match="cannot import"):
        get_reward("no_such_module_xyz:fn")
    with pytest.raises(ValueError, match="no callable"):
        get_reward("reward.functions:missing")
    with pytest.raises(ValueError, match="not a registered reward"):
        get_reward("os:system")  # a dotted path reaches registered rewards only, never arbitrary callables


def test_combinations() -> None:
    default = get_reward("default")
    assert isinstance(default, Combination) and default.weights == {"format": 0.1, "integer_distance": 0.9}
    mixed = combine({"default": 2.0, "format": 0.3, "stepwise": 0.5, "overlong": {"weight": 1, "max_len": 20,
                                                                                   "cache": 5}})
    assert mixed.weights == pytest.approx({"format": 0.5, "integer_distance": 1.8, "stepwise": 0.5, "overlong": 1.0})
    text = "<answer>10</answer>"
    comps = mixed.components([text], answer=[12], **GT_COLUMNS)
    assert comps["overlong"] == [pytest.approx(-0.8)]
    expected = 0.5 + 1.8 * (1 - 2 / 12) + 0.0 - 0.8
    assert mixed([text], answer=[12], **GT_COLUMNS) == [pytest.approx(expected)]
    assert resolve_reward({"format": 1.0})(["<answer>1</answer>"], answer=[0]) == [1.0]
    for bad in ({}, {"format": "high"}, {"format": float("nan")}, {"overlong": {"max_len": 3}}):
        with pytest.raises(ValueError):
            combine(bad)


# --- engine adapters ------------------------------------------------------------------------------


def test_trl_adapter_conversational_and_kwargs() -> None:
    from trl.trainer.utils import get_callable_name

    logged: dict[str, list[float]] = {}
    fn = make_trl_reward("default")
    assert get_callable_name(fn) == "default"
    completions = [
        [{"role": "assistant", "content": GOLD}],
        [{"role": "assistant", "content": [{"type": "text", "text": "<answer>10</answer>"}]}],
        [{"role": "user", "content": "no assistant turn"}],
        "<answer>12</answer>",
    ]
    out = fn(
        prompts=[[{"role": "user", "content": "q"}]] * 4,
        completions=completions,
        completion_ids=[[1, 2, 3]] * 4,
        answer=[12, 12, 12, 12],
        view=["a", "b", "c", "d"],
        trainer_state=object(),
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: logged.setdefault(name, []).append(value),
        **{k: v * 4 for k, v in GT_COLUMNS.items()},
    )
    assert out == [1.0, pytest.approx(0.1 + 0.9 * (1 - 2 / 12)), 0.0, 1.0]
    assert logged["reward/default/errors"] == [2.0]  # the turn-less sample, once per term
    assert logged["reward/default/format"] == [pytest.approx(0.75)]
    clone = pickle.loads(pickle.dumps(fn))
    assert clone.__name__ == "default" and clone(completions=["<answer>12</answer>"], answer=[12]) == [1.0]


def test_trl_multi_reward_funcs() -> None:
    funcs, weights = make_trl_reward_funcs("default")
    assert [f.__name__ for f in funcs] == ["format", "integer_distance"] and weights == [0.1, 0.9]
    funcs, weights = make_trl_reward_funcs({"default": 1.0, "overlong": {"weight": 0.5, "max_len": 8, "cache": 4}})
    assert [f.__name__ for f in funcs] == ["format", "integer_distance", "overlong"] and weights == [0.1, 0.9, 0.5]
    assert funcs[2](completions=["x"], answer=[1], completion_ids=[[0] * 6]) == [pytest.approx(-0.5)]
    with pytest.raises(ValueError, match="unknown reward"):
        make_trl_reward_funcs({"nope": 1.0})


def test_nemo_core() -> None:
    logs = [
        [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "q"}]},
         {"role": "assistant", "content": "<answer>1</answer>"}, {"role": "assistant", "content": GOLD}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<answer>10</answer>"}],
        [{"role": "user", "content": "q"}],
    ]
    meta = [dict(EX4, answer=12), {"answer": 12}, {"answer": 3}]
    assert score_message_logs_components(logs, meta)["total"] == [1.0, pytest.approx(0.1 + 0.9 * (1 - 2 / 12)), 0.0]
    assert error_counts() == {"format": 1, "integer_distance": 1}
    comps = score_message_logs_components(logs[:1], meta[:1], reward={"default": 1.0, "stepwise": 1.0})
    assert comps == {"format": [1.0], "integer_distance": [1.0], "stepwise": [1.0], "total": [2.0]}
    with pytest.raises(ValueError, match=r"metadata\[1\] has no 'answer'"):
        score_message_logs_components(logs[:2], [{"answer": 1}, {"task_main": 1}])
    with pytest.raises(ValueError, match="2 message logs but 1"):
        score_message_logs_components(logs[:2], meta[:1])


def test_cli_score_last_line_is_total() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["reward", "score", "--reward", "default", "--answer", "12", "--completion",
                                 "<answer>10</answer>"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].split()[:2] == ["format", "1"] and lines[1].split()[:2] == ["integer_distance", "0.833333"]
    assert float(lines[-1]) == pytest.approx(0.85)
    result = runner.invoke(app, ["reward", "score", "-r", "exact_match", "-a", "12", "-c", "-"],
                           input="<answer>12</answer>\n")
    assert result.exit_code == 0 and result.output.strip().splitlines()[-1] == "1"
    result = runner.invoke(app, ["reward", "score", "-r", "nope", "-a", "1", "-c", "x"])
    assert result.exit_code != 0 and "valid: consistency" in result.output
    listing = runner.invoke(app, ["reward", "list"])
    assert listing.exit_code == 0 and {"default", "overlong", "stepwise"} <= {
        line.split()[0] for line in listing.output.splitlines()
    }


def test_cli_score_with_gt_file(tmp_path) -> None:
    import json

    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(EX4))
    result = CliRunner().invoke(app, ["reward", "score", "-r", "stepwise", "--gt", str(gt), "-c", GOLD])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == "1"


def test_a_reward_module_that_fails_to_import_is_named(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A user module whose import raises (not only ImportError) is one ValueError naming the module."""
    (tmp_path / "broken_rewards_xyz.py").write_text("raise RuntimeError('half-written module')\n")
    (tmp_path / "bad_syntax_rewards_xyz.py").write_text("def f(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="'broken_rewards_xyz' raised RuntimeError: half-written module"):
        get_reward("broken_rewards_xyz:fn")
    with pytest.raises(ValueError, match="'bad_syntax_rewards_xyz' raised SyntaxError"):
        get_reward("bad_syntax_rewards_xyz:fn")
