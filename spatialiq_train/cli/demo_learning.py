"""The demo report's learning curve: the RL run's reward per step beside its frozen control's, one plot and one
paragraph appended to the evaluation report (replaced, not repeated, when the demo is rerun)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from spatialiq_train.core.learning import LearningSummary

SECTION_MARK = "<!-- spatialiq demo: learning curve -->"
"""Starts the section in report.md; everything from it to the end is the section."""
PLOT_NAME = "learning_curve.png"


def learning_paragraph(summary: LearningSummary, steps: int) -> str:
    """What the curves show and what they do not (pure)."""
    s = summary.seeds[0]
    return (f"Mean total reward (0-1) per RL step on the RL prompts, for the RL run and for its control, which "
            f"sampled and scored the same prompts with the same seeds through the same trainer at the unchanged SFT "
            f"weights (no update). Over the last third of the {steps} steps (steps {summary.first_step}-{steps}) RL "
            f"scored {s.rl_mean:.2f} and the control {s.control_mean:.2f}: a lift of {s.lift:+.2f} "
            f"(95% interval over those steps {s.low:+.2f} to {s.high:+.2f}). It shows whether the RL updates raised "
            "the reward the trainer optimises, on the prompts it trains on, for one seed; it does not show accuracy "
            "on held-out views (the table above does), a lift across seeds (bench/bench_learning.py measures that), "
            "or anything about spatial reasoning.")


def write_learning_section(run_dir: Path, control_dir: Path, report_dir: Path, weights: Mapping[str, float],
                           seed: int) -> LearningSummary:
    """Plot `run_dir`'s and `control_dir`'s RL reward curves into `report_dir` and put the section at the end of
    `report_dir/report.md` (an earlier one is replaced)."""
    from spatialiq_train.core.io import atomic_write_text
    from spatialiq_train.core.learning import learning_summary, total_reward_series, write_curves_plot
    from spatialiq_train.core.metrics import read_metrics

    rl = total_reward_series(read_metrics(run_dir / "metrics.jsonl"), weights)
    control = total_reward_series(read_metrics(control_dir / "metrics.jsonl"), weights)
    summary = learning_summary({seed: rl}, {seed: control})
    write_curves_plot(report_dir / PLOT_NAME, {"RL": {seed: rl}, "control (frozen weights)": {seed: control}},
                      f"demo RL vs its frozen control (seed {seed})")
    report = report_dir / "report.md"
    text = report.read_text(encoding="utf-8") if report.is_file() else ""
    text = text.split(SECTION_MARK)[0].rstrip("\n")
    section = (f"{SECTION_MARK}\n## Learning curve\n\n![RL reward per step beside its control]({PLOT_NAME})\n\n"
               f"{learning_paragraph(summary, len(rl))}\n")
    atomic_write_text(report, (text + "\n\n" if text else "") + section)
    return summary
