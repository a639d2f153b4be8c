"""The vLLM engine's own pure functions: one decoding rule for both engines, vLLM's temperature rule, the CPU-only
engine arguments. The engine itself runs against the real vLLM (CPU build) in tests/engines/vllm/."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from eval.engines import decoding_for, generate_kwargs, platform_kwargs, sampling_params_kwargs
from eval.sample import SamplingConfig, check_temperature
from spatialiq_train.cli import app


@pytest.mark.parametrize(("temperature", "k"), [(0.0, 10), (0.0, 1), (1.0, 10), (0.7, 3), (2.0, 2)])
def test_one_decoding_rule_for_both_engines(temperature: float, k: int) -> None:
    config = SamplingConfig(k=k, temperature=temperature, top_p=0.9, max_new_tokens=64)
    dec = decoding_for(config, k)
    assert dec.draws * dec.repeats == k
    assert (dec.draws, dec.repeats) == ((1, k) if temperature == 0 else (k, 1))
    params = sampling_params_kwargs(config, k, seed=3)
    assert (params["n"], params["max_tokens"], params["seed"], params["temperature"]) == (dec.draws, 64, 3, temperature)
    assert params["top_p"] == (1.0 if temperature == 0 else 0.9)
    hf = generate_kwargs(config, k)
    assert hf["num_return_sequences"] == dec.draws and hf["do_sample"] is (temperature > 0)
    assert ("temperature" in hf) is (temperature > 0)


def test_decoding_refuses_zero_samples() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        decoding_for(SamplingConfig(), 0)


@pytest.mark.parametrize("bad", [2.5, -0.1, float("nan"), float("inf")])
def test_temperature_outside_vllms_range_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match=r"temperature must be in \[0, 2\] \(vLLM's bound\)"):
        check_temperature(bad)


def test_temperatures_vllm_would_change_are_refused_or_made_greedy() -> None:
    # vLLM raises (0, 0.01) to 0.01 while transformers would sample at the value given: refused, not changed
    with pytest.raises(ValueError, match="pass 0 for greedy decoding or at least 0.01"):
        check_temperature(0.005)
    # below 1e-5 vLLM decodes greedily (n must then be 1): both engines treat it as 0
    assert SamplingConfig(temperature=1e-6).temperature == 0.0
    assert decoding_for(SamplingConfig(temperature=1e-6), 4).greedy
    assert check_temperature(0.01) == 0.01 and check_temperature(2.0) == 2.0


def test_cli_names_the_temperature_flag_before_loading_anything(tmp_path) -> None:  # noqa: ANN001
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(tmp_path / "absent"), "--data", str(tmp_path),
                                   "--out", str(tmp_path / "c.jsonl"), "--temperature", "2.5"])
    assert res.exit_code != 0
    assert "--temperature" in res.output and "[0, 2]" in res.output and "2.5" in res.output


def test_chunked_prefill_is_turned_off_on_the_cpu_backend_only() -> None:
    assert platform_kwargs(on_cpu=False, max_model_len=2054) == {}
    assert platform_kwargs(on_cpu=True, max_model_len=2054) == {"enable_chunked_prefill": False,
                                                                "max_num_batched_tokens": 2054}


@pytest.mark.parametrize("key", ["eval.temperature", "generation.temperature"])
def test_recipes_refuse_a_temperature_vllm_rejects(key: str) -> None:
    from spatialiq_train.core.recipes import SHIPPED_RECIPES, RecipeError, load_recipe

    with pytest.raises(RecipeError, match=rf"{key}: Input should be less than or equal to 2 \(got 2.5\)"):
        load_recipe(SHIPPED_RECIPES / "tiny_cpu.yaml", [f"{key}=2.5"])
