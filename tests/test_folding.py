"""The paper-folding simulator (spatialiq_train.core.folding*): hand-made cases, bad input, the released records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.folding import Fold, FoldError, Hole, fold_code, fold_from_code, location_cell, parse_fold
from spatialiq_train.core.folding_holes import simulate
from spatialiq_train.core.folding_records import check_record, check_records, make_record

RELEASED_AGREEING = 900
"""How many of the release's 900 prediction records the simulator reproduces (resultHoles as a set,
totalNumberofHoles, unfoldingTypes): all of them (docs/folding.md)."""


def _holes(result) -> set[tuple[int, str, object]]:
    return {(h.location, h.shape, h.direction) for h in result.holes}


def test_locations_are_numbered_row_by_row_left_triangle_first() -> None:
    assert location_cell(1) == (0, 0, 0) and location_cell(2) == (0, 0, 1)
    assert location_cell(8) == (0, 3, 1) and location_cell(9) == (1, 0, 0) and location_cell(32) == (3, 3, 1)
    with pytest.raises(FoldError, match="valid: 1-32"):
        location_cell(33)


def test_one_vertical_fold_mirrors_the_hole_and_its_direction() -> None:
    # the right half folds onto the left: location 1 (cell 0,0, left) lies under the mirror of 8 (cell 0,3, right)
    got = simulate([parse_fold("vertical_right_to_left")], [Hole("triangle", "small", 90, 1)])
    assert _holes(got) == {(1, "triangle", 90), (8, "triangle", 270)}
    assert got.unfolding == ("V1-F",)
    # a half-turn shape keeps its axis under a mid-line reflection, a round one has none
    assert _holes(simulate([parse_fold("vertical_right_to_left")], [Hole("rectangle", "large", "90, 270", 1)])) == {
        (1, "rectangle", "90, 270"),
        (8, "rectangle", "90, 270"),
    }


def test_a_diagonal_fold_turns_directions_and_a_rotation_renames_the_unfold() -> None:
    # the bottom-left half folds across the top-left/bottom-right diagonal: cell (0,3) maps to cell (3,0)
    got = simulate([parse_fold("diagonal_bottomLeft_to_topRight")], [Hole("ellipse", "small", "0, 180", 8)])
    assert _holes(got) == {(8, "ellipse", "0, 180"), (26, "ellipse", "90, 270")}
    assert got.unfolding == ("D2-F",)
    # top folded down, then the sheet turned a quarter counter-clockwise: the flap now opens from right to left;
    # the folded sheet covers the open sheet's columns 2-3 in the final frame
    turned = simulate(
        [parse_fold("horizontal_top_to_bottom"), parse_fold("rotation-90")], [Hole("circle", "small", "", 5)]
    )
    assert turned.unfolding == ("V2-F",) and len(turned.holes) == 2
    # every stage of the unfolding is kept for step-by-step traces; two folds punch four layers
    two = simulate(
        [parse_fold("horizontal_top_to_bottom"), parse_fold("vertical_left_to_right")], [Hole("star", "large", 0, 32)]
    )
    assert [len(s) for s in two.stages] == [2, 4] and two.stages[-1] == two.holes


def test_codes_and_names_round_trip_and_bad_steps_are_named() -> None:
    for code in ("H1-F", "H2-B", "V1-F", "V2-F", "D1-F", "D2-B", "D3-F", "D4-F", "R-90", "R-270"):
        assert fold_code(fold_from_code(code)) == code
        assert parse_fold(fold_from_code(code).name, fold_from_code(code).to_front) == fold_from_code(code)
    with pytest.raises(FoldError, match="unknown fold 'diagonal_top_to_bottom'"):
        parse_fold("diagonal_top_to_bottom")
    with pytest.raises(FoldError, match="step 2 .*square sheet"):
        simulate([parse_fold("vertical_right_to_left"), parse_fold("diagonal_topLeft_to_bottomRight")], [])
    with pytest.raises(FoldError, match="hole 1 at location 5 .*no paper there"):
        simulate([parse_fold("vertical_right_to_left")], [Hole("circle", "small", "", 5)])
    with pytest.raises(FoldError, match="at least one fold"):
        simulate([Fold("rotation", degrees=90)], [])


def test_a_record_that_contradicts_the_simulator_is_reported_part_by_part() -> None:
    rec = make_record("ours_1", [parse_fold("horizontal_bottom_to_top")], [Hole("letter", "small", 180, 2)])
    assert check_record(rec, 1).agrees
    rec["resultHoles"] = rec["resultHoles"][:1]
    check = check_record(rec, 1)
    assert not check.holes_agree and check.count_agree and check.unfolding_agree  # the stated count is still 2
    assert not check_record(dict(rec, totalNumberofHoles=1), 1).count_agree
    bad = dict(rec, initialHoles=[{"shape": "blob", "size": "small", "direction": 0, "location": 2}])
    assert "record ours_1: initialHoles[1]: shape 'blob'" in check_record(bad, 1).error


def test_fold_simulate_writes_one_line_per_record_and_counts_agreement(tmp_path: Path) -> None:
    good = make_record(
        "a", [parse_fold("vertical_left_to_right"), parse_fold("rotation-180")], [Hole("text", "large", 270, 12)]
    )
    wrong = dict(good, id="b", unfoldingTypes=["H1-F"])
    src = tmp_path / "records.json"
    src.write_text(json.dumps([good, wrong]), encoding="utf-8")
    res = CliRunner().invoke(app, ["fold", "simulate", str(src), "--out", str(tmp_path / "out.jsonl")])
    assert res.exit_code == 0, res.output
    assert "1 of 2 agree" in res.output
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [x["id"] for x in lines] == ["a", "b"]
    assert lines[1]["agree"] == {"resultHoles": True, "totalNumberofHoles": True, "unfoldingTypes": False}
    assert lines[0]["resultHoles"] == good["resultHoles"] and lines[0]["totalNumberofHoles"] == 2


def test_the_released_prediction_records_are_reproduced(shared_dir: Path) -> None:
    path = shared_dir / "fixtures" / "mentalblackboard" / "PFHP_Prediction_Data.json"
    records = json.loads(path.read_text(encoding="utf-8"))
    checks = check_records(records)
    assert len(checks) == 900
    assert [c.id for c in checks if not c.agrees] == []
    assert sum(c.agrees for c in checks) == RELEASED_AGREEING
    # the check is not vacuous: one moved hole is caught
    moved = dict(
        records[0], resultHoles=[dict(records[0]["resultHoles"][0], location=1)] + records[0]["resultHoles"][1:]
    )
    assert not check_record(moved, 1).holes_agree
