"""Helpers of the GPU tests and bench/gpu_check.sh: figures for the check's table, the tiny model in bfloat16."""

from __future__ import annotations

import pytest


def record_figure(stage: str, name: str, value: object) -> None:
    """Append one figure for bench/gpu_check.sh's table (to $SPATIALIQ_GPU_FIGURES when it is set)."""
    import json
    import os

    path = os.environ.get("SPATIALIQ_GPU_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"stage": stage, "name": name, "value": value}) + "\n")


def save_vllm_tiny(out_dir, seed: int = 0):  # noqa: ANN001, ANN201
    """The offline tiny Qwen2.5-VL (its heads are 32 wide, which vLLM's FlashAttention takes), saved in bfloat16
    with the standard processor files."""
    import torch

    from spatialiq_train.core.processor import save_processor
    from spatialiq_train.tiny import build_model, build_processor, build_tokenizer

    tok = build_tokenizer()
    model = build_model(tok, seed=seed, dtype=torch.bfloat16)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    save_processor(build_processor(tok), out_dir)
    return out_dir


def needs(module: str, hint: str) -> None:
    """Skip the calling test when `module` is not importable."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed ({hint})")
