"""`eval external mentalblackboard`: records the folding simulator writes, both prompt modes, the answer format,
the folding family's metrics through the adapter against hand-computed values, the layout refusals, the released
records read in place, and a 2D run on the tiny model through the real transformers engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _train_support import tiny_model_dir
from typer.testing import CliRunner

from eval.external.base import BenchmarkLayoutError
from eval.external.mentalblackboard import MentalBlackboard, parse_answer, predicted_holes
from spatialiq_train.cli import app
from spatialiq_train.core.folding import Hole, parse_fold
from spatialiq_train.core.folding_records import make_record

RELEASED = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "mentalblackboard" / \
    "PFHP_Prediction_Data.json"


def _records(root: Path) -> Path:
    """Two records of our own, written by the simulator: one fold, and a fold then a rotation."""
    records = [make_record("T_1", [parse_fold("vertical_left_to_right")], [Hole("rectangle", "small", "0, 180", 7)]),
               make_record("T_2", [parse_fold("horizontal_top_to_bottom"), parse_fold("rotation-90")],
                           [Hole("circle", "large", "", 30)])]
    root.mkdir(parents=True, exist_ok=True)
    (root / "records.json").write_text(json.dumps(records))
    return root / "records.json"


def _draw_images(folder: Path, record: dict) -> None:
    """The 2D images of one record in the layout the release's img_text_map.py writes, drawn with PIL."""
    from PIL import Image

    rid = record["id"]
    img = folder / rid / "img"
    img.mkdir(parents=True)
    names = [f"{rid}_fold_0_initial.png", *(f"{rid}_fold_{n}_{f['foldType']}.png"
                                             for n, f in enumerate(record["foldingTypes"], 1)),
             f"{rid}_punching_holes.png"]
    for n, name in enumerate(names):
        Image.new("RGB", (56, 56), (30 * n, 200, 255 - 30 * n)).save(img / name)


def _answer(holes: list[dict], unfolding: list[str], fenced: bool = True) -> str:
    body = json.dumps({"totalNumberofHoles": len(holes), "unfoldingTypes": unfolding, "resultHoles": holes})
    return f"Unfold it step by step.\n```json\n{body}\n```" if fenced else f"So: {body} done"


def test_answer_shapes() -> None:
    holes = [{"shape": "circle", "size": "small", "direction": 0, "location": 3}]
    assert parse_answer(_answer(holes, ["V1-F"]))["resultHoles"] == holes
    assert parse_answer(_answer(holes, ["V1-F"], fenced=False))["unfoldingTypes"] == ["V1-F"]
    repaired = parse_answer('```json\n{"unfoldingTypes": [H1-F, V2-F], "resultHoles": [],}\n```')
    assert repaired == {"unfoldingTypes": ["H1-F", "V2-F"], "resultHoles": []}  # as the release's scorer repairs
    assert parse_answer("no json here") is None and parse_answer("") is None
    assert predicted_holes(parse_answer('{"totalNumberofHoles": 2}')) is None  # no resultHoles: unparsed
    assert predicted_holes({"resultHoles": ["x", {"shape": "Circle", "size": "small", "location": True}]}) == \
        [Hole("", "", "", 0), Hole("circle", "small", "", 0)]


