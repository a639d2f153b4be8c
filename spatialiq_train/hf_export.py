"""A checkpoint folder in the Hugging Face layout, written from another: what the TRL export, ``spatialiq release``
and ``spatialiq nemo convert`` share.

Safetensors weights are copied byte for byte (a LoRA adapter is merged into its base model first, in this
process), a one-file checkpoint gets the sharded layout's index, and the processor is saved with the recipe's
pixel budget and a chat template. Pickle-only weights are refused. Heavy libraries (peft, transformers,
safetensors) are imported inside the functions that need them.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import atomic_write_json

log = logging.getLogger(__name__)

WEIGHTS_INDEX = "model.safetensors.index.json"
SINGLE_WEIGHTS = "model.safetensors"
UNSAFE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


class ExportError(UserError):
    """A checkpoint that cannot be exported (no safetensors weights, an adapter that cannot be merged, a processor
    without a chat template); the message names the file."""


def merge_adapter(adapter_dir: str | Path, dst: str | Path, base_path: str | None = None) -> Path:
    """Load the base model and the adapter saved in `adapter_dir` in this process, merge, save safetensors to `dst`.

    `base_path` defaults to the adapter's `base_model_name_or_path`."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    src, out = Path(adapter_dir), Path(dst)
    config = src / "adapter_config.json"
    if not config.is_file():
        raise ExportError(f"{src}: no adapter_config.json (not a saved LoRA adapter)")
    base_path = base_path or json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base_path:
        raise ExportError(f"{config}: no base_model_name_or_path to merge the adapter into")
    base = AutoModelForImageTextToText.from_pretrained(base_path, use_safetensors=True)
    merged = PeftModel.from_pretrained(base, str(src)).merge_and_unload()
    merged.save_pretrained(str(out), safe_serialization=True)
    log.info("merged the LoRA adapter of %s into %s -> %s", src, base_path, out)
    return out


def _refuse_unsafe(src: Path) -> None:
    unsafe = sorted(p.name for pattern in UNSAFE_WEIGHTS for p in src.glob(pattern) if p.name != "training_args.bin")
    if unsafe and not any(src.glob("*.safetensors")):
        raise ExportError(f"{src}: weights only in pickle formats ({', '.join(unsafe)}); this project loads and "
                          "releases safetensors only: save the checkpoint with safe_serialization=True")


def copy_weights(src: Path, dst: Path) -> None:
    """Copy the safetensors weights (and index) byte for byte; a LoRA adapter is merged into its base first."""
    if (src / "adapter_config.json").is_file():
        _merge_adapter(src, dst)
        return
    _refuse_unsafe(src)
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise ExportError(f"{src}: no *.safetensors weights to release")
    for f in files:
        shutil.copy2(f, dst / f.name)
    if (src / WEIGHTS_INDEX).is_file():
        shutil.copy2(src / WEIGHTS_INDEX, dst / WEIGHTS_INDEX)
    else:
        write_single_index(dst / SINGLE_WEIGHTS)


def write_single_index(weights: Path) -> None:
    """An index for a one-file checkpoint, so every release has the sharded layout's index."""
    from safetensors import safe_open

    with safe_open(str(weights), framework="np") as fh:
        names = sorted(fh.keys())
    index = {"metadata": {"total_size": weights.stat().st_size}, "weight_map": dict.fromkeys(names, weights.name)}
    atomic_write_json(weights.with_name(WEIGHTS_INDEX), index)


def _merge_adapter(src: Path, dst: Path) -> None:
    """Load base + adapter in one process (no ZeRO partitioning here), merge, save as safetensors shards."""
    merge_adapter(src, dst)
    if not (dst / WEIGHTS_INDEX).is_file():
        write_single_index(dst / SINGLE_WEIGHTS)


def write_processor(src: Path, dst: Path, min_pixels: int | None, max_pixels: int | None) -> Any:
    """The processor (image processor with the recipe's pixel budget, tokenizer, chat template) saved to ``dst``."""
    from spatialiq_train.core.processor import load_processor, save_processor

    processor = load_processor(src, min_pixels=min_pixels, max_pixels=max_pixels)
    save_processor(processor, dst)
    # transformers 5 folds the image processor into processor_config.json; older readers (and vLLM's image
    # processor lookup) want preprocessor_config.json as well, so a release carries both.
    processor.image_processor.save_pretrained(str(dst))
    if not getattr(processor, "chat_template", None):
        raise ExportError(f"{src}: the processor has no chat template; a release must carry one")
    return processor


def eos_token_ids(config: Any) -> list[int]:
    """The end-of-sequence token ids of a model config, wherever the installed transformers keeps them.

    A Qwen2.5-VL config holds them at its top level under some transformers 5.x releases and only in its
    `text_config` under others (5.17 has no top-level `eos_token_id` attribute at all), so the top level is read
    when it has a value, else the text config; a single id comes back as a one-element list, none as []."""
    value = getattr(config, "eos_token_id", None)
    if value is None:
        text = config.get_text_config() if hasattr(config, "get_text_config") else getattr(config, "text_config", None)
        value = getattr(text, "eos_token_id", None) if text is not None and text is not config else None
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list | tuple) else [int(value)]
