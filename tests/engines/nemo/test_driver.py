"""Our NeMo-RL driver against the real v0.7.0 code: registration in both registries, resuming, config errors and
refusals (all before any GPU work), the dynamic-sampling exit, and a run without validation up to GPU placement."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _nemo_support import Placement, PlacementReached, tiny_model
from _train_support import write_traces

from spatialiq_train.core.errors import UserError
from spatialiq_train.nemo import driver
from spatialiq_train.nemo.checkpoints import latest_step
from spatialiq_train.nemo.env import ACTOR_CLASSES, TRAIN_ENV
from spatialiq_train.nemo.export import write_nemo_config


def _config(tmp_path: Path, phase: str = "rl", overrides: Sequence[str] = (),
            edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """A config written by the generator (`spatialiq recipes nemo-rl tiny_cpu`) over four-row traces, optionally
    edited by hand afterwards (what the driver must refuse)."""
    rng = np.random.default_rng(0)
    for split in ("rl", "val", "warmup"):
        write_traces(tmp_path, split, 4, rng, answer=lambda i: i % 5)  # one batch: tiny_cpu's 4 prompts, 4 rows
    sets = [f"data.traces_dir={tmp_path / 'traces'}", f"data.data_root={tmp_path}", "data.eval_split=val",
            "rl.validation.every_steps=5", "sft.validation.every_steps=2", f"model.name_or_path={tiny_model()}",
            "model.tiny=false", "logging.save_steps=10", f"run.output_dir={tmp_path}", *overrides]
    path = tmp_path / f"nemo_{phase}.yaml"
    write_nemo_config("tiny_cpu", path, phase=phase, nodes=1, gpus_per_node=1, overrides=sets)  # type: ignore[arg-type]
    if edit is not None:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        edit(cfg)
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def test_registration_is_idempotent_and_refuses_a_taken_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from nemo_rl.distributed.ray_actor_environment_registry import get_actor_python_env
    from nemo_rl.environments.utils import ENV_REGISTRY

    api = driver.load_api()
    driver.register_environments(api)
    driver.register_environments(api)
    for name, fqn in ACTOR_CLASSES.items():
        assert ENV_REGISTRY[name]["actor_class_fqn"] == fqn
        assert get_actor_python_env(fqn) == api.system_executable
    monkeypatch.setitem(ENV_REGISTRY, TRAIN_ENV, {"actor_class_fqn": "other.Env"})
    with pytest.raises(UserError, match="already registered to 'other.Env'"):
        driver.register_environments(api)


def test_the_dynamic_sampling_cap_is_exit_3() -> None:
    """NeMo-RL's own ``dynamic_sampling`` past its cap raises; the driver turns exactly that into exit 3."""
    import torch
    from nemo_rl.algorithms.grpo import MasterConfig, dynamic_sampling
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.utils.timer import Timer

    master = MasterConfig.model_construct(grpo={"use_dynamic_sampling": True, "num_prompts_per_step": 2,
                                                "num_generations_per_prompt": 2, "dynamic_sampling_max_gen_batches": 2,
                                                "batch_multiplier": 1}, policy={"train_global_batch_size": 4})
    batch = BatchedDataDict({"idx": [0, 0, 1, 1], "total_reward": torch.tensor([1.0, 0.0, 1.0, 1.0])})
    std = torch.tensor([0.7, 0.7, 0.0, 0.0])  # one of the two groups varies: half a batch after the 3rd generation
    with pytest.raises(driver.DynamicSamplingCapError, match=r"max_gen_batches \(2\)") as info:
        with driver.dynamic_sampling_exit(2):
            dynamic_sampling(batch, std, torch.ones(4), 3, master, Timer())
    assert info.value.exit_code == 3
    with pytest.raises(ValueError, match="something else"), driver.dynamic_sampling_exit(2):
        raise ValueError("something else")


