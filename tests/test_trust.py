"""Issue 39: one writer per output, checked on read, complete or absent, bad values refused where they enter
(docs/trust.md). Case numbers are the issue's."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.errors import EXIT_FAILURE, EXIT_USAGE
from spatialiq_train.core.lock import OutputLockedError, lock_path, output_lock

REPO = Path(__file__).resolve().parents[1]


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def _holder(target: Path) -> subprocess.Popen:
    """Another process holding ``target``'s lock (as a running `eval sample` would)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom spatialiq_train.core.lock import output_lock\n"
         f"with output_lock({str(target)!r}, '--out'):\n    print('held', flush=True)\n    time.sleep(120)",
         "eval", "sample"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


# --- one writer per output ---------------------------------------------------------------------------------------


def test_the_lock_refuses_a_second_holder_and_takes_over_a_stale_one(tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    with output_lock(out, "--out") as path:
        assert path == lock_path(out) and json.loads(path.read_text())["pid"] == os.getpid()
        with pytest.raises(OutputLockedError, match=rf"--out {out} is being written by pid {os.getpid()}"):
            with output_lock(out, "--out"):
                pass
    assert not lock_path(out).exists()  # released: removed
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock_path(out).write_text(json.dumps({"pid": dead.pid, "command": "spatialiq eval sample --out c.jsonl"}))
    notes: list[str] = []
    with output_lock(out, "--out", note=notes.append):
        pass
    assert len(notes) == 1 and f"taking over the lock of pid {dead.pid}" in notes[0] and "no longer running" in notes[0]


def test_two_eval_sample_runs_on_one_out_the_second_is_refused_naming_the_first(tmp_path: Path) -> None:
    """Case 2: the second writer of a completions file is refused before it loads a model or writes a line."""
    from test_eval_pipeline import make_dataset

    from spatialiq_train.tiny import save_tiny

    model = save_tiny(tmp_path / "model", seed=0)
    data = make_dataset(tmp_path / "data", structures=1)
    from PIL import Image

    for gt in (data / "benchmark").rglob("gt.json"):
        Image.new("RGB", (64, 64), (120, 80, 40)).save(gt.parent / "view.png")
    out = tmp_path / "x.jsonl"
    holder = _holder(out)
    try:
        res = CliRunner().invoke(app, ["eval", "sample", "--model", str(model), "--data", str(data), "--out", str(out),
                                       "--engine", "transformers", "--k", "1", "--max-new-tokens", "2",
                                       "--limit", "1"])
        assert res.exit_code == EXIT_USAGE, res.output
        assert f"is being written by pid {holder.pid}" in _errors(res.output)[0]
        assert "eval sample" in _errors(res.output)[0]  # the holder's command
        assert not out.exists() and not Path(f"{out}.provenance.json").exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone (killed): the next run takes its lock over with a note and samples
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(model), "--data", str(data), "--out", str(out),
                                   "--engine", "transformers", "--k", "1", "--max-new-tokens", "2", "--limit", "1"])
    assert res.exit_code == 0, res.output
    assert f"taking over the lock of pid {holder.pid}" in res.output


def test_traces_and_release_refuse_a_second_writer(tmp_path: Path) -> None:
    holder = _holder(tmp_path / "traces")
    try:
        res = CliRunner().invoke(app, ["traces", "--data", str(tmp_path), "--out", str(tmp_path / "traces"),
                                       "--kind", "plain"])
        assert res.exit_code == EXIT_USAGE and f"pid {holder.pid}" in res.output, res.output
    finally:
        holder.kill()
        holder.wait()


