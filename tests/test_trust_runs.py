"""Issue 44, part A (trust, fourth pass): one writer per output however the path is spelled, resumes that check the
data, no step-less success, run folders of the previous release, intermediate-checkpoint cards and the training,
recipe and release messages (docs/trust.md). Case numbers are the issue's."""

from __future__ import annotations

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