def test_resume_from_a_checkpoint_the_training_loop_would_write(tmp_path: Path, caplog: Any, placement: Placement,
                                                               ray_driver: str) -> None:
    """A fresh run to GPU placement; then step_10 saved the way ``grpo_train`` saves it (``CheckpointManager``,
    the training info, the data loader's state); the rerun resumes from it through the real set-up, and a
    checkpoint of another recipe is refused before any of that."""
    import ray
    import torch

    config = _config(tmp_path)
    with pytest.raises(PlacementReached):
        driver.run("rl", config)
    ray.shutdown()  # each driver start attaches anew, as a resubmitted job does
    manager, master, loader = (placement.state[k] for k in ("checkpointer", "master_config", "dataloader"))
    info = {"consumed_samples": 80, "current_step": 10, "current_epoch": 0, "total_steps": 10,
            "total_valid_tokens": 1234, "val_reward": 0.25}
    step = Path(manager.init_tmp_checkpoint(10, info, master))
    shutil.copytree(tiny_model(), step / "policy" / "weights" / "model" / "consolidated",  # what the worker saves
                    ignore=shutil.ignore_patterns("*token*", "*processor*", "chat_*"))
    torch.save(loader.state_dict(), step / "train_dataloader.pt")
    manager.finalize_checkpoint(step)
    ckpt = Path(master.checkpointing["checkpoint_dir"])
    for name in ("step_2", "tmp_step_11", "old_step_12", "step_x"):
        (ckpt / name).mkdir()
    assert latest_step(ckpt) == ckpt / "step_10"
    assert latest_step(tmp_path / "missing") is None
    with caplog.at_level("INFO", logger="spatialiq_train.nemo.driver"), pytest.raises(PlacementReached):
        driver.run("rl", config)
    assert f"resuming from {ckpt / 'step_10'}" in caplog.text
    assert placement.state["grpo_save_state"] == info  # what the real set-up restored
    ray.shutdown()
    saved = yaml.safe_load((ckpt / "step_10" / "config.yaml").read_text())
    saved["spatialiq"]["recipe"] = "dapo_tight_7b"
    (ckpt / "step_10" / "config.yaml").write_text(yaml.safe_dump(saved))
    calls = placement.calls
    with pytest.raises(UserError, match="made by phase 'rl' of recipe 'dapo_tight_7b'"):
        driver.run("rl", config)
    assert placement.calls == calls


def test_resume_names_a_damaged_checkpoint_config(tmp_path: Path) -> None:
    step = tmp_path / "nemo_rl" / "rl" / "checkpoints" / "step_4"
    shutil.copytree(tiny_model(), step / "policy" / "weights" / "model" / "consolidated")  # a complete step ...
    (step / "training_info.json").write_text("{}", encoding="utf-8")
    (step / "train_dataloader.pt").write_bytes(b"")
    (step / "config.yaml").write_text("spatialiq: {recipe: tiny_cpu\n", encoding="utf-8")  # ... but this damaged
    with pytest.raises(UserError, match=r"step_4/config.yaml: not valid YAML .*use an earlier step_N"):
        driver.run("rl", _config(tmp_path))


class RayStarted(Exception):  # noqa: N818 - a signal, not an error
    """Raised where the driver would start Ray: everything before it (the checks, the data record) has run."""


