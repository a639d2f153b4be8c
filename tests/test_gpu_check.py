"""bench/gpu_check.sh on a machine without a GPU: the cheap stages run, every GPU stage is skipped with the
reason, and the script says that nothing was checked and fails; a dry run exits 0; the stage limits fit the budget.
No test depends on how fast this machine is: the stages that run for real get generous limits
(SPATIALIQ_GPU_CHECK_LIMITS), and a timeout is injected through a fake `timeout` command, never waited for."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_check.sh"
GPU_STAGES = ("mitsuba-cuda", "vllm-sample", "grpo-vllm", "sft-zero3", "train-7b")
ENGINES = {"mitsuba-cuda": "mitsuba", "vllm-sample": "vllm", "grpo-vllm": "vllm", "sft-zero3": "deepspeed"}
"""The module each engine stage needs (STAGE_ENGINES in the script)."""
CHEAP_STAGES = ("gpu-tests-collect", "train-plan")


GENEROUS = " ".join(f"{stage}:900" for stage in (*CHEAP_STAGES, *GPU_STAGES))
"""Stage limits no loaded machine reaches (the default budget becomes their sum)."""


def _run(tmp_path: Path, *args: str, limits: str | None = GENEROUS, path: str | None = None,
         pythonpath: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([*pythonpath, str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("SPATIALIQ_GPU_CHECK_LIMITS", None)
    if limits is not None:
        env["SPATIALIQ_GPU_CHECK_LIMITS"] = limits
    if path is not None:
        env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
    return subprocess.run(["bash", str(SCRIPT), *args, "--out", str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=1800, cwd=REPO)


def _table(stdout: str) -> dict[str, list[str]]:
    rows = [line.split(None, 3) for line in stdout.splitlines() if line[:1].strip()]  # not the figures
    return {r[0]: r[1:] for r in rows if r[0] in {*GPU_STAGES, *CHEAP_STAGES}}


def _no_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: bench/gpu_check.sh would run its GPU stages for real")


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.mark.slow
def test_without_a_gpu_nothing_is_checked_and_the_script_fails(tmp_path: Path) -> None:
    """--run-pytest runs the pytest stages without a GPU: those whose engine is installed run (their tests skip),
    the others report ABSENT naming the module, neither passed nor failed."""
    _no_gpu()
    proc = _run(tmp_path, "--run-pytest")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("no GPU: nothing was checked"), proc.stdout[-1500:]
    assert "stages without failure" not in proc.stdout
    rows = _table(proc.stdout)
    assert rows["gpu-tests-collect"][0] == "PASS" and rows["train-plan"][0] == "PASS"
    absent = [stage for stage in GPU_STAGES if stage in ENGINES and not _installed(ENGINES[stage])]
    for stage in GPU_STAGES:
        status, took, reason = rows[stage]
        if stage in absent:
            assert status == "ABSENT" and took == "0", (stage, rows[stage])
            assert reason.startswith(f"{ENGINES[stage]} is not installed") and "'.[train,render,gpu]'" in reason
        else:
            assert status == "SKIP" and "no CUDA GPU" in reason, (stage, rows[stage])
    assert f"2 passed, {5 - len(absent)} skipped, 0 failed of 7 stages" in proc.stdout
    if absent:
        assert "not installed here (not run, not counted as passed or failed): " in proc.stdout
    for stage in absent:  # not run at all: no log, no junit file
        assert not (tmp_path / "out" / f"{stage}.log").exists()
    plan = json.loads((tmp_path / "out" / "train_plan.json").read_text())
    assert 8.0e9 < plan["parameters"] < 8.6e9  # Qwen2.5-VL-7B: 8.29 B with the vision tower
    assert (plan["image_tokens"], plan["rl_completion_tokens"]) == (256, 1024)


@pytest.mark.slow
def test_dry_run_exits_zero_and_says_it_is_a_dry_run(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("dry run: "), proc.stdout[-1500:]
    rows = _table(proc.stdout)
    assert all(rows[s][0] == "SKIP" and rows[s][2] == "--dry-run" for s in GPU_STAGES), rows


def _stage_limits() -> dict[str, int]:
    text = SCRIPT.read_text(encoding="utf-8")
    block = re.search(r"STAGE_LIMITS=\(([^)]*)\)", text)
    assert block, "STAGE_LIMITS=(...) not found in bench/gpu_check.sh"
    return {name: int(sec) for name, sec in re.findall(r"([\w-]+):(\d+)", block.group(1))}


def test_stage_limits_add_up_to_the_default_budget_and_cover_every_stage() -> None:
    limits = _stage_limits()
    run = re.findall(r"^(?:run_stage|pytest_stage) ([\w-]+) ", SCRIPT.read_text(encoding="utf-8"), flags=re.M)
    assert run == list(limits), (run, list(limits))  # every stage has a limit, in the order the stages run
    assert set(run) == {*GPU_STAGES, *CHEAP_STAGES}
    assert sum(limits.values()) == 660  # the documented default budget (11 minutes of GPU time)
    # the 7B stage builds its trainers from the shipped recipe, and has room beyond the 105 s it took on an H200
    assert limits["train-7b"] >= 2 * 105


def test_the_script_parses_and_the_7b_stage_runs_the_shipped_recipe() -> None:
    parse = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert parse.returncode == 0, parse.stderr
    text = SCRIPT.read_text(encoding="utf-8")
    stage = re.search(r"^run_stage train-7b gpu (.*)$", text, flags=re.M)
    assert stage and "bench/bench_train.py --arch 7b --recipe dapo_tight_7b --steps 2" in stage.group(1), stage
    engines = dict(re.findall(r"([\w-]+):(\w+)", re.search(r"STAGE_ENGINES=\(([^)]*)\)", text).group(1)))
    assert engines == ENGINES


def test_a_budget_below_the_stage_limits_is_refused(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--budget", "100", limits=None)
    assert proc.returncode == 2
    assert "at least the stage limits' sum 660" in proc.stderr and not (tmp_path / "out" / "results.tsv").exists()
    proc = _run(tmp_path, "--budget", "700", limits="train-plan:100")  # an override counts in the sum: 740
    assert proc.returncode == 2 and "at least the stage limits' sum 740" in proc.stderr


@pytest.mark.parametrize("entry", ["nosuch:5", "train-plan:0", "train-plan:ten", "train-plan"])
def test_a_bad_limit_override_is_refused_naming_it(tmp_path: Path, entry: str) -> None:
    proc = _run(tmp_path, "--dry-run", limits=f"mitsuba-cuda:60 {entry}")
    assert proc.returncode == 2, proc.stdout
    assert f"SPATIALIQ_GPU_CHECK_LIMITS entry '{entry}': expected NAME:SECONDS" in proc.stderr
    assert not (tmp_path / "out" / "results.tsv").exists()


FAKE_TIMEOUT = """#!/usr/bin/env bash
# timeout --kill-after=10 LIMIT COMMAND...: logs the limit and the command, runs nothing, reports a timeout
echo "$2 ${*:3}" >> "$SIQ_TIMEOUT_LOG"
exit 124
"""


def test_a_stage_past_its_limit_fails_naming_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "timeout").write_text(FAKE_TIMEOUT)
    (fakes / "timeout").chmod(0o755)
    monkeypatch.setenv("SIQ_TIMEOUT_LOG", str(tmp_path / "timeouts.log"))
    proc = _run(tmp_path, "--dry-run", limits="train-plan:33", path=str(fakes))
    assert proc.returncode == 1, proc.stdout
    rows = _table(proc.stdout)
    assert rows["gpu-tests-collect"][0] == "FAIL" and "timed out after 20s" in rows["gpu-tests-collect"][2], rows
    assert rows["train-plan"][0] == "FAIL" and "timed out after 33s" in rows["train-plan"][2], rows
    calls = (tmp_path / "timeouts.log").read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["20", "33"] and "--collect-only" in calls[0], calls
    assert "failed: gpu-tests-collect, train-plan" in proc.stdout


@pytest.mark.slow
def test_without_pytest_the_pytest_stages_name_the_install_and_no_gpu_is_still_said(tmp_path: Path) -> None:
    _no_gpu()
    shadow = tmp_path / "shadow" / "pytest"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'pytest\'", name="pytest")\n')
    proc = _run(tmp_path, pythonpath=(str(shadow.parent),))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _table(proc.stdout)
    status, _, detail = rows["gpu-tests-collect"]
    assert status == "FAIL" and "pytest is not installed" in detail and "'.[train,render,gpu]'" in detail, detail
    assert rows["train-plan"][0] == "PASS"
    assert proc.stdout.rstrip().splitlines()[-1].startswith("no GPU: nothing was checked"), proc.stdout[-1500:]


def test_shellcheck_is_clean() -> None:
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed")
    lint = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
