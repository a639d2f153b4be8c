"""`eval score --raw` and `reward analyze --raw`: predictions files in the released eval_raw layout, with an
optional model column holding several responders, several files in one run (issue 20)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eval.rawcsv import RawCsvError, read_prediction_files
from spatialiq_train.cli import app

HEADER = ("model,view,object_type,total_blocks,num_hidden_blocks,num_columns,num_layers,task5,task5_pred,task5_gt,"
          "task8,task8_pred,task8_gt,main,main_pred,main_gt")
ROWS = [  # model a: 2 of 3 right on main; model b: 1 of 3, one without an answer
    "a,v1,cube,5,1,3,2,1,4,4,1,1,1,1,5,5", "a,v2,cube,7,2,3,2,1,5,5,0,1,2,0,6,7", "a,v3,cube,3,0,3,1,1,3,3,1,0,0,1,3,3",
    "b,v1,cube,5,1,3,2,0,3,4,1,1,1,0,4,5", "b,v2,cube,7,2,3,2,1,5,5,1,2,2,1,7,7", "b,v3,cube,3,0,3,1,1,3,3,1,0,0,,,3",
]


def _file(tmp_path: Path, rows: list[str] = ROWS, header: str = HEADER) -> Path:
    path = tmp_path / "preds.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_model_column_splits_responders_and_repeats_are_refused(tmp_path: Path) -> None:
    tables = read_prediction_files([_file(tmp_path)])
    assert list(tables) == ["a", "b"] and len(tables["a"]) == 3
    other = tmp_path / "more"
    other.mkdir()
    with pytest.raises(RawCsvError, match=r"responder 'a' already read from .*preds\.csv"):
        read_prediction_files([_file(tmp_path), _file(other, ROWS[:1])])
    with pytest.raises(RawCsvError, match=r"line 3, column 'model': empty responder name"):
        read_prediction_files([_file(tmp_path, [ROWS[0], "," + ROWS[1].split(",", 1)[1]])])


def test_eval_score_reads_predictions_files(tmp_path: Path) -> None:
    out = tmp_path / "s"
    res = CliRunner().invoke(app, ["eval", "score", "--raw", str(_file(tmp_path)), "--out", str(out), "--group",
                                   "text"])
    assert res.exit_code == 0, res.output
    a = json.loads((out / "metrics_a.json").read_text())
    b = json.loads((out / "metrics_b.json").read_text())
    assert a["per_task"]["main"]["n_correct"] == 2 and a["per_task"]["main"]["n"] == 3 and a["k"] == 1
    assert b["object_counting"]["correct"]["acc@1"] == 1 and b["mode"] == "predictions" and a["group"] == "text"
    assert json.loads((out / "responder_groups.json").read_text()) == {"a": "text", "b": "text"}
    assert (out / "eval_raw_a_text.csv").is_file()
    both = CliRunner().invoke(app, ["eval", "score", "--raw", str(_file(tmp_path)), "--completions", "x.jsonl",
                                    "--out", str(tmp_path / "o")])
    assert both.exit_code == 2 and "give one or the other" in both.output


def _analyze(tmp_path: Path, rewards: str) -> list[dict[str, str]]:
    """``spatialiq reward analyze --raw`` on the test file; the rows of its rewards.csv."""
    out = tmp_path / "lab"
    res = CliRunner().invoke(app, ["reward", "analyze", "--raw", str(_file(tmp_path)), "--out", str(out),
                                   "--rewards", rewards])
    assert res.exit_code == 0, res.output
    with (out / "a" / "rewards.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_reward_analyze_reads_predictions_files(tmp_path: Path) -> None:
    rows = _analyze(tmp_path, "exact_match,integer_distance")
    out = tmp_path / "lab"
    assert [r["exact_match"] for r in rows] == ["1", "0", "1"] and rows[1]["parsed_abs_error"] == "1"
    with (out / "b" / "summary.csv").open() as fh:
        summary = {r["reward"]: r for r in csv.DictReader(fh)}
    assert float(summary["exact_match"]["auc_exact_match"]) == 1.0
    assert summary["exact_match"]["auc_scope"] == "across views (k = 1)"
    assert "rebuilt from the recorded predictions" in (out / "b" / "report.md").read_text()


def test_published_raw_file_scores_as_table_1(shared_dir: Path, tmp_path: Path) -> None:
    raw = shared_dir / "fixtures" / "paper_outputs" / "raw" / "eval_raw_gemini_text.csv"
    res = CliRunner().invoke(app, ["eval", "score", "--raw", str(raw), "--out", str(tmp_path), "--group", "text"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "metrics_gemini.json").read_text())
    assert metrics["per_task"]["main"]["n_correct"] == 445 and metrics["per_task"]["main"]["n"] == 3000
    assert metrics["convention"] == "prerequisite_given_dependent"


def test_reward_analyze_raw_takes_the_files_of_a_shell_glob(tmp_path: Path) -> None:
    first, second = tmp_path / "x", tmp_path / "y"
    first.mkdir(), second.mkdir()
    a, b = _file(first, ROWS[:3]), _file(second, ROWS[3:])
    out = tmp_path / "lab"
    res = CliRunner().invoke(app, ["reward", "analyze", "--raw", str(a), str(b), "--out", str(out),
                                   "--rewards", "exact_match"])  # what `--raw */preds.csv` expands to
    assert res.exit_code == 0, res.output
    assert (out / "a" / "rewards.csv").is_file() and (out / "b" / "rewards.csv").is_file()
    res = CliRunner().invoke(app, ["reward", "analyze", str(a), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "give --raw first" in res.output and not (tmp_path / "o").exists()


def test_reward_analyze_raw_parses_subtasks_from_the_text_not_the_recorded_columns(tmp_path: Path) -> None:
    """The rebuilt texts are `<answer>N</answer>`: parsed, they state no sub-task line, so parsed_subtasks_correct
    is 0 even where the file records right task5/task8 predictions (docs/rewards.md: parsed from the text)."""
    rows = _analyze(tmp_path, "exact_match")
    assert rows[0]["parsed_exact_match"] == "1"  # v1: task5 and task8 recorded right, main right
    assert [r["parsed_subtasks_correct"] for r in rows] == ["0", "0", "0"]


def test_eval_score_raw_takes_the_files_of_a_shell_glob(tmp_path: Path) -> None:
    first, second = tmp_path / "x", tmp_path / "y"
    first.mkdir(), second.mkdir()
    a, b = _file(first, ROWS[:3]), _file(second, ROWS[3:])
    res = CliRunner().invoke(app, ["eval", "score", "--raw", str(a), str(b), "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "s" / "metrics_a.json").is_file() and (tmp_path / "s" / "metrics_b.json").is_file()
