"""Trace rows (from `spatialiq traces`) -> NeMo-RL v0.7.0 ``DatumSpec`` dicts, for GRPO and for SFT.

NeMo-RL calls a task data processor as ``fn(datum_dict, task_data_spec, processor, max_seq_length, idx)`` and
expects a ``DatumSpec``: ``message_log`` (one dict per chat turn: ``role``, ``content``, ``token_ids`` and, on the
turn holding the images, the processor's multimodal tensors), ``length``, ``extra_env_info`` (what the reward
environment gets as metadata), ``loss_multiplier``, ``idx``, ``task_name`` and, for rollouts, ``vllm_content``
(the prompt string) and ``vllm_images``. :class:`DatumProcessor` is that callable for our rows.

The chat is the TRL path's, turn for turn: the typed parts of :func:`spatialiq_train.core.traces.trace_to_example`
with each image placeholder filled in order, as TRL's ``prepare_multimodal_messages`` fills them. NeMo-RL loads its
processor with the model's default pixel budget and vLLM runs its own image processing, so every image is resized
here with :func:`spatialiq_train.core.processor.resize_to_budget` to the recipe's budget: both sides then see a size
their processors keep, and the image-token count is the one the TRL path gets (checked per datum).

Everything stays a plain dict of CPU tensors. Inside NeMo-RL the multimodal tensors are wrapped in its
``PackedTensor``; without NeMo-RL (tests) they stay bare tensors.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.traces import Mode, TraceError, load_examples

log = logging.getLogger(__name__)

TASK_NAME = "spatialiq"
"""The NeMo-RL task name of every datum; the driver maps it to the reward environment."""
_ROW_KEYS = ("prompt", "completion", "images", "task_name")
"""Keys of a dataset row that are not ground truth (everything else goes to ``extra_env_info``)."""
_SEQUENCE_KEYS = ("token_type_ids", "mm_token_type_ids")
"""Processor outputs with one value per token: kept as plain tensors on every turn, not packed."""


class DatumError(UserError):
    """A trace row or image that cannot become a NeMo-RL datum; the message names the row or file."""


def load_rows(traces_dir: str | Path, split: str, data_root: str | Path, mode: Mode,
              limit: int | None = None) -> list[dict[str, Any]]:
    """``<traces_dir>/<split>.jsonl`` as dataset rows: the TRL example (absolute image paths) plus ``task_name``.

    Rows are checked here, at startup (``spatialiq_train.core.traces.load_examples``, the reader the TRL path uses): a
    bad row, or an image path escaping ``data_root``, raises naming the file and line. RL skips rows without an integer
    ``answer`` (they are not prompts with a verifiable answer).
    """
    try:
        examples = load_examples(traces_dir, split, data_root, mode, limit)
    except TraceError as exc:
        raise DatumError(exc.message) from None
    return [{**example, "task_name": TASK_NAME} for example in examples]


def chat_messages(example: dict[str, Any], images: Sequence[Any], mode: Mode) -> list[dict[str, Any]]:
    """The conversation as TRL renders it: the example's typed parts, each image placeholder filled in order.

    ``images`` are the opened images of ``example["images"]`` (one per placeholder, as
    ``spatialiq_train.core.traces`` wrote them); an RL datum leaves the completion out.
    """
    turns = list(example["prompt"]) + (list(example.get("completion") or []) if mode == "sft" else [])
    slots = sum(part["type"] == "image" for turn in turns for part in turn["content"])
    if slots != len(images):
        raise DatumError(f"the row has {slots} image placeholders and {len(images)} images; "
                         "rows come from spatialiq_train.core.traces.load_examples, which keeps them equal")
    pending = iter(images)
    return [{"role": turn["role"],
             "content": [{"type": "image", "image": next(pending)} if part["type"] == "image"
                         else {"type": "text", "text": part["text"]} for part in turn["content"]]}
            for turn in turns]


def open_images(paths: Sequence[str], data_root: str | Path, min_pixels: int, max_pixels: int) -> list[Any]:
    """Each image opened as RGB and resized to the recipe's budget; paths must be absolute and inside the root."""
    from PIL import Image

    from spatialiq_train.core.processor import resize_to_budget

    root = Path(data_root).resolve()
    images = []
    for p in paths:
        path = Path(p)
        if not path.is_absolute():
            raise DatumError(f"image path {p!r} is relative; the dataset rows hold absolute paths under {root}")
        full = path.resolve()
        if root not in full.parents:
            raise DatumError(f"image path {p!r} escapes the dataset root {root}")
        try:
            with Image.open(full) as im:
                rgb = im.convert("RGB")
        except OSError as exc:
            raise DatumError(f"{full}: cannot read the image ({exc})") from None
        images.append(resize_to_budget(rgb, min_pixels, max_pixels))
    return images


