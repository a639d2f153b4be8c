"""Issue 44, part A (trust, fourth pass): one writer per output however the path is spelled, resumes that check the
data, no step-less success, run folders of the previous release, intermediate-checkpoint cards and the training,
recipe and release messages (docs/trust.md). Case numbers are the issue's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.errors import EXIT_USAGE
from spatialiq_train.core.lock import OutputLockedError, lock_path, output_lock

REPO = Path(__file__).resolve().parents[1]


def _hold(target: Path, *argv: str) -> subprocess.Popen:
    """Another process holding ``target``'s lock, its command line ``argv`` (as a running command would)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
         "from spatialiq_train.core.lock import output_lock\n"
         f"with output_lock({str(target)!r}, 'run folder'):\n    print('held', flush=True)\n    time.sleep(120)",
         *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


# --- case 1: one writer per output, however it is named ----------------------------------------------------------


def test_every_spelling_of_an_output_names_one_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A symbolic link, `..` and a relative path to the same folder are one output: the second writer is refused."""
    real = tmp_path / "t" / "s1"
    real.mkdir(parents=True)
    (tmp_path / "t" / "s1link").symlink_to(real, target_is_directory=True)
    (tmp_path / "t" / "other").mkdir()
    monkeypatch.chdir(tmp_path)
    spellings = [tmp_path / "t" / "s1link", tmp_path / "t" / "other" / ".." / "s1", Path("t/s1"), Path("t/s1link")]
    assert {lock_path(s) for s in spellings} == {real.parent / ".s1.lock"}
    with output_lock(real, "run folder"):
        for spelling in spellings:
            with pytest.raises(OutputLockedError, match=rf"{spelling} is being written by pid {os.getpid()}"):
                with output_lock(spelling, "run folder"):
                    pass
    assert not (tmp_path / "t" / ".s1link.lock").exists() and not (real.parent / ".s1.lock").exists()


def test_a_running_runs_lock_covers_its_phase_folders_and_a_parent_of_a_locked_folder(tmp_path: Path) -> None:
    """`train sft --out RUN/sft` while `run dapo-tight --out RUN` runs is refused naming the run's pid and command,
    before anything is written; so is any writer of the folder that holds a locked run."""
    run = tmp_path / "dtc"
    holder = _hold(run, "run", "dapo-tight", "--out", str(run))
    try:
        res = CliRunner().invoke(app, ["train", "sft", "-r", str(REPO / "recipes" / "tiny_cpu.yaml"), "--out",
                                       str(run / "sft"), f"data.traces_dir={tmp_path}", f"data.data_root={tmp_path}"])
        assert res.exit_code == EXIT_USAGE, res.output
        line = next(x for x in res.output.splitlines() if x.startswith("error:"))
        assert f"is inside {run}, which is being written by pid {holder.pid}" in line and "dapo-tight" in line
        assert not (run / "sft").exists()
        with pytest.raises(OutputLockedError, match=rf"{tmp_path} holds {run}, which is being written by pid "
                                                    rf"{holder.pid}"):
            with output_lock(tmp_path, "--out"):
                pass
        assert not lock_path(tmp_path).exists()  # the refused lock leaves nothing behind
    finally:
        holder.kill()
        holder.wait()


def test_sigterm_releases_the_lock_like_a_normal_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    holder = _hold(out, "train", "sft")
    assert lock_path(out).is_file()
    holder.send_signal(signal.SIGTERM)
    _, err = holder.communicate(timeout=60)
    assert holder.returncode == 128 + signal.SIGTERM, err
    assert "terminated: SIGTERM received" in err and "Traceback" not in err
    assert not lock_path(out).exists()


# --- a real `run dapo-tight`, interrupted in RL after checkpoint-2 of 8 --------------------------------------------



def _overrides(root: Path, traces: Path) -> list[str]:
    return [f"data.traces_dir={traces}", f"data.data_root={root}", "sft.optimizer.max_steps=2",
            "rl.optimizer.max_steps=8", "rl.prompts_per_step=2", "rl.num_generations=2",
            "generation.max_completion_length=8", "rl.overlong.buffer_length=2", "logging.save_steps=2"]


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A `run dapo-tight` (SFT warm-up of 2 steps, then RL with a budget of 8) interrupted at RL step 3."""
    import numpy as np
    from _train_support import Interrupted, interrupt_at, one_thread, tiny_recipe, write_traces

    from spatialiq_train.train.run import run_dapo_tight

    one_thread()
    base = tmp_path_factory.mktemp("dtc")
    root = base / "data"
    rng = np.random.default_rng(2)
    write_traces(root, "warmup", 8, rng, answer=lambda i: i % 10)
    traces = write_traces(root, "rl", 8, rng, answer=lambda i: 3)
    out = base / "run"
    with pytest.raises(Interrupted):
        run_dapo_tight(tiny_recipe(_overrides(root, traces)), out, rl_callbacks=[interrupt_at(3)])
    assert (out / "rl" / "checkpoint-2").is_dir() and not (out / "final").exists()
    return out, _overrides(root, traces)


