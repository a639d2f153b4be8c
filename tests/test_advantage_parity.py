"""The recipe's advantages (`rl.advantage`) are the same on both engines' code paths, for every combination.

TRL path: `train.advantages.recipe_advantages`, what `RecipeAdvantageMixin` puts in place of TRL 1.16's own
advantages (checked below inside a real `GRPOTrainer` batch). NeMo-RL path: the per-view wrapper the driver installs
at v0.7.0's advantage estimator's call site (`nemo.grouping.view_baseline`), followed by the estimator's arithmetic
(`r - baseline`, divided by `std + 1e-6` where `std > 0` when it normalises); the NeMo-RL stage checks that wrapper
inside v0.7.0's real estimator and against v0.7.0's own function (tests/engines/nemo/test_grouping.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _advantage_cases import CASES, COMBINATIONS
from _train_support import tiny_model_dir, tiny_recipe, write_traces

from spatialiq_train.core.advantages import advantages, baseline_and_std
from spatialiq_train.core.recipe_model import RLSection
from spatialiq_train.core.recipes import RecipeError, recipe_from_dict
from spatialiq_train.nemo.grouping import view_baseline
from spatialiq_train.nemo.recipe_values import adv_estimator
from spatialiq_train.train.advantages import recipe_advantages


def _nemo_path(rewards: list[float], g: int, baseline: str, std: str, valid: list[int] | None) -> np.ndarray:
    r = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.ones_like(r) if valid is None else torch.tensor(valid, dtype=torch.float32)
    prompts = torch.full((r.numel(), 3), 7)
    call = view_baseline(g, baseline, std)
    b, s = call(prompts, r, mask, leave_one_out_baseline=adv_estimator(baseline, std)["use_leave_one_out_baseline"])
    adv = r - b
    if adv_estimator(baseline, std)["normalize_rewards"]:
        adv = torch.where(s > 0, adv / (s + 1e-6), adv)
    return adv.numpy()


def _trl_path(rewards: list[float], g: int, baseline: str, std: str, valid: list[int] | None) -> np.ndarray:
    r = torch.tensor(rewards, dtype=torch.float32)
    if valid is not None:  # TRL's unscored rows: every reward function returned None (NaN)
        r = torch.where(torch.tensor(valid).bool(), r, torch.full_like(r, float("nan")))
    return recipe_advantages(r[:, None], torch.ones(1), g, baseline, std).numpy()


@pytest.mark.parametrize(("baseline", "std"), COMBINATIONS)
@pytest.mark.parametrize(("name", "g", "rewards", "valid"), CASES, ids=[c[0] for c in CASES])
def test_parity_of_advantages_trl_and_nemo_paths(baseline: str, std: str, name: str, g: int, rewards: list[float],
                                                  valid: list[int] | None) -> None:
    nemo = _nemo_path(rewards, g, baseline, std, valid)
    trl = _trl_path(rewards, g, baseline, std, valid)
    keep = np.ones(len(rewards), bool) if valid is None else np.asarray(valid, bool)
    assert trl[keep] == pytest.approx(nemo[keep], abs=1e-6), (name, trl, nemo)
    assert (trl[~keep] == 0).all()  # an unscored (masked) sample carries no advantage on TRL; none in NeMo's loss
    if name == "all equal":
        assert np.abs(trl).max() < 1e-6  # a view whose samples agree pushes nothing
    if name == "one valid sample":
        assert trl[0] == 0.0  # the view's only valid sample: baseline = its reward


# The rewards [1, 0, 0, 0, 0, 0, 0, 0] table of docs/training.md: (correct, each wrong, sum over the view)
TABLE = {("group_mean", "none"): (0.875, -0.125, 0.0), ("group_mean", "group"): (2.475, -0.354, 0.0),
         ("group_mean", "leave_one_out"): (0.875, -0.331, -1.44),
         ("leave_one_out", "none"): (1.0, -0.143, 0.0), ("leave_one_out", "group"): (2.828, -0.404, 0.0),
         ("leave_one_out", "leave_one_out"): (1.0, -0.378, -1.646)}


@pytest.mark.parametrize(("baseline", "std"), COMBINATIONS)
def test_parity_of_advantages_the_documented_table(baseline: str, std: str) -> None:
    adv = advantages([1, 0, 0, 0, 0, 0, 0, 0], 8, baseline, std)
    correct, wrong, total = TABLE[(baseline, std)]
    assert (adv[0], adv[1], adv.sum()) == pytest.approx((correct, wrong, total), abs=1e-3)
    assert np.allclose(adv[1:], adv[1])


def test_leave_one_out_std_is_the_std_of_the_other_samples() -> None:
    r = np.array([0.1, 0.82, 1.0, 0.46])
    _, s = baseline_and_std(r, 4, "leave_one_out", "leave_one_out")
    assert s == pytest.approx([np.std(np.delete(r, i), ddof=1) for i in range(4)])
    _, s = baseline_and_std(r, 4, "group_mean", "group")
    assert s == pytest.approx([np.std(r, ddof=1)] * 4)


def test_scale_rewards_is_retired_with_the_equivalent_value() -> None:
    with pytest.raises(RecipeError, match=r"rl.scale_rewards is retired.*rl.advantage \{baseline: group_mean, "
                                          r"std: group\}"):
        recipe_from_dict({"name": "x", "rl": {"scale_rewards": "group"}})
    with pytest.raises(RecipeError, match="advantage"):
        recipe_from_dict({"name": "x", "rl": {"advantage": {"std": "batch"}}})
    assert RLSection().advantage.model_dump() == {"baseline": "group_mean", "std": "group"}


def _reward(completions, answer, **kwargs):  # noqa: ANN001, ANN202
    """Varying within every view: 1 for the first sample of each 4, else a value set by the position."""
    return [1.0 if i % 4 == 0 else 0.1 * (i % 4) for i in range(len(answer))]


@pytest.mark.parametrize(("baseline", "std"), [("leave_one_out", "leave_one_out"), ("group_mean", "none")])
def test_parity_of_advantages_inside_trls_trainer(tmp_path: Path, baseline: str, std: str) -> None:
    """A real TRL GRPOTrainer batch (tiny model, CPU generation): the advantages it hands the loss are the recipe's
    over the rewards it scored, not TRL's own group normalisation."""
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.rl import RewardSetup, rl_phase

    traces = write_traces(tmp_path, "rl", 4, np.random.default_rng(0), answer=lambda i: 3)
    recipe = tiny_recipe(["rl.optimizer.max_steps=1", "rl.num_generations=4", "rl.prompts_per_step=2",
                          "logging.save_steps=100",
                          "generation.max_completion_length=4", "rl.overlong.enabled=false",
                          f"rl.advantage.baseline={baseline}", f"rl.advantage.std={std}"])
    data = load_split(traces, "rl", tmp_path, "rl")
    trainer, _ = build_phase_trainer(rl_phase(rewards=RewardSetup([_reward], [1.0], [True])), recipe, tiny_model_dir(),
                                     data, tmp_path / "out")
    trainer.model.train()
    out = trainer._generate_and_score_completions([data[0]] * 4 + [data[1]] * 4)
    rewards = [1.0, 0.1, 0.2, 0.3] * 2
    assert out["advantages"].numpy() == pytest.approx(advantages(rewards, 4, baseline, std), abs=1e-6)
