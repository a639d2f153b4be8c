"""SpatialChain's breakdowns of accuracy (Sousa et al., ../shared/seeds/002), pure functions over scored item rows.

- **Relation** (section 3.4, Appendix D Table 6, Appendix I.2 Table 10): "our first-occurrence labelling scheme,
  where each question is tagged according to the first spatial relation appearing in its string", over Table 6's
  eleven categories; "per-relation cells with n<20 are non-inferential". The release's ``relation`` column
  ("Primary spatial relation") is preferred where a row has one; the question's first relation otherwise.
- **Hops** (Appendix L.5 Table 18): "hop count — the number of spatial relations chained in the question, inferred
  from the question text"; the paper classified its 5 ambiguous cases by hand, here they stay ``ambiguous``.
- **Yes/no F1** (Table 2: "Acc and F1 are overall accuracy and macro-F1 on the binary Yes/No task"): the macro-F1
  as the caption defines it, and the yes-class F1 that reproduces every one of Table 2's nine F1 values.

The relation phrases are the category names of Table 6 as words ("in front of", "on top of", "next to", ...) and
"between" of its "between / other" row; ``left_of`` and ``right_of`` are the words "left" and "right", since GQA
words them with and without "of" ("to the left of the cup", "on the left", "to the left or to the right of").
No synonym is added ("under" is not "below", "beside" not "next to": the paper names no such mapping).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

RELATIONS: tuple[str, ...] = ("left_of", "right_of", "in_front_of", "behind", "near", "above", "below",
                              "on_top_of", "next_to", "inside", "other")
"""Table 6's eleven categories, in its order; ``other`` is its "between / other" row."""
RELATION_PHRASES: dict[str, str] = {
    "left": "left_of", "right": "right_of", "in front of": "in_front_of", "behind": "behind", "near": "near",
    "above": "above", "below": "below", "on top of": "on_top_of", "next to": "next_to", "inside": "inside",
    "between": "other"}
"""Words in a question -> the category they name (matched as whole words, lower-cased)."""
INFERENTIAL_MIN_N = 20
"""Section 3.4: per-relation cells with n<20 are non-inferential."""
HOP_STRATA: tuple[str, ...] = ("single", "multi", "ambiguous")

_WORD = re.compile(r"[a-z]+")
_PHRASES = sorted(((tuple(p.split()), label) for p, label in RELATION_PHRASES.items()), key=lambda x: -len(x[0]))


def _spans(question: str) -> tuple[list[str], list[tuple[int, int, str]]]:
    """The question's lower-cased words and its relation phrases as (first word, end, category), in order."""
    words = _WORD.findall(question.lower())
    spans, i = [], 0
    while i < len(words):
        hit = next(((p, label) for p, label in _PHRASES if tuple(words[i:i + len(p)]) == p), None)
        if hit is None:
            i += 1
            continue
        spans.append((i, i + len(hit[0]), hit[1]))
        i += len(hit[0])
    return words, spans


def relation_mentions(question: str) -> list[str]:
    """The relation categories the question names, in the order they appear (one per occurrence)."""
    return [label for _, _, label in _spans(question)[1]]


def first_relation(question: str) -> str:
    """The first-occurrence label: the category of the first relation in the question, ``other`` when none."""
    mentions = relation_mentions(question)
    return mentions[0] if mentions else "other"


def item_relation(column: str | None, question: str) -> tuple[str, str]:
    """(label, source): the row's ``relation`` value when it has one (lower-cased, spaces and hyphens as
    underscores; source ``column``), else the question's first-occurrence label (source ``question``)."""
    value = re.sub(r"[\s-]+", "_", (column or "").strip().lower())
    return (value, "column") if value else (first_relation(question), "question")


def hop_stratum(question: str) -> str:
    """``single`` (one relation named), ``multi`` (two or more chained), or ``ambiguous``: no relation phrase
    found, or two named as alternatives (an ``or`` between them, "to the left of the cup or to the right of it"),
    which the text alone cannot tell from a chain (the paper decided its five by hand)."""
    words, spans = _spans(question)
    if not spans or any("or" in words[a[1]:b[0]] for a, b in zip(spans, spans[1:], strict=False)):
        return "ambiguous"
    return "single" if len(spans) == 1 else "multi"


