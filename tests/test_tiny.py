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


def test_eos_token_ids_are_read_where_the_installed_transformers_keeps_them() -> None:
    """transformers 5.17 keeps a Qwen2.5-VL config's eos_token_id in its text_config only (no top-level attribute);
    later 5.x releases have it at the top too. Both shapes, read from real configs and from the 5.17 shape."""
    from types import SimpleNamespace

    from spatialiq_train.hf_export import eos_token_ids
    from spatialiq_train.tiny import build_config, build_tokenizer

    tok = build_tokenizer()
    config = build_config(tok)
    assert eos_token_ids(config) == [tok.eos_token_id] == eos_token_ids(config.get_text_config())
    only_text = SimpleNamespace(text_config=SimpleNamespace(eos_token_id=[7, 9]))  # 5.17: no top-level attribute
    assert eos_token_ids(only_text) == [7, 9]
    assert eos_token_ids(SimpleNamespace(eos_token_id=None, text_config=SimpleNamespace(eos_token_id=3))) == [3]
    assert eos_token_ids(SimpleNamespace(eos_token_id=5, text_config=SimpleNamespace(eos_token_id=3))) == [5]
    assert eos_token_ids(SimpleNamespace()) == []
