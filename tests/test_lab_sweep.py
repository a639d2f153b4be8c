"""Sweeps: --vary parsing, resolved and validated variants, the index, McNemar against the first variant, and a
two-variant tiny sweep end to end (plan, run, resume, report)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from _train_support import one_thread, write_traces
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.recipes import load_recipe
from spatialiq_train.lab.sweep import EvalSettings, load_sweep, parse_vary, plan_sweep, variant_steps
from spatialiq_train.lab.sweep_report import mcnemar_against_first

WEIGHTS = "reward.weights=[{format: 0.1, integer_distance: 0.9}, {default: 1.0, stepwise: 0.5}]"


def test_parse_vary_and_its_errors() -> None:
    assert parse_vary("rl.optimizer.learning_rate=[1.0e-6, 3]") == ("rl.optimizer.learning_rate", [1e-6, 3])
    assert parse_vary(WEIGHTS)[1][1] == {"default": 1.0, "stepwise": 0.5}
    for bad, said in (("rl.optimizer.learning_rate", "expected KEY.PATH=LIST"),
                      ("rl.optimizer.learning_rate=3", "non-empty YAML list"),
                      ("rl..beta=[1]", "expected KEY.PATH=LIST"), ("rl.beta=[1", "not valid YAML")):
        with pytest.raises(UserError, match=said):
            parse_vary(bad)


def test_plan_writes_one_validated_recipe_per_variant(tmp_path: Path) -> None:
    varies = [parse_vary(WEIGHTS), parse_vary("rl.beta=[0.0, 0.05]")]
    sweep = plan_sweep("tiny_cpu", ["sft.optimizer.max_steps=3"], varies, tmp_path / "sw", EvalSettings("data/x"))
    names = [v.name for v in sweep.variants]
    assert len(names) == 4 and len(set(names)) == 4
    assert names[0].split("-", 1)[1] == "format0.1-integer_distance0.9_beta0"
    assert names[3].split("-", 1)[1] == "default1-stepwise0.5_beta0.05"
    for v in sweep.variants:
        recipe = load_recipe(tmp_path / "sw" / v.recipe_file)
        assert recipe.reward.weights == v.values["reward.weights"]  # replaced, not merged with the default
        assert recipe.rl.beta == v.values["rl.beta"] and recipe.sft.optimizer.max_steps == 3
        assert recipe.run.output_dir == str(tmp_path / "sw" / "runs" / v.name)
    index = yaml.safe_load((tmp_path / "sw" / "sweep.yaml").read_text())
    assert [v["name"] for v in index["variants"]] == names and index["varied"] == ["reward.weights", "rl.beta"]
    assert load_sweep(tmp_path / "sw") == sweep
    again = plan_sweep("tiny_cpu", ["sft.optimizer.max_steps=3"], varies, tmp_path / "sw", EvalSettings("data/x"))
    assert [v.name for v in again.variants] == names  # the same plan: same names (hash of the resolved recipe)
    (tmp_path / "sw" / "runs" / names[0]).mkdir(parents=True)  # a variant started: another plan would orphan it
    with pytest.raises(UserError, match="has a run folder the new plan would not use"):
        plan_sweep("tiny_cpu", ["sft.optimizer.max_steps=4"], varies, tmp_path / "sw", EvalSettings("data/x"))
    steps = variant_steps(sweep, sweep.variants[0])
    assert [s[:2] for s in steps] == [["run", "dapo-tight"], ["eval", "sample"], ["eval", "score"]]
    assert steps[0][steps[0].index("--recipe") + 1] == str(tmp_path / "sw" / sweep.variants[0].recipe_file)


def test_values_are_recorded_as_validated(tmp_path: Path) -> None:
    """YAML 1.1 reads 1e-6 as a string; the recipe makes it a float, and the index records the float."""
    sweep = plan_sweep("tiny_cpu", [], [parse_vary("rl.optimizer.learning_rate=[1e-6, 0.5]")], tmp_path,
                       EvalSettings("d"))
    assert [v.values["rl.optimizer.learning_rate"] for v in sweep.variants] == [1e-6, 0.5]
    assert [v.label for v in sweep.variants] == ["learning_rate1e-06", "learning_rate0.5"]


def test_plan_refuses_bad_variants(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="reward.weights.nope: unknown reward 'nope'"):
        plan_sweep("tiny_cpu", [], [parse_vary("reward.weights=[{nope: 1}]")], tmp_path, EvalSettings("d"))
    with pytest.raises(UserError, match="rl.optimizer.learning_rate"):
        plan_sweep("tiny_cpu", [], [parse_vary("rl.optimizer.learning_rate=[x]")], tmp_path, EvalSettings("d"))
    with pytest.raises(UserError, match="same recipe"):
        plan_sweep("tiny_cpu", [], [parse_vary("rl.beta=[0.05, 0.05]")], tmp_path, EvalSettings("d"))
    with pytest.raises(UserError, match="'rl.beta' is a value"):
        plan_sweep("tiny_cpu", [], [parse_vary("rl.beta.x=[1]")], tmp_path, EvalSettings("d"))
    assert not (tmp_path / "sweep.yaml").exists()


def test_mcnemar_against_the_first_variant_with_bh() -> None:
    views = [f"v{i}" for i in range(6)]
    base = np.array([1, 1, 1, 1, 0, 0], float)
    worse = np.array([0, 0, 0, 1, 0, 0], float)  # 3 discordant, all for the base: p = 2 * 0.5^3 = 0.25
    same = base.copy()
    out = mcnemar_against_first({"a": (views, base), "b": (views, worse), "c": (views[::-1], same[::-1])},
                                ["a", "b", "c", "d"])
    assert math.isnan(out["a"][0]) and math.isnan(out["d"][0])  # the reference itself; d not evaluated
    assert out["b"] == pytest.approx((0.25, 0.5))  # BH over two tests: 0.25 * 2 / 1
    assert out["c"] == pytest.approx((1.0, 1.0))  # aligned by view, not by row order


def _eval_data(root: Path) -> Path:
    from PIL import Image

    from spatialiq_train.core.views import LEAF_VIEWS, view_relpath

    gt = {"object_type": "cube", "task1": "cubes", "task_main": 3, "total_blocks": 3, "task2": 1, "task3": 2,
          "task4": 2, "task5": 3, "task6": 1, "task7": 1, "task8": 0, "task9": 1, "num_hidden_blocks": 0,
          "num_columns": 2, "num_layers": 2, "task10": 0, "task11": 0}
    for leaf in LEAF_VIEWS[:4]:
        d = root / view_relpath("benchmark", 1, leaf)
        d.mkdir(parents=True)
        (d / "gt.json").write_text(json.dumps(gt))
        Image.new("RGB", (56, 56), (120, 80, 40)).save(d / "view.png")
    return root


@pytest.mark.slow
def test_two_variant_tiny_sweep_end_to_end(tmp_path: Path) -> None:
    one_thread()
    rng = np.random.default_rng(0)
    root = tmp_path / "data"
    write_traces(root, "warmup", 4, rng, answer=lambda i: 3)
    traces = write_traces(root, "rl", 4, rng, answer=lambda i: 3)
    rows = [json.loads(line) for line in (traces / "rl.jsonl").read_text().splitlines()]
    fields = {"task2": 1, "task3": 2, "task4": 2, "task5": 3, "task6": 1, "task7": 1, "task8": 0, "task9": 1,
              "num_hidden_blocks": 0}  # the columns stepwise reads (spatialiq_train.core.dataset.REWARD_FIELDS)
    (traces / "rl.jsonl").write_text("".join(json.dumps({**r, **fields}) + "\n" for r in rows))
    evald = _eval_data(tmp_path / "evaldata")
    sets = [f"data.traces_dir={traces}", f"data.data_root={root}", "sft.optimizer.max_steps=2",
            "rl.optimizer.max_steps=1",
            "logging.save_steps=1", "eval.k=2", "eval.max_new_tokens=4", "rl.dynamic_sampling.enabled=false"]
    sw = tmp_path / "sw"
    runner = CliRunner()
    res = runner.invoke(app, ["sweep", "plan", "--recipe", "tiny_cpu", "--vary", WEIGHTS, "--out", str(sw),
                              *[a for s in sets for a in ("--set", s)], "--eval-data", str(evald), "--engine",
                              "transformers", "--min-coverage", "0"])
    assert res.exit_code == 0, res.output
    first, second = load_sweep(sw).variants
    res = runner.invoke(app, ["sweep", "run", str(sw), "--only", first.name])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["sweep", "report", str(sw), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "rep" / "sweep.csv").open()))
    assert [(r["variant"], r["status"]) for r in rows] == [(first.name, "finished"), (second.name, "not started")]
    assert rows[0]["k"] == "2" and rows[0]["acc@1"] != "" and rows[1]["acc@1"] == ""  # listed, not dropped
    res = runner.invoke(app, ["sweep", "run", str(sw)])
    assert res.exit_code == 0, res.output
    assert f"{first.name}: finished, skipped" in res.output and "2/2 variants finished" in res.output
    res = runner.invoke(app, ["sweep", "report", str(sw), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "rep" / "sweep.csv").open()))
    assert [r["status"] for r in rows] == ["finished", "finished"]
    assert rows[0]["mcnemar_p"] == "" and 0 <= float(rows[1]["mcnemar_p"]) <= 1
    assert rows[1]["reward.weights"] == "{default: 1.0, stepwise: 0.5}"
    for column in ("maj@k", "pass@k", "selected@k", "object_count", "self_consistency_rate"):
        assert rows[1][column] != "", column
    assert (tmp_path / "rep" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "| variant | status | reward.weights |" in (tmp_path / "rep" / "report.md").read_text()
    recipe = yaml.safe_load((sw / "runs" / second.name / "recipe.yaml").read_text())
    assert recipe["reward"]["weights"] == {"default": 1.0, "stepwise": 0.5}  # trained with the variant's rewards


def test_slurm_sweep_dry_run_prints_one_task_per_variant(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess

    if shutil.which("spatialiq") is None or shutil.which("bash") is None:
        pytest.skip("needs bash and the spatialiq command on PATH")
    sweep = plan_sweep("tiny_cpu", [], [parse_vary(WEIGHTS)], tmp_path / "sw", EvalSettings("d"))
    script = Path(__file__).resolve().parents[1] / "slurm" / "sweep.sh"
    env = {**os.environ, "DRY_RUN": "1", "PYTHONPATH": str(script.parents[1])}
    res = subprocess.run(["bash", str(script), str(tmp_path / "sw")], capture_output=True, text=True, env=env,
                         check=False)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("sbatch ") and "--array=0-1" in lines[0]
    assert lines[1:] == [f"task {i}: spatialiq sweep run {tmp_path / 'sw'} --only {v.name}"
                         for i, v in enumerate(sweep.variants)]
    assert not (tmp_path / "sw" / "slurm").exists()  # a dry run submits and creates nothing
    if shutil.which("shellcheck"):
        lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, check=False)
        assert lint.returncode == 0, lint.stdout


def test_a_varied_optimizer_key_wins_over_the_base(tmp_path: Path) -> None:
    """--vary sets a key as --set does (recipes.set_key): the whole value replaced."""
    sweep = plan_sweep("tiny_cpu", ["rl.optimizer.learning_rate=5.0e-6"],
                       [parse_vary("rl.optimizer.learning_rate=[1.0e-6, 2.0e-6]")], tmp_path, EvalSettings("d"))
    rates = [load_recipe(tmp_path / v.recipe_file).rl.optimizer.learning_rate for v in sweep.variants]
    assert rates == [1e-6, 2e-6]
    assert [v.values["rl.optimizer.learning_rate"] for v in sweep.variants] == [1e-6, 2e-6]


def test_evaluation_data_defaults_to_the_recipe(tmp_path: Path) -> None:
    vary = [parse_vary("rl.beta=[0.0, 0.05]")]
    sweep = plan_sweep("tiny_cpu", ["data.data_root=dr", "data.eval_split=val"], vary, tmp_path / "a", EvalSettings())
    assert (sweep.eval.data, sweep.eval.split) == ("dr", "val")
    assert load_sweep(tmp_path / "a").eval == sweep.eval
    sweep = plan_sweep("tiny_cpu", ["data.eval_split=null"], vary, tmp_path / "b", EvalSettings("d", None))
    assert (sweep.eval.data, sweep.eval.split) == ("d", "benchmark")
    sweep = plan_sweep("tiny_cpu", [], vary, tmp_path / "c", EvalSettings("d", "train"))
    assert sweep.eval.split == "train"


def test_plan_refuses_evaluation_options_before_anything_trains(tmp_path: Path) -> None:
    vary = [parse_vary("rl.beta=[0.0, 0.05]")]
    for settings, said in ((EvalSettings("d", engine="vlm"), "--engine 'vlm': valid: auto, vllm, transformers"),
                           (EvalSettings("d", limit=0), "--eval-limit 0: give 1 or more"),
                           (EvalSettings("d", min_coverage=1.5), "--min-coverage 1.5: give a share between 0 and 1")):
        with pytest.raises(UserError, match=said):
            plan_sweep("tiny_cpu", [], vary, tmp_path, settings)
    with pytest.raises(UserError, match="a key is varied twice"):
        plan_sweep("tiny_cpu", [], [parse_vary("rl.optimizer.learning_rate=[1, 2]"),
                                    parse_vary("rl.optimizer.learning_rate=[3]")], tmp_path, EvalSettings("d"))
    assert not (tmp_path / "sweep.yaml").exists()


def test_a_malformed_index_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "sweep.yaml").write_text("recipe: [\n")
    with pytest.raises(UserError, match="not a sweep index") as err:
        load_sweep(tmp_path)
    assert "\n" not in str(err.value)
    (tmp_path / "sweep.yaml").write_text("recipe: x\nvaried: []\neval: {data: d}\nvariants: [{name: a}]\n")
    with pytest.raises(UserError, match="lacks the key 'label'"):
        load_sweep(tmp_path)
