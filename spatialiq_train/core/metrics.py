"""Metric names, by namespace: one table used by the TRL path, the NeMo-RL path, eval and the reward lab.

Every logged number has exactly one name here. Namespaces:

- ``train/...``: optimisation (loss, learning rate, grad norm, KL, entropy, clip fraction, throughput);
- ``rollout/...``: generated completions (lengths, the share clipped at the token budget);
- ``reward/<name>/{mean,std,errors}``: each reward function, and ``reward/total/...`` for the weighted sum;
- ``dynamic_sampling/...``: DAPO's group filter (kept, dropped and filler groups, refill rounds);
- ``eval/...``: validation (exact match on the validation split, eval loss);
- ``perf/...``: throughput (tokens/s, MFU, peak memory, RL generation/training time; `core.throughput`).

Pure data and pure functions, and :func:`read_metrics` for the ``metrics.jsonl`` file both training backends
write: importing it loads nothing heavy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from spatialiq_train.core.throughput import PERF_METRICS

log = logging.getLogger(__name__)

RewardStat = Literal["mean", "std", "errors"]
REWARD_STATS: tuple[str, ...] = ("mean", "std", "errors")
TOTAL_REWARD = "total"
"""The reward name under which the weighted sum of all reward functions is logged."""
ACCURACY_REWARD = "exact_match"
"""The weight-0 reward function whose mean is the exact-match accuracy of the rollouts."""


def reward_metric(name: str, stat: str) -> str:
    """``reward/<name>/<stat>``; a ValueError names a bad stat or a name with a slash."""
    if stat not in REWARD_STATS:
        raise ValueError(f"reward metric stat {stat!r} is not one of {', '.join(REWARD_STATS)}")
    if not name or "/" in name:
        raise ValueError(f"reward name {name!r} must be non-empty and hold no '/'")
    return f"reward/{name}/{stat}"


TRAIN_LOSS = "train/loss"
TRAIN_LEARNING_RATE = "train/learning_rate"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_EPOCH = "train/epoch"
TRAIN_KL = "train/kl"
TRAIN_ENTROPY = "train/entropy"
TRAIN_CLIP_FRACTION = "train/clip_fraction"
TRAIN_TOKEN_ACCURACY = "train/token_accuracy"
TRAIN_NUM_TOKENS = "train/num_tokens"
TRAIN_TOKENS_PER_S = "train/tokens_per_s"

ROLLOUT_LENGTH_MEAN = "rollout/length_mean"
ROLLOUT_LENGTH_MIN = "rollout/length_min"
ROLLOUT_LENGTH_MAX = "rollout/length_max"
ROLLOUT_CLIPPED_SHARE = "rollout/clipped_share"

REWARD_TOTAL_MEAN = reward_metric(TOTAL_REWARD, "mean")
REWARD_TOTAL_STD = reward_metric(TOTAL_REWARD, "std")
ROLLOUT_EXACT_MATCH = reward_metric(ACCURACY_REWARD, "mean")

DYNAMIC_SAMPLING_KEPT = "dynamic_sampling/kept_groups"
DYNAMIC_SAMPLING_DROPPED = "dynamic_sampling/dropped_groups"
DYNAMIC_SAMPLING_FILLER = "dynamic_sampling/filler_groups"
DYNAMIC_SAMPLING_REFILLS = "dynamic_sampling/refill_rounds"

EVAL_EXACT_MATCH = "eval/exact_match"
EVAL_COVERAGE = "eval/coverage"
EVAL_ANSWERED_EXACT_MATCH = "eval/answered_exact_match"
EVAL_LOSS = "eval/loss"

METRICS: dict[str, str] = {
    TRAIN_LOSS: "training loss of the step",
    TRAIN_LEARNING_RATE: "learning rate of the step",
    TRAIN_GRAD_NORM: "gradient norm before clipping",
    TRAIN_EPOCH: "fractional epoch",
    TRAIN_KL: "mean per-token KL to the reference policy (k3)",
    TRAIN_ENTROPY: "mean per-token entropy of the policy on its completions",
    TRAIN_CLIP_FRACTION: "share of tokens whose ratio was clipped",
    TRAIN_TOKEN_ACCURACY: "SFT: share of target tokens predicted exactly",
    TRAIN_NUM_TOKENS: "tokens seen so far",
    TRAIN_TOKENS_PER_S: "tokens per second since the previous logged step",
    ROLLOUT_LENGTH_MEAN: "mean completion length, tokens",
    ROLLOUT_LENGTH_MIN: "shortest completion, tokens",
    ROLLOUT_LENGTH_MAX: "longest completion, tokens",
    ROLLOUT_CLIPPED_SHARE: "share of completions cut at the new-token budget",
    REWARD_TOTAL_MEAN: "mean of the weighted reward sum",
    REWARD_TOTAL_STD: "standard deviation of the weighted reward sum",
    "reward/<name>/mean": "mean of reward function <name> (exact_match: rollout accuracy)",
    "reward/<name>/std": "standard deviation of reward function <name>",
    "reward/<name>/errors": "samples reward <name> scored 0 after an exception, this step",
    DYNAMIC_SAMPLING_KEPT: "groups with reward variance kept for the update",
    DYNAMIC_SAMPLING_DROPPED: "zero-variance groups dropped",
    DYNAMIC_SAMPLING_FILLER: "zero-variance groups kept to fill the batch after the refill cap",
    DYNAMIC_SAMPLING_REFILLS: "generation rounds beyond the first",
    EVAL_EXACT_MATCH: "exact-match accuracy on the validation split over all prompts, no answer = wrong "
                      "(checkpoint selection)",
    EVAL_COVERAGE: "share of validation completions with a parseable answer",
    EVAL_ANSWERED_EXACT_MATCH: "exact-match accuracy over the validation completions with an answer only",
    EVAL_LOSS: "validation loss (SFT)",
    **PERF_METRICS,
}
"""Every metric name (``<name>`` stands for a reward function's name) and what it measures."""


def validation_accuracy(answers: Sequence[int | None], truths: Sequence[int]) -> dict[str, float]:
    """The three validation numbers under their names: :data:`EVAL_EXACT_MATCH` over all completions (``None``,
    no parseable answer, counts as wrong), :data:`EVAL_COVERAGE` and :data:`EVAL_ANSWERED_EXACT_MATCH`.

    NaN where a denominator is 0; a ValueError when the two sequences differ in length.
    """
    if len(answers) != len(truths):
        raise ValueError(f"{len(answers)} answers but {len(truths)} ground truths; pass one of each per completion")
    answered = [(a, t) for a, t in zip(answers, truths, strict=True) if a is not None]
    correct = sum(a == t for a, t in answered)
    nan = float("nan")
    return {
        EVAL_EXACT_MATCH: correct / len(answers) if answers else nan,
        EVAL_COVERAGE: len(answered) / len(answers) if answers else nan,
        EVAL_ANSWERED_EXACT_MATCH: correct / len(answered) if answered else nan,
    }


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl file; a torn last line (interrupted write) is skipped."""
    p = Path(path)
    if not p.is_file():
        return []
    rows = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: skipping a torn line", p)
    return rows
