"""The checkpoint part of a release: weights (LoRA merged, safetensors only), configs and processor files."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from spatialiq_train.errors import UserError
from spatialiq_train.io import atomic_write_json

log = logging.getLogger(__name__)

WEIGHTS_INDEX = "model.safetensors.index.json"
SINGLE_WEIGHTS = "model.safetensors"
UNSAFE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


class ReleaseError(UserError):
    """A run folder cannot be released, or a release folder fails verification; the message says which file."""


def find_model_dir(run: Path) -> Path:
    """The HF checkpoint of a run: ``RUN/final`` (run dapo-tight, train sft|rl) or RUN itself (a converted one)."""
    for candidate in (run / "final", run):
        if (candidate / "config.json").is_file():
            return candidate
    raise ReleaseError(f"{run}: no checkpoint found (looked for {run / 'final' / 'config.json'} and "
                       f"{run / 'config.json'}); pass a `spatialiq run`/`train` output folder or a converted "
                       "Hugging Face checkpoint")


def find_recipe(run: Path, model_dir: Path) -> Path | None:
    """The recipe the run was made with, if it was kept beside the run or the checkpoint."""
    for candidate in (run / "recipe.yaml", model_dir / "training_recipe.yaml", run.parent / "recipe.yaml"):
        if candidate.is_file():
            return candidate
    return None


def _refuse_unsafe(src: Path) -> None:
    unsafe = sorted(p.name for pattern in UNSAFE_WEIGHTS for p in src.glob(pattern) if p.name != "training_args.bin")
    if unsafe and not any(src.glob("*.safetensors")):
        raise ReleaseError(f"{src}: weights only in pickle formats ({', '.join(unsafe)}); this project loads and "
                           "releases safetensors only: save the checkpoint with safe_serialization=True")


def copy_weights(src: Path, dst: Path) -> None:
    """Copy the safetensors weights (and index) byte for byte; a LoRA adapter is merged into its base first."""
    if (src / "adapter_config.json").is_file():
        _merge_adapter(src, dst)
        return
    _refuse_unsafe(src)
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise ReleaseError(f"{src}: no *.safetensors weights to release")
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
    from spatialiq_train.train.export import ExportError, merge_adapter

    try:
        merge_adapter(src, dst)
    except ExportError as exc:
        raise ReleaseError(str(exc)) from None
    if not (dst / WEIGHTS_INDEX).is_file():
        write_single_index(dst / SINGLE_WEIGHTS)


def copy_configs(src: Path, dst: Path, generation: dict[str, Any] | None) -> None:
    """config.json, and generation_config.json (the checkpoint's, else one from the recipe's sampling)."""
    shutil.copy2(src / "config.json", dst / "config.json")
    if (src / "generation_config.json").is_file():
        shutil.copy2(src / "generation_config.json", dst / "generation_config.json")
    elif generation is not None:
        atomic_write_json(dst / "generation_config.json", {"do_sample": True, **generation})


def write_processor(src: Path, dst: Path, min_pixels: int | None, max_pixels: int | None) -> Any:
    """The processor (image processor with the recipe's pixel budget, tokenizer, chat template) saved to ``dst``."""
    from spatialiq_train.processor import load_processor

    processor = load_processor(src, min_pixels=min_pixels, max_pixels=max_pixels)
    processor.save_pretrained(str(dst))
    # transformers 5 folds the image processor into processor_config.json; older readers (and vLLM's image
    # processor lookup) want preprocessor_config.json as well, so a release carries both.
    processor.image_processor.save_pretrained(str(dst))
    if not getattr(processor, "chat_template", None):
        raise ReleaseError(f"{src}: the processor has no chat template; a release must carry one")
    return processor
