"""The vLLM engine against an in-test stand-in of vLLM whose argument checks follow vLLM's (tests/vllm_standin.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import vllm_standin
from typer.testing import CliRunner

from eval.completions import load_completions
from eval.engines import PROMPT_TOKEN_BUDGET, decoding_for, generate_kwargs, sampling_params_kwargs
from eval.sample import SamplingConfig
from spatialiq_train.cli import app


@pytest.mark.parametrize(("temperature", "k"), [(0.0, 10), (0.0, 1), (1.0, 10), (0.7, 3)])
def test_one_decoding_rule_for_both_engines(temperature: float, k: int) -> None:
    config = SamplingConfig(k=k, temperature=temperature, top_p=0.9, max_new_tokens=64)
    dec = decoding_for(config, k)
    assert dec.draws * dec.repeats == k
    assert (dec.draws, dec.repeats) == ((1, k) if temperature == 0 else (k, 1))
    params = vllm_standin.SamplingParams(**sampling_params_kwargs(config, k, seed=3))  # vLLM's checks pass
    assert params.n == dec.draws and params.max_tokens == 64 and params.seed == 3
    hf = generate_kwargs(config, k)
    assert hf["num_return_sequences"] == dec.draws and hf["do_sample"] is (temperature > 0)


def test_standin_rejects_what_vllm_rejects() -> None:
    with pytest.raises(ValueError, match="n must be 1 when using greedy sampling"):
        vllm_standin.SamplingParams(n=10, temperature=0.0)  # what the engine used to send for greedy k=10
    with pytest.raises(TypeError, match="unexpected keyword"):
        vllm_standin.SamplingParams(n=1, do_sample=True)
    with pytest.raises(ValueError, match="max_model_len must be set"):
        vllm_standin.LLM("m", tensor_parallel_size=1)


def test_decoding_refuses_zero_samples() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        decoding_for(SamplingConfig(), 0)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("torch")
    from PIL import Image
    from test_eval_pipeline import make_dataset

    from spatialiq_train.tiny import save_tiny

    root = tmp_path_factory.mktemp("vllm")
    model = save_tiny(root / "tiny", seed=0)
    data = make_dataset(root / "data", structures=1)
    for gt in (data / "benchmark").rglob("gt.json"):
        Image.new("RGB", (512, 512), (120, 80, 40)).save(gt.parent / "view.png")
    return model, data


def _sample(model: Path, data: Path, out: Path, engine: str, *extra: str) -> None:
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(model), "--data", str(data), "--out", str(out),
                                   "--engine", engine, "--max-new-tokens", "6", "--limit", "2", *extra])
    assert res.exit_code == 0, res.output


def _score(completions: Path, data: Path, out: Path) -> dict[str, object]:
    res = CliRunner().invoke(app, ["eval", "score", "--completions", str(completions), "--data", str(data),
                                   "--out", str(out), "--name", "tiny", "--min-coverage", "0"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics_tiny.json").read_text())
    metrics.pop("completions_file", None)
    return metrics


@pytest.mark.slow
def test_vllm_engine_writes_and_scores_like_transformers(tiny_run: tuple[Path, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    model, data = tiny_run
    standin = vllm_standin.install(monkeypatch)
    _sample(model, data, tmp_path / "vllm.jsonl", "vllm", "--k", "10", "--temperature", "0")
    llm = standin.LLM.instances[-1]
    assert llm.kwargs["max_model_len"] == PROMPT_TOKEN_BUDGET + 6 and llm.kwargs["limit_mm_per_prompt"] == {"image": 1}
    from spatialiq_train.processor import image_token_count, load_processor

    processor = load_processor(model)
    # a 512x512 view gives the same image-token count on the vLLM side as the transformers processor's
    assert {r.image_tokens for r in llm.records} == {image_token_count(512, 512, processor)}
    _sample(model, data, tmp_path / "hf.jsonl", "transformers", "--k", "10", "--temperature", "0")
    vllm_records, hf_records = load_completions(tmp_path / "vllm.jsonl"), load_completions(tmp_path / "hf.jsonl")
    assert len(vllm_records) == 20 and vllm_records.keys() == hf_records.keys()
    assert {k: r.text for k, r in vllm_records.items()} == {k: r.text for k, r in hf_records.items()}
    assert _score(tmp_path / "vllm.jsonl", data, tmp_path / "s1") == _score(tmp_path / "hf.jsonl", data,
                                                                            tmp_path / "s2")


@pytest.mark.slow
def test_vllm_engine_samples_k_and_two_images(tiny_run: tuple[Path, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    model, data = tiny_run
    standin = vllm_standin.install(monkeypatch)
    _sample(model, data, tmp_path / "k.jsonl", "vllm", "--k", "3")
    assert len(load_completions(tmp_path / "k.jsonl")) == 6
    _sample(model, data, tmp_path / "i.jsonl", "vllm", "--k", "2", "--mode", "independent", "--tasks", "task10")
    llm = standin.LLM.instances[-1]
    assert llm.kwargs["limit_mm_per_prompt"] == {"image": 2}
    assert all(len(r.image_sizes) == 2 for r in llm.records)


@pytest.mark.slow
def test_vllm_engine_refuses_a_prompt_longer_than_max_model_len(tiny_run: tuple[Path, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    model, data = tiny_run
    vllm_standin.install(monkeypatch)
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(model), "--data", str(data), "--out",
                                   str(tmp_path / "c.jsonl"), "--engine", "vllm", "--max-new-tokens", "6",
                                   "--limit", "1", "--max-model-len", "300"])
    assert res.exit_code != 0
    assert "exceeds vLLM's max_model_len (300)" in str(res.exception) + res.output
    assert "--max-model-len" in str(res.exception) + res.output