def test_text_prompts_and_scores_against_hand_computed_values(tmp_path: Path) -> None:
    adapter = MentalBlackboard()
    items = adapter.load(_records(tmp_path), None)
    assert [i.id for i in items] == ["T_1", "T_2"] and items[0].images == () and items[0].system is None
    prompt = items[1].prompt
    assert prompt.startswith("You are an AI system with the ability to mentally visualize and manipulate folded paper.")
    assert "The first image" not in prompt and "horizontal_top_to_bottom" in prompt and "rotation-90" in prompt
    assert "- Shape: circle, Size: large, Location: 30, Direction: 0" in prompt
    assert prompt.endswith('      "location": <1-32>\n    }\n  ]\n}\n```')
    t1, t2 = (json.loads((tmp_path / "records.json").read_text())[i] for i in (0, 1))
    truth1 = t1["resultHoles"]
    assert len(truth1) == 2  # the fold doubles the punch
    one_wrong = [dict(truth1[0]), {**truth1[1], "location": 32 if truth1[1]["location"] != 32 else 31}]
    texts = {"T_1": _answer([*truth1, dict(truth1[0])], t1["unfoldingTypes"]),  # both right plus a duplicate
             "T_2": _answer(one_wrong[:1], ["H1-F", "X9-F"])}
    scored = adapter.score(items, texts)
    rows = {r["id"]: r for r in scored.rows}
    assert rows["T_1"]["correct"] == 0 and rows["T_1"]["scores"]["partial_accuracy"] == pytest.approx(2 / 3)
    assert rows["T_1"]["scores"]["extra_holes"] == 1 and rows["T_1"]["scores"]["unfolding_exact"] == 1
    m = scored.metrics
    truth2 = len(t2["resultHoles"])
    # micro average: (2 + matched_2) / (3 + truth2); T_2's one predicted hole is not T_2's truth
    matched2 = rows["T_2"]["scores"]["partial_accuracy"] * truth2
    assert m["partial_accuracy"] == pytest.approx((2 + matched2) / (3 + truth2))
    assert m["exact_match"] == 0.0 and m["extra_holes"] == 0.5 and m["unparsed"] == 0
    assert scored.primary == "exact_match"
    perfect = adapter.score(items, {i: _answer(r["resultHoles"], r["unfoldingTypes"]) for i, r in
                                    (("T_1", t1), ("T_2", t2))})
    assert perfect.metrics["exact_match"] == 1.0 and perfect.metrics["partial_accuracy"] == 1.0
    assert perfect.metrics["unfolding_exact"] == 1.0 and perfect.metrics["unfolding_steps"] == 1.0


def test_wrong_layouts_are_refused_naming_what_is_missing(tmp_path: Path) -> None:
    adapter = MentalBlackboard()
    records = _records(tmp_path / "data")
    data = json.loads(records.read_text())
    del data[1]["resultHoles"]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(BenchmarkLayoutError, match="record T_2.*resultHoles"):
        adapter.load(tmp_path / "bad.json", None)
    (tmp_path / "obj.json").write_text("{}")
    with pytest.raises(BenchmarkLayoutError, match="JSON list of prediction records"):
        adapter.load(tmp_path / "obj.json", None)
    (tmp_path / "img").mkdir()
    with pytest.raises(BenchmarkLayoutError, match="img/T_1_fold_0_initial.png"):
        adapter.load(records, tmp_path / "img")
    _draw_images(tmp_path / "img", json.loads(records.read_text())[0])
    (tmp_path / "img" / "T_1" / "img" / "T_1_punching_holes.png").unlink()
    with pytest.raises(BenchmarkLayoutError, match="T_1_punching_holes.png is missing"):
        adapter.load(records, tmp_path / "img")
    data = json.loads(records.read_text())
    data[0]["id"] = "../T_1"
    (tmp_path / "escape.json").write_text(json.dumps(data))
    with pytest.raises(BenchmarkLayoutError, match="'../T_1' is not a plain file name"):
        adapter.load(tmp_path / "escape.json", tmp_path / "img")


def test_the_released_records_read_and_score_in_place() -> None:
    if not RELEASED.is_file():
        pytest.skip(f"{RELEASED} is absent (../shared/fixtures/mentalblackboard)")
    adapter = MentalBlackboard()
    items = adapter.load(RELEASED, None)
    assert len(items) == 900
    records = {r["id"]: r for r in json.loads(RELEASED.read_text())}
    texts = {i.id: _answer(records[i.id]["resultHoles"], records[i.id]["unfoldingTypes"]) for i in items}
    metrics = adapter.score(items, texts).metrics  # the truth, answered in the prompt's format, scores 1
    assert metrics["exact_match"] == 1.0 and metrics["partial_accuracy"] == 1.0 and metrics["unfolding_exact"] == 1.0


def test_a_2d_run_on_the_tiny_model(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    records = _records(tmp_path / "data")
    _draw_images(tmp_path / "img", json.loads(records.read_text())[1])  # only T_2 has its images
    items = MentalBlackboard().load(records, tmp_path / "img")
    assert [i.id for i in items] == ["T_2"] and len(items[0].images) == 4  # initial, two steps, the punch
    assert items[0].prompt.count("The first image shows the number locations") == 1
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["eval", "external", "mentalblackboard", "--data", str(records), "--images",
                                   str(tmp_path / "img"), "--model", tiny_model_dir(), "--out", str(out),
                                   "--engine", "transformers", "--max-new-tokens", "4"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["benchmark"] == "mentalblackboard" and metrics["primary"] == "exact_match" and metrics["n"] == 1
    assert metrics["metrics"]["unparsed"] == 1  # four random tokens hold no JSON answer: scored as no holes
    assert json.loads((out / "per_item.jsonl").read_text())["correct"] == 0
