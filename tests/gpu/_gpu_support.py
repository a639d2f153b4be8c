"""Helpers of the GPU tests and bench/gpu_check.sh: figures for the check's table, the vLLM-sized tiny model."""

from __future__ import annotations

import pytest

VLLM_TINY_TEXT = {"num_attention_heads": 2, "num_key_value_heads": 1,
                  "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6]}}
"""The tiny model with 32-wide attention heads (hidden 64 / 2 heads): vLLM's FlashAttention backend takes head
sizes 32..256 and half precision, the CPU tiny model has 16-wide heads and float32 weights."""
VLLM_TINY_VISION = {"num_heads": 1}


def record_figure(stage: str, name: str, value: object) -> None:
    """Append one figure for bench/gpu_check.sh's table (to $SPATIALIQ_GPU_FIGURES when it is set)."""
    import json
    import os

    path = os.environ.get("SPATIALIQ_GPU_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"stage": stage, "name": name, "value": value}) + "\n")


def save_vllm_tiny(out_dir, seed: int = 0):  # noqa: ANN001, ANN201
    """The offline tiny Qwen2.5-VL with vLLM-sized heads, saved in bfloat16 with its processor."""
    import torch

    from spatialiq_train.tiny import build_model, build_processor, build_tokenizer

    tok = build_tokenizer()
    model = build_model(tok, seed=seed, dtype=torch.bfloat16, text=VLLM_TINY_TEXT, vision=VLLM_TINY_VISION)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    build_processor(tok).save_pretrained(str(out_dir))
    return out_dir


def needs(module: str, hint: str) -> None:
    """Skip the calling test when `module` is not importable."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed ({hint})")
