"""SpatialChain's breakdowns against hand-checked values: first-occurrence relation labels, hop strata, per-relation
and per-hop accuracy with the n<20 flag, and the yes/no F1s against the paper's Table 2."""

from __future__ import annotations

from typing import Any

import pytest

from eval.external.spatialchain_breakdown import (
    breakdown_metrics,
    first_relation,
    hop_stratum,
    item_relation,
    per_hop,
    per_relation,
    relation_mentions,
    yes_no_f1,
)


@pytest.mark.parametrize(("question", "mentions", "label", "hops"), [
    # Appendix E's four examples: two single-hop, two multi-hop (Figure 6)
    ("Is there a fence to the left of the person that is pulling a suitcase?", ["left_of"], "left_of", "single"),
    ("Do you see any skateboards to the right of the person that is wearing a shirt?", ["right_of"], "right_of",
     "single"),
    ("Are there any umbrellas above the people to the left of the towel?", ["above", "left_of"], "above", "multi"),
    ("Do you see pastries to the left of the food that is to the left of the knife?", ["left_of", "left_of"],
     "left_of", "multi"),
    # Appendix K's question
    ("Are there kittens to the right of the bread that is to the right of the knife?", ["right_of", "right_of"],
     "right_of", "multi"),
    # every other category of Table 6, the multi-word ones as whole phrases
    ("Is the cup in front of the plate that is on top of the table?", ["in_front_of", "on_top_of"], "in_front_of",
     "multi"),
    ("What is the animal next to the fence behind the car?", ["next_to", "behind"], "next_to", "multi"),
    ("Is the lamp near the bed below the window inside the room?", ["near", "below", "inside"], "near", "multi"),
    ("Is the cup between the plate and the bowl?", ["other"], "other", "single"),
    # "on the left": GQA words left/right without "of" too
    ("Is the cup on the left side?", ["left_of"], "left_of", "single"),
    # alternatives, not a chain: the text cannot decide
    ("Is the cup to the left or to the right of the plate?", ["left_of", "right_of"], "left_of", "ambiguous"),
    # no relation of Table 6 (no synonyms: under is not below; nearest is not near; "front" alone is not in front of)
    ("Is the dog under the nearest table in the front?", [], "other", "ambiguous"),
])
def test_first_occurrence_label_and_hops(question: str, mentions: list[str], label: str, hops: str) -> None:
    assert relation_mentions(question) == mentions
    assert first_relation(question) == label
    assert hop_stratum(question) == hops


def test_the_relation_column_is_preferred() -> None:
    question = "Are there any umbrellas above the people to the left of the towel?"
    assert item_relation("left_of", question) == ("left_of", "column")
    assert item_relation(" Left of ", question) == ("left_of", "column")
    assert item_relation("", question) == ("above", "question")
    assert item_relation(None, question) == ("above", "question")


def _row(relation: str, hops: str, correct: int | None, pred: str | None = "yes", truth: str | None = "yes",
         source: str = "column", in_question: str | None = None) -> dict[str, Any]:
    return {"relation": relation, "relation_source": source, "relation_in_question": in_question or relation,
            "hops": hops, "correct": correct, "pred": pred, "truth": truth}


