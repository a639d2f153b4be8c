"""SFT under DeepSpeed ZeRO-3 (accelerate launch, one GPU) for two steps with LoRA, then the export: the merged
checkpoint loads with transformers, holds no adapter weights, has the base model's size, and only the LoRA
targets moved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _gpu_support import needs, record_figure
from _train_support import tiny_model_dir, write_traces

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "recipes" / "accelerate" / "zero3_1gpu.yaml"
LORA_TARGETS = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")


def test_zero3_lora_sft_exports_a_loadable_merged_checkpoint(tmp_path: Path) -> None:
    needs("deepspeed", "pip install -e '.[gpu]'")
    from safetensors import safe_open
    from transformers import AutoModelForImageTextToText

    write_traces(tmp_path, "warmup", 16, np.random.default_rng(0), answer=lambda i: i % 10)
    base = tiny_model_dir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIG),
           str(REPO / "tests" / "gpu" / "_zero3_worker.py"), "--model", base, "--data", str(tmp_path),
           "--out", str(tmp_path / "run")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=420, cwd=REPO)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    info = json.loads((tmp_path / "run" / "worker.json").read_text())
    assert info["deepspeed"] and info["zero_stage"] == 3
    final = Path(info["final"])
    with safe_open(final / "model.safetensors", "pt") as fh:
        keys = list(fh.keys())
    assert keys and not any("lora" in k for k in keys)
    merged = AutoModelForImageTextToText.from_pretrained(final, dtype=torch.float32)
    start = AutoModelForImageTextToText.from_pretrained(base, dtype=torch.float32)
    got, ref = dict(merged.named_parameters()), dict(start.named_parameters())
    assert {n: p.shape for n, p in got.items()} == {n: p.shape for n, p in ref.items()}  # no empty ZeRO-3 shards
    changed = {n for n in got if not torch.allclose(got[n], ref[n], atol=1e-2)}
    assert changed and all(n.endswith(LORA_TARGETS) for n in changed), sorted(changed)[:5]
    record_figure("sft-zero3", "2 LoRA steps + export wall s (incl. launch)", round(wall, 1))
    record_figure("sft-zero3", "tensors changed by the merged adapters", len(changed))