# --- checked on read ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated, rendered benchmark split (1 structure, 16 views at 32 px), with its shard records."""
    from data_gen.config import GenConfig
    from data_gen.generate import run

    out = tmp_path_factory.mktemp("rendered") / "bench"
    run(GenConfig(out=out, structures=1, seed=5, split="benchmark", renderer="mitsuba", resolution=32),
        progress=False)
    return out


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_damaged_image_is_refused_by_every_reader_before_work(rendered: Path, tmp_path: Path) -> None:
    """Case 3: a truncated view.png is named by `traces`, by the trainers' trace loader and by `eval sample`, before
    any output is written."""
    from spatialiq_train.core.dataset import GroundTruthError
    from spatialiq_train.core.traces import load_examples

    data = shutil.copytree(rendered, tmp_path / "data")
    traces = tmp_path / "traces"
    res = CliRunner().invoke(app, ["traces", "--data", str(data), "--out", str(traces), "--kind", "plain"])
    assert res.exit_code == 0, res.output
    image = sorted(data.rglob("view.png"))[5]
    rel = image.relative_to(data).as_posix()
    _truncate(image)
    again = CliRunner().invoke(app, ["traces", "--data", str(data), "--out", str(tmp_path / "t2"), "--kind", "plain"])
    assert again.exit_code == EXIT_USAGE and f"{rel} does not match the sha256 recorded" in again.output
    assert "damaged or different picture" in " ".join(again.output.split())
    assert not (tmp_path / "t2" / "benchmark.jsonl").exists()
    with pytest.raises(GroundTruthError, match=f"{rel} does not match the sha256 recorded"):
        load_examples(traces, "benchmark", data, "sft")  # what both trainers read, before any step
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(tmp_path), "--data", str(data), "--out",
                                   str(tmp_path / "c.jsonl"), "--engine", "transformers", "--k", "1"])
    assert res.exit_code == EXIT_USAGE and f"{rel} does not match the sha256 recorded" in res.output
    assert not (tmp_path / "c.jsonl").exists()


def test_a_truncated_safetensors_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """Case 4: `release`, `eval sample` and `train rl` with rl.init_from refuse a cut-short model.safetensors in one
    line naming it, with no SafetensorError traceback."""
    from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe, recipe_to_yaml
    from spatialiq_train.tiny import save_tiny

    run = tmp_path / "run"
    save_tiny(run / "final", seed=1)
    (run / "recipe.yaml").write_text(recipe_to_yaml(load_recipe(SHIPPED_RECIPES / "tiny_cpu.yaml")))
    _truncate(run / "final" / "model.safetensors")
    runs = {
        "release": ["release", "--run", str(run), "--out", str(tmp_path / "rel")],
        "eval sample": ["eval", "sample", "--model", str(run / "final"), "--data", str(tmp_path / "none"),
                        "--out", str(tmp_path / "c.jsonl"), "--engine", "transformers"],
        "train rl": ["train", "rl", "-r", str(SHIPPED_RECIPES / "tiny_cpu.yaml"), "--out", str(tmp_path / "rl"),
                     f"rl.init_from={run / 'final'}", "model.tiny=false"],
    }
    from test_eval_pipeline import make_dataset

    make_dataset(tmp_path / "none", structures=1)
    for what, args in runs.items():
        res = CliRunner().invoke(app, args)
        errors = _errors(res.output)
        assert res.exit_code == EXIT_USAGE and len(errors) == 1, (what, res.output)
        assert "model.safetensors is not a complete safetensors file" in errors[0], (what, errors)
        assert "Traceback" not in res.output and "SafetensorError" not in res.output
    assert not (tmp_path / "rel").exists() and not (tmp_path / "rel.partial").exists()
    assert not (tmp_path / "c.jsonl").exists() and not (tmp_path / "rl" / "checkpoint-1").exists()


# --- complete or absent ------------------------------------------------------------------------------------------


