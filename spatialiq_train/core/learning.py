"""Did RL learn? The lift of an RL run's reward over a control whose policy cannot move, engine-agnostic.

Input: per-step series of the mean total reward (the recipe's weighted reward sum, 0-1 scale), one series per seed
for the RL runs and one per seed for their controls (same seeds, same code path, learning rate 0 or the smallest
the recipe accepts). Any engine that logs the per-reward means per step can feed it (`total_reward_series` reads
our metrics.jsonl rows: TRL's and the NeMo-RL loop's both use `reward/<name>/mean`). The same lift is computed for
each reward of :data:`REWARD_CURVES` (:func:`reward_series`): the total reward alone cannot tell a policy that writes
the answer tag more often from one that counts better, since the integer distance pays 0 without the tag.

The lift of one seed is the mean over the last third of the RL steps of (RL reward - control reward) at the same
step; its interval is a Student-t interval over those paired per-step differences. The lift across seeds is the
mean of the seeds' lifts, with a Student-t interval across seeds (one seed: no interval). Pure functions, plus one
plot writer (matplotlib, Agg) at the end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spatialiq_train.core.metrics import reward_metric

CONFIDENCE = 0.95
"""Two-sided level of every interval here."""


def total_reward(row: Mapping[str, Any], weights: Mapping[str, float], prefix: str = "") -> float | None:
    """The total reward of one metrics row, the one definition both engines log as ``reward/total/mean``: the sum
    over the recipe's rewards of weight x ``reward/<name>/mean``, unshaped (the overlong shaping and weight-0 terms are
    not in it; the shaping is logged on its own, TRL's shaped sum as ``reward/shaped_total/mean``). None when a
    reward's mean is missing from the row."""
    keys = {name: prefix + reward_metric(name, "mean") for name in weights}
    if any(k not in row for k in keys.values()):
        return None
    return sum(float(w) * float(row[keys[n]]) for n, w in weights.items())


def total_reward_series(rows: Sequence[Mapping[str, Any]], weights: Mapping[str, float], phase: str = "rl",
                        prefix: str = "") -> list[float]:
    """Mean total reward per logged step of `phase` (:func:`total_reward`, the scale of the reward's own, 0-1 for
    the shipped weights).

    Rows are metrics.jsonl records (`step`, `phase`, metric names); rows of another phase, or without every
    reward's mean (evaluation-only rows), are skipped. Ordered by step; a repeated step keeps its last row. `prefix`
    `eval/` reads the validation rows (held-out views) instead."""
    by_step: dict[int, float] = {}
    for row in rows:
        total = total_reward(row, weights, prefix) if row.get("phase", phase) == phase else None
        if total is not None:
            by_step[int(row["step"])] = total
    return [by_step[s] for s in sorted(by_step)]


FORMATTED_DISTANCE = "integer_distance_formatted"
"""The mean integer distance among well-formatted completions: `integer_distance` / `format` (the distance pays 0
without the format and `format` is 0 or 1 per completion, so the ratio of the two means is exactly that mean)."""
REWARD_CURVES: tuple[str, ...] = ("format", "integer_distance", FORMATTED_DISTANCE, "exact_match")
"""The per-reward curves the learning benchmarks report: the format rate, the integer distance (0 without the
format), the integer distance among well-formatted answers and the exact match (the weight-0 accuracy term)."""


def formatted_distance(integer_distance: float, format_rate: float) -> float:
    """Mean integer distance among well-formatted completions from the two means; NaN when none was formatted."""
    return integer_distance / format_rate if format_rate > 0 else math.nan


def reward_series(rows: Sequence[Mapping[str, Any]], name: str, phase: str = "rl", prefix: str = "") -> list[float]:
    """Per logged step of `phase`, the mean of reward `name` (`reward/<name>/mean`, or `prefix` + that for the
    validation rows); :data:`FORMATTED_DISTANCE` is computed per step from the `integer_distance` and `format` means
    (:func:`formatted_distance`, NaN at a step where nothing was formatted). Rows without the needed means are
    skipped; ordered by step, a repeated step keeps its last row."""
    needed = ("integer_distance", "format") if name == FORMATTED_DISTANCE else (name,)
    keys = [prefix + reward_metric(n, "mean") for n in needed]
    by_step: dict[int, float] = {}
    for row in rows:
        if row.get("phase", phase) != phase or any(k not in row for k in keys):
            continue
        values = [float(row[k]) for k in keys]
        by_step[int(row["step"])] = formatted_distance(*values) if name == FORMATTED_DISTANCE else values[0]
    return [by_step[s] for s in sorted(by_step)]


