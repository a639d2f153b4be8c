"""Our NeMo-RL driver against stand-ins with the v0.7.0 signatures: registration in both registries, the arguments
setup/grpo_train/sft receive, resuming, the dynamic-sampling exit code and config errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _train_support import one_thread, tiny_model_dir, write_traces

from spatialiq_train.errors import UserError
from spatialiq_train.nemo import driver
from spatialiq_train.nemo.env import ACTOR_CLASSES, TRAIN_ENV, VAL_ENV, SpatialIQEnvironment
from spatialiq_train.nemo.runtime import nemo_available
from spatialiq_train.nemo.standins import StandinRecorder, standin_api

CAP_ERROR = ("Dynamic sampling has reached the maximum allowed number of batches (10). Consider evaluating the "
             "complexity of your data or adjusting the num_prompts_per_step or num_generations_per_prompt parameters "
             "to enhance the diversity of the samples.")
"""The message NeMo-RL v0.7.0 raises at the cap (nemo_rl/algorithms/grpo.py, dynamic_sampling)."""


def _config(tmp_path: Path, **spatialiq: Any) -> Path:
    rng = np.random.default_rng(0)
    traces = tmp_path / "traces"
    for split in ("rl", "val", "warmup"):
        write_traces(tmp_path, split, 3, rng, answer=lambda i: i % 5)
    cfg = {
        "policy": {"model_name": tiny_model_dir(), "tokenizer": {"name": tiny_model_dir()},
                   "generation": {"backend": "vllm", "max_new_tokens": 24, "vllm_cfg": {"skip_tokenizer_init": False}}},
        "loss_fn": {"ratio_clip_min": 0.2, "ratio_clip_max": 0.28},
        "env": {},
        "data": {"max_input_seq_length": 2048, "shuffle": True, "num_workers": 0},
        "grpo": {"max_num_steps": 10, "dynamic_sampling_max_gen_batches": 10, "val_period": 5},
        "sft": {"max_num_steps": 4, "val_period": 2},
        "logger": {"log_dir": str(tmp_path / "logs")},
        "cluster": {"gpus_per_node": 1, "num_nodes": 1},
        "checkpointing": {"enabled": True, "checkpoint_dir": str(tmp_path / "ckpt")},
        "spatialiq": {"recipe": "tiny_cpu", "traces_dir": str(traces), "data_root": str(tmp_path),
                      "val_split": "val", **spatialiq},
    }
    path = tmp_path / "nemo.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _threads() -> None:
    one_thread()


def test_rl_registers_our_environments_and_calls_setup_and_grpo_train(tmp_path: Path) -> None:
    api, rec = standin_api()
    driver.run("rl", _config(tmp_path), ["grpo.max_num_steps=3"], api=api)

    for name, fqn in ACTOR_CLASSES.items():  # both registries NeMo-RL consults
        assert rec.env_registry[name] == {"actor_class_fqn": fqn}
        assert rec.actor_registry[fqn] == api.system_executable
    assert rec.env_registry["vlm"]["actor_class_fqn"].endswith("VLMEnvironment")  # built-ins untouched
    envs = {c["env_name"]: c["env_config"] for c in rec.called("create_env")}
    assert envs[TRAIN_ENV]["reward"] == {"format": 0.1, "integer_distance": 0.9}  # tiny_cpu's reward.weights
    assert envs[VAL_ENV]["reward"] == "exact_match"
    assert envs[TRAIN_ENV]["metrics_file"].endswith("logs/exp_001/spatialiq_metrics.jsonl")
    SpatialIQEnvironment(envs[TRAIN_ENV])  # the config our actor receives is one it accepts

    (setup,) = rec.called("grpo_setup")
    master, processor = setup["master_config"], setup["processor"]
    assert setup["tokenizer"] is processor.tokenizer
    assert (processor.image_processor.size["shortest_edge"], processor.image_processor.size["longest_edge"]) == \
        (3136, 12544)  # the recipe's budget, not the processor's saved 200,704
    assert master.grpo["max_num_steps"] == 3 and master.logger["log_dir"].endswith("exp_001")
    assert master.data["train"] == {"dataset_name": f"spatialiq:{tmp_path / 'traces' / 'rl.jsonl'}",
                                    "env_name": TRAIN_ENV}
    assert master.data["validation"]["env_name"] == VAL_ENV
    assert master.spatialiq["phase"] == "rl"
    datum = setup["dataset"][1]
    assert datum["task_name"] == "spatialiq" and datum["extra_env_info"]["answer"] == 1
    assert len(setup["dataset"]) == 3 and len(setup["val_dataset"]) == 3

    (train,) = rec.called("grpo_train")
    assert set(train["task_to_env"]) == set(train["val_task_to_env"]) == {"spatialiq"}
    assert train["task_to_env"]["spatialiq"].env_name == TRAIN_ENV
    assert train["val_task_to_env"]["spatialiq"].env_name == VAL_ENV
    assert train["wrapped_dataloader"] == "<dataloader>" and train["master_config"] is master
    assert train["tokenizer"] is processor.tokenizer


def test_standin_grpo_train_refuses_mains_processor_keyword() -> None:
    api, _ = standin_api()
    with pytest.raises(TypeError, match="processor"):
        api.grpo_train(*range(12), processor=object())


def test_registration_is_idempotent_and_refuses_a_taken_name() -> None:
    api, rec = standin_api()
    driver.register_environments(api)
    driver.register_environments(api)
    assert [n for n in rec.env_registry if n in ACTOR_CLASSES] == list(ACTOR_CLASSES)
    api2, rec2 = standin_api(StandinRecorder(env_registry={TRAIN_ENV: {"actor_class_fqn": "other.Env"}}))
    with pytest.raises(UserError, match="already registered to 'other.Env'"):
        driver.register_environments(api2)


def test_dynamic_sampling_cap_is_exit_3(tmp_path: Path) -> None:
    api, rec = standin_api(StandinRecorder(grpo_train_raises=ValueError(CAP_ERROR)))
    with pytest.raises(driver.DynamicSamplingCapError, match=r"dynamic_sampling_max_gen_batches \(10\)") as info:
        driver.run("rl", _config(tmp_path), api=api)
    assert info.value.exit_code == 3
    api, rec = standin_api(StandinRecorder(grpo_train_raises=ValueError("something else")))
    with pytest.raises(ValueError, match="something else"):
        driver.run("rl", _config(tmp_path / "other"), api=api)


def test_sft_goes_through_the_sft_entry_with_our_dataset(tmp_path: Path) -> None:
    api, rec = standin_api()
    driver.run("sft", _config(tmp_path), api=api)
    (setup,) = rec.called("sft_setup")
    processor = setup["tokenizer"]
    assert hasattr(processor, "image_processor")  # the processor stands in for the tokenizer, as in run_vlm_sft
    datum = setup["train_dataset"][0]
    assert [m["role"] for m in datum["message_log"]] == ["system", "user", "assistant"]
    assert datum["message_log"][2]["content"] == "<answer>0</answer><|im_end|>\n"
    assert setup["master_config"].data["train"] == {"dataset_name": f"spatialiq:{tmp_path / 'traces' / 'warmup.jsonl'}"}
    assert rec.called("create_env") == [] and not any(n in rec.env_registry for n in ACTOR_CLASSES)
    (train,) = rec.called("sft_train")
    assert train["tokenizer"] is processor and train["sft_save_state"] == "<sft_save_state>"


def test_resume_logs_the_newest_step_and_refuses_another_recipe(tmp_path: Path, caplog: Any) -> None:
    ckpt = tmp_path / "ckpt"
    for name in ("step_2", "step_10", "tmp_step_11", "old_step_12", "step_x"):
        (ckpt / name).mkdir(parents=True)
    assert driver.latest_step(ckpt) == ckpt / "step_10"
    assert driver.latest_step(tmp_path / "missing") is None
    (ckpt / "step_10" / "config.yaml").write_text(yaml.safe_dump({"spatialiq": {"recipe": "tiny_cpu", "phase": "rl"}}))
    api, _ = standin_api()
    with caplog.at_level("INFO", logger="spatialiq_train.nemo.driver"):
        driver.run("rl", _config(tmp_path), api=api)
    assert f"resuming from {ckpt / 'step_10'}" in caplog.text
    (ckpt / "step_10" / "config.yaml").write_text(yaml.safe_dump({"spatialiq": {"recipe": "dapo_tight_7b",
                                                                                "phase": "rl"}}))
    with pytest.raises(UserError, match="made by phase 'rl' of recipe 'dapo_tight_7b'"):
        driver.run("rl", _config(tmp_path), api=standin_api()[0])


@pytest.mark.parametrize(("section", "overrides", "message"), [
    ({"recipe": None}, [], "spatialiq.recipe"),
    ({"trace_dir": "x"}, [], r"spatialiq\.trace_dir: Extra inputs are not permitted"),
    ({"phase": "sft"}, [], "this config is for `spatialiq nemo sft`"),
    ({}, ["grpo.no_such_key=1"], "overrides grpo.no_such_key=1 rejected"),
    ({"recipe": "no_such_recipe"}, [], "recipe file no_such_recipe does not exist"),
    ({"validation": False}, [], "ask for validation but there is no validation split"),
    ({}, ["checkpointing.checkpoint_dir=null"], "checkpoint_dir is not set"),
])
def test_config_errors_name_the_key(tmp_path: Path, section: dict[str, Any], overrides: list[str],
                                    message: str) -> None:
    with pytest.raises(UserError, match=message):
        driver.run("rl", _config(tmp_path, **section), overrides, api=standin_api()[0])


def test_env_reward_in_the_yaml_must_match_the_recipe(tmp_path: Path) -> None:
    path = _config(tmp_path)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["env"] = {TRAIN_ENV: {"reward": {"format": 1.0}}}
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with pytest.raises(UserError, match="env.spatialiq.reward .* but the recipe gives"):
        driver.run("rl", path, api=standin_api()[0])
    with pytest.raises(UserError, match="no 'spatialiq' section"):
        del cfg["spatialiq"]
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        driver.run("rl", path, api=standin_api()[0])


@pytest.mark.nemo_rl
@pytest.mark.skipif(not nemo_available(), reason="needs NeMo-RL (the nvcr.io/nvidia/nemo-rl:v0.7.0 container)")
def test_real_registries_accept_our_environments() -> None:
    from nemo_rl.distributed.ray_actor_environment_registry import get_actor_python_env
    from nemo_rl.environments.utils import ENV_REGISTRY

    api = driver.load_api()
    driver.register_environments(api)
    for name, fqn in ACTOR_CLASSES.items():
        assert ENV_REGISTRY[name]["actor_class_fqn"] == fqn
        assert get_actor_python_env(fqn) == api.system_executable


# --- the CLI ------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(nemo_available(), reason="NeMo-RL is importable here")
@pytest.mark.parametrize("phase", ["rl", "sft"])
def test_cli_without_nemo_rl_is_exit_2_naming_the_container(tmp_path: Path, phase: str) -> None:
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    result = CliRunner().invoke(app, ["nemo", phase, "--config", str(tmp_path / "any.yaml")])
    assert result.exit_code == 2, result.output
    assert "error: NeMo-RL is not importable" in result.output
    assert "nvcr.io/nvidia/nemo-rl:v0.7.0" in result.output and "docs/cluster.md" in result.output


def test_cli_dynamic_sampling_cap_is_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    api, rec = standin_api(StandinRecorder(grpo_train_raises=ValueError(CAP_ERROR)))
    monkeypatch.setattr(driver, "load_api", lambda: api)
    result = CliRunner().invoke(app, ["nemo", "rl", "--config", str(_config(tmp_path)), "grpo.max_num_steps=2"])
    assert result.exit_code == 3, result.output
    assert "error: dynamic sampling reached grpo.dynamic_sampling_max_gen_batches (10)" in result.output
    assert rec.called("grpo_setup")[0]["master_config"].grpo["max_num_steps"] == 2


def test_cli_convert_refuses_a_non_checkpoint_with_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    result = CliRunner().invoke(app, ["nemo", "convert", "--checkpoint", str(tmp_path), "--out",
                                      str(tmp_path / "hf"), "--recipe", "tiny_cpu"])
    assert result.exit_code == 2 and "neither a NeMo-RL step folder" in result.output
