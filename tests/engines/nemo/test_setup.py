"""Every shipped recipe phase, as ``spatialiq recipes nemo-rl`` writes it and ``spatialiq nemo rl|sft`` runs it,
passes the real v0.7.0 ``grpo.setup`` / ``sft.setup`` up to GPU placement (config access, data loaders, tokenizer
and processor, our environments as Ray actors, logger, checkpointing)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _nemo_support import CASES, ROWS, Placement, PlacementReached, run_driver, write_all_traces, write_config

from spatialiq_train.core.recipes import load_recipe


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_all_traces(tmp_path_factory.mktemp("siq"))


def _expected(recipe: Any, phase: str) -> dict[str, Any]:
    """Key values as the recipe states them (read from the recipe, not through the NeMo-RL mapping)."""
    if phase == "rl":
        r, opt = recipe.rl, recipe.rl.optimizer
        return {"grpo.num_generations_per_prompt": r.num_generations,
                "policy.optimizer.kwargs.lr": opt.learning_rate,
                "policy.optimizer.kwargs.weight_decay": opt.weight_decay,
                "loss_fn.ratio_clip_min": r.epsilon, "loss_fn.ratio_clip_max": r.epsilon_high,
                "loss_fn.reference_policy_kl_penalty": r.beta,
                "grpo.use_dynamic_sampling": r.dynamic_sampling.enabled,
                "grpo.dynamic_sampling_max_gen_batches": r.dynamic_sampling.max_refill_rounds,
                "grpo.reward_shaping.max_response_length":
                    r.overlong.max_response_length or recipe.generation.max_completion_length,
                "policy.generation.max_new_tokens": recipe.generation.max_completion_length}
    s, opt = recipe.sft, recipe.sft.optimizer
    budget = opt.max_steps if opt.max_steps > 0 else None  # one step budget: epochs never stop a step-bounded run
    return {"policy.optimizer.kwargs.lr": opt.learning_rate,
            "sft.max_num_epochs": budget or math.ceil(opt.num_train_epochs),
            "sft.val_period": s.validation.every_steps}


def _get(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree[part]
    return tree


@pytest.mark.parametrize(("name", "phase"), CASES)
def test_generated_config_reaches_gpu_placement(name: str, phase: str, data_root: Path, tmp_path: Path,
                                               placement: Placement, ray_driver: str) -> None:
    cfg, written = write_config(name, phase, data_root, tmp_path)
    result = run_driver(phase, cfg)
    assert isinstance(result.exception, PlacementReached), result.output
    assert placement.calls == 1
    state = placement.state
    master = state["master_config"]
    ran = master.model_dump() if hasattr(master, "model_dump") else dict(master)
    recipe = load_recipe(name, written["spatialiq"]["recipe_overrides"])
    for path, want in _expected(recipe, phase).items():
        assert _get(ran, path) == want, path  # what v0.7.0 runs with, against the recipe itself
    # what the real set-up built from our datasets, before it asked for GPUs
    train_loader = state["dataloader" if phase == "rl" else "train_dataloader"]
    assert len(train_loader.dataset) == ROWS
    first = train_loader.dataset[0]
    assert first["task_name"] == "spatialiq" and first["loss_multiplier"] == 1.0
    split = recipe.data.rl_split if phase == "rl" else recipe.data.sft_split
    assert Path(train_loader.dataset.dataset[0]["images"][0]).name.startswith(f"{split}_")
    assert state["val_dataloader"] is not None and len(state["val_dataloader"].dataset) == ROWS
    # the cluster NeMo-RL asks Ray for: the allocation the config was written for
    kwargs = state["_cluster_kwargs"]
    assert kwargs["bundle_ct_per_node_list"] == [written["cluster"]["gpus_per_node"]] * written["cluster"]["num_nodes"]
    # the logger wrote where docs/cluster.md says: <log_dir>/exp_NNN/tensorboard
    log_dir = Path(written["logger"]["log_dir"])
    assert [p.name for p in log_dir.glob("exp_*/tensorboard")] == ["tensorboard"]


def test_a_misspelled_override_is_refused_by_nemo_rl(data_root: Path, tmp_path: Path, placement: Placement) -> None:
    cfg, _ = write_config("dapo_tight_7b", "rl", data_root, tmp_path)
    result = run_driver("rl", cfg, "grpo.use_dynamic_samplng=false")
    assert result.exit_code == 2 and "use_dynamic_samplng" in result.output
    assert placement.calls == 0
