"""The engine-agnostic learning analysis (spatialiq_train.core.learning): reward series from metrics rows, the
last-third lift over a control with its intervals, the plot, and the diagnosis of an RL phase that learned nothing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from spatialiq_train.core import learning as L
from spatialiq_train.core import metrics as m

WEIGHTS = {"format": 0.1, "integer_distance": 0.9}


def _row(step: int, fmt: float, dist: float, phase: str = "rl", **extra: float) -> dict:
    return {"step": step, "phase": phase, m.reward_metric("format", "mean"): fmt,
            m.reward_metric("integer_distance", "mean"): dist, **extra}


def test_total_reward_series_weights_each_reward_and_skips_other_rows() -> None:
    rows = [_row(2, 1.0, 0.5), _row(1, 0.0, 0.0), _row(1, 1.0, 1.0, phase="sft"), {"step": 3, "phase": "rl"},
            {"step": 3, "phase": "rl", "eval/" + m.reward_metric("format", "mean"): 1.0,
             "eval/" + m.reward_metric("integer_distance", "mean"): 0.0}]
    assert L.total_reward_series(rows, WEIGHTS) == pytest.approx([0.0, 0.1 + 0.45])
    assert L.total_reward_series(rows, WEIGHTS, prefix="eval/") == pytest.approx([0.1])


@pytest.mark.parametrize(("n", "start"), [(1, 0), (3, 2), (4, 2), (12, 8), (16, 10)])
def test_last_third_rounds_up(n: int, start: int) -> None:
    assert L.last_third(n) == slice(start, n)


def test_seed_lift_is_the_mean_paired_difference_over_the_last_third() -> None:
    rl = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.7, 0.6]
    control = [0.2] * 9
    lift = L.seed_lift(3, rl, control)
    assert lift.lift == pytest.approx(0.4)
    assert lift.rl_mean == pytest.approx(0.6) and lift.control_mean == pytest.approx(0.2)
    # t interval over the differences 0.3, 0.5, 0.4: sd 0.1, t(0.975, 2) = 4.303
    half = 4.302652729911275 * 0.1 / math.sqrt(3)
    assert (lift.low, lift.high) == pytest.approx((0.4 - half, 0.4 + half))


def test_learning_summary_across_seeds_and_the_verdict() -> None:
    rl = {0: [0.1, 0.5, 0.6], 1: [0.1, 0.4, 0.4], 2: [0.1, 0.3, 0.32]}
    control = {s: [0.1, 0.2, 0.2] for s in rl}
    summary = L.learning_summary(rl, control)
    assert [s.lift for s in summary.seeds] == pytest.approx([0.4, 0.2, 0.12])
    assert summary.lift == pytest.approx(0.24) and summary.min_lift == pytest.approx(0.12)
    assert summary.low < 0.24 < summary.high
    assert (summary.first_step, summary.n_steps) == (3, 1)
    assert summary.learned(0.10) and not summary.learned(0.15)
    lines = L.summary_lines(summary, 0.15)
    assert "did NOT learn" in lines[-1] and "seed 2" in lines[3]


def test_learning_summary_refuses_mismatched_seeds_or_lengths() -> None:
    with pytest.raises(ValueError, match="seeds"):
        L.learning_summary({0: [0.1]}, {1: [0.1]})
    with pytest.raises(ValueError, match="logged 2 steps, its control 3"):
        L.learning_summary({0: [0.1, 0.2]}, {0: [0.1, 0.2, 0.3]})


def test_reward_series_reads_each_reward_and_the_distance_among_formatted_answers() -> None:
    rows = [_row(2, 0.5, 0.2, **{m.reward_metric("exact_match", "mean"): 0.25}), _row(1, 0.0, 0.0),
            _row(1, 1.0, 1.0, phase="sft")]
    assert L.reward_series(rows, "format") == [0.0, 0.5]
    assert L.reward_series(rows, "exact_match") == [0.25]  # step 1 logged no exact match
    formatted = L.reward_series(rows, L.FORMATTED_DISTANCE)
    assert math.isnan(formatted[0]) and formatted[1] == pytest.approx(0.4)  # 0.2 of 0.5 formatted
    assert L.REWARD_CURVES == ("format", "integer_distance", L.FORMATTED_DISTANCE, "exact_match")


def test_seed_lift_leaves_out_steps_without_a_value() -> None:
    nan = math.nan
    s = L.seed_lift(0, [0.0, 0.0, 0.0, 0.0, 0.5, 0.7], [0.0, 0.0, 0.0, 0.0, 0.2, nan])  # last third: steps 5-6
    assert (s.lift, s.rl_mean, s.control_mean) == pytest.approx((0.3, 0.5, 0.2))
    assert math.isnan(L.seed_lift(1, [nan, nan, nan], [0.1, 0.2, 0.3]).lift)


def test_paired_lift_is_the_mean_difference_with_a_t_interval_across_seeds() -> None:
    out = L.paired_lift({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.4, 1: 0.4, 2: 0.4})
    assert (out["rl"], out["control"], out["lift"]) == pytest.approx((0.6, 0.4, 0.2))
    assert out["low"] == pytest.approx(0.2 - 4.302653 * 0.1 / math.sqrt(3), abs=1e-5) and out["high"] > 0.2
    assert out["seeds"] == pytest.approx({0: 0.1, 1: 0.2, 2: 0.3})
    with pytest.raises(ValueError, match="must be the same"):
        L.paired_lift({0: 0.5}, {1: 0.5})


def test_write_curves_plot_draws_one_panel_per_reward(tmp_path: Path) -> None:
    curves = {"RL": {0: [0.1, 0.2, 0.3]}, "control": {0: [0.1, 0.1, 0.1]}}
    png = L.write_curves_plot(tmp_path / "c.png", curves, "t", panels={n: curves for n in L.REWARD_CURVES})
    from PIL import Image

    assert Image.open(png).size[1] > Image.open(L.write_curves_plot(tmp_path / "one.png", curves, "t")).size[1]


def test_write_curves_plot_writes_a_png(tmp_path: Path) -> None:
    out = L.write_curves_plot(tmp_path / "c.png", {"RL": {0: [0.1, 0.3, 0.5]}, "control": {0: [0.1, 0.1, 0.2]}},
                              "t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _step(grad: float, clipped: float, kept: float) -> dict:
    return {"step": 1, "phase": "rl", m.TRAIN_GRAD_NORM: grad, m.ROLLOUT_CLIPPED_SHARE: clipped,
            m.DYNAMIC_SAMPLING_KEPT: kept}


def test_idle_rl_cause_names_clipping_and_the_knobs() -> None:
    msg = L.idle_rl_cause([_step(0.0, 0.95, 0.0), _step(0.0, 0.92, 0.0)], 24)
    assert msg is not None
    assert "none of its 2 steps" in msg and "95%" not in msg and "94%" in msg
    for knob in ("generation.max_completion_length (now 24)", "rl.num_generations",
                 "rl.dynamic_sampling.max_refill_rounds"):
        assert knob in msg


def test_idle_rl_cause_names_constant_groups_when_nothing_is_clipped() -> None:
    msg = L.idle_rl_cause([_step(0.0, 0.0, 0.0)], 24)
    assert msg is not None and "kept no group" in msg


def test_idle_rl_cause_is_none_once_one_step_moved_the_weights() -> None:
    assert L.idle_rl_cause([_step(0.0, 0.9, 0.0), _step(0.3, 0.1, 1.0)], 24) is None
    assert L.idle_rl_cause([], 24) is None
    assert L.idle_rl_cause([_step(float("nan"), 0.0, 2.0)], 24) == L.idle_rl_cause([_step(0.0, 0.0, 2.0)], 24)


def test_rl_learned_nothing_reads_the_phase_metrics(tmp_path: Path) -> None:
    """What `train rl` and `run dapo-tight` print in their summary: the quick start's old failure (CoT traces cut at
    24 tokens, every group filtered) is named with its knobs; a phase that moved its weights says nothing."""
    import json

    from _train_support import tiny_recipe

    from spatialiq_train.core.resolve import Hardware, resolve
    from spatialiq_train.train.plan import write_plan
    from spatialiq_train.train.rl import rl_learned_nothing

    write_plan(tmp_path, resolve(tiny_recipe(["generation.max_completion_length=24"]), "rl", Hardware(gpu=False)))
    idle = [_step(0.0, 0.94, 0.0) | {"step": s, "train/loss": 0.0} for s in (1, 2, 3, 4)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in idle), encoding="utf-8")
    msg = rl_learned_nothing(tmp_path)
    assert msg is not None and "none of its 4 steps" in msg and "now 24" in msg
    moved = [*idle, _step(0.5, 0.1, 2.0) | {"step": 5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in moved), encoding="utf-8")
    assert rl_learned_nothing(tmp_path) is None


def test_the_demo_report_gets_one_learning_section(tmp_path: Path) -> None:
    """The demo appends the curve and its paragraph to report.md, and a rerun replaces them rather than adding more."""
    import json

    from spatialiq_train.cli.demo_learning import PLOT_NAME, SECTION_MARK, write_learning_section

    for name, dist in (("rl", [0.2, 0.4, 0.6]), ("control", [0.2, 0.3, 0.3])):
        (tmp_path / name).mkdir()
        rows = [_row(s, 1.0, d) for s, d in enumerate(dist, 1)]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").write_text("# Report\n\ntable\n", encoding="utf-8")
    for _ in range(2):
        summary = write_learning_section(tmp_path / "rl", tmp_path / "control", report, WEIGHTS, seed=0)
    text = (report / "report.md").read_text(encoding="utf-8")
    assert text.startswith("# Report\n\ntable\n") and text.count(SECTION_MARK) == 1
    assert summary.lift == pytest.approx(0.9 * 0.3) and "a lift of +0.27" in text and "does not show" in text
    assert (report / PLOT_NAME).read_bytes()[:4] == b"\x89PNG"
