"""The checkpoint part of a release: finding the run's checkpoint and recipe, its configs, the stock-processor check
(weights and processor are written by :mod:`spatialiq_train.hf_export`)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import atomic_write_json

log = logging.getLogger(__name__)


class ReleaseError(UserError):
    """A run folder cannot be released, or a release folder fails verification; the message says which file."""


def find_model_dir(run: Path) -> Path:
    """The HF checkpoint of a run: ``RUN/final`` (run dapo-tight, train sft|rl) or RUN itself (a converted one)."""
    for candidate in (run / "final", run):
        if (candidate / "config.json").is_file():
            return candidate
    if (run / "policy" / "weights").is_dir() or any(run.glob("step_*/policy/weights")):
        raise ReleaseError(f"{run}: a NeMo-RL checkpoint, not a Hugging Face one: convert it first (`spatialiq nemo "
                           f"convert --checkpoint {run} --out HF`, which also carries the run's data record), then "
                           "release HF with --run HF")
    raise ReleaseError(f"{run}: no checkpoint found (looked for {run / 'final' / 'config.json'} and "
                       f"{run / 'config.json'}); pass a `spatialiq run`/`train` output folder or a converted "
                       "Hugging Face checkpoint")


def find_recipe(run: Path, model_dir: Path) -> Path | None:
    """The recipe the run was made with, if it was kept beside the run or the checkpoint."""
    for candidate in (run / "recipe.yaml", model_dir / "training_recipe.yaml", run.parent / "recipe.yaml"):
        if candidate.is_file():
            return candidate
    return None


def copy_configs(src: Path, dst: Path, generation: dict[str, Any] | None) -> None:
    """config.json, and generation_config.json (the checkpoint's, else one from the recipe's sampling)."""
    shutil.copy2(src / "config.json", dst / "config.json")
    if (src / "generation_config.json").is_file():
        shutil.copy2(src / "generation_config.json", dst / "generation_config.json")
    elif generation is not None:
        atomic_write_json(dst / "generation_config.json", {"do_sample": True, **generation})


STOCK_NOT_CHECKED = "stock AutoProcessor NOT checked"
"""The start of the note :func:`check_stock_processor` leaves where torchvision is missing."""


def _pixel_values_problem(processor: Any, who: str) -> str | None:
    """None when ``processor`` turns one chat-templated image prompt into ``pixel_values``, else what went wrong."""
    from PIL import Image

    if getattr(processor, "image_processor", None) is None:
        return f"{who} returned a {type(processor).__name__} without an image processor (the image would be dropped)"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many blocks?"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    batch = processor(text=[text], images=[Image.new("RGB", (224, 224), (120, 80, 40))], return_tensors="pt")
    if "pixel_values" not in batch or batch["pixel_values"].numel() == 0:
        return f"{who} gave no pixel_values for a 224x224 image (keys: {', '.join(batch)})"
    return None


def check_stock_processor(folder: Path, notes: list[str]) -> list[str]:
    """Problems loading ``folder``'s processor with STOCK ``transformers.AutoProcessor`` (what a user runs).

    Where torchvision is missing, stock transformers cannot build the processor (it returns a bare tokenizer), so
    the check says so in ``notes`` and instead checks the files name the standard processor and that the project's
    image-only loader yields ``pixel_values``; it never reports the stock load as verified.
    """
    import importlib.util
    import json

    from spatialiq_train.core.processor import STANDARD_CLASS

    config_path = folder / "processor_config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{config_path}: unreadable ({exc})"]
    problems = [f"{config_path}: {key} is missing; save the processor with "
                "spatialiq_train.core.processor.save_processor"
                for key in ("image_processor", "video_processor") if key not in config]
    if config.get("processor_class") != STANDARD_CLASS:
        problems.append(f"{config_path}: processor_class is {config.get('processor_class')!r}, not {STANDARD_CLASS!r}")
    if importlib.util.find_spec("torchvision") is None:
        from spatialiq_train.core.processor import load_processor

        notes.append(f"{STOCK_NOT_CHECKED}: torchvision is not installed here (without it stock "
                     "transformers returns a bare tokenizer); the processor files were checked and the project's "
                     "image-only loader yields pixel_values. Install torchvision and rerun --verify to check the "
                     "stock load")
        problem = _pixel_values_problem(load_processor(folder), "the image-only loader")
        return problems + ([f"{folder}: {problem}"] if problem else [])
    from transformers import AutoProcessor

    problem = _pixel_values_problem(AutoProcessor.from_pretrained(str(folder)), "stock AutoProcessor")
    if problem is None:
        notes.append("stock AutoProcessor loads the processor and yields pixel_values for an image")
    return problems + ([f"{folder}: {problem}"] if problem else [])