def test_a_resume_on_other_data_is_refused_naming_what_changed(interrupted_run: tuple[Path, list[str]]) -> None:
    """Case 2: another dataset at the same data.traces_dir / data.data_root: the resume is refused in one line naming
    the trace file (or the images) that changed, before anything is written; with the data back it resumes."""
    out, overrides = interrupted_run
    root = out.parent / "data"
    rl_file = root / "traces" / "rl.jsonl"
    kept, image = rl_file.read_bytes(), root / "img" / "rl_0.png"
    kept_image = image.read_bytes()
    cmd = ["run", "dapo-tight", "--recipe", str(REPO / "recipes" / "tiny_cpu.yaml"), "--out", str(out), *overrides]
    before = sorted(p.name for p in (out / "rl").iterdir())
    try:
        rl_file.write_bytes(kept.replace(b'"answer": 3', b'"answer": 4'))
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == EXIT_USAGE, res.output
        errors = [x for x in res.output.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and "the data changed since this run started" in errors[0]
        assert "data.traces_dir rl.jsonl: recorded sha256" in errors[0] and "Traceback" not in res.output
        rl_file.write_bytes(kept)
        from PIL import Image

        Image.new("RGB", (56, 56), (1, 2, 3)).save(image)
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == EXIT_USAGE and "data.data_root images of the split" in res.output, res.output
        assert sorted(p.name for p in (out / "rl").iterdir()) == before  # nothing written by either refusal
    finally:
        rl_file.write_bytes(kept)
        image.write_bytes(kept_image)
    records = {p: json.loads((out / p / "data.json").read_text()) for p in ("sft", "rl")}
    assert records["sft"]["traces"].keys() == {"warmup.jsonl"} and records["rl"]["traces"].keys() == {"rl.jsonl"}


def test_an_intermediate_checkpoint_release_states_the_phases_run_and_its_step(
        interrupted_run: tuple[Path, list[str]], tmp_path: Path) -> None:
    """Case 7: `release --run RUN/rl/checkpoint-2` of a `run dapo-tight` names the SFT warm-up that ran and says
    step 2 of 8; the card names every dataset the phases trained on. Case 8: --out inside the run is refused."""
    out, _ = interrupted_run
    res = CliRunner().invoke(app, ["release", "--run", str(out / "rl" / "checkpoint-2"), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    card = (tmp_path / "r" / "README.md").read_text()
    assert "step 2 of 8 of its RL phase; the phases run up to it: sft, rl" in card
    assert "SFT on" in card and "then GRPO/DAPO" in card and "the run's phases: rl" not in card
    sft, rl = (json.loads((out / p / "data.json").read_text()) for p in ("sft", "rl"))
    assert f"(SFT phase): traces `traces` (`warmup.jsonl` sha256 `{sft['traces']['warmup.jsonl']}`)" in card
    assert f"(RL phase): traces `traces` (`rl.jsonl` sha256 `{rl['traces']['rl.jsonl']}`)" in card
    assert f"`{rl['images_sha256']}`" in card
    for inside in (out / "final", out / "final" / "release", out / "rl" / "x", out):
        res = CliRunner().invoke(app, ["release", "--run", str(out / "rl" / "checkpoint-2"), "--out", str(inside)])
        assert res.exit_code == EXIT_USAGE and "pick a folder outside the run" in res.output, res.output
        assert not inside.exists() or inside == out


# --- case 3: no step-less success ----------------------------------------------------------------------------------


def test_a_run_that_trained_no_step_is_never_complete_nor_released(tmp_path: Path) -> None:
    """RL on 3 rows at 4 prompts per step trains no step: it is never marked complete nor exported (refused before
    any work, or after a step-less loop); a folder an earlier version marked complete at step 0 is not released."""
    import numpy as np
    from _train_support import write_traces

    from spatialiq_train.tiny import save_tiny
    from spatialiq_train.train.completion import decide, read_marker, write_marker

    root = tmp_path / "data"
    traces = write_traces(root, "rl", 3, np.random.default_rng(0), answer=lambda i: 3)
    out = tmp_path / "rl"
    res = CliRunner().invoke(app, ["train", "rl", "-r", str(REPO / "recipes" / "tiny_cpu.yaml"), "--out", str(out),
                                   f"data.traces_dir={traces}", f"data.data_root={root}", "rl.optimizer.max_steps=2",
                                   "data.max_examples=3", "generation.max_completion_length=8",
                                   "rl.overlong.buffer_length=2"])
    assert res.exit_code != 0, res.output
    assert "Traceback" not in res.output and len([x for x in res.output.splitlines() if x.startswith("error:")]) == 1
    assert not out.exists()  # nothing left behind: no complete.json, no final/, no base/ or record of the settings
    # what 655ed98 left: final/ as it started and complete.json at global_step 0
    save_tiny(out / "final", seed=0)
    budget = {"max_steps": 2, "num_train_epochs": 1.0}
    write_marker(out, "rl", budget, 0, out / "final")
    assert decide(read_marker(out, budget), budget, True, False, str(out)) == "train"  # a rerun trains, not "complete"
    res = CliRunner().invoke(app, ["release", "--run", str(out), "--out", str(tmp_path / "rel")])
    assert res.exit_code == EXIT_USAGE and "trained no optimizer step (global_step 0)" in res.output, res.output
    assert not (tmp_path / "rel").exists() and not (tmp_path / "rel.partial").exists()


# --- case 8: training, recipe and release messages -----------------------------------------------------------------


@pytest.mark.parametrize(("override", "said"), [
    ("rl.scale_rewards=true", "scale_rewards True was rl.advantage {baseline: group_mean, std: group}"),
    ("rl.scale_rewards=false", "scale_rewards False was rl.advantage {baseline: group_mean, std: none}"),
    ("rl.optimizer.steps_per_generation=2", "rl.optimizer.steps_per_generation is no longer a recipe key: one "
                                            "generation batch of rl.prompts_per_step x rl.num_generations"),
    ("rl.optimizer.learning_rate=-1.0", "rl.optimizer.learning_rate: Value error, must be > 0"),
    ("reward.weights={format: 1e308, integer_distance: 0.9}", "weight of 'format' is 1e+308; weights are relative"),
    ("reward.weights={format: 0, integer_distance: 0}", "no positive weight"),
])
def test_recipe_refusals_name_the_replacement_in_one_line(override: str, said: str) -> None:
    res = CliRunner().invoke(app, ["recipes", "validate", str(REPO / "recipes" / "tiny_cpu.yaml"), "--set", override])
    assert res.exit_code == EXIT_USAGE
    first = res.output.splitlines()[0]
    assert said in first and "unknown key" not in first and first.count("got ") <= 1, first


def test_recipes_show_prints_no_key_a_recipe_may_not_set(tmp_path: Path) -> None:
    import yaml

    from spatialiq_train.core.recipes import load_recipe

    res = CliRunner().invoke(app, ["recipes", "show", "tiny_cpu"])
    assert res.exit_code == 0, res.output
    shown = yaml.safe_load(res.output)
    assert "global_batch_size" not in shown["rl"]["optimizer"] and shown["sft"]["optimizer"]["global_batch_size"] == 4
    (tmp_path / "shown.yaml").write_text(res.output)
    assert load_recipe(tmp_path / "shown.yaml") == load_recipe("tiny_cpu")  # what it prints loads as the same recipe


def test_liger_on_a_cpu_run_is_one_line_without_gpu_advice_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "sft"
    res = CliRunner().invoke(app, ["train", "sft", "-r", str(REPO / "recipes" / "tiny_cpu.yaml"), "--out", str(out),
                                   "model.liger_kernel=true", f"data.traces_dir={tmp_path}",
                                   f"data.data_root={tmp_path}"])
    assert res.exit_code == EXIT_USAGE and "Traceback" not in res.output
    assert res.output.startswith("error: model.liger_kernel=true: Liger's kernels are Triton GPU kernels and this "
                                 "run is on the CPU"), res.output
    assert "pip install" not in res.output and not out.exists()


# --- case 6: a run folder of the previous release ------------------------------------------------------------------


def _aged(run: Path, to: Path) -> Path:
    """A copy of ``run`` as the release before the global batch left it: its recipe records hold the per-device
    batch keys and rl.scale_rewards (tests/old_run/recipe.yaml, what that version wrote), no plan.json or data.json."""
    import shutil

    old = shutil.copytree(run, to)
    text = (REPO / "tests" / "old_run" / "recipe.yaml").read_text().replace("DATA", str(run.parent / "data"))
    for folder in (old, old / "sft", old / "rl"):
        (folder / "recipe.yaml").write_text(text)
        for name in ("plan.json", "data.json"):
            (folder / name).unlink(missing_ok=True)
    return old


def test_a_run_of_the_previous_release_releases_and_resumes_with_its_batch_as_it_trained(
        interrupted_run: tuple[Path, list[str]], tmp_path: Path) -> None:
    """Case 6: the release states the recorded per-device batch as it trained (4 x 1 x 1 process = 4 sequences;
    4 completions = 2 prompts x 2 generations) and its recipe loads today; a resume under other settings is refused
    naming the exact overrides that continue it, and with them it continues from its checkpoint to the end."""
    import yaml

    from spatialiq_train.core.recipes import load_recipe

    run, overrides = interrupted_run
    old = _aged(run, tmp_path / "old")
    res = CliRunner().invoke(app, ["release", "--run", str(old / "rl" / "checkpoint-2"), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    card = (tmp_path / "r" / "README.md").read_text()
    assert ("Recorded by an earlier spatialiq with per-device batch keys; read as it trained: sft: "
            "per_device_train_batch_size 4 x gradient_accumulation_steps 1 x 1 process(es) = "
            "sft.optimizer.global_batch_size 4") in card
    assert "4 completions = rl.prompts_per_step 2 x rl.num_generations 2" in card and "step 2 of 8" in card
    released = yaml.safe_load((tmp_path / "r" / "training_recipe.yaml").read_text())
    assert (released["rl"]["prompts_per_step"], released["rl"]["advantage"]) == (2, {"baseline": "group_mean",
                                                                                      "std": "group"})
    (tmp_path / "loads.yaml").write_text((tmp_path / "r" / "training_recipe.yaml").read_text())
    assert load_recipe(tmp_path / "loads.yaml").sft.optimizer.global_batch_size == 4
    cmd = ["run", "dapo-tight", "--recipe", str(REPO / "recipes" / "tiny_cpu.yaml"), "--out", str(old)]
    res = CliRunner().invoke(app, [*cmd, *overrides, "rl.prompts_per_step=4"])  # today's tiny_cpu batch
    assert res.exit_code == EXIT_USAGE, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("error:"))
    assert "it was recorded by an earlier spatialiq; as it trained it reads sft: per_device_train_batch_size" in line
    assert "rl.scale_rewards group = rl.advantage" in line
    # only what the phase trains with differs: the old record's vllm.enabled false and vllm.enable_sleep_mode false
    # resolve on the CPU as today's tiny_cpu (vllm.enabled true, sleep mode null) does: no vLLM, no sleep mode
    assert "vllm." not in line
    advice = "rl.prompts_per_step=2"
    assert line.endswith(f"to continue it, rerun with {advice}, or pick a new --out for a new run"), line
    res = CliRunner().invoke(app, [*cmd, *overrides, *advice.split()])
    assert res.exit_code == 0, res.output
    assert json.loads((old / "rl" / "complete.json").read_text())["global_step"] == 8
    steps = [json.loads(x)["step"] for x in (old / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))  # resumed from checkpoint-2: no step repeated or missed


def test_a_command_refused_after_its_setup_began_leaves_no_run_folder(interrupted_run: tuple[Path, list[str]],
                                                                       tmp_path: Path) -> None:
    """Case 8: a refusal found once `run dapo-tight` had built base/ and recorded its recipe (an uneven micro-batch)
    leaves nothing, so the corrected command meets no stray base/ or record of the refused settings."""
    _, overrides = interrupted_run
    out = tmp_path / "runs" / "new"
    res = CliRunner().invoke(app, ["run", "dapo-tight", "--recipe", str(REPO / "recipes" / "tiny_cpu.yaml"), "--out",
                                   str(out), *overrides, "sft.optimizer.micro_batch_size=3"])
    assert res.exit_code == EXIT_USAGE and "sft.optimizer.micro_batch_size = 3" in res.output, res.output
    assert not out.exists() and not lock_path(out).exists()


def test_a_resume_compares_the_values_the_phase_trains_with(tmp_path: Path) -> None:
    """A key left null whose resolved value is the recorded explicit one (or the reverse) is no change: the resume
    goes on; a key whose resolved value differs is refused, named with its recorded and its new value."""
    from _train_support import tiny_recipe

    from spatialiq_train.core.recipes import RecipeError
    from spatialiq_train.train.record import check_phase_record, write_record

    # tiny_cpu leaves both null: sleep mode off on TRL, the overlong window ending at max_completion_length 24
    explicit = tiny_recipe(["vllm.enable_sleep_mode=false", "rl.overlong.max_response_length=24"])
    same = {"vllm.enable_sleep_mode", "rl.overlong.max_response_length"}
    for folder, recorded, now in ((tmp_path / "a", explicit, tiny_recipe()), (tmp_path / "b", tiny_recipe(), explicit)):
        folder.mkdir()
        write_record(folder, recorded)
        assert set(check_phase_record(folder, now, "rl", extend=False)) == same
    with pytest.raises(RecipeError, match=r": vllm\.enable_sleep_mode differ .*recorded False, now True\)"):
        check_phase_record(tmp_path / "a", tiny_recipe(["vllm.enable_sleep_mode=true"]), "rl", extend=False)
    with pytest.raises(RecipeError, match=r": rl\.overlong\.max_response_length differ .*recorded 24, now 20\)"):
        check_phase_record(tmp_path / "a", tiny_recipe(["rl.overlong.max_response_length=20"]), "rl", extend=False)
    # refused on any machine (where no CUDA device is, the new recipe cannot resolve: the keys are compared as written)
    with pytest.raises(RecipeError, match=r"run\.device: recorded 'cpu', now 'cuda'"):
        check_phase_record(tmp_path / "a", tiny_recipe(["run.device=cuda"]), "rl", extend=False)
