"""The gaming probes, each built from a known view's ground truth, and the train-partition splits they sample."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spatialiq_train.core.parsing import parse_trace
from spatialiq_train.core.tasks import fill_cot_template
from spatialiq_train.lab.probes import CONSTANT_ANSWER, PAD_CHARS, PROBES, faithful_trace, probe_texts

GT = {"task1": "cubes", "task_main": 14, "task2": 2, "task3": 5, "task4": 3, "task5": 11, "task6": 1, "task7": 2,
      "task8": 2, "task9": 1, "num_hidden_blocks": 3}
LINES = ("task3", "task4", "task2", "task9", "task5", "task7", "task6", "task8")  # CoT lines 2..9


def _probe(name: str, gt: dict = GT) -> str | None:  # noqa: B006 - read only
    return PROBES[name](gt)


def test_reference_is_the_filled_cot_template() -> None:
    assert faithful_trace(GT) == fill_cot_template(GT)
    assert faithful_trace({**GT, "task1": None}).startswith("<think>\n1) The object type making up the structure is: "
                                                            "blocks.")


def test_answer_only_and_constant() -> None:
    assert _probe("answer_only") == "<answer>14</answer>"
    assert _probe("constant") == f"<answer>{CONSTANT_ANSWER}</answer>"
    assert _probe("constant", {**GT, "task_main": CONSTANT_ANSWER}) is None  # the constant would be right


def test_wrong_lines_keeps_only_the_answer_right() -> None:
    trace = parse_trace(_probe("wrong_lines"))
    assert trace.pred == 14 and trace.pred_source == "tag"
    assert all(trace.tasks[t] == GT[t] + 1 for t in LINES)
    assert trace.hidden == GT["num_hidden_blocks"] + 1
    assert trace.total_line == (12, 4, 14)
    assert "structure is: spheres." in _probe("wrong_lines")


def test_visible_only_counts_the_visible_blocks_and_adds_up() -> None:
    trace = parse_trace(_probe("visible_only"))
    assert trace.pred == 11 and trace.total_line == (11, 0, 11) and trace.hidden == 0
    assert trace.tasks["task8"] == 0 and all(trace.tasks[t] == GT[t] for t in LINES if t != "task8")
    assert _probe("visible_only", {**GT, "num_hidden_blocks": 0, "task8": 0, "task_main": 11}) is None


def test_double_tag_padded_and_consistent_wrong() -> None:
    assert _probe("double_tag").endswith("</think>\n<answer><answer>14</answer></answer>")
    assert _probe("double_tag").count("<answer>") == 2
    padded = _probe("padded")
    assert len(padded) == PAD_CHARS + 1 + len(faithful_trace(GT)) and padded.endswith(faithful_trace(GT))
    assert len(padded[:PAD_CHARS].encode()) == 50_000 and not any(c.isdigit() for c in padded[:PAD_CHARS])
    trace = parse_trace(_probe("consistent_wrong"))
    assert trace.pred == 15 and trace.total_line == (11, 4, 15) and trace.hidden == 4 and trace.self_consistent
    assert all(trace.tasks[t] == GT[t] for t in LINES)


def test_probe_texts_skip_views_without_the_trace_fields() -> None:
    texts = probe_texts([GT, {**GT, "num_hidden_blocks": None}, {**GT, "task_main": CONSTANT_ANSWER, "task5": 8}])
    assert texts["reference"][0] == [0, 2]
    assert texts["constant"][0] == [0]
    assert texts["answer_only"] == ([0, 2], ["<answer>14</answer>", f"<answer>{CONSTANT_ANSWER}</answer>"])


def test_split_may_name_a_train_partition(tmp_path: Path) -> None:
    """``--split rl`` reads the train views whose structure falls in the RL partition, as the traces decide it."""
    from eval.scenes import find_scenes
    from spatialiq_train.core.splits import part_of
    from spatialiq_train.core.views import LEAF_VIEWS, sample_relpath, view_relpath

    gt = {**GT, "total_blocks": 14, "object_type": "cube"}
    for s in range(1, 31):
        rel = view_relpath("train", s, LEAF_VIEWS[0])
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "gt.json").write_text(json.dumps(gt))
    expected = {p: [s for s in range(1, 31) if part_of(sample_relpath("train", s)) == p]
                for p in ("rl", "warmup", "val")}
    assert expected["rl"] and expected["warmup"] and expected["val"]  # 30 structures: every part occupied
    for part, samples in expected.items():
        views = find_scenes(tmp_path, part)
        assert [v.view for v in views] == [view_relpath("train", s, LEAF_VIEWS[0]) for s in samples]
        assert {v.split for v in views} == {"train"}
    assert len(find_scenes(tmp_path, "train")) == 30
    for s in expected["warmup"]:  # without warm-up structures the partition is empty: an error naming it
        shutil.rmtree(tmp_path / sample_relpath("train", s))
    with pytest.raises(FileNotFoundError, match="no train view falls in the 'warmup' partition"):
        find_scenes(tmp_path, "warmup")
