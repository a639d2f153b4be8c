"""The demo's pipeline: every step is a valid `spatialiq` command line, in dependency order."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from spatialiq_train.cli import app
from spatialiq_train.cli.demo import demo_steps


def _parse(args: list[str]):  # noqa: ANN202 - typer's (vendored) click Context
    """Resolve and parse one command line without running it (raises a usage error on bad options)."""
    command = typer.main.get_command(app)
    ctx = command.make_context("spatialiq", [], resilient_parsing=True)
    rest = list(args)
    while hasattr(command, "get_command"):  # a group: descend into the named sub-command
        name, rest = rest[0], rest[1:]
        sub = command.get_command(ctx, name)
        assert sub is not None, f"no command {name!r} in {args}"
        command = sub
        if hasattr(command, "get_command"):
            ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
    return command.make_context(command.name, rest, parent=ctx)


def test_every_demo_step_parses(tmp_path: Path) -> None:
    steps = demo_steps(tmp_path, "warmup=2,rl=3", 2, "mitsuba", 64, 3, 2, 16, Path("recipes/tiny_cpu.yaml"))
    names = [ctx.command.name for ctx in map(_parse, steps)]
    assert names == ["gen", "traces", "gen", "rl", "dapo-tight", "check-splits", "sample", "score", "report",
                     "release"]


def test_demo_steps_chain_outputs_to_inputs(tmp_path: Path) -> None:
    steps = demo_steps(tmp_path, "warmup=2,rl=3", 2, "mitsuba", 64, 3, 2, 16, Path("recipes/tiny_cpu.yaml"))
    gen_train, traces, gen_bench, control, run, _, sample, score, report, release = steps
    train_dir, bench_dir = gen_train[2], gen_bench[2]
    assert traces[traces.index("--data") + 1] == train_dir
    assert f"data.traces_dir={traces[traces.index('--out') + 1]}" in run
    assert traces[traces.index("--kind") + 1] == "plain"
    assert sample[sample.index("--model") + 1] == str(Path(run[run.index("--out") + 1]) / "final")
    # the control: same recipe, data and budgets, from the run's SFT checkpoint, weights frozen
    assert "--control" in control and control[control.index("--recipe") + 1] == run[run.index("--recipe") + 1]
    assert [a for a in run if "=" in a] == [a for a in control if "=" in a and not a.startswith("rl.init_from=")]
    assert f"rl.init_from={Path(run[run.index('--out') + 1]) / 'sft' / 'final'}" in control
    # the steps that run at once write apart: a folder's writer owns what is inside it (docs/trust.md)
    outs = [Path(step[step.index("--out") + 1]) for step in (gen_bench, control, run)]
    assert not any(a != b and a.is_relative_to(b) for a in outs for b in outs), outs
    assert sample[sample.index("--data") + 1] == bench_dir == score[score.index("--data") + 1]
    assert score[score.index("--completions") + 1] == sample[sample.index("--out") + 1]
    assert report[report.index("--metrics") + 1].endswith("metrics_demo-tiny.json")
    assert release[release.index("--metrics") + 1] == report[report.index("--metrics") + 1]
    assert release[release.index("--run") + 1] == run[run.index("--out") + 1]
    assert release[release.index("--out") + 1] == str(tmp_path / "release")
    assert "means nothing" in score[score.index("--note") + 1]
    assert gen_train[gen_train.index("--split") + 1] == "train"
    assert gen_bench[gen_bench.index("--split") + 1] == "benchmark"


def test_parse_rejects_a_misspelled_option() -> None:
    with pytest.raises(Exception, match="modle"):
        _parse(["eval", "sample", "--modle", "x"])


def test_demo_training_overrides_are_valid_recipe_keys() -> None:
    from spatialiq_train.cli.demo import DEMO_TRAINING
    from spatialiq_train.core.recipes import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[1] / "recipes" / "tiny_cpu.yaml", list(DEMO_TRAINING))
    assert (recipe.sft.optimizer.max_steps, recipe.rl.optimizer.max_steps) == (120, 16)


def test_demo_stops_at_the_first_failing_step(tmp_path: Path, monkeypatch) -> None:
    """A step that exits non-zero (here check-splits on a missing folder) stops the demo with its code."""
    from typer.testing import CliRunner

    import spatialiq_train.cli.demo as demo_mod

    def steps(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return [["check-splits", str(tmp_path / "missing")], ["recipes", "validate", "recipes/tiny_cpu.yaml"]]

    monkeypatch.setattr(demo_mod, "demo_steps", steps)
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert result.exit_code != 0
    assert "demo step 1 failed" in result.output
    assert "ok: recipes/tiny_cpu.yaml" not in result.output


def test_demo_finds_its_recipe_from_any_directory(tmp_path: Path, monkeypatch) -> None:
    """The default recipe is a shipped name, resolved without the repository as working directory."""
    from spatialiq_train.core.recipes import load_recipe

    monkeypatch.chdir(tmp_path)
    assert load_recipe("tiny_cpu").model.min_pixels > 0
    steps = demo_steps(tmp_path, "warmup=2,rl=3", 2, "mitsuba", 64, 3, 2, 16, "tiny_cpu")
    assert str(_parse(steps[4]).params["recipe"]) == "tiny_cpu" and steps[4][:2] == ["run", "dapo-tight"]


def test_demo_refuses_a_missing_recipe_before_any_work(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--recipe", "no_such_recipe"])
    said = result.output + str(result.exception)
    assert result.exit_code != 0 and "no_such_recipe" in said and "tiny_cpu" in said
    assert not (tmp_path / "d").exists()


def test_demo_refuses_an_unknown_reward_before_any_work(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nmodel: {tiny: true}\nreward:\n  weights: {no_such_reward: 1.0}\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "d"), "--recipe", str(recipe)])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "reward.weights.no_such_reward" in errors[0], result.output
    assert not (tmp_path / "d").exists()


def test_demo_rerun_keeps_the_recorded_render_variant_and_offers_the_option(tmp_path: Path, monkeypatch) -> None:
    """Once another Mitsuba variant resolves here (e.g. libllvm19 installed), a rerun continues with the variant the
    datasets were rendered with; gen's refusal names `--render-variant`, which the demo has too."""
    import json

    from typer.testing import CliRunner

    import spatialiq_train.cli.demo as demo_mod

    ran: list[list[str]] = []
    monkeypatch.setattr("spatialiq_train.cli.steps.run_step",
                        lambda ctx, args, verbose=False: ran.append(args) or 0)
    monkeypatch.setattr(demo_mod, "report_learning", lambda out, rec: None)
    monkeypatch.setattr(demo_mod, "demo_background", lambda out: {})  # every step through run_step
    out = tmp_path / "demo"
    (out / "data-train").mkdir(parents=True)
    (out / "data-train" / "gen_config.json").write_text(json.dumps(
        {"structures": 40, "render_backend": {"renderer": "mitsuba", "variant": "scalar_rgb"}}))
    result = CliRunner().invoke(app, ["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    gens = [a for a in ran if a[0] == "gen"]
    assert len(gens) == 2 and all(a[a.index("--render-variant") + 1] == "scalar_rgb" for a in gens), gens
    ran.clear()
    result = CliRunner().invoke(app, ["demo", "--out", str(out), "--render-variant", "llvm_ad_rgb"])
    assert result.exit_code == 0 and ran[0][ran[0].index("--render-variant") + 1] == "llvm_ad_rgb"
    assert demo_mod.recorded_variant(tmp_path / "nothing") is None


@pytest.mark.parametrize("kind", ["plain", "cot"])
def test_demo_report_says_which_trace_kind_it_trained_on(tmp_path: Path, kind: str) -> None:
    steps = demo_steps(tmp_path, "warmup=2,rl=3", 2, "mitsuba", 64, 3, 2, 16, "tiny_cpu", kind)
    score = next(a for a in steps if a[:2] == ["eval", "score"])
    note = score[score.index("--note") + 1]
    assert f"trained on {kind.replace('cot', 'CoT')} traces (--kind {kind}" in note
    if kind == "plain":  # the report's n/a sub-task columns and shortcut rate 1.000 are explained
        assert "sub-task columns read n/a" in note and "shortcut rate" in note and "1.000" in note


def test_demo_steps_run_on_the_command_group_of_the_demo(tmp_path: Path, monkeypatch) -> None:
    """Each step runs in-process on the group the demo runs in: a good step's output shows, a usage error stops it."""
    from typer.testing import CliRunner

    import spatialiq_train.cli.demo as demo_mod

    def steps(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return [["recipes", "validate", "recipes/tiny_cpu.yaml"], ["recipes", "validate", "--no-such-option"]]

    monkeypatch.setattr(demo_mod, "demo_steps", steps)
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
    assert "ok: recipes/tiny_cpu.yaml" in result.output
    assert result.exit_code == 2 and "demo step 2 failed (exit 2" in result.output


def test_the_benchmark_render_and_the_control_run_beside_training_and_finish_before_check_splits(
        tmp_path: Path) -> None:
    from spatialiq_train.cli.demo import JOIN_BEFORE, MARKER, demo_background
    from spatialiq_train.train.completion import MARKER as PHASE_MARKER

    steps = demo_steps(tmp_path, "warmup=2,rl=4", 2, "mitsuba", 64, 3, 2, 16, "tiny_cpu")
    background = demo_background(tmp_path)
    bench, control = (steps[i] for i in sorted(background))
    assert bench[bench.index("--split") + 1] == "benchmark" and background[steps.index(bench)] is None
    assert "--control" in control and MARKER == PHASE_MARKER
    run_dir = Path(steps[4][steps[4].index("--out") + 1])
    assert background[steps.index(control)] == run_dir / "sft" / MARKER  # the SFT the control starts from is done
    join = next(i for i, a in enumerate(steps) if a[0] == JOIN_BEFORE)
    assert max(background) < 4 < join < next(i for i, a in enumerate(steps) if a[:2] == ["eval", "sample"])


def test_a_background_step_runs_in_a_child_and_its_failure_stops_the_demo(tmp_path: Path, monkeypatch) -> None:
    """A background step runs once its file exists, is reported with its times before the join step, and a failing
    one stops the demo there, naming its log."""
    from typer.testing import CliRunner

    import spatialiq_train.cli.demo as demo_mod

    repo = Path(__file__).resolve().parents[1]
    flag = tmp_path / "flag"
    good = ["recipes", "validate", "recipes/tiny_cpu.yaml"]
    for bad, code in ((False, 0), (True, 2)):
        background_step = ["recipes", "validate", "--no-such-option"] if bad else good
        steps = [background_step, ["recipes", "show", "recipes/tiny_cpu.yaml"], ["check-splits", str(tmp_path)]]
        flag.write_text("")
        monkeypatch.setattr(demo_mod, "demo_steps", lambda *a, _s=steps, **k: _s)
        monkeypatch.setattr(demo_mod, "demo_background", lambda out: {0: flag})
        monkeypatch.setattr(demo_mod, "JOIN_BEFORE", "check-splits")
        monkeypatch.chdir(repo)
        result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")])
        if bad:
            assert result.exit_code == code and "demo step [1/3] failed (exit 2" in result.output, result.output
            assert "no-such-option" in (tmp_path / "demo" / "logs" / "01-recipes-validate.log").read_text()
        else:  # check-splits on a folder without data then fails as step 3, after the join reported step 1
            assert "[1/3] recipes validate (background): " in result.output, result.output
            assert "demo step 3 failed" in result.output