def test_per_relation_and_per_hop_cells() -> None:
    rows = ([_row("right_of", "multi", 1)] * 20 + [_row("right_of", "multi", 0, pred=None)]
            + [_row("left_of", "single", 1), _row("left_of", "single", 0, pred="no"),
               _row("left_of", "ambiguous", None, pred=None, truth=None, in_question="right_of"),
               _row("under", "single", 1, source="question")])
    table = per_relation(rows)
    assert list(table) == ["left_of", "right_of", "under"]  # Table 6's order, then labels it does not have
    assert table["left_of"] == {"n_items": 3, "n": 2, "correct": 1, "unparsed": 0, "accuracy": 0.5,
                                "inferential": False}
    assert table["right_of"] == {"n_items": 21, "n": 21, "correct": 20, "unparsed": 1, "accuracy": 20 / 21,
                                 "inferential": True}
    assert table["under"]["n"] == 1 and table["under"]["inferential"] is False
    assert per_relation(rows[1:])["right_of"]["inferential"] is True  # n = 20: inferential
    assert per_relation(rows[2:])["right_of"]["inferential"] is False  # n = 19: not
    hops = per_hop(rows)
    assert hops["single"] == {"n_items": 3, "n": 3, "correct": 2, "unparsed": 0, "accuracy": 2 / 3}
    assert hops["multi"]["accuracy"] == 20 / 21 and hops["ambiguous"] == {
        "n_items": 1, "n": 0, "correct": 0, "unparsed": 0, "accuracy": None}
    metrics = breakdown_metrics(rows)
    assert metrics["accuracy_single_hop"] == 2 / 3 and metrics["n_multi_hop"] == 21
    assert metrics["hop_delta"] == pytest.approx(20 / 21 - 2 / 3)
    assert metrics["accuracy_ambiguous_hop"] is None and metrics["n_ambiguous_hop"] == 0
    assert metrics["relation_from_column"] == 24 and metrics["relation_agreement"] == 23 / 24


def test_yes_no_f1_by_hand() -> None:
    pairs = ([("yes", "yes")] * 3 + [("yes", "no")] + [("no", "yes")] * 2 + [("no", "no")] * 2
             + [("yes", None), (None, "yes")])  # an unparsed answer and an attribute question: left out
    # yes: tp 3, fp 2, fn 1 -> 6/9; no: tp 2, fp 1, fn 2 -> 4/7
    assert yes_no_f1(pairs) == pytest.approx({"f1_yes": 2 / 3, "f1_no": 4 / 7, "macro_f1": 13 / 21})
    assert yes_no_f1([("yes", "yes")]) == {"f1_yes": 1.0, "f1_no": None, "macro_f1": None}
    assert yes_no_f1([]) == {"f1_yes": None, "f1_no": None, "macro_f1": None}


@pytest.mark.parametrize(("tp", "tn", "unparsed", "acc", "f1"), [
    (455, 273, 0, 81.34, 84.49),  # GLM-4.1-9B: yes-acc 80.39 of 566, no-acc 82.98 of 329
    (494, 234, 25, 81.34, 87.43),  # InternVL3.5-4B, 25 unparsed
    (496, 219, 7, 79.89, 85.15),  # Claude Sonnet 4.6, 7 unparsed
])
def test_table_2_rows_are_the_yes_class_f1(tp: int, tn: int, unparsed: int, acc: float, f1: float) -> None:
    """Table 2's counts (566 yes, 329 no questions; correct = yes-acc x 566 + no-acc x 329): its F1 column is the
    yes-class F1 over parsed answers and its Acc counts an unparsed answer wrong; the caption's macro-F1 is lower."""
    fn_and_unparsed, fp_and_unparsed = 566 - tp, 329 - tn
    unparsed_yes = min(unparsed, fn_and_unparsed)  # how the unparsed split by truth does not change either number
    pairs = ([("yes", "yes")] * tp + [("yes", "no")] * (fn_and_unparsed - unparsed_yes) + [("yes", None)] * unparsed_yes
             + [("no", "no")] * tn + [("no", "yes")] * (fp_and_unparsed - unparsed + unparsed_yes)
             + [("no", None)] * (unparsed - unparsed_yes))
    scores = yes_no_f1(pairs)
    assert round(100 * scores["f1_yes"], 2) == f1
    assert scores["macro_f1"] < scores["f1_yes"] - 0.03
    rows = [_row("left_of", "single", int(t == p), pred=p, truth=t) for t, p in pairs]
    assert len(rows) == 895 and round(100 * per_hop(rows)["single"]["accuracy"], 2) == acc
