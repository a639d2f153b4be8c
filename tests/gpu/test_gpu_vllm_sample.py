"""`spatialiq eval sample --engine vllm` on the tiny model (bfloat16): greedy k=10 gives the same completion for
two views with the same image and prompt but different seeds, temperature 1 gives ten sampled ones. Each run is its
own process, as on a GPU node."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from _gpu_support import needs, record_figure

from eval.completions import load_completions

REPO = Path(__file__).resolve().parents[2]
LIMIT = 2  # scenes


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image
    from test_eval_pipeline import make_dataset

    data = make_dataset(tmp_path_factory.mktemp("bench") / "data", structures=1)
    for gt in (data / "benchmark").rglob("gt.json"):
        Image.new("RGB", (512, 512), (120, 80, 40)).save(gt.parent / "view.png")
    return data


def _sample(model: Path, data: Path, out: Path, *extra: str) -> tuple[dict, float]:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    cmd = [sys.executable, "-c", "from spatialiq_train.cli import main; main()", "eval", "sample",
           "--model", str(model), "--data", str(data), "--out", str(out), "--engine", "vllm",
           "--max-new-tokens", "16", "--limit", str(LIMIT), "--k", "10", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=420, cwd=REPO)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    by_prompt: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (view, task, _), rec in sorted(load_completions(out).items()):
        by_prompt[(view, task)].append(rec.text)
    return by_prompt, wall


def test_vllm_greedy_k10_gives_ten_identical_completions(vllm_tiny: Path, bench_data: Path, tmp_path: Path) -> None:
    needs("vllm", "pip install -e '.[gpu]'")
    by_prompt, wall = _sample(vllm_tiny, bench_data, tmp_path / "greedy.jsonl", "--temperature", "0")
    assert len(by_prompt) == LIMIT
    assert all(len(texts) == 10 and len(set(texts)) == 1 for texts in by_prompt.values()), by_prompt
    # every view here has the same image and prompt but its own request seed: greedy decoding ignores the seed, so
    # the views' completions agree; had the engine sampled (temperature 1), the seeds would make them differ
    assert len({texts[0] for texts in by_prompt.values()}) == 1, by_prompt
    record_figure("vllm-sample", "greedy k=10 wall s (incl. engine start)", round(wall, 1))


def test_vllm_temperature_1_k10_samples_ten(vllm_tiny: Path, bench_data: Path, tmp_path: Path) -> None:
    needs("vllm", "pip install -e '.[gpu]'")
    by_prompt, wall = _sample(vllm_tiny, bench_data, tmp_path / "t1.jsonl", "--temperature", "1.0")
    assert len(by_prompt) == LIMIT and all(len(texts) == 10 for texts in by_prompt.values())
    # a random 1024-token model sampled at temperature 1 for 16 tokens: ten equal draws would mean no sampling
    assert all(len(set(texts)) > 1 for texts in by_prompt.values()), by_prompt
    record_figure("vllm-sample", "T=1 k=10 wall s (incl. engine start)", round(wall, 1))
    distinct = sum(len(set(t)) for t in by_prompt.values()) / len(by_prompt)
    record_figure("vllm-sample", "distinct completions per prompt at T=1 (of 10)", round(distinct, 1))
