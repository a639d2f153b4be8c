"""Issue 44, case 8 (reward, sweep, eval, demo and CLI messages): one line with the right cause and a fix that
works; no third-party notice telling a user to restart a runtime; the demo's lines in order with a total."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.errors import EXIT_USAGE, UserError

REPO = Path(__file__).resolve().parents[1]


def _flat(output: str) -> str:
    return " ".join(output.split())


def _reward(spec: str) -> object:
    return CliRunner().invoke(app, ["reward", "score", "--reward", spec, "--answer", "3", "--completion",
                                    "<answer>3</answer>"])


def test_reward_score_applies_the_recipes_weight_rule() -> None:
    from spatialiq_train.core.recipes import RecipeError, load_recipe

    res = _reward('{"format": 1e308}')  # printed inf before
    assert res.exit_code == EXIT_USAGE and "inf" not in res.output
    assert "weight of 'format' is 1e+308" in _flat(res.output)
    res = _reward('{"format": 0, "integer_distance": 0}')  # accepted before, refused by recipes
    assert res.exit_code == EXIT_USAGE
    with pytest.raises(RecipeError) as refused:
        load_recipe(REPO / "recipes" / "tiny_cpu.yaml", ["reward.weights={format: 0, integer_distance: 0}"])
    rule = "no positive weight in {'format': 0.0, 'integer_distance': 0.0}; at least one reward must count"
    assert rule in _flat(res.output) and rule.replace(".0", "") in _flat(str(refused.value)).replace(".0", "")
    assert _reward('{"format": 0.1, "integer_distance": 0.9}').exit_code == 0


def test_reward_score_takes_a_factorys_parameters_and_names_them_when_missing() -> None:
    res = _reward("overlong")  # "bad parameters []" before, and no way to pass them
    assert res.exit_code == EXIT_USAGE and "bad parameters" not in res.output
    assert "reward factory 'overlong' takes the parameters max_len, cache (given: none); pass them as " \
           "overlong:max_len=N:cache=N" in _flat(res.output)
    res = _reward("overlong:max_len=20:cache=5")  # the advice works: 18 characters, 3 into the 5-long ramp
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[-1] == "-0.6"


def test_a_task_id_typo_in_a_completions_file_names_the_task_not_the_data(tmp_path: Path) -> None:
    from test_eval_pipeline import make_dataset

    from eval.scenes import find_scenes

    data = make_dataset(tmp_path / "data", structures=1)
    out = tmp_path / "c.jsonl"
    out.write_text("".join(json.dumps({"view": s.view, "task": "task_Main", "sample": 0, "text": "3"}) + "\n"
                           for s in find_scenes(data)))
    res = CliRunner().invoke(app, ["eval", "score", "--completions", str(out), "--data", str(data), "--out",
                                   str(tmp_path / "o"), "--name", "m"])
    assert res.exit_code == EXIT_USAGE and "--data" not in _flat(res.output).split("error:")[-1]
    assert "'task_Main' is not a task id (valid: task1, " in _flat(res.output) and "task_main" in res.output


def test_sweep_plan_finds_a_repeat_written_in_another_key_order(tmp_path: Path) -> None:
    from spatialiq_train.lab.sweep import EvalSettings, parse_vary, plan_sweep

    vary = parse_vary("reward.weights=[{format: 0.1, integer_distance: 0.9}, {integer_distance: 0.9, format: 0.1}]")
    with pytest.raises(UserError, match="two variants resolve to the same recipe .* the same values in another key "
                                        "order"):
        plan_sweep("tiny_cpu", [], [vary], tmp_path, EvalSettings("d"))
    assert not (tmp_path / "sweep.yaml").exists()


def test_version() -> None:
    from spatialiq_train.core.versions import PROJECT_VERSION

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"spatialiq-train {PROJECT_VERSION}"


@pytest.mark.parametrize(("signal_exc", "code"), [(KeyboardInterrupt(), 130), (SystemExit(143), 143)])
def test_an_interrupted_demo_step_says_it_was_interrupted_and_what_was_kept(tmp_path: Path, monkeypatch,
                                                                             signal_exc: BaseException,
                                                                             code: int) -> None:
    """Ctrl-C (exit 130), or SIGTERM in a step holding an output lock (which unwinds it as exit 143)."""
    import data_gen.split_check
    import spatialiq_train.cli.demo as demo_mod

    def interrupted(dirs):  # noqa: ANN001, ANN202 - the signal arrives while the step runs
        raise signal_exc

    steps = [["recipes", "validate", "recipes/tiny_cpu.yaml"], ["check-splits", str(tmp_path)]]
    monkeypatch.setattr(demo_mod, "demo_steps", lambda *a, **k: steps)
    monkeypatch.setattr(data_gen.split_check, "check_splits", interrupted)
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert res.exit_code == code and f"failed (exit {code}" not in res.output, res.output
    said = _flat(res.output)
    assert "interrupted: the demo stopped at step [2/2] (check-splits); what step 1 wrote is kept" in said
    assert "rerun the same demo command to continue" in said


def test_the_demo_prints_its_step_lines_in_order_and_a_total(tmp_path: Path, monkeypatch) -> None:
    """A background step that ends after a later in-process step still has its line before that step's."""
    import spatialiq_train.cli.demo as demo_mod

    steps = [["recipes", "validate", "recipes/tiny_cpu.yaml"], ["recipes", "show", "recipes/tiny_cpu.yaml"],
             ["reward", "list"]]
    monkeypatch.setattr(demo_mod, "demo_steps", lambda *a, **k: steps)
    monkeypatch.setattr(demo_mod, "demo_background", lambda out: {0: None})  # a child: seconds of imports
    monkeypatch.setattr(demo_mod, "JOIN_BEFORE", "reward")
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    lines = res.output.splitlines()
    timing = [next(i for i, t in enumerate(lines) if t.startswith(head))
              for head in ("[1/3] recipes validate (background): ", "[2/3] recipes show: ", "[3/3] reward list: ",
                           "[total] 3 steps: ")]
    assert timing == sorted(timing), res.output
