"""The shared phase runner: one optimizer section for SFT and RL mapped one to one onto TrainingArguments, the
old flat spelling still loading, the warm-start schedule, validation arguments and the LoRA export."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from _train_support import one_thread, tiny_model_dir, tiny_recipe, write_traces

from spatialiq_train.core.recipe_model import OPTIMIZER_KEYS
from spatialiq_train.core.recipes import RecipeError, recipe_from_dict
from spatialiq_train.train.mapper import OPTIMIZER_ARGS
from spatialiq_train.train.phase import warmup_factor

one_thread()


def test_every_optimizer_key_is_a_training_arguments_field() -> None:
    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    passed = [k for k in OPTIMIZER_KEYS if k in OPTIMIZER_ARGS]
    assert set(passed) == set(OPTIMIZER_ARGS) and not [k for k in passed if k not in fields]


def test_optimizer_keys_have_one_spelling() -> None:
    nested = recipe_from_dict({"name": "x", "rl": {"optimizer": {"learning_rate": 1e-6, "weight_decay": 0.01}}})
    assert nested.rl.optimizer.learning_rate == 1e-6
    assert nested.rl.optimizer.lr_scheduler_type == "constant_with_warmup"  # the RL phase default is kept
    assert recipe_from_dict({"name": "x",
                             "sft": {"optimizer": {"weight_decay": 0.01}}}).sft.optimizer.learning_rate == 2e-5
    with pytest.raises(RecipeError, match="unknown key 'rl.learning_rate' did you mean 'rl.optimizer.learning_rate'"):
        recipe_from_dict({"name": "x", "rl": {"learning_rate": 1e-6}})
    assert not hasattr(nested.rl, "learning_rate")


def test_an_override_sets_the_nested_key() -> None:
    recipe = tiny_recipe(["rl.optimizer.learning_rate=0.5", "sft.optimizer.max_steps=3"])
    assert (recipe.rl.optimizer.learning_rate, recipe.sft.optimizer.max_steps) == (0.5, 3)


def test_warmup_factor_is_linear_from_the_start_factor_then_constant() -> None:
    assert [warmup_factor(s, 4, 0.1) for s in range(6)] == pytest.approx([0.1, 0.325, 0.55, 0.775, 1.0, 1.0])
    assert warmup_factor(0, 0, 0.1) == 1.0
    with pytest.raises(RecipeError, match="warmup_start_factor 0.1 needs lr_scheduler_type constant_with_warmup"):
        tiny_recipe(["rl.optimizer.warmup_start_factor=0.1", "rl.optimizer.lr_scheduler_type=cosine"])


def test_optimizer_and_validation_reach_the_sft_config(tmp_path: Path) -> None:
    from spatialiq_train.train.sft import sft_config

    recipe = tiny_recipe(["sft.optimizer.adam_beta2=0.98", "sft.optimizer.weight_decay=0.01",
                          "sft.validation.every_steps=2", "sft.validation.early_stopping_patience=3",
                          "data.eval_split=val", "logging.save_steps=4"])
    cfg = sft_config(recipe, tmp_path)
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.weight_decay) == (0.9, 0.98, 0.01)
    assert getattr(cfg.eval_strategy, "value", cfg.eval_strategy) == "steps" and cfg.eval_steps == 2
    assert (cfg.metric_for_best_model, cfg.greater_is_better, cfg.load_best_model_at_end) == ("eval_loss", False, True)
    with pytest.raises(RecipeError, match=r"save_steps \(3\) must be a multiple of sft.validation.every_steps"):
        tiny_recipe(["sft.validation.every_steps=2", "sft.validation.early_stopping_patience=3",
                     "data.eval_split=val", "logging.save_steps=3"])
    with pytest.raises(RecipeError, match="needs data.eval_split"):
        tiny_recipe(["rl.validation.every_steps=2"])


def test_warm_start_schedule_starts_at_the_factor(tmp_path: Path) -> None:
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.sft import sft_phase

    traces = write_traces(tmp_path, "warmup", 4, np.random.default_rng(0), answer=lambda i: i)
    recipe = tiny_recipe(["sft.optimizer.lr_scheduler_type=constant_with_warmup", "sft.optimizer.warmup_steps=4",
                          "sft.optimizer.warmup_start_factor=0.1", "sft.optimizer.learning_rate=0.01"])
    trainer, _ = build_phase_trainer(sft_phase(), recipe, tiny_model_dir(),
                                     load_split(traces, "warmup", tmp_path, "sft"), tmp_path / "sft")
    trainer.create_optimizer()
    scheduler = trainer.create_scheduler(10, trainer.optimizer)
    lrs = []
    for _ in range(6):
        lrs.append(scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([0.001, 0.00325, 0.0055, 0.00775, 0.01, 0.01])


@pytest.mark.parametrize("micro", ["null", "2"])
def test_an_epochs_tail_is_left_out_whatever_the_accumulation(tmp_path: Path, micro: str) -> None:
    """6 rows at a global batch of 4: one step of 4 rows per epoch, by whole share (micro 4) or in 2 micro-batches
    of 2 (the transformers loop would otherwise train a second step on the 2-row tail); the same on any number of
    processes, whose shares of a whole global batch are whole micro-batches."""
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.sft import sft_phase

    traces = write_traces(tmp_path, "warmup", 6, np.random.default_rng(0), answer=lambda i: i)
    recipe = tiny_recipe(["sft.optimizer.max_steps=-1", "sft.optimizer.num_train_epochs=2",
                          f"sft.optimizer.micro_batch_size={micro}", "logging.save_steps=100"])
    trainer, _ = build_phase_trainer(sft_phase(), recipe, tiny_model_dir(),
                                     load_split(traces, "warmup", tmp_path, "sft"), tmp_path / "sft")
    loader = trainer.get_train_dataloader()
    assert sum(len(b["input_ids"]) for b in loader) == 4  # one whole global batch of the 6 rows
    trainer.train()
    assert trainer.state.global_step == 2  # 2 epochs x 1 step; the core's step budget says the same
    from spatialiq_train.core.resolve import Hardware, resolve, step_budget

    assert step_budget(resolve(recipe, "sft", Hardware(gpu=False)), 6) == 2


def test_every_vllm_key_maps_onto_a_grpo_config_field() -> None:
    from trl import GRPOConfig

    from spatialiq_train.core.recipe_model import VLLM_TO_GRPO, VllmSection

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(VLLM_TO_GRPO) == set(VllmSection.model_fields) - {"enabled"}  # every key but the switch is mapped
    assert not [grpo for grpo in VLLM_TO_GRPO.values() if grpo not in fields]
    assert len(set(VLLM_TO_GRPO.values())) == len(VLLM_TO_GRPO)  # one to one


def test_vllm_section_reaches_grpo_config_when_usable() -> None:
    from spatialiq_train.core.resolve import Hardware, resolve
    from spatialiq_train.train.mapper import config_kwargs

    recipe = tiny_recipe(["run.device=auto", "vllm.enabled=true", "vllm.mode=server", "vllm.tensor_parallel_size=2",
                          "vllm.max_model_len=64", "vllm.enable_sleep_mode=true", "vllm.server_host=10.0.0.2",
                          "vllm.server_port=8123", "vllm.gpu_memory_utilization=0.45"])
    cpu = config_kwargs(resolve(recipe, "rl", Hardware(gpu=False, vllm_importable=True)), "out")
    assert cpu["use_vllm"] is False  # CPU: transformers generates
    args = config_kwargs(resolve(recipe, "rl", Hardware(gpu=True, vllm_importable=True)), "out")
    assert {k: v for k, v in args.items() if k.startswith(("vllm", "use_vllm"))} == {
        "use_vllm": True, "vllm_mode": "server", "vllm_gpu_memory_utilization": 0.45,
        "vllm_tensor_parallel_size": 2, "vllm_max_model_length": 64, "vllm_enable_sleep_mode": True,
        "vllm_server_host": "10.0.0.2", "vllm_server_port": 8123,
        "vllm_importance_sampling_correction": False, "vllm_importance_sampling_mode": "sequence_mask",
        "vllm_importance_sampling_clip_max": 3.0, "vllm_importance_sampling_clip_min": None}
    with pytest.raises(RecipeError, match=r"vllm.max_model_len \(24\) must exceed generation.max_completion_length"):
        tiny_recipe(["vllm.max_model_len=24"])


@pytest.mark.slow
def test_both_phases_validate_on_the_eval_split(tmp_path: Path) -> None:
    from spatialiq_train.core.metrics import read_metrics
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.rl import rl_phase
    from spatialiq_train.train.sft import sft_phase

    rng = np.random.default_rng(5)
    write_traces(tmp_path, "warmup", 8, rng, answer=lambda i: i % 10)
    write_traces(tmp_path, "rl", 8, rng, answer=lambda i: 3)
    traces = write_traces(tmp_path, "val", 4, rng, answer=lambda i: 3)
    recipe = tiny_recipe([f"data.traces_dir={traces}", f"data.data_root={tmp_path}", "data.eval_split=val",
                          "sft.optimizer.max_steps=6", "sft.validation.every_steps=2",
                          "sft.optimizer.learning_rate=1e-12",
                          "sft.validation.early_stopping_patience=1", "sft.validation.early_stopping_min_delta=0.5",
                          "rl.optimizer.max_steps=2", "rl.validation.every_steps=2", "rl.validation.max_samples=4",
                          "logging.save_steps=2"])
    init = run_phase(sft_phase(), recipe, tmp_path / "sft", model_path=tiny_model_dir())
    sft_eval = [r for r in read_metrics(tmp_path / "sft" / "metrics.jsonl") if "eval/loss" in r]
    assert [r["step"] for r in sft_eval] == [2, 4]  # a frozen loss never improves by 0.5: stopped after 2 checks
    run_phase(rl_phase(), recipe, tmp_path / "rl", model_path=str(init))
    rl_eval = [r for r in read_metrics(tmp_path / "rl" / "metrics.jsonl") if "eval/exact_match" in r]
    assert [r["step"] for r in rl_eval] == [2] and 0.0 <= rl_eval[0]["eval/exact_match"] <= 1.0
