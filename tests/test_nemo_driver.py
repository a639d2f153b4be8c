"""Our NeMo-RL driver against stand-ins with the v0.7.0 signatures: registration in both registries, the arguments
setup/grpo_train/sft receive, resuming, the dynamic-sampling exit code and config errors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _train_support import one_thread, tiny_model_dir, write_traces

from spatialiq_train.errors import UserError
from spatialiq_train.nemo import driver
from spatialiq_train.nemo.env import ACTOR_CLASSES, TRAIN_ENV, VAL_ENV, SpatialIQEnvironment
from spatialiq_train.nemo.export import write_nemo_config
from spatialiq_train.nemo.runtime import nemo_available
from spatialiq_train.nemo.standins import StandinRecorder, standin_api

CAP_ERROR = ("Dynamic sampling has reached the maximum allowed number of batches (10). Consider evaluating the "
             "complexity of your data or adjusting the num_prompts_per_step or num_generations_per_prompt parameters "
             "to enhance the diversity of the samples.")
"""The message NeMo-RL v0.7.0 raises at the cap (nemo_rl/algorithms/grpo.py, dynamic_sampling)."""


def _config(tmp_path: Path, phase: str = "rl", overrides: Sequence[str] = (),
            edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """A config written by the generator (`spatialiq recipes nemo-rl tiny_cpu`) over three-row traces, optionally
    edited by hand afterwards (what the driver must refuse)."""
    rng = np.random.default_rng(0)
    for split in ("rl", "val", "warmup"):
        write_traces(tmp_path, split, 3, rng, answer=lambda i: i % 5)
    sets = [f"data.traces_dir={tmp_path / 'traces'}", f"data.data_root={tmp_path}", "data.eval_split=val",
            "rl.validation.every_steps=5", "sft.validation.every_steps=2", f"model.name_or_path={tiny_model_dir()}",
            "model.tiny=false", f"run.output_dir={tmp_path}", *overrides]
    path = tmp_path / f"nemo_{phase}.yaml"
    write_nemo_config("tiny_cpu", path, phase=phase, nodes=1, gpus_per_node=1, overrides=sets)  # type: ignore[arg-type]
    if edit is not None:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        edit(cfg)
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
                                    "data_path": str(tmp_path / "traces" / "rl.jsonl"), "split": "rl",
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
    with pytest.raises(driver.DynamicSamplingCapError, match=r"max_gen_batches \(2\)") as info:  # tiny_cpu: 2 rounds
        driver.run("rl", _config(tmp_path), api=api)
    assert info.value.exit_code == 3
    api, rec = standin_api(StandinRecorder(grpo_train_raises=ValueError("something else")))
    with pytest.raises(ValueError, match="something else"):
        driver.run("rl", _config(tmp_path / "other"), api=api)


def test_sft_goes_through_the_sft_entry_with_our_dataset(tmp_path: Path) -> None:
    api, rec = standin_api()
    driver.run("sft", _config(tmp_path, "sft"), api=api)
    (setup,) = rec.called("sft_setup")
    processor = setup["tokenizer"]
    assert hasattr(processor, "image_processor")  # the processor stands in for the tokenizer, as in run_vlm_sft
    datum = setup["train_dataset"][0]
    assert [m["role"] for m in datum["message_log"]] == ["system", "user", "assistant"]
    assert datum["message_log"][2]["content"] == "<answer>0</answer><|im_end|>\n"
    assert setup["master_config"].data["train"]["dataset_name"] == f"spatialiq:{tmp_path / 'traces' / 'warmup.jsonl'}"
    assert "env_name" not in setup["master_config"].data["train"]
    assert rec.called("create_env") == [] and not any(n in rec.env_registry for n in ACTOR_CLASSES)
    (train,) = rec.called("sft_train")
    assert train["tokenizer"] is processor and train["sft_save_state"] == "<sft_save_state>"


def test_resume_logs_the_newest_step_and_refuses_another_recipe(tmp_path: Path, caplog: Any) -> None:
    ckpt = tmp_path / "nemo_rl" / "rl" / "checkpoints"  # run.output_dir/nemo_rl/rl, as generated
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



def test_resume_names_a_damaged_checkpoint_config(tmp_path: Path) -> None:
    step = tmp_path / "nemo_rl" / "rl" / "checkpoints" / "step_4"
    step.mkdir(parents=True)
    (step / "config.yaml").write_text("spatialiq: {recipe: tiny_cpu\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"step_4/config.yaml: not valid YAML .*use an earlier step_N"):
        driver.run("rl", _config(tmp_path), api=standin_api()[0])


def test_a_missing_directory_or_malformed_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--config .*nope.yaml: no such file"):
        driver.run("rl", tmp_path / "nope.yaml", api=standin_api()[0])
    with pytest.raises(UserError, match=f"--config {tmp_path}: a directory"):
        driver.run("sft", tmp_path, api=standin_api()[0])
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo: {max_num_steps: 3\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.yaml: not valid YAML \(while parsing a flow mapping"):
        driver.run("rl", bad, api=standin_api()[0])

def _section(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(cfg: dict[str, Any]) -> None:
        for key, value in changes.items():
            if value is _DROP:
                del cfg["spatialiq"][key]
            else:
                cfg["spatialiq"][key] = value
    return edit


_DROP = object()


@pytest.mark.parametrize(("edit", "overrides", "message"), [
    (_section(recipe=_DROP), [], r"spatialiq\.recipe: Field required"),
    (_section(trace_dir="x"), [], r"spatialiq\.trace_dir: Extra inputs are not permitted"),
    (_section(phase="sft"), [], "this config is for `spatialiq nemo sft`"),
    (None, ["grpo.no_such_key=1"], "overrides grpo.no_such_key=1 rejected"),
    (_section(recipe="no_such_recipe"), [], "recipe file no_such_recipe does not exist"),
    (None, ["checkpointing.checkpoint_dir=null"], "checkpoint_dir is not set"),
])
def test_config_errors_name_the_key(tmp_path: Path, edit: Any, overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        driver.run("rl", _config(tmp_path, edit=edit), overrides, api=standin_api()[0])


def test_validation_asked_for_without_a_split_is_refused(tmp_path: Path) -> None:
    path = _config(tmp_path, overrides=["data.eval_split=null", "rl.validation.every_steps=null",
                                        "sft.validation.every_steps=null"])
    api, rec = standin_api()
    driver.run("rl", path, api=api)  # as generated: no validation set, val_period 0
    assert rec.called("grpo_setup")[0]["val_dataset"] is None
    assert [c["env_name"] for c in rec.called("create_env")] == [TRAIN_ENV]
    with pytest.raises(UserError, match="ask for validation but the recipe gives no validation split"):
        driver.run("rl", path, ["grpo.val_period=5"], api=standin_api()[0])


@pytest.mark.parametrize(("edit", "overrides", "message"), [
    (lambda c: c["env"].update(spatialiq={"reward": {"format": 1.0}}), [],
     r"env is .* the recipe gives \{'spatialiq': \{'reward': \{'format': 0\.1, 'integer_distance': 0\.9\}\}"),
    (None, ["data.train.data_path=/elsewhere/rl.jsonl"], r"data\.train is \{.*'/elsewhere/rl\.jsonl'"),
    (None, ["data.default.max_pixels=802816"], r"data\.default is .* the recipe gives .*'max_pixels': 12544"),
    (lambda c: c["spatialiq"].update(recipe_overrides=[*c["spatialiq"]["recipe_overrides"], "data.rl_split=warmup"]),
     [], r"data\.train is .*'split': 'rl'.* the recipe gives .*'split': 'warmup'"),
    (None, ["policy.generation.vllm_cfg.skip_tokenizer_init=true"],
     r"policy\.generation\.vllm_cfg\.skip_tokenizer_init is True, the recipe gives False"),
    (None, ["checkpointing.metric_name=val:loss"], r"checkpointing\.metric_name is 'val:loss'"),
    (None, ["checkpointing.save_consolidated=false"], r"checkpointing\.save_consolidated is False"),
    (lambda c: c.pop("env"), [], r"env is absent"),
])
def test_project_pieces_differing_from_the_recipe_are_refused_not_rewritten(
        tmp_path: Path, edit: Any, overrides: list[str], message: str) -> None:
    api, rec = standin_api()
    with pytest.raises(UserError, match=message) as info:
        driver.run("rl", _config(tmp_path, edit=edit), overrides, api=api)
    assert "regenerate the config with `spatialiq recipes nemo-rl`" in str(info.value)
    assert rec.called("grpo_setup") == [] and rec.called("init_ray") == []


def test_no_spatialiq_section_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no 'spatialiq' section"):
        driver.run("rl", _config(tmp_path, edit=lambda c: c.pop("spatialiq")), api=standin_api()[0])


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
    assert "error: dynamic sampling reached grpo.dynamic_sampling_max_gen_batches (2)" in result.output
    assert rec.called("grpo_setup")[0]["master_config"].grpo["max_num_steps"] == 2


def test_cli_convert_refuses_a_non_checkpoint_with_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    result = CliRunner().invoke(app, ["nemo", "convert", "--checkpoint", str(tmp_path), "--out",
                                      str(tmp_path / "hf"), "--recipe", "tiny_cpu"])
    assert result.exit_code == 2 and "neither a NeMo-RL step folder" in result.output
