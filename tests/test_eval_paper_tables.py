"""The published Spatial-IQ text tables, reproduced to 1e-9 from the released raw outputs in ../shared."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from eval.paper_tables import convention_for, display_name, write_paper_tables
from eval.rawcsv import read_raw_csv, read_raw_dir
from spatialiq_train.cli import app

TOL = 1e-9


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _same(expected: str, got: str, where: str) -> None:
    if expected == "":
        assert got == "", f"{where}: expected empty, got {got!r}"
        return
    try:
        e = float(expected)
    except ValueError:
        assert got == expected, f"{where}: expected {expected!r}, got {got!r}"
        return
    assert got != "", f"{where}: expected {expected}, got empty"
    g = float(got)
    assert math.isclose(g, e, rel_tol=0, abs_tol=TOL), f"{where}: expected {e!r}, got {g!r}"


def _compare(expected_rows: list[dict[str, str]], got_rows: list[dict[str, str]], key: tuple[str, ...],
             name: str) -> None:
    index = {tuple(r[k] for k in key): r for r in got_rows}
    assert len(index) == len(got_rows), f"{name}: duplicate keys in our output"
    assert expected_rows, f"{name}: empty expected file"
    for e in expected_rows:
        k = tuple(e[c] for c in key)
        assert k in index, f"{name}: our output has no row {k}"
        for column, value in e.items():
            _same(value, index[k].get(column, "<missing column>"), f"{name} {k} {column}")
    assert {tuple(e[c] for c in key) for e in expected_rows} == set(index), f"{name}: row sets differ"


@pytest.fixture(scope="module")
def tables_out(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = shared_dir / "fixtures" / "paper_outputs"
    out = tmp_path_factory.mktemp("paper_tables")
    result = CliRunner().invoke(app, ["eval", "paper-tables", "--raw", str(base / "raw"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return base / "expected", out


def _group(rows: list[dict[str, str]], group: str) -> list[dict[str, str]]:
    return [r for r in rows if r["group"] == group]


@pytest.mark.parametrize(("figure", "group"), [("figure_07_text_summation_mechanism.csv", "text"),
                                                ("figure_27_trained_text_summation_mechanism.csv", "trained_text")])
def test_summation_2x2_matches_published(tables_out: tuple[Path, Path], figure: str, group: str) -> None:
    expected, out = tables_out
    _compare(_read(expected / figure), _group(_read(out / "summation_2x2.csv"), group),
             ("group", "model", "cell"), figure)


@pytest.mark.parametrize(("figure", "group"), [("figure_22_text_composition_diagnostics.csv", "text"),
                                                ("figure_28_trained_text_composition_diagnostics.csv",
                                                 "trained_text")])
def test_composition_matches_published(tables_out: tuple[Path, Path], figure: str, group: str) -> None:
    expected, out = tables_out
    _compare(_read(expected / figure), _group(_read(out / "composition.csv"), group), ("group", "model"), figure)


def test_task_accuracy_matches_table_06(tables_out: tuple[Path, Path]) -> None:
    expected, out = tables_out
    _compare(_read(expected / "table_06_text_task_accuracy.csv"), _group(_read(out / "task_accuracy.csv"), "text"),
             ("group", "model", "task"), "table_06")


@pytest.mark.parametrize("table", ["table_01_text_summary.csv", "table_04_trained_text_summary.csv"])
def test_summary_matches_published(tables_out: tuple[Path, Path], table: str) -> None:
    expected, out = tables_out
    rows = _read(expected / table)
    got = [r for r in _read(out / "summary_published.csv") if r["model"] in {e["model"] for e in rows}]
    _compare(rows, got, ("model",), table)
    plain = {r["model"]: r for r in _read(out / "summary.csv")}
    for e in rows:  # summary.csv carries the same numbers under the issue's column list
        for column in ("object_count", "visible_count", "hidden_count", "referential_chain", "visible_support",
                       "hidden_support", "summation_mechanism"):
            _same(e[column], plain[e["model"]][column], f"summary.csv {e['model']} {column}")


def test_summary_csv_has_exactly_the_issue_columns(tables_out: tuple[Path, Path]) -> None:
    _, out = tables_out
    with (out / "summary.csv").open() as fh:
        header = next(csv.reader(fh))
    assert header == ["model", "object_count", "visible_count", "hidden_count", "referential_chain",
                      "visible_support", "hidden_support", "summation_mechanism"]


def test_convention_flag_overrides(shared_dir: Path, tmp_path: Path) -> None:
    raw = shared_dir / "fixtures" / "paper_outputs" / "raw"
    write_paper_tables(raw, tmp_path, override="prerequisite_given_dependent")
    rows = {r["model"]: r for r in _read(tmp_path / "summary.csv")}
    # Under P(P|C) the DAPO chain pools both edges: 0.98777..., not the published P(C|P) value 0.93677...
    assert float(rows["dapo-7b-tight"]["referential_chain"]) == pytest.approx(0.9877777777777778, abs=TOL)
    assert float(rows["human"]["referential_chain"]) == pytest.approx(0.9013452914798207, abs=TOL)


def test_convention_rule_and_names() -> None:
    assert convention_for("sft-32b-cot") == "dependent_given_prerequisite"
    assert convention_for("dapo-7b-tight") == "dependent_given_prerequisite"
    assert convention_for("Qwen2.5-VL-32B-Instruct") == "dependent_given_prerequisite"
    assert convention_for("human") == "prerequisite_given_dependent"
    assert convention_for("claude") == "prerequisite_given_dependent"
    assert convention_for("human", "dependent_given_prerequisite") == "dependent_given_prerequisite"
    with pytest.raises(ValueError, match="valid: prerequisite_given_dependent"):
        convention_for("human", "given")
    assert display_name("gemini") == "Gemini" and display_name("dapo-7b-tight") == "dapo-7b-tight"


def test_human_file_is_read_as_human(shared_dir: Path) -> None:
    tables = read_raw_dir(shared_dir / "fixtures" / "paper_outputs" / "raw")
    assert "human" in tables and len(tables["human"]) == 3000
    assert tables["human"].tasks[-1] == "main" and "task11" in tables["human"].tasks
    gemini = tables["gemini"]
    assert int(np.isnan(gemini.correct["task5"]).sum()) == 1  # the published n = 2999 on Visible


MALFORMED = [
    ("view,object_type,total_blocks\n", "line 1: header lacks column 'num_hidden_blocks'"),
    ("view,object_type,total_blocks,num_hidden_blocks,num_columns,num_layers,main,main_pred\n",
     "line 1: column 'main' has no partner column 'main_gt'"),
    ("view,object_type,total_blocks,num_hidden_blocks,num_columns,num_layers,main,main_pred,main_gt\n"
     "a,cube,3,0,3,1,1,3,3\nb,cube,3,0,3,1,1,three,3\n", "line 3, column 'main_pred'"),
    ("view,object_type,total_blocks,num_hidden_blocks,num_columns,num_layers,main,main_pred,main_gt\n"
     "a,cube,3,0,3,1,2,3,3\n", "line 2, column 'main': correctness must be 0, 1 or empty"),
    ("view,object_type,total_blocks,num_hidden_blocks,num_columns,num_layers,main,main_pred,main_gt\n"
     "a,cube,3,0,3,1,1,3\n", "line 2: 8 fields, the header has 9"),
    ("", "line 1: empty file"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_csv_names_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "eval_raw_bad_text.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match="eval_raw_bad_text.csv") as info:
        read_raw_csv(path)
    assert message in str(info.value)


def test_released_files_survive_write_and_reread(shared_dir: Path, tmp_path: Path) -> None:
    from eval.rawcsv import write_raw_csv

    tables = read_raw_dir(shared_dir / "fixtures" / "paper_outputs" / "raw")
    for name, table in tables.items():
        write_raw_csv(tmp_path / f"eval_raw_{name}_text.csv", table)
    back = read_raw_dir(tmp_path)
    assert set(back) == set(tables)
    for name, table in tables.items():
        assert back[name].views == table.views and back[name].object_type == table.object_type
        assert back[name].tasks == table.tasks
        for t in table.tasks:
            for got, exp in ((back[name].correct[t], table.correct[t]), (back[name].pred[t], table.pred[t]),
                             (back[name].gt[t], table.gt[t])):
                np.testing.assert_array_equal(got, exp)


def test_task_labels_and_column_order_derived_from_the_catalogue() -> None:
    from eval.paper_tables import TASK_LABELS
    from eval.rawcsv import TASK_ORDER

    assert TASK_ORDER == (*(f"task{i}" for i in range(1, 12)), "main")
    assert TASK_LABELS == (
        ("Task2", "task9"), ("Task3", "task3"), ("Task4", "task4"), ("Task5", "task5"), ("Task6", "task2"),
        ("Task7", "task6"), ("Task8", "task7"), ("Task9", "task8"), ("Target1", "main"), ("Target2a", "task10"),
        ("Target2b", "task11"),
    )  # Table 6's rows as published
