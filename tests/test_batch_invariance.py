"""The hardware does not change the algorithm: the same recipe run with 1 process and with 2 (DDP over gloo, as
tests/test_multiprocess.py launches them), and with two micro-batch sizes, trains the same rows in the same order and
makes the same first optimizer step, for SFT as it runs and for RL from the same fixed completions
(tests/_batch_invariance_worker.py); an SFT epoch whose tail fills no global batch trains the same whole batches
everywhere.

The recipe's global batch is 4 sequences (SFT) and 4 prompts x 4 completions (RL). Configurations:
1 process x whole share (micro 4 / 16, no accumulation), 1 process x micro-batch 2 (accumulation 2 / 8), and 2
processes x micro-batch 2 (accumulation 1 / 4). The rows of one step, read in (accumulation step, rank) order, are
the sampler's first global batch in every configuration.

Tolerances (float32; measured on this CPU, see the assertions): gradients applied by the optimizer agree to
GRAD_ATOL + GRAD_RTOL x |g|, weights after the step to WEIGHT_ATOL. The step is AdamW's first, lr x g / (|g| + eps)
per element, so a weight moves by about the learning rate unless its gradient is below eps, and the step moves
many weights by ~lr (asserted too, so the comparison is not vacuous).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _train_support import REPO, free_port, launcher_env, tiny_model_dir, write_traces

WORKER = REPO / "tests" / "_batch_invariance_worker.py"
ACCELERATE_CONFIG = REPO / "recipes" / "accelerate" / "ddp_2cpu.yaml"
CONFIGS = {"1p-whole": (1, "null"), "1p-micro2": (1, "2"), "2p-micro2": (2, "2")}
GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-4
WEIGHT_ATOL = 1e-5
"""1-2 % of the learning rates (SFT 1e-3, RL 5e-4): a weight's first AdamW step is lr x g / (|g| + eps), about lr,
so a gradient of another sign or size would move it by ~lr; float32 summation order changes a step by far less,
except where |g| is near eps (measured up to ~2e-6 on one element of 8,192)."""




def _launch(out: Path, world: int, micro: str, model: str, data: Path) -> None:
    args = [str(WORKER), "--model", model, "--data", str(data), "--out", str(out), "--micro", micro]
    if world == 1:
        cmd = [sys.executable, *args]
    else:
        launcher = Path(sys.executable).parent / "accelerate"
        cmd = [str(launcher) if launcher.exists() else "accelerate", "launch", "--config_file",
               str(ACCELERATE_CONFIG), "--main_process_port", str(free_port()), *args]
    proc = subprocess.run(cmd, env=launcher_env(), capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists():
        pytest.skip("accelerate is not installed (pip install -e '.[train]')")
    root = tmp_path_factory.mktemp("batch")
    rng = np.random.default_rng(5)
    write_traces(root, "warmup", 8, rng, answer=lambda i: i)  # distinct answers: distinct SFT token rows
    write_traces(root, "rl", 8, rng, answer=lambda i: i)
    model = tiny_model_dir()
    outs = {}
    for name, (world, micro) in CONFIGS.items():
        out = root / name
        out.mkdir()
        _launch(out, world, micro, model, root)
        outs[name] = out
    return outs


def _report(out: Path, phase: str) -> tuple[list[str], dict]:
    """The step's rows in (accumulation step, rank) order, and rank 0's report."""
    reports = sorted((json.loads(p.read_text()) for p in out.glob(f"{phase}_rank*.json")), key=lambda r: r["rank"])
    world = reports[0]["world"]
    assert len(reports) == world
    steps = len(reports[0]["rows"])
    rows = [key for a in range(steps) for r in reports for key in r["rows"][a]]
    return rows, reports[0]


def _tensors(out: Path, phase: str, kind: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(out / f"{phase}_{kind}.safetensors"))


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["sft", "rl"])
def test_same_rows_in_the_same_order(runs: dict[str, Path], phase: str) -> None:
    seen = {name: _report(out, phase) for name, out in runs.items()}
    plans = {name: (r["world"], r["micro_batch"], r["accumulation"]) for name, (_, r) in seen.items()}
    per_step = {"sft": 4, "rl": 16}[phase]
    assert plans == {"1p-whole": (1, per_step, 1), "1p-micro2": (1, 2, per_step // 2),
                     "2p-micro2": (2, 2, per_step // 4)}
    rows = {name: r for name, (r, _) in seen.items()}
    if phase == "rl":  # generation sees each process's whole share at once: one list per rank, whole groups
        rows = {name: r[::4] for name, r in rows.items()}  # one key per group (4 completions of a prompt)
    reference = rows["1p-whole"]
    assert len(reference) == {"sft": 4, "rl": 4}[phase] and len(set(reference)) == len(reference)
    for name, got in rows.items():
        assert got == reference, (name, got, reference)


@pytest.mark.slow
def test_the_epochs_tail_is_left_out_on_any_process_count(runs: dict[str, Path]) -> None:
    """6 rows at a global batch of 4, one epoch: one step of the same 4 rows in every configuration (whole share,
    accumulation, two processes); the 2-row tail trains no step of 2 rows on one process and 1 on each of two."""
    seen = {name: _report(out, "tail") for name, out in runs.items()}
    reference = seen["1p-whole"][0]
    assert len(reference) == 4 and len(set(reference)) == 4
    for name, (rows, report) in seen.items():
        assert (rows, report["steps"]) == (reference, 1), (name, rows, report["steps"])


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["sft", "rl"])
def test_same_first_optimizer_step(runs: dict[str, Path], phase: str) -> None:
    from safetensors.numpy import load_file

    base = load_file(str(Path(tiny_model_dir()) / "model.safetensors"))
    ref_g, ref_w = _tensors(runs["1p-whole"], phase, "grads"), _tensors(runs["1p-whole"], phase, "weights")
    moved = max(float(np.abs(ref_w[k] - base[k]).max()) for k in ref_w if k in base)
    assert moved > 10 * WEIGHT_ATOL  # the step moved weights by about the learning rate
    worst_g = worst_w = 0.0
    for name in ("1p-micro2", "2p-micro2"):
        grads, weights = _tensors(runs[name], phase, "grads"), _tensors(runs[name], phase, "weights")
        assert grads.keys() == ref_g.keys() and weights.keys() == ref_w.keys()
        worst_g = max([worst_g, *(float(np.abs(grads[k] - g).max()) for k, g in ref_g.items())])
        worst_w = max([worst_w, *(float(np.abs(weights[k] - w).max()) for k, w in ref_w.items())])
        print(f"{phase} {name}: largest difference to 1 process, whole share: gradients "
              f"{max(float(np.abs(grads[k] - g).max()) for k, g in ref_g.items()):.2e}, weights "
              f"{max(float(np.abs(weights[k] - w).max()) for k, w in ref_w.items()):.2e} (largest weight move "
              f"{moved:.2e})")
        for k, g in ref_g.items():
            np.testing.assert_allclose(grads[k], g, rtol=GRAD_RTOL, atol=GRAD_ATOL, err_msg=f"{name} {k}")
        for k, w in ref_w.items():
            np.testing.assert_allclose(weights[k], w, rtol=0, atol=WEIGHT_ATOL, err_msg=f"{name} {k}")


@pytest.mark.slow
def test_every_step_logs_perf_metrics(runs: dict[str, Path]) -> None:
    """The perf/* callback (train/perf.py) on a real run: tokens/s (total and per device), step time, peak memory,
    RL's generation/training split; no MFU on the CPU (no known peak)."""
    from _metric_names import is_known

    from spatialiq_train.core import throughput as tp
    from spatialiq_train.core.metrics import read_metrics

    for name, devices in (("1p-whole", 1), ("2p-micro2", 2)):
        for phase in ("sft", "rl"):
            (row,) = read_metrics(runs[name] / f"{phase}0" / "metrics.jsonl")
            perf = {k: v for k, v in row.items() if k.startswith("perf/")}
            assert all(is_known(k) for k in perf), perf
            assert perf[tp.PERF_TOKENS_PER_S] > 0 and perf[tp.PERF_STEP_S] > 0 and perf[tp.PERF_PEAK_MEMORY_GB] > 0
            assert perf[tp.PERF_TOKENS_PER_S_PER_GPU] == pytest.approx(perf[tp.PERF_TOKENS_PER_S] / devices)
            assert perf[tp.PERF_TOKENS_PER_S] == pytest.approx(row["train/num_tokens"] / perf[tp.PERF_STEP_S])
            assert tp.PERF_MFU not in perf
            if phase == "rl":
                assert 0 < perf[tp.PERF_GENERATION_S] < perf[tp.PERF_STEP_S]
                assert perf[tp.PERF_TRAINING_S] == pytest.approx(perf[tp.PERF_STEP_S] - perf[tp.PERF_GENERATION_S])
            else:
                assert tp.PERF_GENERATION_S not in perf