def _cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """n (yes/no items), correct, unparsed and accuracy (an unparsed answer counted wrong) of a group."""
    binary = [r for r in rows if r["correct"] is not None]
    correct = sum(r["correct"] for r in binary)
    return {"n": len(binary), "correct": correct, "unparsed": sum(r["pred"] is None for r in binary),
            "accuracy": correct / len(binary) if binary else None}


def per_relation(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Relation label -> its cell (:func:`_cell`) plus ``n_items`` (attribute answers too) and ``inferential``
    (n >= 20); Table 6's categories first in its order, then any other label the data holds, alphabetically."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["relation"], []).append(row)
    order = [r for r in RELATIONS if r in groups] + sorted(set(groups) - set(RELATIONS))
    return {label: {"n_items": len(groups[label]), **(cell := _cell(groups[label])),
                    "inferential": cell["n"] >= INFERENTIAL_MIN_N} for label in order}


def per_hop(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Stratum (single, multi, ambiguous; each present) -> its cell and ``n_items``."""
    out = {}
    for stratum in HOP_STRATA:
        group = [r for r in rows if r["hops"] == stratum]
        out[stratum] = {"n_items": len(group), **_cell(group)}
    return out


def _f1(tp: int, fp: int, fn: int) -> float | None:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None


def yes_no_f1(pairs: Iterable[tuple[str | None, str | None]]) -> dict[str, float | None]:
    """F1 of the yes class, of the no class and their unweighted mean (macro-F1) over (truth, pred) pairs of
    parsed answers to yes/no questions (pairs with a None on either side are left out, as Table 2's F1 leaves out
    unparsed answers). A class's F1 is None when it has no true, predicted or missed item; the macro-F1 is None
    unless both are defined."""
    kept = [(t, p) for t, p in pairs if t is not None and p is not None]
    out: dict[str, float | None] = {}
    for label in ("yes", "no"):
        tp = sum(t == p == label for t, p in kept)
        fp = sum(p == label != t for t, p in kept)
        fn = sum(t == label != p for t, p in kept)
        out[f"f1_{label}"] = _f1(tp, fp, fn)
    f_yes, f_no = out["f1_yes"], out["f1_no"]
    out["macro_f1"] = None if f_yes is None or f_no is None else (f_yes + f_no) / 2
    return out


def breakdown_metrics(rows: list[dict[str, Any]]) -> dict[str, float | int | None]:
    """The flat metrics of the breakdowns: macro-F1 and the class F1s, accuracy per hop stratum with n and the
    multi - single difference (Table 18's delta), and how the relation labels were found."""
    metrics: dict[str, float | int | None] = dict(yes_no_f1((r["truth"], r["pred"]) for r in rows))
    hops = per_hop(rows)
    for stratum, cell in hops.items():
        metrics[f"accuracy_{stratum}_hop"] = cell["accuracy"]
        metrics[f"n_{stratum}_hop"] = cell["n"]
    single, multi = hops["single"]["accuracy"], hops["multi"]["accuracy"]
    metrics["hop_delta"] = None if single is None or multi is None else multi - single
    from_column = [r for r in rows if r["relation_source"] == "column"]
    metrics["relation_from_column"] = len(from_column)
    metrics["relation_agreement"] = (sum(r["relation"] == r["relation_in_question"] for r in from_column)
                                     / len(from_column) if from_column else None)
    return metrics


def hop_faithfulness(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Mean judge faithfulness per hop stratum over the items with a valid verdict (``scores``'
    ``judge_reasoning_faithfulness``), and multi - single: Table 18's RF columns."""
    out: dict[str, float | None] = {}
    for stratum in HOP_STRATA:
        values = [r["scores"]["judge_reasoning_faithfulness"] for r in rows if r["hops"] == stratum
                  and r["scores"].get("judge_reasoning_faithfulness") is not None]
        out[f"judge_faithfulness_{stratum}_hop"] = sum(values) / len(values) if values else None
    single, multi = out["judge_faithfulness_single_hop"], out["judge_faithfulness_multi_hop"]
    out["judge_faithfulness_hop_delta"] = None if single is None or multi is None else multi - single
    return out
