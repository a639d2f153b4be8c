"""SpatialChain's answer shapes, every chain metric against hand-computed values, and the layout checks."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from _external_support import ROWS, write_spatialchain

from eval.external import chains
from eval.external.base import BenchmarkLayoutError
from eval.external.spatialchain import SpatialChain, object_labels, spatialchain_metrics, split_output, yes_no


@pytest.mark.parametrize(("text", "chain", "answer", "label"), [
    # the training target format (section 3.3)
    ("<think>I see a fence.</think><answer>Yes, there is a fence.</answer>", "I see a fence.",
     "Yes, there is a fence.", "yes"),
    # the inference prompt's Answer line (Appendix H), as in Appendix E and K
    ("Looking at the image, I can see a bird.\nAnswer: No, there is a bird to the right of the bread.",
     "Looking at the image, I can see a bird.", "No, there is a bird to the right of the bread.", "no"),
    ("Answer:The image shows birds. No kittens are visible. Answer: No, there are no kittens in the image",
     "Answer:The image shows birds. No kittens are visible.", "No, there are no kittens in the image", "no"),
    ("kittens is not to the right of the bread.\nAnswer: No (implicit).", "kittens is not to the right of the bread.",
     "No (implicit).", "no"),
    ("Some reasoning.\n**Answer:** Yes", "Some reasoning.", "Yes", "yes"),
    ("Chain.\nAnswer:\n\nYes, it is.", "Chain.", "Yes, it is.", "yes"),
    ("Chain.\nANSWER: no", "Chain.", "no", "no"),
    ("Appendix E style.\nAnswer: ✓ Yes, there is a fence.", "Appendix E style.", "✓ Yes, there is a fence.", "yes"),
    # a chat template that opened the think block in the prompt: only the closing tag is generated
    ("steps here</think>\n\nAnswer: yes", "steps here", "yes", "yes"),
    # answers that are there but not yes/no, and a missing answer
    ("Answer: To determine this, look left. Therefore, the answer is No.", "",
     "To determine this, look left. Therefore, the answer is No.", None),
    ("<answer>maybe</answer>", "", "maybe", None),
    ("I think there is a fence somewhere.", "I think there is a fence somewhere.", None, None),
    ("", "", None, None),
])
def test_every_answer_shape(text: str, chain: str, answer: str | None, label: str | None) -> None:
    assert split_output(text) == (chain, answer)
    assert yes_no(answer) == label


def test_chain_metrics_against_hand_computed_values() -> None:
    assert chains.rouge("the cat sat", "the cat ran") == pytest.approx((2 / 3, 2 / 3))
    assert chains.rouge("a b c d", "a c b d") == pytest.approx((1.0, 0.75))  # LCS 3 of 4
    assert chains.rouge("", "a b") == (0.0, 0.0)
    # content tokens: [fence, left, person] vs [see, fence, person, stands]: P 2/3, R 2/4
    assert chains.token_f1("The fence is left of the person", "I see a fence; the person stands") == \
        pytest.approx(4 / 7)
    assert chains.token_f1("the of and", "fence") == 0.0
    labels = ["fire hydrant", "fence", "person", "Fence"]
    assert chains.entity_overlap("A red fire hydrant near the fence.", labels) == pytest.approx(2 / 3)
    assert chains.entity_overlap("a hydrant", ["fire hydrant"]) == 0.0
    assert chains.entity_overlap("anything", []) is None
    assert chains.length_ratio("one two three", "a b c d e f") == 0.5
    assert chains.length_ratio("one", "") is None
    assert chains.step_markers("First, I look. Then, next... Finally! Firstly not.") == 4
    opener, share = chains.opener_share(["Looking at the image", "looking at it", "I see"])
    assert opener == "looking at" and share == pytest.approx(2 / 3)
    assert chains.opener_share([]) == (None, None)
    assert chains.opener("<think>Looking at the image</think>") == "looking at"


def test_chain_quality_conditioned_on_correctness() -> None:
    test = chains.conditioned([0.1, 0.2, 0.3, 0.4, None, 0.9], [1, 1, 0, 0, 1, None])
    assert test["n_correct"] == 2 and test["n_incorrect"] == 2
    assert test["mean_correct"] == pytest.approx(0.15) and test["mean_incorrect"] == pytest.approx(0.35)
    assert test["delta"] == pytest.approx(-0.2)
    assert test["u"] == 0.0 and test["p"] == pytest.approx(1 / 3)  # exact: 2 * P(U <= 0) = 2 / C(4, 2)
    assert chains.conditioned([0.5], [1])["p"] is None  # no incorrect group


def _row(truth: str | None, pred: str | None, rouge1: float, f1: float) -> dict:
    correct = None if truth is None else int(pred == truth)
    scores = {"rouge1": rouge1, "rougeL": rouge1 / 2, "token_f1": f1, "entity_overlap": None, "length_ratio": 2.0,
              "step_markers": 1, "chain_words": 4}
    return {"id": f"{truth}{pred}{rouge1}", "correct": correct, "truth": truth, "pred": pred, "scores": scores}


def test_accuracy_family_against_hand_computed_values() -> None:
    rows = [_row("yes", "yes", 0.6, 0.5), _row("yes", "yes", 0.8, 0.7), _row("yes", "no", 0.2, 0.1),
            _row("no", "no", 0.4, 0.3), _row("no", None, 0.0, 0.0), _row(None, "yes", 1.0, 1.0)]
    m = spatialchain_metrics(rows)
    assert m["n_binary"] == 5 and m["unparsed"] == 1
    assert m["accuracy"] == pytest.approx(3 / 4)  # parsed only (Table 2's caption)
    assert m["accuracy_all"] == pytest.approx(3 / 5)  # the unparsed one counted wrong (Table 2's numbers)
    assert m["yes_accuracy"] == pytest.approx(2 / 3) and m["no_accuracy"] == 1.0
    assert m["yes_accuracy_all"] == pytest.approx(2 / 3) and m["no_accuracy_all"] == pytest.approx(1 / 2)
    assert m["polarity_gap"] == pytest.approx(2 / 3 - 1)
    assert m["rouge1"] == pytest.approx((0.6 + 0.8 + 0.2 + 0.4 + 0.0 + 1.0) / 6)  # chain metrics: every item
    assert m["entity_overlap"] is None and m["length_ratio"] == 2.0 and m["step_markers"] == 1.0
    assert m["rouge1_correct"] == pytest.approx(0.6) and m["rouge1_incorrect"] == pytest.approx(0.2)
    assert m["n_correct"] == 3 and m["n_incorrect"] == 1  # unparsed and non-binary items left out of the test
    assert m["token_f1_delta"] == pytest.approx(0.5 - 0.1)


def test_scene_graph_labels_in_every_form() -> None:
    gqa = json.dumps({"objects": {"1": {"name": "fence"}, "2": {"name": "person"}}})
    assert object_labels(gqa) == ["fence", "person"]
    assert object_labels(json.dumps({"7": {"name": "cup"}})) == ["cup"]
    assert object_labels(json.dumps([{"name": "cup"}, {"id": 3}])) == ["cup"]
    assert object_labels("{'1': {'name': 'plate'}}") == ["plate"]  # a Python literal: parsed, never evaluated
    assert object_labels("Scene: 640x480\nObjects:\n  - fire hydrant(12) [red]  at (1, 2) size 3x4\n"
                         "  - man(13)  at (5, 6) size 7x8") == ["fire hydrant", "man"]
    assert object_labels("__import__('os')") == []


def test_a_folder_in_the_wrong_layout_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    adapter = SpatialChain()
    root = write_spatialchain(tmp_path / "a", columns=["imageId", "question", "fullAnswer", "scene_graph"])
    with pytest.raises(BenchmarkLayoutError, match="missing column.*thinking"):
        adapter.load(root / "test.csv", root / "images")
    root = write_spatialchain(tmp_path / "b")
    (root / "images" / f"{ROWS[1]['imageId']}.jpg").unlink()
    with pytest.raises(BenchmarkLayoutError, match=f"row 2 .*{ROWS[1]['imageId']}.jpg"):
        adapter.load(root / "test.csv", root / "images")
    with pytest.raises(BenchmarkLayoutError, match="needs --images"):
        adapter.load(root / "test.csv", None)
    with pytest.raises(BenchmarkLayoutError, match="no such file"):
        adapter.load(root / "absent.csv", root / "images")
    escaping = [{**ROWS[0], "imageId": "../secret"}]
    root = write_spatialchain(tmp_path / "c", rows=[ROWS[0]])
    with (root / "test.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(ROWS[0]))
        writer.writeheader()
        writer.writerows(escaping)
    with pytest.raises(BenchmarkLayoutError, match="'../secret' is not a plain file name"):
        adapter.load(root / "test.csv", root / "images")


def test_parquet_and_csv_give_the_same_items(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = write_spatialchain(tmp_path)
    pq.write_table(pa.Table.from_pylist(ROWS), root / "test.parquet")
    from_csv = SpatialChain().load(root / "test.csv", root / "images")
    from_parquet = SpatialChain().load(root / "test.parquet", root / "images")
    assert from_csv == from_parquet
    assert [i.id for i in from_csv] == [f"{n}:{r['imageId']}" for n, r in enumerate(ROWS, start=1)]
    assert from_csv[0].system is not None and from_csv[0].system.startswith("Your task:\n1. Analyze the image")
    assert from_csv[0].prompt == ROWS[0]["question"]
