"""The offline tiny Qwen2.5-VL is saved whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.slow
def test_save_tiny_replaces_a_stale_partial_build(tmp_path: Path) -> None:
    from spatialiq_train.tiny import save_tiny

    stale = tmp_path / "base.partial"
    stale.mkdir()
    (stale / "config.json").write_text("{}")  # left by an interrupted build
    out = save_tiny(tmp_path / "base", seed=0)
    assert out == tmp_path / "base"
    assert not stale.exists()
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pth")) for n in names)  # weights only as safetensors


def test_attention_heads_are_widths_vllm_accepts() -> None:
    """vLLM's CPU attention takes head sizes 32, 64, 80, ... (16 is refused), its GPU FlashAttention 32 to 256."""
    from spatialiq_train.tiny import TINY_TEXT, TINY_VISION

    text_head = TINY_TEXT["hidden_size"] // TINY_TEXT["num_attention_heads"]
    vision_head = TINY_VISION["hidden_size"] // TINY_VISION["num_heads"]
    assert text_head in (32, 64) and vision_head in (32, 64)
    assert sum(TINY_TEXT["rope_parameters"]["mrope_section"]) == text_head // 2
