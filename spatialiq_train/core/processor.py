"""The one processor loader, and the pixel-budget arithmetic every engine shares.

Qwen2.5-VL resizes each image to multiples of 28 pixels inside ``[min_pixels, max_pixels]`` and then emits one
image token per 28x28 block. The trainer, vLLM and NeMo-RL must see the same image-token count for the same view,
so every side either loads its processor through :func:`load_processor` with the recipe's budget, or receives
images already resized by :func:`resize_to_budget` (a resize to the processor's own target size is a no-op for it).

Every processor the project writes goes through :func:`save_processor`: the standard ``Qwen2_5_VLProcessor`` files
(image processor, video processor, tokenizer, chat template) that stock ``AutoProcessor`` and vLLM load, written
even where torchvision (which the video processor needs in memory) is absent -- the files are JSON.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path
from typing import Any

from spatialiq_train.core.errors import UserError

log = logging.getLogger(__name__)

PATCH = 14
"""Qwen2.5-VL vision patch size (pixels)."""
MERGE = 2
"""Patches merged per side into one image token."""
FACTOR = PATCH * MERGE
"""Image sides are rounded to multiples of this (28 pixels)."""
MAX_ASPECT = 200
"""Qwen2.5-VL refuses images whose longer side exceeds this multiple of the shorter."""


class ProcessorError(UserError):
    """A processor folder that cannot be loaded, or a pixel budget that cannot hold an image."""


def check_budget(min_pixels: int, max_pixels: int) -> None:
    """Refuse a budget no image fits in, naming both bounds."""
    if min_pixels < FACTOR * FACTOR or max_pixels < min_pixels:
        raise ProcessorError(
            f"pixel budget min_pixels={min_pixels}, max_pixels={max_pixels} is invalid: need "
            f"{FACTOR * FACTOR} <= min_pixels <= max_pixels")


def target_size(height: int, width: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) Qwen2.5-VL resizes a ``height`` x ``width`` image to under this pixel budget.

    Both sides become multiples of 28, the area stays inside ``[min_pixels, max_pixels]`` and the aspect ratio is
    kept as closely as the rounding allows (the ``smart_resize`` rule of the Qwen2-VL image processors).
    """
    if height < 1 or width < 1:
        raise ProcessorError(f"an image of {width}x{height} pixels has no area")
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise ProcessorError(f"an image of {width}x{height} pixels is more than {MAX_ASPECT}:1; Qwen2.5-VL refuses it")
    check_budget(min_pixels, max_pixels)
    h, w = round(height / FACTOR) * FACTOR, round(width / FACTOR) * FACTOR
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / FACTOR) * FACTOR
        w = math.ceil(width * beta / FACTOR) * FACTOR
    return h, w


def tokens_for(height: int, width: int, min_pixels: int, max_pixels: int) -> int:
    """Image tokens Qwen2.5-VL spends on a ``height`` x ``width`` image under this budget."""
    h, w = target_size(height, width, min_pixels, max_pixels)
    return (h // FACTOR) * (w // FACTOR)


def budget_of(processor: Any) -> tuple[int, int]:
    """(min_pixels, max_pixels) a loaded processor applies."""
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None:
        raise ProcessorError("this processor has no image processor (a tokenizer was loaded instead)")
    size = getattr(image_processor, "size", None) or {}
    get = size.get if isinstance(size, dict) else (lambda k: getattr(size, k, None))
    lo = getattr(image_processor, "min_pixels", None) or get("shortest_edge")
    hi = getattr(image_processor, "max_pixels", None) or get("longest_edge")
    if not lo or not hi:
        raise ProcessorError("this image processor sets no min_pixels/max_pixels budget")
    return int(lo), int(hi)


def image_token_count(height: int, width: int, processor: Any) -> int:
    """Image tokens ``processor`` emits for a ``height`` x ``width`` image."""
    return tokens_for(height, width, *budget_of(processor))


def resize_to_budget(image: Any, min_pixels: int, max_pixels: int) -> Any:
    """A PIL image resized (bicubic, RGB) to the size the processor would choose; unchanged when already there."""
    h, w = target_size(image.height, image.width, min_pixels, max_pixels)
    if image.mode != "RGB":
        image = image.convert("RGB")
    if (image.height, image.width) == (h, w):
        return image
    from PIL import Image

    return image.resize((w, h), Image.Resampling.BICUBIC)


def apply_pixel_budget(processor: Any, min_pixels: int | None, max_pixels: int | None) -> Any:
    """Set the image processor's budget in place (both the ``size`` dict and the legacy attributes); returns it."""
    if min_pixels is None and max_pixels is None:
        return processor
    lo, hi = budget_of(processor) if (min_pixels is None or max_pixels is None) else (min_pixels, max_pixels)
    lo, hi = int(min_pixels if min_pixels is not None else lo), int(max_pixels if max_pixels is not None else hi)
    check_budget(lo, hi)
    image_processor = processor.image_processor
    image_processor.size = {"shortest_edge": lo, "longest_edge": hi}
    for attr, value in (("min_pixels", lo), ("max_pixels", hi)):
        if hasattr(image_processor, attr):
            setattr(image_processor, attr, value)
    return processor


def image_only_processor_class() -> type:
    """Qwen2.5-VL's processor class without the video processor, for machines without torchvision."""
    from transformers import Qwen2_5_VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class Qwen2_5_VLImageOnlyProcessor(Qwen2_5_VLProcessor):
        """Qwen2.5-VL processor without the video processor (which needs torchvision)."""

        attributes = ["image_processor", "tokenizer"]

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):  # noqa: ANN001
            self.image_token = getattr(tokenizer, "image_token", "<|image_pad|>")
            self.video_token = getattr(tokenizer, "video_token", "<|video_pad|>")
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return Qwen2_5_VLImageOnlyProcessor


