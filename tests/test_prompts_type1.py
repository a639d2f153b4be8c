"""All twelve Type1 (zero-shot) prompts, byte for byte, against benchmark-spec section 6.6.

The expected prompts are rebuilt from the spec text itself: its two fenced interface strings, the
newline rules its prose states (a fenced block cannot show a trailing newline), and its template table,
rendered with ``str.format_map`` as the released clients do.
"""

from __future__ import annotations

import re

import pytest

from spatialiq_train.core import prompts
from spatialiq_train.core.tasks import build_prompt

TYPE1_KEYS = (*(f"task{i}" for i in range(1, 12)), "main")


@pytest.fixture(scope="module")
def section_66(shared_dir) -> str:
    spec = (shared_dir / "docs" / "benchmark-spec.md").read_text(encoding="utf-8")
    start = spec.index("### 6.6 ")
    end = spec.index("\n## 7.", start)
    return spec[start:end]


def _fenced_after(section: str, heading: str) -> str:
    at = section.index(heading)
    m = re.compile(r"```text\n(.*?)\n```", re.S).search(section, at)
    assert m is not None, f"no fenced block after {heading!r}"
    return m.group(1)


def _spec_prompts(section: str) -> dict[str, str]:
    # The prose states both newline rules; the test relies on them, so it checks they are still there.
    assert "`CRITICAL_INSTRUCTION` **ends with a newline**" in section
    assert "`DEFINITIONS` starts **and** ends with a newline" in section
    critical = _fenced_after(section, "`CRITICAL_INSTRUCTION` (Type1 text)") + "\n"
    definitions = _fenced_after(section, "`DEFINITIONS` (Type1 text)") + "\n"
    assert definitions.startswith("\nDEFINITIONS:\n")
    rows = dict(re.findall(r"^\| `(task\d+|main)` \| (.*) \|$", section, flags=re.M))
    assert sorted(rows) == sorted(TYPE1_KEYS)
    values = {"CRITICAL_INSTRUCTION": critical, "DEFINITIONS": definitions}
    return {key: template.format_map(values) for key, template in rows.items()}


def test_all_twelve_type1_prompts_byte_for_byte(section_66: str) -> None:
    expected = _spec_prompts(section_66)
    for key in TYPE1_KEYS:
        task = "task_main" if key == "main" else key
        assert build_prompt(task, "type1").encode("utf-8") == expected[key].encode("utf-8"), key


def test_type1_critical_instruction_ends_with_newline(section_66: str) -> None:
    assert prompts.TYPE1_CRITICAL_INSTRUCTION.endswith("context.\n")
    assert "or context.\nQUESTION: What type of object(s)" in build_prompt("task1", "type1")
    assert "or context.\n\nDEFINITIONS:\n" in build_prompt("task_main", "type1")
    expected = _spec_prompts(section_66)
    assert expected["task1"].count("\n") == 1  # the spec's task1 prompt: one newline, before QUESTION
