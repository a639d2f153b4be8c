"""Sweeps of issue 20: one scene set for every metric (eval score --limit), evaluation inputs checked before any
variant trains, a folder planned again after a failure, n shown in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_eval_pipeline import TruthEngine, make_dataset
from typer.testing import CliRunner

from eval.sample import SamplingConfig, run_sampling
from eval.scenes import find_scenes
from spatialiq_train.cli import app
from spatialiq_train.core.errors import UserError
from spatialiq_train.lab.sweep import EvalSettings, load_sweep, parse_vary, plan_sweep, variant_steps
from spatialiq_train.lab.sweep_report import metric_cells

VARY = [parse_vary("rl.beta=[0.0, 0.05]")]


def test_eval_score_limit_scores_every_metric_on_the_sampled_scenes(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data")
    scenes = find_scenes(data)
    out = tmp_path / "c.jsonl"
    run_sampling(scenes[:4], TruthEngine(data, {1: "<answer>0</answer>"}), SamplingConfig(k=2), out)
    res = CliRunner().invoke(app, ["eval", "score", "--completions", str(out), "--data", str(data), "--out",
                                   str(tmp_path / "s"), "--name", "m", "--limit", "4"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "s" / "metrics_m.json").read_text())
    oc = metrics["object_counting"]
    assert metrics["scenes"] == 4 and set(oc["n"].values()) == {4}  # every metric over the same 4 scenes
    assert oc["pass@2"] >= oc["acc@1"] == 1.0
    bad = CliRunner().invoke(app, ["eval", "score", "--completions", str(out), "--data", str(data), "--out",
                                   str(tmp_path / "s2"), "--name", "m", "--limit", "0"])
    assert bad.exit_code == 2 and "--limit must be at least 1" in bad.output


def test_sweep_scores_on_the_limited_scenes_and_reports_n(tmp_path: Path) -> None:
    sweep = plan_sweep("tiny_cpu", [], VARY, tmp_path / "sw", EvalSettings("d", limit=8))
    score = variant_steps(sweep, sweep.variants[0])[2]
    assert score[score.index("--limit") + 1] == "8"
    cells = metric_cells({"k": 2, "scenes": 8, "object_counting": {"acc@1": 0.5, "n": {"acc@1": 8}}})
    assert (cells["n"], cells["acc@1_n"]) == (8, 8)


def test_sweep_run_checks_the_evaluation_data_before_training(tmp_path: Path) -> None:
    sw = tmp_path / "sw"
    plan_sweep("tiny_cpu", [], VARY, sw, EvalSettings(str(tmp_path / "absent"), "benchmark"))
    res = CliRunner().invoke(app, ["sweep", "run", str(sw)])
    assert res.exit_code == 2 and f"eval data {tmp_path / 'absent'}" in res.output, res.output
    assert not (sw / "runs").exists()


def test_a_sweep_folder_can_be_planned_again_after_a_failure(tmp_path: Path) -> None:
    sw = tmp_path / "sw"
    first = plan_sweep("tiny_cpu", [], VARY, sw, EvalSettings("d", min_coverage=0.9))
    (sw / "runs" / first.variants[0].name).mkdir(parents=True)  # it trained, then its evaluation failed
    again = plan_sweep("tiny_cpu", [], VARY, sw, EvalSettings("d", min_coverage=0.1))
    assert load_sweep(sw).eval.min_coverage == 0.1 and again.variants == first.variants
    (sw / "runs" / first.variants[0].name / "done.json").write_text("{}")
    with pytest.raises(UserError, match="finished under the evaluation settings"):
        plan_sweep("tiny_cpu", [], VARY, sw, EvalSettings("d", min_coverage=0.2))
    with pytest.raises(UserError, match="has a run folder the new plan would not use"):
        plan_sweep("tiny_cpu", [], [parse_vary("rl.beta=[0.1]")], sw, EvalSettings("d", min_coverage=0.1))
    other = tmp_path / "sw2"
    plan_sweep("tiny_cpu", [], VARY, other, EvalSettings("d"))
    plan_sweep("tiny_cpu", [], [parse_vary("rl.beta=[0.1]")], other, EvalSettings("d"))  # nothing ran: replaced
    assert len(list((other / "variants").glob("*.yaml"))) == 1
