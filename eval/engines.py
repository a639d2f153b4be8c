"""Generation engines for :mod:`eval.sample`: vLLM (GPU, batched, tensor parallel) and transformers (CPU).

Both are imported lazily: constructing an engine is the first point that touches torch, transformers
or vLLM. Messages follow the Qwen2.5-VL chat format: optional system turn, then one user turn holding
the image(s) followed by the prompt text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from eval.sample import Request, SamplingConfig

log = logging.getLogger(__name__)

EngineName = Literal["auto", "vllm", "transformers"]


def _messages(req: Request) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": [{"type": "text", "text": req.system}]})
    content: list[dict[str, Any]] = [{"type": "image"} for _ in req.images]
    content.append({"type": "text", "text": req.prompt})
    messages.append({"role": "user", "content": content})
    return messages


def _images(req: Request) -> list[Any]:
    import io

    from PIL import Image

    images = []
    for source in req.images:
        if isinstance(source, bytes):
            with Image.open(io.BytesIO(source)) as im:
                images.append(im.convert("RGB"))
            continue
        if not Path(source).is_file():
            raise FileNotFoundError(f"{source}: image missing for {req.view} {req.task}")
        with Image.open(source) as im:
            images.append(im.convert("RGB"))
    return images


def load_processor(model_path: str | Path) -> Any:
    """The model's processor (the project's loader when present, which copes with image-only processors)."""
    try:
        from spatialiq_train.tiny import load_processor as project_loader
    except ImportError:
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(str(model_path))
    return project_loader(model_path)


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def generate_kwargs(config: SamplingConfig, n: int) -> dict[str, Any]:
    """``model.generate`` decoding arguments for ``n`` completions; temperature 0 means greedy, as in vLLM.

    Sampling: ``top_k=0`` and ``repetition_penalty=1.0`` override a checkpoint's generation_config
    (Qwen2.5-VL ships top_k=1, repetition_penalty=1.05), so the recipe is plain temperature/top-p
    sampling. Greedy: ``do_sample=False`` without temperature/top_p/top_k (transformers rejects
    ``temperature=0`` with sampling) and one sequence, since greedy decoding cannot return several.
    """
    common: dict[str, Any] = {"repetition_penalty": 1.0, "max_new_tokens": config.max_new_tokens}
    if config.temperature > 0:
        return {**common, "do_sample": True, "temperature": config.temperature, "top_p": config.top_p, "top_k": 0,
                "num_return_sequences": n}
    return {**common, "do_sample": False, "num_return_sequences": 1}


class TransformersEngine:
    """CPU (or single-GPU) sampling with ``generate(do_sample=True, num_return_sequences=n)``.

    At temperature 0 it decodes greedily once and repeats that completion for every requested sample.
    """

    def __init__(self, model_path: str | Path, device: str = "cpu", dtype: str = "auto") -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        self.device = device
        self.processor = load_processor(model_path)
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
        self.model = AutoModelForImageTextToText.from_pretrained(str(model_path), dtype=torch_dtype)
        self.model.to(device).eval()

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> list[list[str]]:
        import torch

        outputs = []
        for req in requests:
            text = self.processor.apply_chat_template(_messages(req), tokenize=False, add_generation_prompt=True)
            images = _images(req)
            inputs = self.processor(text=[text], images=images or None, return_tensors="pt").to(self.device)
            torch.manual_seed(req.seed)
            kwargs = generate_kwargs(config, len(req.samples))
            with torch.no_grad():
                out = self.model.generate(**inputs, **kwargs)
            new_tokens = out[:, inputs["input_ids"].shape[1]:]
            texts = self.processor.batch_decode(new_tokens, skip_special_tokens=True)
            if not kwargs["do_sample"]:
                texts = texts[:1] * len(req.samples)
            outputs.append(texts)
        return outputs


class VLLMEngine:
    """Batched GPU sampling with ``SamplingParams(n=k, ...)``; ``tensor_parallel_size`` > 1 for 32B."""

    def __init__(self, model_path: str | Path, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise RuntimeError(
                "the vllm engine needs vLLM, which is not installed here; install it on a GPU node "
                "(pip install 'spatialiq-train[gpu]') or use --engine transformers") from exc
        self.processor = load_processor(model_path)
        kwargs: dict[str, Any] = {"model": str(model_path), "tensor_parallel_size": tensor_parallel_size,
                                  "gpu_memory_utilization": gpu_memory_utilization,
                                  "limit_mm_per_prompt": {"image": 2}}
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.llm = LLM(**kwargs)

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> list[list[str]]:
        from vllm import SamplingParams

        prompts, params = [], []
        for req in requests:
            text = self.processor.apply_chat_template(_messages(req), tokenize=False, add_generation_prompt=True)
            prompts.append({"prompt": text, "multi_modal_data": {"image": _images(req)}})
            params.append(SamplingParams(n=len(req.samples), temperature=config.temperature, top_p=config.top_p,
                                         max_tokens=config.max_new_tokens, seed=req.seed))
        results = self.llm.generate(prompts, params, use_tqdm=False)
        return [[o.text for o in r.outputs] for r in results]


def make_engine(name: EngineName, model_path: str | Path, *, tensor_parallel_size: int = 1, device: str = "cpu",
                dtype: str = "auto") -> TransformersEngine | VLLMEngine:
    """``auto`` picks vLLM when it is installed, else transformers."""
    if name == "auto":
        name = "vllm" if vllm_available() else "transformers"
        log.info("engine: %s", name)
    if name == "vllm":
        return VLLMEngine(model_path, tensor_parallel_size=tensor_parallel_size)
    if name == "transformers":
        return TransformersEngine(model_path, device=device, dtype=dtype)
    raise ValueError(f"unknown engine {name!r}; valid: auto, vllm, transformers")
