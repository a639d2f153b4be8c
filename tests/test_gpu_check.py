"""bench/gpu_check.sh on a machine without a GPU: the cheap stages run, every GPU stage is skipped with the
reason, and the script says that nothing was checked and fails; a dry run exits 0; the stage limits fit the budget."""

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
CHEAP_STAGES = ("gpu-tests-collect", "train-plan")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(["bash", str(SCRIPT), *args, "--out", str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def _table(stdout: str) -> dict[str, list[str]]:
    rows = [line.split(None, 3) for line in stdout.splitlines() if line[:1].strip()]  # not the figures
    return {r[0]: r[1:] for r in rows if r[0] in {*GPU_STAGES, *CHEAP_STAGES}}


def _no_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: bench/gpu_check.sh would run its GPU stages for real")


@pytest.mark.slow
def test_without_a_gpu_nothing_is_checked_and_the_script_fails(tmp_path: Path) -> None:
    _no_gpu()
    proc = _run(tmp_path, "--run-pytest")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("no GPU: nothing was checked"), proc.stdout[-1500:]
    assert "stages without failure" not in proc.stdout
    rows = _table(proc.stdout)
    assert rows["gpu-tests-collect"][0] == "PASS" and rows["train-plan"][0] == "PASS"
    for stage in GPU_STAGES:
        status, _, reason = rows[stage]
        assert status == "SKIP" and "no CUDA GPU" in reason, (stage, rows[stage])
    assert "2 passed, 5 skipped, 0 failed of 7 stages" in proc.stdout
    plan = json.loads((tmp_path / "train_plan.json").read_text())
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
    assert sum(limits.values()) == 570  # the documented default budget (about 10 minutes of GPU time)


def test_a_budget_below_the_stage_limits_is_refused(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--budget", "100")
    assert proc.returncode == 2
    assert "at least the stage limits' sum 570" in proc.stderr and not (tmp_path / "results.tsv").exists()


def test_shellcheck_is_clean() -> None:
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed")
    lint = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
