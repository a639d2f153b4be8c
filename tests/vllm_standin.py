"""An in-test stand-in of vLLM's offline API (``vllm.LLM``, ``vllm.SamplingParams``).

Its argument checks follow vLLM's own (vllm/sampling_params.py, vllm/entrypoints/llm.py): unknown keyword
arguments are a TypeError; greedy sampling (temperature below 1e-5) takes ``n == 1``; ``top_k`` is -1, 0 or
positive; a prompt may hold at most ``limit_mm_per_prompt["image"]`` images (vLLM's default is one), each
announced by one image placeholder in the prompt text; prompt plus ``max_tokens`` must fit ``max_model_len``.
On top of vLLM's, it insists that ``max_model_len`` is set (the project never lets vLLM reserve the model's
128k context). Generation runs the checkpoint with transformers, so greedy outputs equal the transformers
engine's; it records how many image tokens each prompt produced, processed as vLLM would (the checkpoint's
processor with ``mm_processor_kwargs`` applied).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from dataclasses import dataclass, field
from typing import Any

_GREEDY_EPS = 1e-5
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


class SamplingParams:
    def __init__(self, n: int = 1, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 repetition_penalty: float = 1.0, max_tokens: int | None = 16, seed: int | None = None,
                 **unknown: Any) -> None:
        if unknown:
            raise TypeError(f"SamplingParams.__init__() got unexpected keyword arguments {sorted(unknown)}")
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}.")
        if temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {temperature}.")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
        if top_k < -1:
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
        if repetition_penalty <= 0.0:
            raise ValueError(f"repetition_penalty must be greater than zero, got {repetition_penalty}.")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
        if temperature < _GREEDY_EPS and n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {n}.")
        self.n, self.temperature, self.top_p, self.top_k = n, temperature, top_p, top_k
        self.repetition_penalty, self.max_tokens, self.seed = repetition_penalty, max_tokens, seed


@dataclass
class CompletionOutput:
    index: int
    text: str


@dataclass
class RequestOutput:
    prompt: str
    outputs: list[CompletionOutput]


@dataclass
class Record:
    """What the stand-in saw for one prompt."""

    prompt_tokens: int
    image_tokens: int
    image_sizes: list[tuple[int, int]] = field(default_factory=list)


class LLM:
    ENGINE_ARGS = {"tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "limit_mm_per_prompt",
                   "mm_processor_kwargs", "seed", "dtype", "enforce_eager", "enable_sleep_mode"}
    instances: list[LLM] = []

    def __init__(self, model: str, **kwargs: Any) -> None:
        unknown = set(kwargs) - self.ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got unexpected keyword arguments {sorted(unknown)}")
        if kwargs.get("max_model_len") is None:
            raise ValueError("stand-in: max_model_len must be set (the model config's 128k would be used)")
        self.model_path, self.kwargs = model, kwargs
        self.image_limit = int((kwargs.get("limit_mm_per_prompt") or {}).get("image", 1))
        self.records: list[Record] = []
        self._model: Any = None
        self._processor: Any = None
        LLM.instances.append(self)

    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoModelForImageTextToText

        from spatialiq_train.processor import load_processor

        budget = self.kwargs.get("mm_processor_kwargs") or {}
        self._processor = load_processor(self.model_path, min_pixels=budget.get("min_pixels"),
                                         max_pixels=budget.get("max_pixels"))
        self._model = AutoModelForImageTextToText.from_pretrained(self.model_path).eval()

    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        self._load()
        return [self._one(p, sp) for p, sp in zip(prompts, params, strict=True)]

    def _one(self, prompt: dict[str, Any], sp: SamplingParams) -> RequestOutput:
        import torch

        text, images = prompt["prompt"], list(prompt.get("multi_modal_data", {}).get("image", []))
        if len(images) > self.image_limit:
            raise ValueError(f"At most {self.image_limit} image(s) may be provided in one prompt.")
        if text.count(IMAGE_PLACEHOLDER) != len(images):
            raise ValueError(f"the prompt holds {text.count(IMAGE_PLACEHOLDER)} image placeholders for "
                             f"{len(images)} images")
        inputs = self._processor(text=[text], images=images or None, return_tensors="pt")
        ids = inputs["input_ids"]
        image_id = self._processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        n_prompt = int(ids.shape[1])
        if n_prompt + (sp.max_tokens or 0) > self.kwargs["max_model_len"]:
            raise ValueError(f"prompt ({n_prompt} tokens) + max_tokens ({sp.max_tokens}) exceeds max_model_len "
                             f"({self.kwargs['max_model_len']})")
        self.records.append(Record(n_prompt, int((ids == image_id).sum()), [im.size for im in images]))
        torch.manual_seed(sp.seed or 0)
        greedy = sp.temperature < _GREEDY_EPS
        kwargs: dict[str, Any] = {"max_new_tokens": sp.max_tokens, "num_return_sequences": sp.n,
                                  "repetition_penalty": sp.repetition_penalty, "do_sample": not greedy}
        if not greedy:
            kwargs.update(temperature=sp.temperature, top_p=sp.top_p, top_k=max(sp.top_k, 0))
        with torch.no_grad():
            out = self._model.generate(**inputs, **kwargs)
        texts = self._processor.batch_decode(out[:, n_prompt:], skip_special_tokens=True)
        return RequestOutput(text, [CompletionOutput(i, t) for i, t in enumerate(texts)])


def install(monkeypatch: Any) -> types.ModuleType:
    """Put the stand-in in ``sys.modules`` as ``vllm`` for one test; returns the module."""
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams  # type: ignore[attr-defined]
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    LLM.instances = []
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module
