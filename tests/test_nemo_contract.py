"""End to end on CPU: what `spatialiq recipes nemo-rl` writes is what `spatialiq nemo rl|sft --config` runs, with no
hand edits, for every shipped DAPO and SFT recipe; and the Slurm job's two commands are the CLI's.

The driver runs against the v0.7.0 stand-ins (`spatialiq_train.nemo.standins`) on three-row traces, with the
recipe's model swapped for the offline tiny Qwen2.5-VL (a recipe override, as a user would pass it). The expected
values are read from the recipe independently of the NeMo-RL mapping, so a wrong mapping fails here even when
generator and driver agree with each other.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _train_support import one_thread, tiny_model_dir, write_traces
from test_slurm_scripts import SLURM, TRAINING, fake_slurm, plan, run  # noqa: F401 - fake_slurm is a fixture
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.nemo import driver
from spatialiq_train.nemo.env import ACTOR_CLASSES, TRAIN_ENV, VAL_ENV
from spatialiq_train.nemo.paper import get_path
from spatialiq_train.nemo.runtime import NemoApi
from spatialiq_train.nemo.standins import StandinRecorder, standin_api
from spatialiq_train.processor import budget_of
from spatialiq_train.recipes import SHIPPED_RECIPES, load_recipe

RECIPES = sorted(p.stem for p in SHIPPED_RECIPES.glob("*.yaml") if p.stem.startswith(("dapo_", "sft_")))
CASES = [(name, "rl") for name in RECIPES if name.startswith("dapo_")] + [(name, "sft") for name in RECIPES]
ROWS = 3


@pytest.fixture(autouse=True)
def _threads() -> None:
    one_thread()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Traces of every split (answers 0, 1, 2) with their images under one root."""
    root = tmp_path_factory.mktemp("siq")
    rng = np.random.default_rng(0)
    for split in ("train", "val", "warmup", "rl"):
        write_traces(root, split, ROWS, rng, answer=lambda i: i)
    return root


