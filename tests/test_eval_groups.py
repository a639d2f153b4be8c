"""Responder groups are recorded or given, never guessed from a name (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from eval.groups import GROUPS_FILE, PUBLISHED_GROUPS, parse_group_options, read_groups_file, record_group
from eval.paper.common import group_models
from eval.paper_tables import summary_rows
from eval.rawcsv import ResponderTable, read_raw_dir, write_raw_csv
from spatialiq_train.cli import app
from spatialiq_train.core.errors import InputError


def _table(name: str) -> ResponderTable:
    ones = np.ones(3)
    cols = {t: ones.copy() for t in ("task2", "task6", "task7", "main")}
    return ResponderTable(name, ["a", "b", "c"], ["cube"] * 3, {c: ones * 3 for c in
                          ("total_blocks", "num_hidden_blocks", "num_columns", "num_layers")},
                          cols, {t: ones * 3 for t in cols}, {t: ones * 3 for t in cols})


def test_a_released_model_named_mine_is_not_put_among_the_zero_shot_responders(tmp_path: Path) -> None:
    for name in ("mine", "dapo-x", "claude"):
        write_raw_csv(tmp_path / f"eval_raw_{name}_text.csv", _table(name))
    with pytest.raises(InputError, match="no responder group for 'claude', 'dapo-x', 'mine'"):
        group_models(read_raw_dir(tmp_path), "text")  # nothing recorded: refused, not guessed from "dapo"
    record_group(tmp_path, "mine", "trained_text")
    tables = read_raw_dir(tmp_path, {"dapo-x": "text", "claude": "text"})
    assert group_models(tables, "trained_text") == ["mine"]
    assert group_models(tables, "text") == ["claude", "dapo-x"]
    conventions = {r["model"]: r["convention"] for r in summary_rows(tables)}
    assert conventions == {"mine": "dependent_given_prerequisite", "dapo-x": "prerequisite_given_dependent",
                           "claude": "prerequisite_given_dependent"}
    with pytest.raises(InputError, match="no eval_raw file of responder 'typo'"):
        read_raw_dir(tmp_path, {"typo": "text"})


def test_group_options_and_file_are_checked() -> None:
    assert parse_group_options(["a=text", " b = both "]) == {"a": "text", "b": "both"}
    for bad, needle in (("a", "expected NAME=GROUP"), ("a=zero", "unknown responder group 'zero'")):
        with pytest.raises(InputError, match=needle):
            parse_group_options([bad])
    assert PUBLISHED_GROUPS["dapo-7b-tight"] == "trained_text" and PUBLISHED_GROUPS["qwen"] == "text"
    assert len(PUBLISHED_GROUPS) == 17


def test_bad_groups_file_names_file_and_key(tmp_path: Path) -> None:
    (tmp_path / GROUPS_FILE).write_text(json.dumps({"m": "zero-shot"}))
    with pytest.raises(InputError, match=rf"{GROUPS_FILE}: key 'm': unknown responder group 'zero-shot'"):
        read_groups_file(tmp_path)


def test_eval_paper_tables_refuses_a_responder_without_group(tmp_path: Path) -> None:
    write_raw_csv(tmp_path / "eval_raw_mine_text.csv", _table("mine"))
    res = CliRunner().invoke(app, ["eval", "paper-tables", "--raw", str(tmp_path), "--out", str(tmp_path / "o"),
                                   "--no-figures"])
    assert res.exit_code == 2 and "no responder group for 'mine'" in res.output and not (tmp_path / "o").exists()
    res = CliRunner().invoke(app, ["eval", "paper-tables", "--raw", str(tmp_path), "--out", str(tmp_path / "o"),
                                   "--no-figures", "--group", "mine=trained_text"])
    assert res.exit_code == 0, res.output
    summary = (tmp_path / "o" / "summary_published.csv").read_text()
    assert "dependent_given_prerequisite" in summary.splitlines()[1]
