"""Benchmark prompt strings and the CoT template against benchmark-spec sections 6.5 and 6.6."""

from __future__ import annotations

import ast
import re

import pytest

from spatialiq_train.core import prompts
from spatialiq_train.core.tasks import COT_LINE_TASKS, TASKS, build_prompt, fill_cot_template, get_task

EX4_GT = dict(task1="blocks", task2=4, task3=8, task4=2, task5=11, task6=3, task7=3, task8=1, task9=3,
              num_hidden_blocks=1, task_main=12)


def _fenced_blocks(text: str) -> list[str]:
    return re.findall(r"```text\n(.*?)\n```", text, flags=re.S)


@pytest.fixture(scope="module")
def spec(shared_dir) -> str:
    return (shared_dir / "docs" / "benchmark-spec.md").read_text(encoding="utf-8")


def test_training_main_prompt_equals_spec_literal(spec: str) -> None:
    literal = next(line for line in spec.splitlines() if line.startswith("'CRITICAL INSTRUCTION: You are undergoing"))
    assert build_prompt("task_main") == ast.literal_eval(literal)


def test_every_prompt_string_appears_verbatim_in_spec(spec: str) -> None:
    blocks = _fenced_blocks(spec)
    assert prompts.TRAINING_CRITICAL_INSTRUCTION.rstrip("\n") in blocks
    assert prompts.TRAINING_DEFINITIONS.rstrip("\n") in blocks
    assert prompts.TYPE1_CRITICAL_INSTRUCTION.rstrip("\n") in blocks
    assert prompts.TYPE1_DEFINITIONS.rstrip("\n") in blocks
    assert prompts.COT_SYSTEM_PROMPT in blocks
    assert prompts.COT_TARGET_TEMPLATE in blocks
    for question in prompts.TRAINING_QUESTIONS.values():
        assert f"| {question} |" in spec
    for template in prompts.TYPE1_TEMPLATES.values():
        assert f"| {template} |" in spec


def test_cot_template_filled_matches_spec_example(spec: str) -> None:
    example_start = "<think>\n1) The object type making up the structure is: blocks."
    filled = next(b for b in _fenced_blocks(spec) if b.startswith(example_start))
    assert fill_cot_template(EX4_GT) == filled
    assert not filled.endswith("\n")


def test_masked_cot_replaces_both_totals() -> None:
    masked = fill_cot_template(EX4_GT, mask_final_answer="X")
    assert "The total is 11 + 1 = X." in masked and masked.endswith("<answer>X</answer>")
    assert "12" not in masked


def test_cot_missing_field_is_named() -> None:
    gt = dict(EX4_GT)
    del gt["task7"]
    with pytest.raises(KeyError, match="task7"):
        fill_cot_template(gt)


def test_prompt_assembly_rules() -> None:
    assert "DEFINITIONS" not in build_prompt("task1")
    assert build_prompt("task2").count("DEFINITIONS:\n") == 1
    type1 = build_prompt("task_main", "type1")
    assert "\nDEFINITIONS:\n1. A COLUMN is a vertical stack of one or more objects" in type1
    assert type1.endswith("QUESTION: How many TOTAL objects are present in the object structure? "
                          "Your answer should be a single integer ONLY.")
    assert build_prompt("task10", "type1") == build_prompt("task11", "type1")
    with pytest.raises(KeyError, match="type1"):
        build_prompt("task11", "training")
    with pytest.raises(ValueError, match="dialect"):
        build_prompt("task2", "chat")  # type: ignore[arg-type]


def test_catalogue_mapping() -> None:
    assert [t.paper_tag for t in TASKS.values()][:9] == [f"S{i}" for i in range(1, 10)]
    assert get_task("main").id == "task_main"
    assert COT_LINE_TASKS == {1: "task1", 2: "task3", 3: "task4", 4: "task2", 5: "task9", 6: "task5",
                              7: "task7", 8: "task6", 9: "task8"}