def render_turns(processor: Any, messages: list[dict[str, Any]]) -> list[str]:
    """Each turn's slice of the rendered chat; a user turn followed by an assistant turn (or last) carries the
    generation prompt, so an SFT target's tokens are only its content and end-of-turn, as TRL trains them."""
    chunks: list[str] = []
    rendered = ""
    for i, msg in enumerate(messages):
        nxt = messages[i + 1]["role"] if i + 1 < len(messages) else None
        gen = msg["role"] == "user" and nxt in (None, "assistant")
        full = processor.apply_chat_template(messages[: i + 1], tokenize=False, add_generation_prompt=gen)
        if not full.startswith(rendered):
            raise DatumError(f"the chat template does not render turn {i + 1} ({msg['role']}) as an extension of "
                             "the turns before it; NeMo-RL needs one token slice per turn")
        chunks.append(full[len(rendered):])
        rendered = full
    return chunks


@functools.cache
def _packed_tensor_api() -> tuple[Any, Any] | None:
    try:
        from nemo_rl.data.multimodal_utils import PackedTensor, get_dim_to_pack_along
    except ImportError:
        return None
    return PackedTensor, get_dim_to_pack_along


def pack(processor: Any, key: str, value: Any) -> Any:
    """NeMo-RL's ``PackedTensor`` around a multimodal tensor when NeMo-RL is importable, else the tensor."""
    api = _packed_tensor_api()
    if api is None:
        return value
    packed_tensor, dim_of = api
    return packed_tensor(value, dim_to_pack=dim_of(processor, key))


def tokenize_turn(processor: Any, text: str, images: Sequence[Any]) -> dict[str, Any]:
    """``token_ids`` and the multimodal tensors of one turn's text (the turn holding the images gets them)."""
    import torch

    if images:
        out = processor(text=[text], images=list(images), return_tensors="pt", add_special_tokens=False)
    else:
        out = processor.tokenizer(text, return_tensors="pt", add_special_tokens=False)
    fields: dict[str, Any] = {"token_ids": out["input_ids"][0].to(torch.int64)}
    for key, value in out.items():
        if key in ("input_ids", "attention_mask"):
            continue
        fields[key] = value[0] if key in _SEQUENCE_KEYS else pack(processor, key, value)
    return fields


def image_token_id(processor: Any) -> int:
    token = getattr(processor, "image_token", None) or "<|image_pad|>"
    return int(processor.tokenizer.convert_tokens_to_ids(token))