def test_traces_on_a_full_disk_leave_the_old_folder_whole_and_the_retry_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Case 8: a full disk while writing the new trace files leaves the earlier ones as they were (never new
    train/warmup beside an old rl), one error line, and the retry writes every file."""
    import data_gen.traces as traces_mod
    from data_gen.config import GenConfig
    from data_gen.generate import run

    data = tmp_path / "data"
    run(GenConfig(out=data, structures=6, seed=2, split="train"), progress=False)
    args = ["traces", "--data", str(data), "--out", str(tmp_path / "traces"), "--kind", "plain", "--no-require-images"]
    out = tmp_path / "traces"
    out.mkdir()
    old = {name: f'{{"old": "{name}"}}\n' for name in ("train", "val", "warmup", "rl")}
    for name, text in old.items():
        (out / f"{name}.jsonl").write_text(text)
    real = traces_mod.atomic_write_text

    def full_disk(path, text):  # noqa: ANN001, ANN202
        if Path(path).name == "rl.jsonl":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr(traces_mod, "atomic_write_text", full_disk)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == EXIT_FAILURE, res.output
    assert len(_errors(res.output)) == 1 and "no space left on the device" in res.output
    assert {p.name for p in out.iterdir()} == {f"{n}.jsonl" for n in old}  # no staging folder left
    assert all((out / f"{n}.jsonl").read_text() == text for n, text in old.items())  # not mixed: all old
    monkeypatch.setattr(traces_mod, "atomic_write_text", real)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert all((out / f"{n}.jsonl").read_text() != text for n, text in old.items())


# --- bad values refused where they enter (case 9) ----------------------------------------------------------------


@pytest.mark.parametrize(("device", "expected"), [("bogus", "--device 'bogus': not a torch device"),
                                                  ("cuda", "--device cuda: this torch"),
                                                  ("cuda:3", "--device cuda:3: ")])
def test_eval_sample_refuses_an_unusable_device_before_the_model_loads(tmp_path: Path, device: str,
                                                                        expected: str) -> None:
    import torch

    if device.startswith("cuda") and torch.cuda.device_count() > 3:
        pytest.skip("this machine has that GPU")  # allowed: see tests/allowed_skips.py
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(tmp_path), "--data", str(tmp_path), "--out",
                                   str(tmp_path / "c.jsonl"), "--engine", "transformers", "--device", device])
    assert res.exit_code == EXIT_USAGE and _errors(res.output)[0].startswith(f"error: {expected}"), res.output


@pytest.mark.parametrize(("extra", "expected"), [
    (["--batch-size", "0"], "--batch-size: Input should be greater than or equal to 1 (got 0)"),
    (["--tasks", "task2"], "--tasks 'task2': only --mode independent asks sub-tasks"),
])
def test_eval_sample_refuses_bad_values_where_they_enter(tmp_path: Path, extra: list[str], expected: str) -> None:
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(tmp_path), "--data", str(tmp_path), "--out",
                                   str(tmp_path / "c.jsonl"), "--engine", "transformers", *extra])
    errors = _errors(res.output)
    assert res.exit_code == EXIT_USAGE and len(errors) == 1 and errors[0].startswith(f"error: {expected}"), res.output


@pytest.mark.parametrize(("gt", "answer", "expected"), [
    ({"task_main": "x"}, None, "key 'task_main' must be an integer or null, got 'x'"),
    ({"task_main": 12.7}, None, "key 'task_main' must be an integer or null, got 12.7"),
    (None, "-3", "--answer -3: a ground-truth block count is a whole number >= 0"),
])
def test_reward_score_refuses_ground_truth_that_is_not_a_count(tmp_path: Path, gt: dict | None, answer: str | None,
                                                               expected: str) -> None:
    args = ["reward", "score", "-c", "<answer>3</answer>"]
    if gt is not None:
        (tmp_path / "gt.json").write_text(json.dumps(gt))
        args += ["--gt", str(tmp_path / "gt.json")]
    if answer is not None:
        args += ["--answer", answer]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == EXIT_USAGE and expected in res.output, res.output


def _release_run(tmp_path: Path) -> Path:
    from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe, recipe_to_yaml
    from spatialiq_train.tiny import save_tiny

    run = tmp_path / "run"
    save_tiny(run / "final", seed=1)
    (run / "recipe.yaml").write_text(recipe_to_yaml(load_recipe(SHIPPED_RECIPES / "tiny_cpu.yaml")))
    return run


def test_release_out_must_be_a_release_folder_and_never_the_current_one(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    run = _release_run(tmp_path)
    work = tmp_path / "work"
    (work / "notes").mkdir(parents=True)
    (work / "notes" / "mine.txt").write_text("not part of a release")
    monkeypatch.chdir(work)
    for out in (".", str(work)):
        res = CliRunner().invoke(app, ["release", "--run", str(run), "--out", out, "--overwrite"])
        assert res.exit_code == EXIT_USAGE and "is the current folder" in _errors(res.output)[0], res.output
    other = tmp_path / "other"
    shutil.copytree(work, other)
    res = CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(other), "--overwrite"])
    assert res.exit_code == EXIT_USAGE and "has no SHA256SUMS" in res.output, res.output
    assert (other / "notes" / "mine.txt").is_file() and (work / "notes" / "mine.txt").is_file()
    rel = tmp_path / "rel"
    assert CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(rel)]).exit_code == 0
    (rel / "mine.txt").write_text("added by hand")
    res = CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(rel), "--overwrite"])
    assert res.exit_code == EXIT_USAGE and "holds mine.txt, which its SHA256SUMS does not list" in res.output
    (rel / "mine.txt").unlink()
    assert CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(rel), "--overwrite"]).exit_code == 0


def test_sigint_says_what_was_kept_and_how_to_resume(tmp_path: Path) -> None:
    """Ctrl-C during `eval sample` (after the engine loaded): exit 130 and a line naming the file and the rerun."""
    from test_eval_pipeline import make_dataset

    data = make_dataset(tmp_path / "data", structures=1)
    from PIL import Image

    from spatialiq_train.tiny import save_tiny

    for gt in (data / "benchmark").rglob("gt.json"):
        Image.new("RGB", (64, 64), (120, 80, 40)).save(gt.parent / "view.png")
    model = save_tiny(tmp_path / "model", seed=0)
    # the child handles SIGINT as Python's default would, however the suite was launched: a background job (nohup
    # ... &, sbatch wrappers) inherits SIGINT as ignored, and a raised SIGINT would then do nothing
    script = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "import eval.sample as s\nreal = s.append_completions\ncalls = []\n"
              "def append(path, records):\n    n = real(path, records)\n    calls.append(n)\n"
              "    if len(calls) == 2:\n        signal.raise_signal(signal.SIGINT)\n    return n\n"
              "s.append_completions = append\nfrom spatialiq_train.cli import main\nsys.argv[0] = 'spatialiq'\n"
              "main()\n")
    out = tmp_path / "c.jsonl"
    proc = subprocess.run([sys.executable, "-c", script, "eval", "sample", "--model", str(model), "--data", str(data),
                           "--out", str(out), "--engine", "transformers", "--k", "1", "--max-new-tokens", "2",
                           "--batch-size", "1", "--limit", "4"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode == 130, proc.stderr
    line = [t for t in proc.stderr.splitlines() if t.startswith("interrupted:")]
    assert len(line) == 1 and str(out) in line[0] and "rerun the same command" in line[0], proc.stderr
    assert len(out.read_text().splitlines()) == 2 and not lock_path(out).exists()


def test_a_full_disk_while_appending_completions_names_the_file_and_the_resume_is_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Complete or absent for completions: ENOSPC at the write is one line naming the file; what was cut is set
    aside and the lines before it kept."""
    from eval.completions import Completion, append_completions, load_completions
    from spatialiq_train.core.errors import describe_error

    out = tmp_path / "c.jsonl"
    append_completions(out, [Completion("v1", "task_main", 0, "eins")])

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as caught:
        append_completions(out, [Completion("v1", "task_main", 1, "zwei")])
    message, code = describe_error(caught.value)  # type: ignore[misc]
    assert code == EXIT_FAILURE and message == f"no space left on the device while writing {out}"
    monkeypatch.undo()
    with out.open("ab") as fh:  # what a disk that filled mid-line leaves
        fh.write(b'{"view": "v1", "task": "ta')
    assert list(load_completions(out)) == [("v1", "task_main", 0), ("v1", "task_main", 1)]


