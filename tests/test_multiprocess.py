"""Two data-parallel processes on the CPU (`accelerate launch`, DDP over gloo): SFT, export, then RL with dynamic
sampling on the tiny model. Both ranks end with identical weights, refills never draw a prompt on both ranks, and
the logged dynamic_sampling/* counts are the sums over ranks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _train_support import REPO, free_port, launcher_env, tiny_model_dir, write_traces

from spatialiq_train.core.metrics import read_metrics

WORKER = REPO / "tests" / "_multiproc_worker.py"
ACCELERATE_CONFIG = REPO / "recipes" / "accelerate" / "ddp_2cpu.yaml"
COUNTS = ("kept_groups", "dropped_groups", "filler_groups")




@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], float]:
    if shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists():
        pytest.skip("accelerate is not installed (pip install -e '.[train]')")
    root = tmp_path_factory.mktemp("mp")
    rng = np.random.default_rng(3)
    write_traces(root, "warmup", 8, rng, answer=lambda i: i % 10)
    write_traces(root, "rl", 16, rng, answer=lambda i: i)  # only i % 4 == 1 varies under the worker's reward
    out = root / "out"
    out.mkdir()
    launcher = str(Path(sys.executable).parent / "accelerate")
    cmd = [launcher if os.path.exists(launcher) else "accelerate", "launch", "--config_file", str(ACCELERATE_CONFIG),
           "--main_process_port", str(free_port()), str(WORKER),
           "--model", tiny_model_dir(), "--data", str(root), "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=launcher_env(), capture_output=True, text=True, timeout=600, cwd=REPO)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    print(f"two-process SFT+RL wall time: {wall:.1f} s")
    return out, reports, wall


@pytest.mark.slow
def test_two_ranks_train_in_step(two_ranks) -> None:  # noqa: ANN001
    from _train_support import model_digest

    out, reports, _ = two_ranks
    assert [r["world"] for r in reports] == [2, 2] and [r["rank"] for r in reports] == [0, 1]
    assert all(r["distributed_type"] == "DistributedType.MULTI_CPU" for r in reports)
    assert reports[0]["sft_digest"] == reports[1]["sft_digest"]
    assert reports[0]["rl_digest"] == reports[1]["rl_digest"]
    from transformers import AutoModelForImageTextToText

    base = model_digest(AutoModelForImageTextToText.from_pretrained(tiny_model_dir()))
    exported = model_digest(AutoModelForImageTextToText.from_pretrained(out / "sft" / "final"))
    assert len({base, exported, reports[0]["rl_digest"]}) == 3  # both phases moved the weights
    assert [r["step"] for r in read_metrics(out / "sft" / "metrics.jsonl")] == [1, 2, 3]


@pytest.mark.slow
def test_refills_are_disjoint_across_ranks(two_ranks) -> None:  # noqa: ANN001
    _, reports, _ = two_ranks
    logs = [r["refill_log"] for r in reports]
    assert len(logs[0]) == len(logs[1]) == 2  # one generation per RL step
    n_rounds = 0
    for e0, e1 in zip(*logs, strict=True):
        assert (e0["step"], e0["generation"]) == (e1["step"], e1["generation"])
        assert e0["refill_rounds"] == e1["refill_rounds"] == len(e0["drawn"]) == len(e1["drawn"])
        drawn0 = [i for d in e0["drawn"] for i in d]
        drawn1 = [i for d in e1["drawn"] for i in d]
        assert not set(drawn0) & set(drawn1), (drawn0, drawn1)  # no prompt on both ranks in a generation
        assert len(set(drawn0)) == len(drawn0) and len(set(drawn1)) == len(drawn1)
        n_rounds += len(e0["drawn"])
    assert n_rounds >= 1  # three quarters of the prompts give constant rewards: refills must have happened


@pytest.mark.slow
def test_logged_counts_are_sums_over_ranks(two_ranks) -> None:  # noqa: ANN001
    out, reports, _ = two_ranks
    rows = read_metrics(out / "rl" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for row, e0, e1 in zip(rows, *[r["refill_log"] for r in reports], strict=True):
        assert e0["step"] == row["step"] - 1
        for name in COUNTS:
            assert row[f"dynamic_sampling/{name}"] == e0[name] + e1[name], name
        assert row["dynamic_sampling/refill_rounds"] == e0["refill_rounds"]
        assert e0["kept_groups"] + e0["filler_groups"] == 2  # each rank filled its own two groups
    assert any(e["dropped_groups"] > 0 for r in reports for e in r["refill_log"])


@pytest.mark.slow
def test_two_process_run_is_quick(two_ranks) -> None:  # noqa: ANN001
    _, _, wall = two_ranks
    assert wall < 180, f"two-process SFT+RL took {wall:.0f} s (budget ~2 minutes on 2 cores)"

