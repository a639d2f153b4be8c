"""Sampled-decoding metrics over k completions per scene (metrics.md section 2), vectorised.

Predictions come as a ``(scenes, k)`` float array (NaN = no parseable answer) beside a ``(scenes,)``
ground-truth array. Rules, stated in every output through :data:`MAJORITY_RULE`:

* acc@1: the first sample, over all scenes; a scene whose first sample has no parseable answer counts as wrong
  (so a policy cannot gain acc@1 by abstaining). Beside it, under their own names: ``coverage@1`` (share of scenes
  whose first sample has an answer) and ``acc@1_answered`` (accuracy over those scenes only).
* ``n`` gives every accuracy's denominator: ``acc@1_answered`` over scenes with a first answer, the others over
  all scenes; ``correct`` gives every accuracy's success count.
* maj@k: the most frequent parsed answer; missing answers do not vote; among tied values the one
  whose earliest occurrence comes first wins; a scene with no parseable answer counts as wrong.
* pass@k: at least one of the k samples is correct; denominator = all scenes.
* unbiased pass@k: ``1 - C(n - c, k) / C(n, k)`` per scene (n samples, c correct), averaged.
* selected@k: majority among the samples a ground-truth-free verifier accepts (self-consistent
  traces, optionally passing the hierarchy invariants); scenes where it accepts none fall back to
  plain majority.
"""

from __future__ import annotations

import math

import numpy as np

MAJORITY_RULE = (
    "majority over parsed answers; missing answers do not vote; ties go to the value whose earliest sample "
    "comes first; a scene with no parseable answer counts as wrong"
)
ACC1 = "acc@1"
"""Headline accuracy of the first sample over all scenes; no parseable answer counts as wrong."""
COVERAGE1 = "coverage@1"
"""Share of scenes whose first sample has a parseable answer."""
ACC1_ANSWERED = "acc@1_answered"
"""Accuracy of the first sample over the scenes where it has a parseable answer (not a headline number)."""
SELECTION_RULE = (
    "majority among samples accepted by the verifier (highest verifier score; self-consistent trace = final answer "
    "equals its own visible + hidden); scenes where no sample is accepted fall back to plain majority"
)


def _check(preds: np.ndarray, gt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    preds = np.asarray(preds, dtype=np.float64)
    gt = np.asarray(gt, dtype=np.float64)
    if preds.ndim != 2 or gt.shape != (preds.shape[0],):
        raise ValueError(f"predictions must be (scenes, k) and ground truth (scenes,); got {preds.shape}, {gt.shape}")
    return preds, gt


def majority_vote(preds: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Per-scene majority answer (NaN when nothing votes); ``weights`` (0/1, same shape) restricts the voters."""
    preds = np.asarray(preds, dtype=np.float64)
    voters = ~np.isnan(preds)
    if weights is not None:
        voters &= np.asarray(weights, dtype=bool)
    same = (preds[:, :, None] == preds[:, None, :]) & voters[:, None, :]
    counts = np.where(voters, same.sum(axis=2), 0)
    best = counts.argmax(axis=1)  # first index with the top count = earliest sample among tied values
    rows = np.arange(preds.shape[0])
    return np.where(counts[rows, best] > 0, preds[rows, best], np.nan)


def selected_vote(preds: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Majority among the samples with the highest positive verifier score; plain majority where none scores."""
    preds = np.asarray(preds, dtype=np.float64)
    scores = np.where(np.isnan(preds), -np.inf, np.asarray(scores, dtype=np.float64))
    top = scores.max(axis=1, keepdims=True)
    accepted = (scores == top) & (top > 0)
    chosen = majority_vote(preds, accepted)
    return np.where(accepted.any(axis=1), chosen, majority_vote(preds))


def unbiased_pass_at_k(n_correct: np.ndarray, n: int, k: int) -> float:
    """Mean over scenes of ``1 - C(n - c, k) / C(n, k)``."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n; got k={k}, n={n}")
    c = np.asarray(n_correct, dtype=np.float64)
    if c.size == 0:
        return math.nan
    i = np.arange(k, dtype=np.float64)
    ratio = np.prod(np.clip(n - c[:, None] - i, 0, None) / (n - i), axis=1)  # C(n-c,k)/C(n,k) as a product
    return float(np.mean(1.0 - ratio))


def _acc(hit: np.ndarray) -> float:
    return float(hit.mean()) if hit.size else math.nan


def decoding_metrics(preds: np.ndarray, gt: np.ndarray, verifier_scores: np.ndarray | None = None) -> dict[str, object]:
    """acc@1, maj@k, pass@k, the unbiased pass@j curve (j = 1..k) and, with scores, selected@k."""
    preds, gt = _check(preds, gt)
    scenes, k = preds.shape
    first = preds[:, 0] if k else np.full(scenes, np.nan)
    present = ~np.isnan(first)
    correct = preds == gt[:, None]
    n_correct = correct.sum(axis=1)
    maj = majority_vote(preds) if k else np.full(scenes, np.nan)
    answered = int(present.sum())
    out: dict[str, object] = {
        "scenes": scenes,
        "k": k,
        ACC1: _acc(first == gt),
        "acc@1_n": scenes,
        "acc@1_missing": scenes - answered,
        COVERAGE1: answered / scenes if scenes else math.nan,
        ACC1_ANSWERED: _acc(first[present] == gt[present]),
        f"maj@{k}": _acc(maj == gt),
        f"pass@{k}": _acc(n_correct > 0),
        "pass@k_unbiased": {str(j): unbiased_pass_at_k(n_correct, k, j) for j in range(1, k + 1)} if k else {},
        "n": {ACC1: scenes, ACC1_ANSWERED: answered, f"maj@{k}": scenes, f"pass@{k}": scenes},
        "missing_samples": int(np.isnan(preds).sum()),
        "scenes_without_answer": int(np.isnan(preds).all(axis=1).sum()) if k else scenes,
        "majority_rule": MAJORITY_RULE,
    }
    # success counts beside "n": a card's intervals come from these, whatever each accuracy's denominator
    out["correct"] = {ACC1: int((present & (first == gt)).sum()), ACC1_ANSWERED: int((present & (first == gt)).sum()),
                      f"maj@{k}": int((maj == gt).sum()),
                      f"pass@{k}": int((n_correct > 0).sum())}
    if verifier_scores is not None and k:
        selected = selected_vote(preds, verifier_scores) == gt
        out[f"selected@{k}"] = _acc(selected)
        out["n"][f"selected@{k}"] = scenes  # type: ignore[index]
        out["correct"][f"selected@{k}"] = int(selected.sum())  # type: ignore[index]
        out["selection_rule"] = SELECTION_RULE
    return out
