"""TRL's vLLM importance-sampling correction as recipe keys: TRL 1.16 turns it on by default as soon as vLLM
generates, NeMo-RL v0.7.0 and the released config leave it off. Every shipped RL recipe says which it wants, the
keys reach GRPOConfig under TRL's names, and impossible bounds are refused when the recipe loads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from _train_support import REPO, tiny_recipe

from spatialiq_train.core.recipes import RecipeError

IS_KEYS = ("importance_sampling_correction", "importance_sampling_mode", "importance_sampling_clip_max",
           "importance_sampling_clip_min")
RL_RECIPES = sorted(p for p in [*REPO.glob("recipes/*.yaml"), *REPO.glob("recipes/experiments/*.yaml")]
                    if "rl" in (yaml.safe_load(p.read_text(encoding="utf-8")) or {}))


def test_trl_defaults_are_what_the_docs_say() -> None:
    from trl import GRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert defaults["vllm_importance_sampling_correction"] is True  # on by default with use_vllm
    assert defaults["vllm_importance_sampling_mode"] == "sequence_mask"
    assert (defaults["vllm_importance_sampling_clip_max"], defaults["vllm_importance_sampling_clip_min"]) == (3.0, None)


def test_nemo_rl_default_and_the_released_config_leave_the_correction_off(shared_dir: Path) -> None:
    released = yaml.safe_load((shared_dir / "fixtures/released_configs/grpo_spatialiq.yaml").read_text())
    assert released["loss_fn"]["use_importance_sampling_correction"] is False
    assert released["loss_fn"]["truncated_importance_sampling_ratio"] is None
    source = (shared_dir / "vendor/nemo-rl-v0.7.0/nemo_rl/algorithms/loss/loss_functions.py").read_text()
    assert "use_importance_sampling_correction: bool = False" in source


@pytest.mark.parametrize("path", RL_RECIPES, ids=lambda p: p.name)
def test_every_shipped_rl_recipe_sets_the_correction_explicitly_and_off(path: Path) -> None:
    vllm = yaml.safe_load(path.read_text(encoding="utf-8")).get("vllm") or {}
    assert [k for k in IS_KEYS if k not in vllm] == [], f"{path.name}: vllm section lacks these keys"
    assert vllm["importance_sampling_correction"] is False  # as the paper's NeMo-RL run


def test_rl_recipes_are_found() -> None:
    assert {"dapo_tight_7b.yaml", "dapo_tight_32b.yaml", "tiny_cpu.yaml"} <= {p.name for p in RL_RECIPES}


def test_the_keys_reach_grpo_config_with_vllm(tmp_path: Path) -> None:
    from spatialiq_train.core.resolve import Hardware, resolve
    from spatialiq_train.train import rl
    from spatialiq_train.train.phase import phase_config

    def config(recipe):  # noqa: ANN001, ANN202 - a GPU run with vLLM importable, as its plan decides
        plan = resolve(recipe, "rl", Hardware(gpu=True, vllm_importable=True))
        return phase_config(rl.rl_phase(rewards=rl.RewardSetup([], [0.1, 0.9], [])), plan, tmp_path)

    recipe = tiny_recipe(["run.device=auto", "vllm.enabled=true", "vllm.importance_sampling_correction=true",
                          "vllm.importance_sampling_mode=token_truncate",
                          "vllm.importance_sampling_clip_max=2.0", "vllm.importance_sampling_clip_min=0.5"])
    on = config(recipe)
    assert on.use_vllm and on.vllm_importance_sampling_correction
    assert on.vllm_importance_sampling_mode == "token_truncate"
    assert (on.vllm_importance_sampling_clip_min, on.vllm_importance_sampling_clip_max) == (0.5, 2.0)
    off = config(tiny_recipe(["run.device=auto", "vllm.enabled=true"]))
    assert off.use_vllm and off.vllm_importance_sampling_correction is False  # the recipe's value, not TRL's


@pytest.mark.parametrize(("overrides", "message"), [
    (["vllm.importance_sampling_clip_min=3.0"], r"importance_sampling_clip_min \(3.0\) must be below"),
    (["vllm.importance_sampling_mode=sequence_truncate", "vllm.importance_sampling_clip_max=null"],
     "sequence_truncate needs importance_sampling_clip_max or importance_sampling_clip_min"),
    (["vllm.importance_sampling_mode=sequence"], "importance_sampling_mode"),
    (["vllm.importance_sampling_clip_max=0"], "importance_sampling_clip_max"),
])
def test_impossible_importance_sampling_settings_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        tiny_recipe(overrides)
