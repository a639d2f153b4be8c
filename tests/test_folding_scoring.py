"""Paper folding: the answer format, the paper's metrics on hand-computed cases, and the registered rewards."""

from __future__ import annotations

import json

import pytest

from reward import components_of, get_reward
from spatialiq_train.core.folding import Hole, parse_fold
from spatialiq_train.core.folding_answers import answer_text, cot_text, parse_holes, parse_unfolding
from spatialiq_train.core.folding_holes import simulate
from spatialiq_train.core.folding_metrics import (
    directions_match,
    exact_set_match,
    partial_accuracy,
    score_prediction,
    summarize_scores,
)

A = Hole("triangle", "small", 90, 1)
B = Hole("triangle", "small", 270, 8)
C = Hole("circle", "large", "", 5)
D = Hole("star", "small", 0, 9)
TRUTH = [A, B, C]


def test_answers_round_trip_and_malformed_ones_do_not_parse() -> None:
    text = answer_text(TRUTH, ["V1-F"])
    assert parse_holes(text) == sorted(TRUTH, key=lambda h: h.location) and parse_unfolding(text) == ["V1-F"]
    assert text.endswith("<answer>3</answer>")
    assert parse_holes("<holes>14 small rectangle 180; 3 LARGE Circle</holes>") == [
        Hole("rectangle", "small", "0, 180", 14),
        Hole("circle", "large", "", 3),
    ]
    for bad in (
        "<holes>1 small triangle</holes>",  # an oriented shape needs its direction
        "<holes>1 small circle 90</holes>",  # a round one has none
        "<holes>33 small star 0</holes>",
        "<holes>1 tiny star 0</holes>",
        "<holes>1 small star 45</holes>",
        "<holes>1 small star 0</holes><holes>2 small star 0</holes>",
        "</holes>1 small star 0<holes>",
        "no tags at all",
    ):
        assert parse_holes(bad) is None, bad
    assert parse_holes("<holes>\n</holes>") == []
    assert parse_unfolding("<unfolding>H1-F R-90</unfolding>") is None


def test_partial_accuracy_exact_match_extra_missing_and_duplicates_by_hand() -> None:
    assert partial_accuracy([A, B, C, D], TRUTH) == pytest.approx(3 / 4)  # 3 matched over 3 + 1 extra
    assert partial_accuracy([A], TRUTH) == pytest.approx(1 / 3)
    assert partial_accuracy([A, A, B], TRUTH) == pytest.approx(2 / 3)  # the duplicate matches once
    assert not exact_set_match([A, A, B], TRUTH) and not exact_set_match([A, B, C, C], TRUTH)
    assert exact_set_match([C, B, A], TRUTH) and partial_accuracy([], []) == 1.0
    assert directions_match("0, 180", 180) and directions_match("", 90) and not directions_match(90, "")
    wrong_turn = score_prediction(
        [A, Hole("triangle", "small", 90, 8), C], TRUTH, ["H1-F", "D3-F", "V1-F"], ["H1-F", "V1-F", "D3-F"]
    )
    assert wrong_turn.matched == 2 and wrong_turn.partial == pytest.approx(2 / 3)
    assert wrong_turn.field_matched == (3, 3, 3, 2)  # shape, size, location, direction
    assert not wrong_turn.unfolding_exact and wrong_turn.unfolding_matched == 1 and wrong_turn.unfolding_steps == 3
    # the direction-free variant (the paper's text modality) forgives the turn
    assert score_prediction([A, Hole("triangle", "small", 90, 8), C], TRUTH, use_direction=False).exact


def test_benchmark_totals_are_micro_averaged_as_the_paper_scores() -> None:
    exact = score_prediction([A, B], [A, B], ["V1-F"], ["V1-F"])
    extra = score_prediction([A, B, C, D], TRUTH, ["V1-F", "H2-F"], ["V1-F", "H1-F"])
    missing = score_prediction(None, [D], None, ["D1-F"])  # an answer that did not parse
    got = summarize_scores([exact, extra, missing])
    assert got["n"] == 3 and got["exact_match"] == pytest.approx(1 / 3)
    assert got["partial_accuracy"] == pytest.approx(5 / (2 + 3 + 1 + 1))  # sum M over sum (G + extra)
    assert got["extra_holes"] == pytest.approx(1 / 3) and got["missing_holes"] == pytest.approx(1 / 3)
    assert got["unfolding_exact"] == pytest.approx(1 / 3) and got["unfolding_steps"] == pytest.approx(2 / 4)
    assert got["location"] == pytest.approx(5 / 7) and got["parsed"] == pytest.approx(2 / 3)


def test_the_hole_rewards_are_gated_and_registered_with_the_count_reward_unchanged() -> None:
    truth = simulate([parse_fold("vertical_right_to_left")], [A])
    good = cot_text(truth.stages, truth.unfolding)
    holes = [h.as_record() for h in truth.holes]
    completions = [good, good.replace("8 small triangle 270", "8 small triangle 90"), good + "<holes></holes>"]
    comps, total = components_of(get_reward("folding"), completions, answer=[2, 2, 2], holes=[holes] * 3)
    assert comps["hole_partial"] == [1.0, 0.5, 0.0] and comps["integer_distance"] == [1.0, 1.0, 1.0]
    assert total == pytest.approx([1.0, 0.65, 0.3])
    exact = get_reward("hole_exact")(completions, answer=[2] * 3, holes=[json.dumps(holes)] * 3)
    assert exact == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="needs the column 'holes'"):
        get_reward("hole_partial")(completions, answer=[2] * 3)
