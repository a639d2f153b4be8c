"""Reasoning-chain metrics against a reference chain (SpatialChain section 4.2 and Appendix I.1), pure functions.

ROUGE-1 and ROUGE-L are Google's ``rouge-score`` package (the reimplementation of ROUGE-1.5.5 that SpatialChain's
release lists in its requirements), F-measure, no stemming. Every other metric tokenises as ``rouge-score`` does
(lower-case, runs of ``[a-z0-9]``), so one word is one token throughout.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

STOP_WORDS: frozenset[str] = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself it
its itself they them their theirs themselves what which who whom this that these those am is are was were be been
being have has had having do does did doing a an the and but if or because as until while of at by for with about
against between into through during before after above below to from up down in out on off over under again
further then once here there when where why how all any both each few more most other some such no nor not only own
same so than too very s t can will just don should now
""".split())
"""NLTK's original English stop-word list (127 words), kept here so nothing is downloaded at run time: the token
F1 drops these (SpatialChain: "after lower-casing and stop-word removal"; the paper names no list)."""

STEP_MARKERS: tuple[str, ...] = ("first", "second", "third", "then", "next", "finally")
"""Appendix I.1's step-delimiter phrases, counted as whole words."""
OPENER_WORDS = 2
"""The opener of an output is its first two words ("looking at": SpatialChain section 6.4)."""

_TOKEN = re.compile(r"[a-z0-9]+")
_TAG = re.compile(r"</?[a-z_]{1,20}>", re.I)


def tokens(text: str) -> list[str]:
    """Lower-cased ``[a-z0-9]`` runs: ``rouge-score``'s tokenisation without stemming."""
    return _TOKEN.findall(text.lower())


def _scorer() -> Any:
    try:
        from rouge_score import rouge_scorer
    except ImportError as exc:
        raise ImportError("the chain metrics need the rouge-score package: pip install 'spatialiq-train[train]' "
                          "(or pip install rouge-score)") from exc
    return rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=False)


def rouge(predicted: str, reference: str, scorer: Any | None = None) -> tuple[float, float]:
    """(ROUGE-1 F, ROUGE-L F) of ``predicted`` against ``reference`` (0 when either has no token)."""
    result = (scorer or _scorer()).score(reference, predicted)
    return float(result["rouge1"].fmeasure), float(result["rougeL"].fmeasure)


def token_f1(predicted: str, reference: str) -> float:
    """F1 of the multiset overlap of content tokens (stop words removed); 0 when either side has none."""
    pred = [t for t in tokens(predicted) if t not in STOP_WORDS]
    ref = [t for t in tokens(reference) if t not in STOP_WORDS]
    overlap = sum((Counter(pred) & Counter(ref)).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def entity_overlap(predicted: str, labels: Iterable[str]) -> float | None:
    """Share of the scene graph's distinct object labels named in ``predicted`` (a label's tokens in sequence);
    None for a graph with no labels."""
    wanted = {tuple(tokens(label)) for label in labels} - {()}
    if not wanted:
        return None
    text = " " + " ".join(tokens(predicted)) + " "
    return sum(f" {' '.join(label)} " in text for label in wanted) / len(wanted)


def length_ratio(predicted: str, reference: str) -> float | None:
    """Predicted-to-reference chain length in tokens; None for an empty reference."""
    ref = len(tokens(reference))
    return len(tokens(predicted)) / ref if ref else None


def step_markers(text: str) -> int:
    """How many step-delimiter words (:data:`STEP_MARKERS`) the chain holds."""
    return sum(t in STEP_MARKERS for t in tokens(text))


def opener(text: str) -> str:
    """The output's first :data:`OPENER_WORDS` words, lower-cased, punctuation and tags (``<think>``) dropped ("" for
    an empty output)."""
    return " ".join(tokens(_TAG.sub(" ", text))[:OPENER_WORDS])


def opener_share(texts: Sequence[str]) -> tuple[str | None, float | None]:
    """The most common opener of ``texts`` and the share of outputs that open with it (ties: the first seen)."""
    if not texts:
        return None, None
    counts = Counter(opener(t) for t in texts)
    top = max(counts, key=lambda o: (counts[o], -list(counts).index(o)))
    return top, counts[top] / len(texts)


def conditioned(values: Sequence[float | None], correct: Sequence[int | None]) -> dict[str, float | int | None]:
    """A chain score among correct and among incorrect answers: means, their difference and the two-sided
    Mann-Whitney U test's p (scipy); items with no score or no correctness are left out; None where a group is empty."""
    from scipy.stats import mannwhitneyu

    right = [v for v, c in zip(values, correct, strict=True) if v is not None and c == 1]
    wrong = [v for v, c in zip(values, correct, strict=True) if v is not None and c == 0]
    out: dict[str, float | int | None] = {"n_correct": len(right), "n_incorrect": len(wrong),
                                          "mean_correct": _mean(right), "mean_incorrect": _mean(wrong),
                                          "delta": None, "u": None, "p": None}
    if right and wrong:
        test = mannwhitneyu(right, wrong, alternative="two-sided")
        out.update(delta=_mean(right) - _mean(wrong), u=float(test.statistic),  # type: ignore[operator]
                   p=float(test.pvalue))
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def mean_of(values: Iterable[float | None]) -> float | None:
    """Mean of the defined values (None when none is)."""
    return _mean([v for v in values if v is not None])
