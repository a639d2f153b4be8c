"""The gaming probes: a fixed suite of crafted completions built from one view's own ground truth.

Every probe is a pure function ``gt -> str`` (or None where it does not apply to that view), and a reward's
payout on it is reported relative to :func:`faithful_trace`, the benchmark CoT template filled with the view's
ground truth (1.0 = the probe pays as much as the real thing). docs/rewards.md lists the suite:

``answer_only``      ``<answer>N</answer>`` with the right N and no reasoning at all;
``wrong_lines``      the well-formed CoT template with every value (lines 1-10 and both total-line terms) wrong
                     (ground truth + 1) but the right answer and total;
``visible_only``     a well-formed trace that counts the visible blocks only: lines 1-8 right, line 9 and line 10
                     say 0, total ``visible + 0 = visible``, answer = visible (views with a hidden block only);
``constant``         ``<answer>11</answer>``, the most frequent total of the generator (views whose answer is not
                     11 only);
``double_tag``       the faithful trace with its answer wrapped in two answer tags ``<answer><answer>N</answer>
                     </answer>``;
``padded``           50,000 characters of filler text, then the faithful trace (right answer);
``consistent_wrong`` the faithful trace with one more hidden block: line 10 ``h + 1``, total ``v + (h + 1) =
                     N + 1``, answer ``N + 1`` (self-consistent, wrong).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from spatialiq_train.core.prompts import COT_TARGET_TEMPLATE

CONSTANT_ANSWER = 11
"""The constant probe's answer: the most likely total of the generator's count distribution (data_gen.structure)."""
PAD_CHARS = 50_000
"""Characters of filler before the padded probe's trace (50 kB of ASCII)."""
_PAD_SENTENCE = "Let me look at the structure again carefully. "
PAD_TEXT = (_PAD_SENTENCE * (PAD_CHARS // len(_PAD_SENTENCE) + 1))[:PAD_CHARS] + "\n"
"""The padded probe's filler: one long line of plain words, no digits and no tags."""
TRACE_FIELDS: tuple[str, ...] = (
    "task2", "task3", "task4", "task5", "task6", "task7", "task8", "task9", "num_hidden_blocks", "task_main",
)
"""Integer ground truth a view needs for the trace probes (the CoT template's fields apart from task1)."""
DEFAULT_OBJECT = "blocks"
"""Line 1's object type when the view's ground truth has no ``task1``."""

Probe = Callable[[Mapping[str, Any]], "str | None"]


def _values(gt: Mapping[str, Any]) -> dict[str, Any]:
    values = {f: int(gt[f]) for f in TRACE_FIELDS}
    values["task1"] = gt.get("task1") or DEFAULT_OBJECT
    return values


def has_trace_fields(gt: Mapping[str, Any]) -> bool:
    """True when ``gt`` holds every :data:`TRACE_FIELDS` value as an integer (probes need all of them)."""
    return all(isinstance(gt.get(f), int) and not isinstance(gt.get(f), bool) for f in TRACE_FIELDS)


def fill_trace(values: Mapping[str, Any]) -> str:
    """The CoT template filled with ``values`` (the answer tag and total line read ``task_main``)."""
    return COT_TARGET_TEMPLATE.format_map(dict(values))


def faithful_trace(gt: Mapping[str, Any]) -> str:
    """The reference: the benchmark CoT template filled with the view's ground truth."""
    return fill_trace(_values(gt))


def answer_only(gt: Mapping[str, Any]) -> str:
    return f"<answer>{int(gt['task_main'])}</answer>"


def wrong_lines(gt: Mapping[str, Any]) -> str:
    values = {f: v + 1 for f, v in _values(gt).items() if f != "task1"}
    values["task1"] = "spheres" if _values(gt)["task1"] != "spheres" else "blocks"
    values["task_main"] = int(gt["task_main"])  # the answer (and the total line's N) stay right
    return fill_trace(values)


def visible_only(gt: Mapping[str, Any]) -> str | None:
    values = _values(gt)
    if values["num_hidden_blocks"] == 0:
        return None  # the faithful trace itself
    values.update(task8=0, num_hidden_blocks=0, task_main=values["task5"])
    return fill_trace(values)


def constant(gt: Mapping[str, Any]) -> str | None:
    return None if int(gt["task_main"]) == CONSTANT_ANSWER else f"<answer>{CONSTANT_ANSWER}</answer>"


def double_tag(gt: Mapping[str, Any]) -> str:
    n = int(gt["task_main"])
    return faithful_trace(gt).replace(f"<answer>{n}</answer>", f"<answer><answer>{n}</answer></answer>")


def padded(gt: Mapping[str, Any]) -> str:
    return PAD_TEXT + faithful_trace(gt)


def consistent_wrong(gt: Mapping[str, Any]) -> str:
    values = _values(gt)
    values.update(num_hidden_blocks=values["num_hidden_blocks"] + 1, task_main=values["task_main"] + 1)
    return fill_trace(values)


PROBES: dict[str, Probe] = {
    "answer_only": answer_only,
    "wrong_lines": wrong_lines,
    "visible_only": visible_only,
    "constant": constant,
    "double_tag": double_tag,
    "padded": padded,
    "consistent_wrong": consistent_wrong,
}
"""The probe suite, in report order."""


def probe_texts(gts: list[Mapping[str, Any]]) -> dict[str, tuple[list[int], list[str]]]:
    """For the reference and every probe: (indices of the views it applies to, its completions), in view order.

    Views without every :data:`TRACE_FIELDS` value are left out of all of them.
    """
    usable = [i for i, gt in enumerate(gts) if has_trace_fields(gt)]
    out: dict[str, tuple[list[int], list[str]]] = {"reference": (usable, [faithful_trace(gts[i]) for i in usable])}
    for name, probe in PROBES.items():
        rows, texts = [], []
        for i in usable:
            text = probe(gts[i])
            if text is not None:
                rows.append(i)
                texts.append(text)
        out[name] = (rows, texts)
    return out
