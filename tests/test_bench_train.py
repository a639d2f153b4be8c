"""bench/bench_train.py runs the shipped 7B and 32B DAPO-tight recipes at tiny size on the CPU: both phases build
their trainers as a run does (validation split included), train, are measured, and leave no checkpoint; the JSON is
written. (The GPU figures are the bench's job, by hand: `python bench/bench_train.py --arch 7b --recipe
dapo_tight_7b --steps 3`.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _train_support import REPO

BENCH = REPO / "bench" / "bench_train.py"


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path)}
    env.pop("WORLD_SIZE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(BENCH), "--arch", "tiny", "--out", str(out), *args], env=env,
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.is_file(), proc.stdout[-2000:] + proc.stderr[-4000:]  # always written
    return proc, json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["dapo_tight_7b", "dapo_tight_32b"])
def test_bench_train_runs_the_shipped_recipe_on_the_cpu(tmp_path: Path, recipe: str) -> None:
    proc, res = _run(tmp_path, "--recipe", recipe, "--steps", "1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert res["recipe"] == recipe and [p["phase"] for p in res["phases"]] == ["sft", "rl"]
    for phase in res["phases"]:
        assert phase["status"] == "ok", phase
        assert phase["checkpoints_written"] == []  # a benchmark writes no checkpoint, the final one included
        assert phase["steps_timed"] == 1 and phase["tokens_per_s"] > 0 and phase["peak_memory_gb"] > 0
        assert phase["mfu"] is None  # no known peak on the CPU
        assert "eval split 'val' loaded" in phase["validation"]  # built with the recipe's validation split
        batch = phase["settings"]["batch"]
        assert batch["micro_batch"] * batch["accumulation"] * batch["world_size"] == batch["global_batch"]
    sft, rl = res["phases"]
    assert sft["settings"]["batch"]["global_batch"] == 16 and rl["settings"]["batch"]["global_batch"] == 64
    assert sft["flops_factor"] == 6 and rl["flops_factor"] == 8  # beta > 0: + the reference forward
    assert rl["generation_s_per_step"] >= 0
    # nothing left behind: the run folders lived in a temporary folder that is gone
    assert not list(tmp_path.glob("**/checkpoint-*")) and not list(tmp_path.glob("bench-train-*"))
    assert "sft    ok" in proc.stdout and "rl     ok" in proc.stdout  # the printed table


@pytest.mark.slow
def test_bench_train_reports_a_failed_phase_and_runs_the_other(tmp_path: Path) -> None:
    proc, res = _run(tmp_path, "--recipe", "tiny_cpu", "--steps", "1", "rl.optimizer.micro_batch_size=3",
                     "generation.max_completion_length=8")
    assert proc.returncode == 1  # not every phase is ok
    sft, rl = res["phases"]
    assert sft["status"] == "ok" and sft["checkpoints_written"] == []
    assert rl["status"] == "failed"
    assert "micro_batch_size = 3 does not divide the 32 completions" in rl["error"], rl
    assert "rl: BatchError: rl.optimizer.micro_batch_size = 3" in proc.stdout  # the table names the error