def check_image_tokens(processor: Any, token_ids: Any, images: Sequence[Any], where: str) -> int:
    """The image-token count, refused unless it is the one the recipe's budget gives (the TRL path's count)."""
    from spatialiq_train.core.processor import FACTOR

    expected = sum((im.height // FACTOR) * (im.width // FACTOR) for im in images)
    got = int((token_ids == image_token_id(processor)).sum())
    if got != expected:
        raise DatumError(f"{where}: {got} image tokens where the recipe's pixel budget gives {expected}; the "
                         "processor resized the already-resized images again (its min_pixels/max_pixels do not "
                         "contain the recipe's budget)")
    return got


def _build_log(processor: Any, messages: list[dict[str, Any]], images: Sequence[Any]) -> list[dict[str, Any]]:
    import torch

    message_log = []
    for msg, chunk in zip(messages, render_turns(processor, messages), strict=True):
        holds_images = msg["role"] == "user" and any(p.get("type") == "image" for p in msg["content"])
        message_log.append({"role": msg["role"], "content": chunk,
                            **tokenize_turn(processor, chunk, images if holds_images else ())})
    seq_keys = {k for m in message_log for k in _SEQUENCE_KEYS if k in m}
    for m in message_log:  # per-token fields must cover every turn, or their concatenation misaligns
        for key in seq_keys - m.keys():
            m[key] = torch.zeros_like(m["token_ids"])
    return message_log


def _mask_out(message_log: list[dict[str, Any]], max_seq_length: int) -> None:
    """NeMo-RL's treatment of an over-long sample: a few tokens per turn, empty media, loss multiplier 0."""
    keep = min(4, max_seq_length // len(message_log))
    for m in message_log:
        m["token_ids"] = m["token_ids"][:keep]
        for key in list(m):
            if key in _SEQUENCE_KEYS:
                m[key] = m[key][:keep]
            elif key not in ("role", "content", "token_ids"):
                value = m[key]
                m[key] = type(value).empty_like(value) if hasattr(value, "tensors") else value[:0]


@dataclass(frozen=True)
class DatumProcessor:
    """NeMo-RL's ``TaskDataProcessFnCallable`` for our rows (picklable, for dataloader workers)."""

    data_root: str
    min_pixels: int
    max_pixels: int
    mode: Mode = "rl"

    def __call__(self, datum_dict: dict[str, Any], task_data_spec: Any, processor: Any,
                 max_seq_length: int | None, idx: int) -> dict[str, Any]:
        where = f"dataset row {idx}"
        images = open_images(datum_dict.get("images") or [], self.data_root, self.min_pixels, self.max_pixels)
        messages = chat_messages(datum_dict, images, self.mode)
        message_log = _build_log(processor, messages, images)
        user = next(m for m in message_log if m["role"] == "user")
        check_image_tokens(processor, user["token_ids"], images, where)
        length = sum(len(m["token_ids"]) for m in message_log)
        datum: dict[str, Any] = {
            "message_log": message_log,
            "length": length,
            "extra_env_info": ground_truth(datum_dict) if self.mode == "rl" else None,
            "loss_multiplier": 1.0,
            "idx": idx,
            "task_name": datum_dict.get("task_name", TASK_NAME),
        }
        too_long = max_seq_length is not None and length >= max_seq_length
        if too_long:
            log.warning("%s: %d tokens >= max_seq_length %d; masked out (loss multiplier 0)", where, length,
                        max_seq_length)
            _mask_out(message_log, max_seq_length)
            datum["loss_multiplier"] = 0.0
        if self.mode == "rl":
            prompt = "".join(m["content"] for m in message_log)
            datum["vllm_content"] = None if too_long else prompt
            datum["vllm_images"] = [] if too_long else images
        return datum


def ground_truth(row: dict[str, Any]) -> dict[str, Any]:
    """The reward environment's metadata: ``answer``, ``task_id``, ``structure_id`` and the ground-truth fields."""
    if "answer" not in row:
        raise DatumError(f"row has no 'answer' (keys: {sorted(row)}); RL rows need the integer answer")
    return {k: v for k, v in row.items() if k not in _ROW_KEYS}


def datum_processor(data_root: str | Path, min_pixels: int, max_pixels: int, mode: Mode) -> Callable[..., Any]:
    """The processor for one dataset, with the root resolved once."""
    from spatialiq_train.core.processor import check_budget

    check_budget(min_pixels, max_pixels)
    return DatumProcessor(str(Path(data_root).resolve()), int(min_pixels), int(max_pixels), mode)
