"""Reward lab fixes of issue 20: unique rewards.csv columns, parameterised rewards, k = 1 AUC with its reason,
format failures apart from unfaithful traces, signed probe ratios explained, no ``-0.000``."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from test_lab_analyze import GTS, _views
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.tasks import fill_cot_template
from spatialiq_train.lab.report import cell3
from spatialiq_train.lab.scoring import parse_reward_item, parse_reward_list


def _run(tmp_path: Path, texts: dict[tuple[str, int], str], rewards: str) -> tuple[Path, str]:
    data = tmp_path / "data"
    views = _views(data)
    lines = [json.dumps({"view": views[v], "task": "task_main", "sample": s, "text": t}) for (v, s), t in texts.items()]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "lab"
    res = CliRunner().invoke(app, ["reward", "analyze", "--completions", str(tmp_path / "c.jsonl"), "--data",
                                   str(data), "--rewards", rewards, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, (out / "report.md").read_text()


def _summary(out: Path) -> dict[str, dict[str, str]]:
    with (out / "summary.csv").open() as fh:
        return {row["reward"]: row for row in csv.DictReader(fh)}


def _wrong_line(gt: dict) -> str:
    """A complete trace with the right answer and one scored line (visible support, task6) wrong: unfaithful."""
    return fill_cot_template({**gt, "task6": int(gt["task6"]) + 1})  # type: ignore[call-overload]


def test_k1_auc_is_across_views_with_the_reason_and_gaps_split(tmp_path: Path) -> None:
    texts = {("A", 0): fill_cot_template(GTS["A"]), ("B", 0): _wrong_line(GTS["B"]), ("C", 0): "<answer>3</answer>"}
    out, report = _run(tmp_path, {**texts, ("C", 0): "<answer>4</answer>"}, "exact_match,stepwise")
    s = _summary(out)
    # A right and faithful, B right but unfaithful, C wrong: exact_match pays 1, 1, 0 -> every pair a win
    assert float(s["exact_match"]["auc_exact_match"]) == 1.0
    assert s["exact_match"]["auc_scope"].startswith("across views (k = 1")
    assert s["exact_match"]["zero_variance_groups"] == ""
    assert "not defined: k = 1, one sample per view" in report and "`auc_scope`" in report
    assert float(s["stepwise"]["shortcut_reward_gap"]) == pytest.approx(-1 / 9, abs=1e-6)  # one line of nine wrong
    assert s["stepwise"]["format_failure_reward_gap"] == ""  # no correct answer without its trace
    assert "1 faithful, 1 unfaithful" in report and "0 format failures" in report
    with (out / "rewards.csv").open() as fh:
        header = next(csv.reader(fh))
    assert len(header) == len(set(header)) and "exact_match" in header and "parsed_exact_match" in header


def test_parameterised_rewards_from_the_command_line(tmp_path: Path) -> None:
    assert parse_reward_item("overlong:max_len=2048:cache=512") == ("overlong", {"max_len": 2048, "cache": 512})
    assert parse_reward_item("my_pkg.rewards:my_fn") == ("my_pkg.rewards:my_fn", {})
    for bad, needle in (("overlong:max_len", "cannot import module 'overlong'"),
                        ("overlong:max_len=1:cache", "is not KEY=VALUE"),
                        ("overlong:max_len=1:max_len=2", "given twice"), ("default:scale=2", "takes no parameters"),
                        ("overlong:max_len=10:cache=20", "cache must be an int in [0, max_len)")):
        with pytest.raises(UserError, match=needle.replace("[", r"\[").replace(")", r"\)")):
            parse_reward_list(bad)
    texts = {("A", 0): fill_cot_template(GTS["A"]), ("B", 0): "<answer>5</answer>", ("C", 0): "<answer>3</answer>"}
    out, report = _run(tmp_path, texts, "overlong:max_len=200:cache=100")
    row = _summary(out)["overlong:max_len=200:cache=100"]
    assert float(row["reference_mean"]) == -1.0  # the faithful trace is far over 200 characters
    assert "earns a negative mean under overlong:max_len=200:cache=100" in report
    assert float(row["probe_answer_only"]) == pytest.approx(0.0) and math.isfinite(float(row["mean"]))


def test_no_negative_zero_is_printed() -> None:
    assert cell3(-0.0001) == "0.000" and cell3(-0.0) == "0.000" and cell3(-0.25) == "-0.250"
    assert cell3(math.nan) == "n/a"
