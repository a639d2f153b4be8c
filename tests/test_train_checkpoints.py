"""Complete or absent, for training (issue 39, case 1): a checkpoint cut off mid-save is skipped, named and set
aside by the resume, which continues from the newest complete one; a full disk during a save is one line, and the
rerun finishes. Also: one writer per run folder."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _train_support import TINY_RECIPE, one_thread, tiny_recipe, write_traces
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.train.checkpoints import checkpoint_problem, last_complete_checkpoint

one_thread()


def _cmd(root: Path, traces: Path, out: Path, steps: int = 6) -> list[str]:
    return ["train", "sft", "-r", str(TINY_RECIPE), "--out", str(out), f"data.traces_dir={traces}",
            f"data.data_root={root}", "data.sft_split=warmup", f"sft.optimizer.max_steps={steps}",
            "logging.save_steps=2"]


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "data"
    return root, write_traces(root, "warmup", 8, np.random.default_rng(3), answer=lambda i: i % 10)


def test_a_checkpoint_cut_off_mid_save_is_set_aside_and_the_resume_uses_the_last_complete_one(
        data: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from transformers import TrainerCallback

    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.sft import sft_phase

    class Killed(RuntimeError):
        pass

    class KillAt5(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step == 5:
                raise Killed("simulated SIGKILL at step 5")

    root, traces = data
    out = tmp_path / "sft"
    cmd = _cmd(root, traces, out, steps=6)
    with pytest.raises(Killed):
        run_phase(sft_phase(), tiny_recipe(cmd[6:]), out, callbacks=[KillAt5()])
    # checkpoint-2 and checkpoint-4 were saved; cut checkpoint-4 as SIGKILL mid-save would: weights half-written,
    # no trainer_state.json (the trainer writes it last)
    ckpt = out / "checkpoint-4"
    (ckpt / "trainer_state.json").unlink()
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert checkpoint_problem(ckpt) is not None and last_complete_checkpoint(out)[0] == out / "checkpoint-2"
    second = CliRunner().invoke(app, cmd)
    assert second.exit_code == 0, second.output
    assert (out / "checkpoint-4.incomplete").is_dir()  # named and set aside, never resumed
    assert "checkpoint-4 is incomplete" in caplog.text and "resuming from checkpoint-2" in caplog.text
    state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and checkpoint_problem(out / "checkpoint-4") is None  # saved again, complete


def test_a_full_disk_during_a_save_is_one_line_and_the_rerun_finishes(
        data: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    root, traces = data
    out = tmp_path / "sft"
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if "checkpoint-4" in str(f):
            raise OSError(errno.ENOSPC, "No space left on device", str(f))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    runner = CliRunner()
    failed = runner.invoke(app, _cmd(root, traces, out, steps=6))
    assert failed.exit_code == 1
    lines = [line for line in failed.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "no space left on the device" in lines[0], failed.output
    assert f"resumes from {out / 'checkpoint-2'}" in lines[0] and "Traceback" not in failed.output
    monkeypatch.setattr(torch, "save", real_save)  # space freed
    again = runner.invoke(app, _cmd(root, traces, out, steps=6))
    assert again.exit_code == 0, again.output
    assert (out / "checkpoint-4.incomplete").is_dir() and (out / "final" / "model.safetensors").is_file()
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6


def test_a_second_writer_of_a_run_folder_is_refused_naming_the_first(data: tuple[Path, Path], tmp_path: Path) -> None:
    root, traces = data
    out = tmp_path / "sft"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom spatialiq_train.core.lock import output_lock\n"
         f"with output_lock({str(out)!r}, 'run folder'):\n    print('held', flush=True)\n    time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = CliRunner().invoke(app, _cmd(root, traces, out))
        assert result.exit_code == 2
        assert f"is being written by pid {holder.pid}" in result.output and "(-c" in result.output
        assert not (out / "checkpoint-2").exists()
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