def last_third(n_steps: int) -> slice:
    """The last third of `n_steps` steps (rounded up, at least one step)."""
    if n_steps < 1:
        raise ValueError("a reward series needs at least one step")
    return slice(n_steps - max(1, math.ceil(n_steps / 3)), n_steps)


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean; with one value the interval is that value."""
    from scipy.stats import t

    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values")
    mean = float(x.mean())
    if x.size == 1:
        return mean, mean, mean
    half = float(t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class SeedLift:
    """One seed: mean reward of the RL run and of its control over the last third of the steps, their difference
    (`lift`) and its interval over the paired per-step differences (`low`, `high`)."""

    seed: int
    rl_mean: float
    control_mean: float
    lift: float
    low: float
    high: float


@dataclass(frozen=True)
class LearningSummary:
    """Every seed's lift (`seeds`), their mean (`lift`) with an interval across seeds (`low`, `high`), the smallest
    (`min_lift`), the steps the lift averages over (`first_step`, `n_steps`; 1-based) and the `spread` (sample
    standard deviation of the seeds' lifts; 0 with one seed)."""

    seeds: tuple[SeedLift, ...]
    lift: float
    low: float
    high: float
    min_lift: float
    spread: float
    first_step: int
    n_steps: int

    def learned(self, threshold: float) -> bool:
        """True when every seed's lift reaches `threshold`."""
        return self.min_lift >= threshold


def seed_lift(seed: int, rl: Sequence[float], control: Sequence[float]) -> SeedLift:
    """The lift of one seed over the last third of its steps (both series must have the same length)."""
    if len(rl) != len(control):
        raise ValueError(f"seed {seed}: the RL run logged {len(rl)} steps, its control {len(control)}")
    window = last_third(len(rl))
    a, b = np.asarray(rl, dtype=np.float64)[window], np.asarray(control, dtype=np.float64)[window]
    ok = np.isfinite(a) & np.isfinite(b)  # a step without a value (nothing formatted) is left out of both
    if not ok.any():
        nan = math.nan
        return SeedLift(seed, nan, nan, nan, nan, nan)
    a, b = a[ok], b[ok]
    lift, low, high = t_interval(a - b)
    return SeedLift(seed, float(a.mean()), float(b.mean()), lift, low, high)


def learning_summary(rl: Mapping[int, Sequence[float]], control: Mapping[int, Sequence[float]]) -> LearningSummary:
    """Per-seed lifts and their mean with a Student-t interval across seeds; `rl` and `control` map each seed to its
    per-step mean total reward, and must hold the same seeds."""
    if set(rl) != set(control) or not rl:
        raise ValueError(f"RL seeds {sorted(rl)} and control seeds {sorted(control)} must be the same, non-empty")
    seeds = tuple(seed_lift(s, rl[s], control[s]) for s in sorted(rl))
    lifts = [s.lift for s in seeds]
    mean, low, high = t_interval(lifts)
    n = len(next(iter(rl.values())))
    window = last_third(n)
    spread = float(np.std(lifts, ddof=1)) if len(lifts) > 1 else 0.0
    return LearningSummary(seeds, mean, low, high, min(lifts), spread, window.start + 1, window.stop - window.start)


def summary_lines(summary: LearningSummary, threshold: float) -> list[str]:
    """Plain-text lines: one per seed, the mean across seeds and the verdict against `threshold`."""
    pct = int(CONFIDENCE * 100)
    lines = [f"lift of the total reward over the control, steps {summary.first_step}-"
             f"{summary.first_step + summary.n_steps - 1} ({pct}% intervals)"]
    for s in summary.seeds:
        lines.append(f"  seed {s.seed}: RL {s.rl_mean:.3f}, control {s.control_mean:.3f}, lift {s.lift:+.3f} "
                     f"[{s.low:+.3f}, {s.high:+.3f}]")
    lines.append(f"  mean over {len(summary.seeds)} seeds: {summary.lift:+.3f} [{summary.low:+.3f}, "
                 f"{summary.high:+.3f}], smallest {summary.min_lift:+.3f}, spread (sd) {summary.spread:.3f}")
    verdict = "learned" if summary.learned(threshold) else "did NOT learn"
    lines.append(f"  {verdict}: every seed's lift >= {threshold:.2f} is "
                 f"{'true' if summary.learned(threshold) else 'false'}")
    return lines


def paired_lift(rl: Mapping[int, float], control: Mapping[int, float]) -> dict[str, Any]:
    """One number per seed for the RL run and its control (e.g. a held-out score of the final checkpoints): their
    means, the mean difference (`lift`) with a Student-t interval across seeds (`low`, `high`) and each seed's
    difference (`seeds`). Same seeds on both sides, non-empty; a NaN seed (no value) is left out."""
    if set(rl) != set(control) or not rl:
        raise ValueError(f"RL seeds {sorted(rl)} and control seeds {sorted(control)} must be the same, non-empty")
    seeds = [s for s in sorted(rl) if math.isfinite(rl[s]) and math.isfinite(control[s])]
    diffs = {s: float(rl[s] - control[s]) for s in seeds}
    if not seeds:
        nan = math.nan
        return {"rl": nan, "control": nan, "lift": nan, "low": nan, "high": nan, "seeds": {}}
    lift, low, high = t_interval(list(diffs.values()))
    return {"rl": float(np.mean([rl[s] for s in seeds])), "control": float(np.mean([control[s] for s in seeds])),
            "lift": lift, "low": low, "high": high, "seeds": diffs}


def _draw_curves(ax: Any, curves: Mapping[str, Mapping[int, Sequence[float]]]) -> int:
    """One colour per label, a thin line per seed and a thick one for the mean; returns the longest mean's length."""
    n_max = 0
    for i, (label, series) in enumerate(curves.items()):
        colour = f"C{i}"
        lengths = {len(v) for v in series.values()}
        for values in series.values():
            ax.plot(range(1, len(values) + 1), values, color=colour, alpha=0.3, linewidth=0.8)
        if len(lengths) == 1 and series:
            n = lengths.pop()
            n_max = max(n_max, n)
            mean = np.nanmean(np.asarray(list(series.values()), dtype=np.float64), axis=0)
            ax.plot(range(1, n + 1), mean, color=colour, linewidth=2.0, label=f"{label} (mean of {len(series)})")
    if n_max:
        window = last_third(n_max)
        ax.axvspan(window.start + 0.5, n_max + 0.5, color="0.9", zorder=0, label="last third (lift window)")
    return n_max


def write_curves_plot(path: str | Path, curves: Mapping[str, Mapping[int, Sequence[float]]], title: str,
                      panels: Mapping[str, Mapping[str, Mapping[int, Sequence[float]]]] | None = None) -> Path:
    """A PNG of reward curves: one colour per label (e.g. `RL`, `control`, `RL held-out`), one thin line per seed and
    a thick line for the mean over seeds; the last-third window shaded. With `panels` (reward name -> curves by
    label, e.g. :data:`REWARD_CURVES`), one more panel per reward below the total. Returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    extra = list((panels or {}).items())
    fig, axes = plt.subplots(1 + len(extra), 1, figsize=(6.4, 3.6 + 2.4 * len(extra)), dpi=100, squeeze=False)
    ax = axes[0][0]
    _draw_curves(ax, curves)
    ax.set_xlabel("RL step")
    ax.set_ylabel("mean total reward (0-1)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best")
    for row, (name, panel) in zip(axes[1:], extra, strict=True):
        _draw_curves(row[0], panel)
        row[0].set_ylabel(name, fontsize=8)
        row[0].set_xlabel("RL step")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out


# --- an RL phase that learned nothing -------------------------------------------------------------------------

CLIPPED_MAJORITY = 0.5
"""Mean `rollout/clipped_share` above which clipping is named as the first cause of an idle RL phase."""


def _mean_of(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if key in r and math.isfinite(float(r[key]))]
    return sum(vals) / len(vals) if vals else None


def idle_rl_cause(rows: Sequence[Mapping[str, Any]], max_completion_length: int, phase: str = "rl") -> str | None:
    """Why no RL step updated the weights, or None when one did (or nothing was logged).

    A step updated the weights when its `train/grad_norm` is finite and above 0. When none did, the message names
    the cause the logged metrics point at (completions cut at the budget, groups whose rewards never varied, or a
    zero gradient) and the knobs that change it."""
    from spatialiq_train.core import metrics as m

    steps = [r for r in rows if r.get("phase", phase) == phase and m.TRAIN_GRAD_NORM in r]
    if not steps or any(math.isfinite(float(r[m.TRAIN_GRAD_NORM])) and float(r[m.TRAIN_GRAD_NORM]) > 0
                        for r in steps):
        return None
    clipped = _mean_of(steps, m.ROLLOUT_CLIPPED_SHARE)
    kept = _mean_of(steps, m.DYNAMIC_SAMPLING_KEPT)
    knobs = (f"generation.max_completion_length (now {max_completion_length}), rl.num_generations and "
             "rl.dynamic_sampling.max_refill_rounds")
    if clipped is not None and clipped > CLIPPED_MAJORITY:
        cause = (f"{clipped:.0%} of the completions were cut at generation.max_completion_length="
                 f"{max_completion_length} tokens, so they carry no answer tag and every group scored the same")
    elif kept is not None and kept == 0:
        cause = ("every group's rewards were the same for all its completions, so dynamic sampling kept no group "
                 "(only zero-loss filler groups)")
    else:
        cause = "every step's gradient was zero"
    return (f"the RL phase learned nothing: none of its {len(steps)} steps updated the weights (grad_norm 0); "
            f"{cause}. Change {knobs}, or warm up longer so the policy writes the answer format")
