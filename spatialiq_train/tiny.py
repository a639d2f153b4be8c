"""A tiny Qwen2.5-VL built offline: byte-level BPE tokenizer, the standard processor and random weights.

Used by the CPU tests and the demo recipe (`recipes/tiny_cpu.yaml`). Nothing is downloaded: the tokenizer is
trained on an in-memory corpus of the project's own prompts, the model is built from a config and saved with
safetensors. See ../shared/docs/notes/cpu-feasibility.md section 2 for the recipe and the processor workaround.

Attention heads are 32 wide (text: hidden 64 / 2 heads; vision: hidden 32 / 1 head): vLLM's CPU attention takes
head sizes 32, 64, 80, ... (16 is refused: "Unsupported CPU attention configuration") and its GPU FlashAttention
backend 32 to 256, so the same tiny model runs on every engine. ``mrope_section`` sums to head_dim / 2 = 16.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from spatialiq_train.core.prompts import (
    COT_SYSTEM_PROMPT,
    COT_TARGET_TEMPLATE,
    TRAINING_CRITICAL_INSTRUCTION,
    TRAINING_DEFINITIONS,
    TRAINING_QUESTIONS,
)

log = logging.getLogger(__name__)

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
"""Qwen2.5-VL special tokens; they get ids 0..6 in this order."""

TINY_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6]},
}
TINY_VISION = {
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 1,
    "out_hidden_size": 64,
    "fullatt_block_indexes": [1],
    "window_size": 112,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}


def _corpus(extra: list[str] | None = None) -> list[str]:
    # the whole training prompt (instruction, definitions, questions), so that its words are single tokens: the
    # prompt is about 300 tokens instead of 720, which makes every tiny forward pass about twice as fast
    lines = [TRAINING_CRITICAL_INSTRUCTION, TRAINING_DEFINITIONS, *TRAINING_QUESTIONS.values(), COT_SYSTEM_PROMPT,
             COT_TARGET_TEMPLATE]
    lines += [f"<answer>{i}</answer>" for i in range(100)]
    lines += ["system", "user", "assistant", "You are a helpful assistant.", "How many blocks are there?"]
    return lines + list(extra or [])


def build_tokenizer(extra_corpus: list[str] | None = None, vocab_size: int = 1024) -> Any:
    """Train a byte-level BPE on the project's prompt strings and wrap it with the Qwen2.5-VL chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_vl_chat_template

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(extra_corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
        padding_side="left",
    )
    fast.chat_template = qwen2_5_vl_chat_template
    return fast


def build_image_processor(min_pixels: int = 56 * 56, max_pixels: int = 448 * 448) -> Any:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )


def build_processor(tokenizer: Any, image_processor: Any | None = None) -> Any:
    """The standard Qwen2.5-VL processor (with its video processor) where torchvision is installed, else the
    explicitly image-only subclass; :func:`spatialiq_train.core.processor.save_processor` writes the same standard files
    from either."""
    from spatialiq_train.core.processor import image_only_processor_class, video_processor_config

    image_processor = image_processor or build_image_processor()
    try:
        from transformers import Qwen2_5_VLProcessor
        from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

        config = video_processor_config(image_processor)
        config.pop("video_processor_type")
        video = Qwen2VLVideoProcessor(**config)
        return Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video,
                                   chat_template=tokenizer.chat_template)
    except ImportError as exc:
        log.debug("video processor unavailable (%s); building the image-only processor", exc)
        cls = image_only_processor_class()
        return cls(image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template)


def token_ids(tokenizer: Any) -> dict[str, int]:
    """The ids a Qwen2.5-VL config needs, read from the tokenizer."""
    conv = tokenizer.convert_tokens_to_ids
    return {
        "image_token_id": conv("<|image_pad|>"),
        "video_token_id": conv("<|video_pad|>"),
        "vision_start_token_id": conv("<|vision_start|>"),
        "vision_end_token_id": conv("<|vision_end|>"),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.pad_token_id,
    }


def build_config(tokenizer: Any, text: dict[str, Any] | None = None, vision: dict[str, Any] | None = None) -> Any:
    """Qwen2.5-VL config: the tiny dimensions unless `text` / `vision` override them (e.g. QWEN25_VL_7B)."""
    from transformers import Qwen2_5_VLConfig

    ids = token_ids(tokenizer)
    text_cfg = {**TINY_TEXT, "vocab_size": len(tokenizer), **(text or {})}
    for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
        text_cfg[key] = ids[key]
    return Qwen2_5_VLConfig(text_config=text_cfg, vision_config={**TINY_VISION, **(vision or {})}, **ids)


def build_model(tokenizer: Any, seed: int = 0, dtype: Any = None, device: str | None = None,
                **config_overrides: Any) -> Any:
    """A randomly initialised Qwen2.5-VL (float32 unless `dtype`, built on `device`) with ids and generation
    config set from the tokenizer."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    try:
        if dtype is not None:
            torch.set_default_dtype(dtype)
        with torch.device(device or "cpu"):
            model = Qwen2_5_VLForConditionalGeneration(build_config(tokenizer, **config_overrides))
    finally:
        torch.set_default_dtype(previous)
    ids = token_ids(tokenizer)
    for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
        setattr(model.generation_config, key, ids[key])
    return model


def save_tiny(out_dir: str | Path, seed: int = 0) -> Path:
    """Build tokenizer, processor and model and save all three (safetensors, standard processor files) under
    `out_dir`."""
    from spatialiq_train.core.processor import save_processor

    out = Path(out_dir)
    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer)
    model = build_model(tokenizer, seed=seed)
    # Save beside the target, then rename: an interrupted build never leaves a half-written model folder.
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    model.save_pretrained(str(partial), safe_serialization=True)
    save_processor(processor, partial)
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("tiny Qwen2.5-VL (%d parameters) saved to %s", n_params, out)
    return out


QWEN25_VL_7B: dict[str, dict[str, Any]] = {
    "text": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    },
    "vision": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "window_size": 112,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}
"""Qwen2.5-VL-7B-Instruct dimensions (its published config.json), for random-weight benchmarks."""