STANDARD_CLASS = "Qwen2_5_VLProcessor"
"""The processor class every saved checkpoint names (``processor_config.json`` and ``tokenizer_config.json``)."""
VIDEO_PROCESSOR_TYPE = "Qwen2VLVideoProcessor"
"""Qwen2.5-VL's video processor class; only its type and the patch geometry are written, the rest are its defaults."""


def video_processor_config(image_processor: Any) -> dict[str, Any]:
    """The video processor entry of a standard Qwen2.5-VL ``processor_config.json``, matching the image processor's
    patch geometry and normalisation (the project never sends video; vLLM and AutoProcessor need the entry)."""
    config: dict[str, Any] = {"video_processor_type": VIDEO_PROCESSOR_TYPE}
    for key in ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std"):
        value = getattr(image_processor, key, None)
        if value is not None:
            config[key] = list(value) if isinstance(value, tuple) else value
    return config


def _rewrite_json(path: Path, update: Any) -> None:
    from spatialiq_train.core.io import atomic_write_text

    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    update(data)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def save_processor(processor: Any, dst: str | Path) -> Path:
    """Save ``processor`` to ``dst`` as a standard ``Qwen2_5_VLProcessor`` (stock AutoProcessor and vLLM load it).

    An image-only processor (built where torchvision is missing) is saved with the standard class name and a video
    processor entry, so the folder is the same whichever machine wrote it.
    """
    out = Path(dst)
    if getattr(processor, "image_processor", None) is None:
        raise ProcessorError(f"{out}: refusing to save a processor without an image processor")
    processor.save_pretrained(str(out))

    def fix_processor(data: dict[str, Any]) -> None:
        data["processor_class"] = STANDARD_CLASS
        data.setdefault("video_processor", video_processor_config(processor.image_processor))

    def fix_tokenizer(data: dict[str, Any]) -> None:
        data["processor_class"] = STANDARD_CLASS

    _rewrite_json(out / "processor_config.json", fix_processor)
    if (out / "tokenizer_config.json").is_file():
        _rewrite_json(out / "tokenizer_config.json", fix_tokenizer)
    return out


def _video_processor_missing(exc: BaseException) -> bool:
    """True when loading failed only because the video processor needs torchvision (absent on CPU machines)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(word in text for word in ("torchvision", "video"))


_WARNED: list[bool] = []


def _warn_image_only(exc: BaseException) -> None:
    """Say once per process, in one line of our own, that the image-only processor is in use (the full one needs
    torchvision). transformers' own five-line notice (which ends "you may need to restart your runtime", advice
    for notebooks that is wrong for a command) is not repeated: only the first line of a non-torchvision cause."""
    if not _WARNED:
        _WARNED.append(True)
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        cause = ("torchvision is not installed" if "torchvision" in str(exc).lower()
                 else f"{type(exc).__name__}: {first}")
        log.warning("the full Qwen2.5-VL processor needs torchvision (%s); using the image-only processor: "
                    "images are processed the same, video is refused", cause)


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def _check_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise ProcessorError(f"{folder}: no such checkpoint folder (expected a saved model with its processor, "
                             "or a hub id of the form org/name)")
    if not (folder / "preprocessor_config.json").is_file() and not (folder / "processor_config.json").is_file():
        raise ProcessorError(f"{folder}: no preprocessor_config.json or processor_config.json; save the processor "
                             "beside the model (processor.save_pretrained)")


def load_processor(path: str | Path, min_pixels: int | None = None, max_pixels: int | None = None) -> Any:
    """The Qwen2.5-VL processor saved at ``path`` (a folder, or a hub id), with the given pixel budget applied.

    Falls back to an image-only processor (no video processor) only when the full one fails for want of
    torchvision; any other failure is raised with the folder named. Never returns a bare tokenizer.
    """
    folder = Path(path)
    if folder.exists() or not _HUB_ID.fullmatch(str(path)) or str(path).startswith((".", "/", "~")):
        _check_folder(folder)
    from transformers import Qwen2_5_VLProcessor

    try:
        processor = Qwen2_5_VLProcessor.from_pretrained(str(folder))
    except (ImportError, ValueError, TypeError, AttributeError, OSError) as exc:
        if not _video_processor_missing(exc):
            raise ProcessorError(f"{folder}: the Qwen2.5-VL processor does not load ({type(exc).__name__}: {exc})") \
                from exc
        _warn_image_only(exc)
        try:
            processor = image_only_processor_class().from_pretrained(str(folder))
        except (ImportError, ValueError, TypeError, AttributeError, OSError) as exc2:
            raise ProcessorError(f"{folder}: the processor does not load ({type(exc2).__name__}: {exc2})") from exc2
    if getattr(processor, "image_processor", None) is None:
        raise ProcessorError(f"{folder}: loaded without an image processor; is this a vision-language checkpoint?")
    return apply_pixel_budget(processor, min_pixels, max_pixels)