def _invoke(args: list[str]) -> Any:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _run_driver(args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[NemoApi, StandinRecorder]:
    """`spatialiq <args>` with the driver on the v0.7.0 stand-ins."""
    api, rec = standin_api()
    monkeypatch.setattr(driver, "load_api", lambda: api)
    _invoke(args)
    return api, rec


def _split_of(dataset: Any) -> str:
    """The split a built dataset read, from its rows' image file names (img/<split>_<i>.png)."""
    found = {re.sub(r"_\d+$", "", Path(row["images"][0]).stem) for row in dataset.dataset}
    assert len(found) == 1, found
    return found.pop()


def _check_dataset(dataset: Any, split: str, phase: str) -> None:
    assert len(dataset) == ROWS and _split_of(dataset) == split
    datum = dataset[1]
    assert datum["task_name"] == "spatialiq" and datum["loss_multiplier"] == 1.0
    if phase == "rl":
        assert datum["extra_env_info"]["answer"] == 1 and datum["vllm_images"]
    else:
        assert datum["message_log"][-1]["role"] == "assistant"


def _expected(recipe: Any, phase: str) -> dict[str, Any]:
    """Key hyperparameters as the recipe states them (not through the NeMo-RL mapping)."""
    if phase == "rl":
        r, opt = recipe.rl, recipe.rl.optimizer
        return {"grpo.num_prompts_per_step": 8, "grpo.num_generations_per_prompt": r.num_generations,
                "policy.train_global_batch_size": 8 * r.num_generations,
                "policy.optimizer.kwargs.lr": opt.learning_rate,
                "policy.optimizer.kwargs.weight_decay": opt.weight_decay,
                "policy.optimizer.kwargs.betas": [opt.adam_beta1, opt.adam_beta2],
                "loss_fn.ratio_clip_min": r.epsilon, "loss_fn.ratio_clip_max": r.epsilon_high,
                "loss_fn.reference_policy_kl_penalty": r.beta, "loss_fn.reference_policy_kl_type": r.kl_estimator,
                "grpo.use_dynamic_sampling": r.dynamic_sampling.enabled,
                "grpo.dynamic_sampling_max_gen_batches": r.dynamic_sampling.max_refill_rounds,
                "grpo.max_num_steps": opt.max_steps, "grpo.val_period": r.validation.every_steps,
                "grpo.max_val_samples": r.validation.max_samples,
                "policy.generation.max_new_tokens": recipe.generation.max_completion_length,
                "checkpointing.metric_name": "val:accuracy"}
    s, opt = recipe.sft, recipe.sft.optimizer
    return {"policy.train_global_batch_size": 16, "policy.optimizer.kwargs.lr": opt.learning_rate,
            "policy.optimizer.kwargs.weight_decay": opt.weight_decay,
            "policy.optimizer.kwargs.betas": [opt.adam_beta1, opt.adam_beta2],
            "sft.max_num_epochs": math.ceil(opt.num_train_epochs), "sft.val_period": s.validation.every_steps,
            "sft.val_batches": s.validation.max_samples // 8, "checkpointing.metric_name": "val:val_loss"}


def _check_rl(api: NemoApi, rec: StandinRecorder, recipe: Any) -> Any:
    for name, fqn in ACTOR_CLASSES.items():  # registered in both registries NeMo-RL consults
        assert rec.env_registry[name] == {"actor_class_fqn": fqn}
        assert rec.actor_registry[fqn] == api.system_executable
    envs = {c["env_name"]: c["env_config"] for c in rec.called("create_env")}
    assert set(envs) == {TRAIN_ENV, VAL_ENV}
    assert envs[TRAIN_ENV]["reward"] == recipe.reward.weights and envs[VAL_ENV]["reward"] == "exact_match"
    (setup,) = rec.called("grpo_setup")
    _check_dataset(setup["dataset"], recipe.data.rl_split, "rl")
    _check_dataset(setup["val_dataset"], recipe.data.eval_split, "rl")
    (train,) = rec.called("grpo_train")
    assert train["task_to_env"]["spatialiq"].env_name == TRAIN_ENV
    assert train["val_task_to_env"]["spatialiq"].env_name == VAL_ENV
    assert train["master_config"] is setup["master_config"]
    return setup["processor"], setup["master_config"]


def _check_sft(api: NemoApi, rec: StandinRecorder, recipe: Any) -> Any:
    assert rec.called("create_env") == [] and not set(ACTOR_CLASSES) & set(rec.env_registry)
    (setup,) = rec.called("sft_setup")
    _check_dataset(setup["train_dataset"], recipe.data.sft_split, "sft")
    _check_dataset(setup["val_dataset"], recipe.data.eval_split, "sft")
    (train,) = rec.called("sft_train")
    assert train["tokenizer"] is setup["tokenizer"] and train["master_config"] is setup["master_config"]
    return setup["tokenizer"], setup["master_config"]


@pytest.mark.parametrize(("name", "phase"), CASES)
def test_generated_config_runs_as_written(name: str, phase: str, data_root: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "nemo.yaml"
    sets = [f"data.traces_dir={data_root / 'traces'}", f"data.data_root={data_root}",
            f"model.name_or_path={tiny_model_dir()}", f"run.output_dir={tmp_path / 'run'}"]
    _invoke(["recipes", "nemo-rl", name, "--out", str(cfg), "--phase", phase, "--nodes", "1", "--gpus-per-node", "4",
             *(a for s in sets for a in ("--set", s))])
    written = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    assert written["spatialiq"] == {"recipe": name, "recipe_overrides": sets, "phase": phase}

    api, rec = _run_driver(["nemo", phase, "--config", str(cfg)], monkeypatch)
    recipe = load_recipe(name, sets)
    processor, master = (_check_rl if phase == "rl" else _check_sft)(api, rec, recipe)
    assert budget_of(processor) == (recipe.model.min_pixels, recipe.model.max_pixels)  # 3136, 200704
    ran = master.model_dump()
    for path, want in _expected(recipe, phase).items():
        assert get_path(ran, path) == get_path(written, path) == want, path
    assert ran["spatialiq"] == written["spatialiq"] and ran["data"] == written["data"]
    split = recipe.data.rl_split if phase == "rl" else recipe.data.sft_split
    assert written["data"]["train"]["data_path"] == str(data_root / "traces" / f"{split}.jsonl")
    assert written["data"]["default"]["data_root"] == str(data_root)
    assert (written["data"]["default"]["min_pixels"], written["data"]["default"]["max_pixels"]) == budget_of(processor)


@pytest.mark.parametrize("script", ["dapo_7b.sh", "sft_cot_32b.sh"])
def test_slurm_jobs_generator_and_driver_commands_are_the_clis(fake_slurm: Path, data_root: Path, script: str,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's two srun steps, fed to the CLI as they stand, write a config and run it."""
    recipe, phase, _ = TRAINING[script]
    proc, _ = run(script, fake_slurm, 2, in_job=True, DRY_RUN="1", INIT_FROM="none",
                  TRACES_DIR=str(data_root / "traces"), DATASET=str(data_root),
                  EXTRA_SETS=f"model.name_or_path={tiny_model_dir()}")
    assert proc.returncode == 0, proc.stderr
    cmds = plan(proc.stdout)
    (gen,) = [c for c in cmds if "nemo-rl" in c]
    (drv,) = [c for c in cmds if c[-4:-2] == ["nemo", phase]]
    for cmd in (gen, drv):
        assert cmd[cmd.index("-m") - 1:cmd.index("-m") + 2] == ["python", "-m", "spatialiq_train.cli"]
    _invoke(gen[gen.index("spatialiq_train.cli") + 1:])
    config = Path(drv[-1])
    assert config == Path(gen[gen.index("--out") + 1])
    written = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert written["spatialiq"]["recipe"] == recipe and written["spatialiq"]["phase"] == phase
    assert written["spatialiq"]["recipe_overrides"] == [gen[i + 1] for i, a in enumerate(gen) if a == "--set"]
    _, rec = _run_driver(drv[drv.index("spatialiq_train.cli") + 1:], monkeypatch)
    assert len(rec.called("grpo_setup" if phase == "rl" else "sft_setup")) == 1


def test_slurm_knows_the_drivers_dynamic_sampling_exit_status() -> None:
    text = (SLURM / "nemo_common.sh").read_text(encoding="utf-8")
    assert f"SIQ_EXIT_DYNAMIC_SAMPLING_CAP={driver.EXIT_DYNAMIC_SAMPLING_CAP} " in text
    assert driver.DynamicSamplingCapError("x").exit_code == driver.EXIT_DYNAMIC_SAMPLING_CAP == 3