def test_a_resume_on_changed_data_is_refused_before_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44, item 2 on this engine: the driver records the data it trains on (``data.json``, as the TRL path)
    beside its checkpoints when training starts; a resume whose traces changed is refused in one line naming the
    file, before Ray starts and without touching the record; the same data resumes."""
    import json

    import nemo_rl.distributed.virtual_cluster as cluster

    from spatialiq_train.core.run_folder import DataChangedError

    def init_ray(*_args: Any, **_kwargs: Any) -> None:
        raise RayStarted

    monkeypatch.setattr(cluster, "init_ray", init_ray)  # load_api reads it at each run
    config = _config(tmp_path)
    with pytest.raises(RayStarted):
        driver.run("rl", config)
    ckpt = tmp_path / "nemo_rl" / "rl" / "checkpoints"
    record = json.loads((ckpt / "data.json").read_text())
    assert record["phase"] == "rl" and sorted(record["traces"]) == ["rl.jsonl", "val.jsonl"]
    step = ckpt / "step_2"  # a complete step, as the training loop leaves it
    shutil.copytree(tiny_model(), step / "policy" / "weights" / "model" / "consolidated")
    (step / "training_info.json").write_text("{}", encoding="utf-8")
    (step / "train_dataloader.pt").write_bytes(b"")
    shutil.copy(config, step / "config.yaml")
    traces = tmp_path / "traces" / "rl.jsonl"
    rows = traces.read_text()
    traces.write_text("".join(reversed(rows.splitlines(keepends=True))))  # same rows and images, another order
    with pytest.raises(DataChangedError) as info:
        driver.run("rl", config)
    assert "\n" not in str(info.value)
    assert f"data.traces_dir rl.jsonl: recorded sha256 {record['traces']['rl.jsonl'][:12]}, now" in str(info.value)
    assert json.loads((ckpt / "data.json").read_text()) == record
    traces.write_text(rows)
    with pytest.raises(RayStarted):  # the data its checkpoints were trained on: resumed
        driver.run("rl", config)


def test_a_missing_directory_or_malformed_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--config .*nope.yaml: no such file"):
        driver.run("rl", tmp_path / "nope.yaml")
    with pytest.raises(UserError, match=f"--config {tmp_path}: a directory"):
        driver.run("sft", tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo: {max_num_steps: 3\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.yaml: not valid YAML \(while parsing a flow mapping"):
        driver.run("rl", bad)

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
    (_section(plan=_DROP), [], r"spatialiq\.plan is absent .* regenerate it with `spatialiq recipes nemo-rl`"),
    (_section(plan={"phase": "rl"}), [], r"spatialiq\.plan is not a plan record"),
    (None, ["checkpointing.checkpoint_dir=null"], "checkpoint_dir is not set"),
])
def test_config_errors_name_the_key(tmp_path: Path, edit: Any, overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        driver.run("rl", _config(tmp_path, edit=edit), overrides)


def test_validation_asked_for_without_a_split_is_refused(tmp_path: Path, placement: Placement,
                                                         ray_driver: str) -> None:
    path = _config(tmp_path, overrides=["data.eval_split=null", "rl.validation.every_steps=null",
                                        "sft.validation.every_steps=null"])
    with pytest.raises(PlacementReached):
        driver.run("rl", path)  # as generated: no validation set, val_period 0
    assert placement.state["val_dataloader"] is None and placement.state["master_config"].grpo["val_period"] == 0
    with pytest.raises(UserError, match="ask for validation but the recipe gives no validation split"):
        driver.run("rl", path, ["grpo.val_period=5"])


@pytest.mark.parametrize(("edit", "overrides", "message"), [
    (lambda c: c["env"].update(spatialiq={"reward": {"format": 1.0}}), [],
     r"env is .* the recipe gives \{'spatialiq': \{'reward': \{'format': 0\.1, 'integer_distance': 0\.9\}\}"),
    (None, ["data.train.data_path=/elsewhere/rl.jsonl"], r"data\.train is \{.*'/elsewhere/rl\.jsonl'"),
    (None, ["data.default.max_pixels=802816"], r"data\.default is .* the recipe gives .*'max_pixels': 12544"),
    (lambda c: c["spatialiq"]["plan"]["data"].update(train_split="warmup"),  # the plan the driver trains with
     [], r"data\.train is .*'split': 'rl'.* the recipe gives .*'split': 'warmup'"),
    (None, ["policy.generation.vllm_cfg.skip_tokenizer_init=true"],
     r"policy\.generation\.vllm_cfg\.skip_tokenizer_init is True, the recipe gives False"),
    (None, ["checkpointing.metric_name=val:loss"], r"checkpointing\.metric_name is 'val:loss'"),
    (None, ["checkpointing.save_consolidated=false"], r"checkpointing\.save_consolidated is False"),
    (lambda c: c.pop("env"), [], r"env is absent"),
    (None, ["grpo.adv_estimator.use_leave_one_out_baseline=true"],  # tiny_cpu: group mean, group std
     r"grpo\.adv_estimator\.use_leave_one_out_baseline is True, the recipe gives False"),
    (None, ["grpo.normalize_rewards=false"], r"grpo\.normalize_rewards is False, the recipe gives True"),
])
def test_project_pieces_differing_from_the_recipe_are_refused_not_rewritten(
        tmp_path: Path, edit: Any, overrides: list[str], message: str, placement: Placement) -> None:
    with pytest.raises(UserError, match=message) as info:
        driver.run("rl", _config(tmp_path, edit=edit), overrides)
    assert "regenerate the config with `spatialiq recipes nemo-rl`" in str(info.value)
    assert placement.calls == 0


def test_no_spatialiq_section_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no 'spatialiq' section"):
        driver.run("rl", _config(tmp_path, edit=lambda c: c.pop("spatialiq")))


@pytest.mark.parametrize(("phase", "message"), [
    ("rl", r"rl.prompts_per_step = 4 prompts per step is larger than spatialiq:.*rl.jsonl, which has 3 rows"),
    ("sft", r"sft.optimizer.global_batch_size = 4 sequences per step is larger than .*warmup.jsonl, which has 3"),
])
def test_a_batch_larger_than_the_split_is_refused_before_any_work(tmp_path: Path, placement: Placement,
                                                                  phase: str, message: str) -> None:
    """Issue 44, item 3: v0.7.0's loaders keep whole batches only, so this run would train no step and end as if
    finished; the driver refuses it before Ray, logs or checkpoints (data.max_examples counted)."""
    config = _config(tmp_path, phase, ["data.max_examples=3"])
    with pytest.raises(UserError, match=message):
        driver.run(phase, config)  # type: ignore[arg-type]
    assert placement.calls == 0 and not (tmp_path / "nemo_rl").exists()
