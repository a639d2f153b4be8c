"""`spatialiq reward analyze` on a small crafted completions file: every summary column against hand-computed
values, the per-completion table, the probes' relative payouts, the report, and the errors."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.tasks import fill_cot_template
from spatialiq_train.core.views import LEAF_VIEWS, view_relpath


def _gt(main: int, visible: int, hidden: int) -> dict[str, object]:
    return {"object_type": "cube", "task1": "cubes", "task_main": main, "total_blocks": main, "task2": 2, "task3": 4,
            "task4": 3, "task5": visible, "task6": 1, "task7": min(2, visible - 2), "task8": 1 if hidden else 0,
            "task9": 1, "num_hidden_blocks": hidden, "num_columns": 4, "num_layers": 3, "task10": 0, "task11": 0}


GTS = {"A": _gt(10, 8, 2), "B": _gt(5, 4, 1), "C": _gt(3, 3, 0)}
"""Three views: A (truth 10), B (truth 5), C (truth 3, nothing hidden)."""


def _views(root: Path) -> dict[str, str]:
    views = {}
    for name, leaf in zip(GTS, LEAF_VIEWS, strict=False):
        rel = view_relpath("benchmark", 1, leaf)
        (root / rel).mkdir(parents=True)
        (root / rel / "gt.json").write_text(json.dumps(GTS[name]))
        views[name] = rel
    return views


def _texts() -> dict[tuple[str, int], str]:
    return {
        ("A", 0): fill_cot_template(GTS["A"]),  # correct and faithful
        ("A", 1): "<answer>10</answer>",  # correct, no trace: a shortcut
        ("A", 2): "<answer>8</answer>",  # wrong by 2
        ("B", 0): "<answer>7</answer>",  # wrong by 2
        ("B", 1): "no answer here",  # no answer at all
        ("B", 2): "<answer>7</answer>",
        ("C", 0): "<answer>3</answer>", ("C", 1): "<answer>3</answer>", ("C", 2): "<answer>3</answer>",
    }


@pytest.fixture()
def analysed(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    views = _views(data)
    lines = [json.dumps({"view": views[v], "task": "task_main", "sample": s, "text": t})
             for (v, s), t in _texts().items()]
    lines.append(json.dumps({"view": views["A"], "task": "task5", "sample": 0, "text": "3"}))  # another task: left out
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "lab"
    res = CliRunner().invoke(app, ["reward", "analyze", "--completions", str(tmp_path / "c.jsonl"), "--data",
                                   str(data), "--rewards", "integer_distance,format,consistency,stepwise,default",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _summary(out: Path) -> dict[str, dict[str, str]]:
    with (out / "summary.csv").open() as fh:
        return {row["reward"]: row for row in csv.DictReader(fh)}


def _f(cell: str) -> float:
    return math.nan if cell == "" else float(cell)


def test_rewards_csv_has_one_row_per_completion_with_the_eval_facts(analysed: Path) -> None:
    with (analysed / "rewards.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:6] == ["view", "sample", "parsed_exact_match", "parsed_abs_error",
                                 "parsed_subtasks_correct", "parsed_self_consistent"]
    assert list(rows[0])[6:] == ["integer_distance", "format", "consistency", "stepwise", "default",
                                 "default.format", "default.integer_distance"]
    assert len(rows) == 9
    a0, a1, a2, b0, b1 = rows[:5]
    assert (a0["parsed_exact_match"], a0["parsed_abs_error"], a0["parsed_subtasks_correct"],
            a0["parsed_self_consistent"]) == ("1", "0", "8", "1")
    assert (a1["parsed_exact_match"], a1["parsed_subtasks_correct"], a1["parsed_self_consistent"]) == ("1", "0", "")
    assert (a2["parsed_exact_match"], a2["parsed_abs_error"]) == ("0", "2")
    assert (b1["parsed_exact_match"], b1["parsed_abs_error"]) == ("0", "")
    assert _f(a2["integer_distance"]) == pytest.approx(0.8) and _f(b0["integer_distance"]) == pytest.approx(0.6)
    assert _f(a2["default"]) == pytest.approx(0.1 + 0.9 * 0.8)
    assert _f(a2["default.integer_distance"]) == pytest.approx(0.8) and a2["default.format"] == "1"


def test_summary_columns_match_hand_computed_values(analysed: Path) -> None:
    s = _summary(analysed)
    d = s["integer_distance"]  # scores A: 1, 1, 0.8; B: 0.6, 0, 0.6; C: 1, 1, 1
    assert _f(d["mean"]) == pytest.approx(7 / 9, abs=1e-6)
    assert _f(d["std"]) == pytest.approx(math.sqrt((3.36 + 3) / 9 - (7 / 9) ** 2), abs=1e-6)
    assert _f(d["zero_variance_groups"]) == pytest.approx(1 / 3, abs=1e-6)  # only C's three samples agree
    assert _f(d["auc_exact_match"]) == 1.0  # only A has both: 1 > 0.8 twice
    # abs errors (B1 has none): A 0, 0, 2; B 2, 2; C 0, 0, 0 -> ranks 3 x5 and 7 x3; rewards rank 6 x5, 3, 1.5 x2
    assert _f(d["spearman_abs_error"]) == pytest.approx(-30 / math.sqrt(945), abs=1e-6)
    # A1 and C0-2 are correct answers alone: format failures (paying 1, as the faithful A0), not unfaithful traces
    assert math.isnan(_f(d["shortcut_reward_gap"])) and _f(d["format_failure_reward_gap"]) == 0.0
    assert d["auc_scope"] == "within views"
    assert _f(s["format"]["auc_exact_match"]) == 0.5  # every sample of A is well-formed: all ties
    assert _f(s["format"]["zero_variance_groups"]) == pytest.approx(2 / 3, abs=1e-6)  # A and C; B1 has no tag
    c = s["consistency"]  # only A0 adds up
    assert _f(c["auc_exact_match"]) == 0.75  # (A0, A2) a win, (A1, A2) a tie
    assert _f(c["format_failure_reward_gap"]) == -1.0
    assert _f(c["mean"]) == pytest.approx(1 / 9, abs=1e-6)
    # stepwise pays A0 alone: rewards rank 8 once and 4 x7 -> sum dx dy = -6, sum dy^2 = 14
    assert _f(s["stepwise"]["spearman_abs_error"]) == pytest.approx(-6 / math.sqrt(30 * 14), abs=1e-6)


def test_probe_payouts_relative_to_the_faithful_trace(analysed: Path) -> None:
    s = _summary(analysed)
    em = s["integer_distance"]
    assert [_f(em[f"probe_{p}"]) for p in ("answer_only", "wrong_lines", "double_tag", "padded")] == [1, 1, 0, 1]
    assert _f(em["probe_constant"]) == pytest.approx(0.9 / 3, abs=1e-6)  # 11 vs 10: 0.9; vs 5 and vs 3: 0
    assert _f(em["probe_visible_only"]) == pytest.approx((0.8 + 0.8) / 2, abs=1e-6)  # A: 8 vs 10, B: 4 vs 5
    assert _f(em["probe_consistent_wrong"]) == pytest.approx((0.9 + 0.8 + 0.8) / 3, abs=1e-6)
    c = s["consistency"]
    assert [_f(c[f"probe_{p}"]) for p in ("answer_only", "wrong_lines", "visible_only", "constant", "double_tag",
                                           "padded", "consistent_wrong")] == [0, 0, 1, 0, 0, 0, 1]
    st = s["stepwise"]
    assert _f(st["probe_visible_only"]) == pytest.approx(7 / 9, abs=1e-6)  # lines 9 and 10 wrong
    assert _f(st["probe_consistent_wrong"]) == pytest.approx(8 / 9, abs=1e-6)
    assert [_f(st[f"probe_{p}"]) for p in ("answer_only", "wrong_lines", "double_tag", "padded")] == [0, 0, 1, 0]
    assert _f(s["default"]["reference_mean"]) == 1.0


def test_report_and_plots_are_written(analysed: Path) -> None:
    text = (analysed / "report.md").read_text()
    assert "## Summary" in text and "## Gaming probes" in text and "| integer_distance |" in text
    for name in ("reward_by_correctness.png", "reward_vs_abs_error.png", "zero_variance.png"):
        assert (analysed / name).read_bytes()[:4] == b"\x89PNG"
    assert "1 other_task" in text


def test_bad_reward_name_and_unmatched_views_are_one_line_errors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _views(data)
    (tmp_path / "c.jsonl").write_text(json.dumps({"view": "elsewhere", "task": "task_main", "sample": 0,
                                                  "text": "<answer>1</answer>"}) + "\n")
    base = ["reward", "analyze", "--completions", str(tmp_path / "c.jsonl"), "--data", str(data), "--out",
            str(tmp_path / "o")]
    res = CliRunner().invoke(app, [*base, "--rewards", "default,nope"])
    assert res.exit_code == 2 and "unknown reward 'nope'" in res.output
    res = CliRunner().invoke(app, [*base, "--rewards", "default"])
    assert res.exit_code == 2 and "no Object Counting (task_main) completion matches" in res.output
    res = CliRunner().invoke(app, [*base, "--rewards", "default", "--k", "0"])
    assert res.exit_code == 2 and "--k must be at least 1" in res.output
    assert not (tmp_path / "o").exists()
