"""Job scripts run by /bin/sh (issue 39, cases 6 and 7): every `sbatch --wrap` command slurm/gen_array.sh and
slurm/sweep.sh submit is run under `dash` (what /bin/sh is on Debian and Ubuntu, and what Slurm runs a --wrap with)
with hostile values: spaces, quotes, a newline, `$(...)` and `*`. Each value must reach the command exactly, and
nothing in a value may run. slurm/eval.sh checks the run name when it plans the job, by scoring's rule."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from eval.score import run_name_problem

ROOT = Path(__file__).resolve().parents[1]
SLURM = ROOT / "slurm"
DASH = shutil.which("dash")

FAKE_SBATCH = """#!/usr/bin/env bash
n=$(find "$FAKE_DIR/sbatch" -type f | wc -l)
for a in "$@"; do printf '%s\\0' "$a"; done > "$FAKE_DIR/sbatch/$n"
echo $((421 + n))
"""
FAKE_SPATIALIQ = """#!/bin/sh
if [ "$1" = sweep ] && [ "$2" = list ]; then printf 'v1\\nv2\\n'; exit 0; fi
n=$(find "$FAKE_DIR/calls" -type f | wc -l)
{ printf '%s\\0' "${SIQ_ENV_LOADED:-}"; for a in "$@"; do printf '%s\\0' "$a"; done; } > "$FAKE_DIR/calls/$n"
"""
HOSTILE = "o u't\"\n$(touch PWNED)*`touch PWNED2`"
"""A value with a space, both quotes, a newline, a command substitution, a glob and backticks."""


def _nul_split(path: Path) -> list[str]:
    return path.read_bytes().decode().split("\0")[:-1]


@pytest.fixture()
def fakes(tmp_path: Path) -> Path:
    if DASH is None:
        pytest.fail("dash is not installed (apt-get install -y dash): the /bin/sh of Slurm's --wrap is tested with it")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("spatialiq", FAKE_SPATIALIQ)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for sub in ("sbatch", "calls"):
        (tmp_path / sub).mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a-file-a-glob-would-find").write_text("")
    env_dir = tmp_path / "env dir 'x' $(touch PWNED3)"
    env_dir.mkdir()
    (env_dir / "activate").write_text("SIQ_ENV_LOADED=yes; export SIQ_ENV_LOADED\n")
    return tmp_path


def _env(fakes: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SIQ_"))}
    return {**base, "PATH": f"{fakes / 'bin'}:{os.environ['PATH']}", "FAKE_DIR": str(fakes),
            "SIQ_ENV": str(next(fakes.glob("env dir*")) / "activate"), **extra}


def _wraps(fakes: Path) -> list[str]:
    calls = [_nul_split(p) for p in sorted((fakes / "sbatch").iterdir(), key=lambda p: int(p.name))]
    return [next(a for a in call if a.startswith("--wrap="))[len("--wrap="):] for call in calls]


def _run_wraps_under_dash(fakes: Path, wraps: list[str], **env: str) -> list[list[str]]:
    """Each --wrap as Slurm runs it (/bin/sh -c, here dash), in the submission folder; the argv each one gave the
    (fake) spatialiq, after the value SIQ_ENV's script set."""
    calls = []
    for wrap in wraps:
        for old in (fakes / "calls").iterdir():
            old.unlink()
        proc = subprocess.run([DASH, "-c", wrap], env=_env(fakes, **env), cwd=fakes / "work", capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, (wrap, proc.stderr)
        (made,) = list((fakes / "calls").iterdir())
        calls.append(_nul_split(made))
    assert not list(fakes.rglob("PWNED*")), "a value ran as a command"
    return calls


def test_gen_array_wraps_run_under_dash_with_hostile_values(fakes: Path) -> None:
    out = fakes / HOSTILE
    extra = ["--renderer", "none", "--render-variant", "a b*"]
    proc = subprocess.run(["bash", str(SLURM / "gen_array.sh"), str(out), "10", "0", "train", "2", *extra],
                          env=_env(fakes), cwd=fakes / "work", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    plan, array, merge = _run_wraps_under_dash(fakes, _wraps(fakes), SLURM_ARRAY_TASK_ID="1")
    args = ["--out", str(out), "--structures", "10", "--seed", "0", "--split", "train", "--num-shards", "2", "--quiet",
            *extra]
    assert plan == ["yes", "gen", *args, "--workers", "8", "--plan-only"]
    assert array == ["yes", "gen", *args, "--workers", "8", "--shard", "1"]
    assert merge == ["yes", "gen-merge", "--out", str(out)]


def test_sweep_wrap_runs_under_dash_with_hostile_values(fakes: Path) -> None:
    sweep = fakes / "work" / HOSTILE
    sweep.mkdir(parents=True)
    proc = subprocess.run(["bash", str(SLURM / "sweep.sh"), str(sweep)], env=_env(fakes), cwd=fakes / "work",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (task,) = _run_wraps_under_dash(fakes, _wraps(fakes), SLURM_ARRAY_TASK_ID="1")
    assert task == ["yes", "sweep", "run", str(sweep), "--only", "v2"]


def _eval_plan(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    bench = tmp_path / "data" / "benchmark"
    bench.mkdir(parents=True, exist_ok=True)
    (tmp_path / "hf_home").mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SIQ_", "HF_", "RAY_"))}
    base.update(DATA=str(tmp_path / "data"), OUT=str(tmp_path / "out"), HF_HOME=str(tmp_path / "hf_home"),
                DRY_RUN="1", SLURM_JOB_ID="77", SLURM_JOB_NODELIST="gpu0", SLURM_JOB_NUM_NODES="1",
                SIQ_PROJECT=str(ROOT), **env)
    return subprocess.run(["bash", str(SLURM / "eval.sh")], env=base, capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)


def test_eval_plans_only_run_names_scoring_accepts(tmp_path: Path) -> None:
    """Case 7: MODEL=/lustre/runs/lr=1e-6/final used to plan `lustre-runs-lr=1e-6-final`, refused by `eval score`
    after the sampling; the derived name now maps such characters to '_', and a NAME scoring would refuse is refused
    at plan time, by the same rule."""
    proc = _eval_plan(tmp_path, MODEL="/lustre/runs/lr=1e-6/final")
    assert proc.returncode == 0, proc.stderr
    name = "lustre-runs-lr_1e-6-final"
    assert f"--name {name}" in proc.stdout and run_name_problem(name) is None
    for candidate in ("lr=1e-6", "ok.name+1", "..", ".hidden", "a b", "Zähler", "x-1_2.3", "a$(x)"):
        proc = _eval_plan(tmp_path, MODEL="/lustre/runs/m", NAME=candidate)
        # scoring's rule, plus the folder rule of OUT/eval/NAME (not hidden)
        accepted = run_name_problem(candidate) is None and not candidate.startswith(".")
        assert (proc.returncode == 0) is accepted, (candidate, proc.stderr)
        if not accepted:
            assert proc.returncode == 2 and "srun" not in proc.stdout
            assert (f"run name '{candidate}'" if not candidate.startswith(".") else f"NAME={candidate}") in proc.stderr


def test_extra_sets_reach_the_job_as_written_never_globbed(tmp_path: Path) -> None:
    """Case 6 (EXTRA_SETS): a `*` is not globbed to a file name, and one override per line may hold spaces."""
    from test_slurm_scripts import fake_slurm as make_fakes  # the training scripts' fakes (sbatch, srun, ...)
    from test_slurm_scripts import plan, run

    fakes = make_fakes.__wrapped__(tmp_path) if hasattr(make_fakes, "__wrapped__") else None
    if fakes is None:
        pytest.fail("test_slurm_scripts.fake_slurm changed shape")
    (fakes / "glob-bait.txt").write_text("")
    sets = "rl.optimizer.max_steps=2\nlogging.wandb_project=proj *"
    proc, _ = run("dapo_7b.sh", fakes, 1, in_job=True, DRY_RUN="1", EXTRA_SETS=sets)
    assert proc.returncode == 0, proc.stderr
    driver = next(c for c in plan(proc.stdout) if "--set" in c and "rl.optimizer.max_steps=2" in c)
    assert "logging.wandb_project=proj *" in driver and "glob-bait.txt" not in " ".join(driver)