def test_without_flock_the_recorded_pid_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that refuses flock (ENOLCK): a live holder's pid still refuses, a dead one is taken over."""
    import fcntl

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    out = tmp_path / "c.jsonl"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock_path(out).write_text(json.dumps({"pid": live.pid, "command": "spatialiq eval sample"}))
        with pytest.raises(OutputLockedError, match=rf"pid {live.pid} \(spatialiq eval sample"):
            with output_lock(out, "--out"):
                pass
    finally:
        live.kill()
        live.wait()
    notes: list[str] = []
    with output_lock(out, "--out", note=notes.append):
        assert json.loads(lock_path(out).read_text())["pid"] == os.getpid()
    assert len(notes) == 1 and f"pid {live.pid}" in notes[0] and not lock_path(out).exists()


def test_a_distributed_run_is_one_writer_rank_0_holds_the_run_folder_lock(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rank of `accelerate launch spatialiq train sft` opens the same run folder: rank 0 takes the lock, the
    others take none (each taking it refused every rank but one, the DeepSpeed ZeRO-3 runs among them)."""
    from spatialiq_train.cli.train import _writing
    from spatialiq_train.core.lock import OutputLockedError, lock_path

    run = tmp_path / "run"
    monkeypatch.setenv("RANK", "0")
    with _writing(run):
        assert lock_path(run).is_file()
        monkeypatch.setenv("RANK", "1")
        with _writing(run):  # the same job's rank 1: no lock of its own, not refused
            pass
        monkeypatch.delenv("RANK")
        with pytest.raises(OutputLockedError, match="run folder"), _writing(run):  # a second, separate run
            pass
    assert not lock_path(run).exists()
