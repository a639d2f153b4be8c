"""One GRPO group per view (``spatialiq_train.nemo.grouping``) inside v0.7.0's real functions, and the recipe's
advantages (``rl.advantage``) against v0.7.0's own arithmetic and the TRL path.

A reward grid of views, every view tokenising identically (as ours do), goes through v0.7.0's
``calculate_baseline_and_std_per_prompt`` at both call sites, its ``dynamic_sampling`` and its
``GRPOAdvantageEstimator``, with the driver's per-view grouping installed. The advantages must equal, within 1e-6:
v0.7.0's own function and estimator given one distinct prompt per view (for every combination of baseline and std;
a combination v0.7.0 cannot ask for in one call takes the baseline from one call and the std from the other), and
the TRL path's (``train.advantages.recipe_advantages``, what the TRL trainer hands its loss). The views kept are
those the TRL path's filter keeps."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _advantage_cases import CASES, COMBINATIONS

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.groups import filter_groups
from spatialiq_train.nemo.grouping import (
    GroupingError,
    StepCalls,
    check_patch_targets,
    check_supported,
    per_view_groups,
    view_baseline,
)
from spatialiq_train.nemo.recipe_values import adv_estimator

G = 4
GRID = [[1.0, 0.0, 0.0, 0.0],      # one right answer: v0.7.0's per-sample filter dropped the right sample
        [0.55, 0.55, 0.55, 0.55],  # all agree: DAPO drops the whole view
        [0.1, 0.82, 1.0, 0.46],
        [0.0, 0.0, 0.0, 0.0],      # all agree
        [0.3, 0.1, 0.3, 0.2]]


def _master(prompts: int, loo: bool = True, dynamic: bool = True) -> Any:
    return SimpleNamespace(grpo={"num_generations_per_prompt": G, "num_prompts_per_step": prompts,
                                 "use_dynamic_sampling": dynamic, "dynamic_sampling_max_gen_batches": 3,
                                 "use_leave_one_out_baseline": loo, "normalize_rewards": True},
                           env={}, data_plane=None, policy={"generation": {"vllm_cfg": {"async_engine": False}}})


def _batch(grid: list[list[float]]) -> Any:
    import torch
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    rewards = torch.tensor([r for view in grid for r in view])
    n = rewards.numel()
    return BatchedDataDict({"total_reward": rewards, "idx": [i // G for i in range(n)],
                            "loss_multiplier": torch.ones(n)}), torch.ones((n, 5), dtype=torch.long) * 7


def _v070(rewards: list[float], g: int, baseline: str, std: str, valid: list[int] | None) -> np.ndarray:
    """v0.7.0's own function (one distinct prompt per view, so its grouping is per view) and its estimator's
    arithmetic, in float64 (torch's default dtype set to float64 so that v0.7.0's mask matrix follows the rewards: in
    float32 its E[x^2] - E[x]^2 alone moves these advantages by up to 4e-6, which would hide the rule's difference
    in rounding). v0.7.0 ties the std to the baseline's flag: the baseline comes from the call with the
    recipe's baseline flag, the std from the call with the recipe's std flag."""
    import torch
    from nemo_rl.algorithms.advantage_estimator import GRPOAdvantageEstimator
    from nemo_rl.algorithms.utils import calculate_baseline_and_std_per_prompt

    r = torch.tensor(rewards, dtype=torch.float64)
    mask = torch.ones_like(r) if valid is None else torch.tensor(valid, dtype=torch.float64)
    prompts = (torch.arange(r.numel()) // g)[:, None]
    flags = adv_estimator(baseline, std)
    if valid is None and (baseline == "leave_one_out") == (std == "leave_one_out"):
        # the estimator alone can ask for this combination: use it whole
        estimator = GRPOAdvantageEstimator(flags, None)
        return estimator.compute_advantage(prompt_ids=prompts, rewards=r, mask=torch.ones((r.numel(), 2)))[:, 0] \
            .numpy()
    b, _ = calculate_baseline_and_std_per_prompt(prompts, r, mask, leave_one_out_baseline=baseline == "leave_one_out")
    _, s = calculate_baseline_and_std_per_prompt(prompts, r, mask, leave_one_out_baseline=std == "leave_one_out")
    adv = r - b
    if flags["normalize_rewards"]:  # GRPOAdvantageEstimator.compute_advantage's rule
        adv = torch.where(s > 0, adv / (s + 1e-6), adv)
    return adv.numpy()


def _ours_in_the_estimator(rewards: list[float], g: int, baseline: str, std: str,
                           valid: list[int] | None) -> np.ndarray:
    """The driver's wrapper at the estimator's call site, inside v0.7.0's real estimator."""
    import torch
    from nemo_rl.algorithms import advantage_estimator
    from nemo_rl.algorithms.advantage_estimator import GRPOAdvantageEstimator

    r = torch.tensor(rewards, dtype=torch.float64)
    prompts = torch.full((r.numel(), 3), 7)  # every view tokenises identically, as ours do
    wrapper = view_baseline(g, baseline, std)
    if valid is not None:  # the estimator passes all-ones: masked samples go through the wrapper directly
        mask = torch.tensor(valid, dtype=torch.float64)
        b, s = wrapper(prompts, r, mask, leave_one_out_baseline=baseline == "leave_one_out")
        adv = r - b
        return (torch.where(s > 0, adv / (s + 1e-6), adv) if std != "none" else adv).numpy()
    real = advantage_estimator.calculate_baseline_and_std_per_prompt
    advantage_estimator.calculate_baseline_and_std_per_prompt = wrapper
    try:
        estimator = GRPOAdvantageEstimator(adv_estimator(baseline, std), None)
        return estimator.compute_advantage(prompt_ids=prompts, rewards=r, mask=torch.ones((r.numel(), 2)))[:, 0] \
            .numpy()
    finally:
        advantage_estimator.calculate_baseline_and_std_per_prompt = real


@pytest.mark.parametrize(("baseline", "std"), COMBINATIONS)
@pytest.mark.parametrize(("name", "g", "rewards", "valid"), CASES, ids=[c[0] for c in CASES])
def test_parity_of_advantages_with_v070s_own_function(baseline: str, std: str, name: str, g: int,
                                                      rewards: list[float], valid: list[int] | None) -> None:
    import torch

    from spatialiq_train.train.advantages import recipe_advantages

    ours = _ours_in_the_estimator(rewards, g, baseline, std, valid)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        theirs = _v070(rewards, g, baseline, std, valid)
    finally:
        torch.set_default_dtype(default)
    assert ours == pytest.approx(theirs, abs=1e-6), (name, ours, theirs)
    r = torch.tensor(rewards, dtype=torch.float32)
    keep = np.ones(len(rewards), bool) if valid is None else np.asarray(valid, bool)
    if valid is not None:
        r = torch.where(torch.tensor(keep), r, torch.full_like(r, float("nan")))
    trl = recipe_advantages(r[:, None], torch.ones(1), g, baseline, std).numpy()
    assert trl[keep] == pytest.approx(theirs[keep], abs=1e-6), (name, trl, theirs)


def test_parity_of_advantages_released_table_leave_one_out() -> None:
    """The issue's measurement: rewards [1, 0, 0, 0, 0, 0, 0, 0] through v0.7.0 as shipped (leave-one-out baseline
    and std) give +1.00 / -0.378 / sum -1.65; the recipe's leave_one_out/leave_one_out gives the same."""
    adv = _ours_in_the_estimator([1, 0, 0, 0, 0, 0, 0, 0], 8, "leave_one_out", "leave_one_out", None)
    assert (adv[0], adv[1], adv.sum()) == pytest.approx((1.0, -0.378, -1.646), abs=1e-3)


def _nemo(grid: list[list[float]], baseline: str, std: str, prompts: int) -> tuple[Any, Any, Any]:
    import nemo_rl.algorithms.grpo as grpo
    import torch
    from nemo_rl.algorithms.advantage_estimator import GRPOAdvantageEstimator
    from nemo_rl.utils.timer import Timer

    flags = adv_estimator(baseline, std)
    master = _master(prompts, flags["use_leave_one_out_baseline"])
    batch, prompt_ids = _batch(grid)
    with per_view_groups(master, baseline, std):
        b, s = grpo.calculate_baseline_and_std_per_prompt(
            prompt_ids, batch["total_reward"], torch.ones_like(batch["total_reward"]),
            leave_one_out_baseline=flags["use_leave_one_out_baseline"])
        kept, complete, _, _ = grpo.dynamic_sampling(batch, s, b, 1, master, Timer())
        estimator = GRPOAdvantageEstimator(flags, None)
        rows = kept.size
        adv = estimator.compute_advantage(prompt_ids=prompt_ids[:rows], rewards=kept["filtered_reward"],
                                          mask=torch.ones((rows, 3)))
    return kept, complete, adv[:, 0]


@pytest.mark.parametrize(("baseline", "std"), COMBINATIONS)
def test_parity_of_advantages_through_dynamic_sampling_and_the_estimator(baseline: str, std: str) -> None:
    from spatialiq_train.core.advantages import advantages

    keep = filter_groups([r for view in GRID for r in view], G)
    varying = [v for v in range(len(GRID)) if keep[v * G]]
    assert varying == [0, 2, 4]
    kept, complete, adv = _nemo(GRID, baseline, std, prompts=3)
    assert complete and [int(i) for i in kept["idx"]][::G] == varying
    kept_rewards = [r for v in varying for r in GRID[v]]
    assert adv.numpy() == pytest.approx(advantages(kept_rewards, G, baseline, std), abs=1e-6)


def test_rows_that_are_not_whole_views_are_refused() -> None:
    import nemo_rl.algorithms.grpo as grpo
    import torch
    from nemo_rl.utils.timer import Timer

    master = _master(3)
    batch, prompt_ids = _batch(GRID)
    prompt_ids[5, 0] = 8  # view 1 holds two prompts
    with per_view_groups(master, "leave_one_out", "leave_one_out"), pytest.raises(GroupingError, match="rows 4..7"):
        grpo.calculate_baseline_and_std_per_prompt(prompt_ids, batch["total_reward"],
                                                   torch.ones_like(batch["total_reward"]))
    batch, prompt_ids = _batch(GRID)
    batch["idx"][6] = 9  # a sample of another view in view 1's block
    with per_view_groups(master, "leave_one_out", "leave_one_out"), pytest.raises(GroupingError,
                                                                                   match="dataset rows"):
        grpo.dynamic_sampling(batch, torch.ones(20), torch.zeros(20), 1, master, Timer())
    assert grpo.dynamic_sampling.__module__ == "nemo_rl.algorithms.grpo"  # restored on exit


def test_an_estimator_asking_for_another_baseline_is_refused() -> None:
    import torch

    wrapper = view_baseline(G, "leave_one_out", "leave_one_out")
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    with pytest.raises(GroupingError, match="leave_one_out_baseline=False"):
        wrapper(torch.ones((4, 2)), r, torch.ones(4), leave_one_out_baseline=False)


def test_a_step_without_both_call_sites_stops_naming_the_call() -> None:
    calls = StepCalls()
    trained: list[int] = []
    policy = SimpleNamespace(train=lambda *a, **k: trained.append(1))
    calls.guard(policy)
    calls.ran("filter")
    calls.ran("advantages")
    policy.train()
    assert trained == [1]
    calls.ran("filter")  # the advantage estimator's call site did not run this step
    with pytest.raises(GroupingError, match="advantage_estimator.calculate_baseline_and_std_per_prompt"):
        policy.train()
    assert trained == [1]  # stopped before the update


def test_the_patch_targets_are_v070s(monkeypatch: pytest.MonkeyPatch) -> None:
    import nemo_rl
    from nemo_rl.algorithms import advantage_estimator

    check_patch_targets()  # the vendored v0.7.0 passes
    monkeypatch.setattr(nemo_rl, "__version__", "0.8.0")
    with pytest.raises(UserError, match="NeMo-RL is 0.8.0, not 0.7.0"):
        check_patch_targets()
    monkeypatch.undo()
    monkeypatch.setattr(advantage_estimator, "calculate_baseline_and_std_per_prompt",
                        lambda prompts, rewards, valid_mask, leave_one_out_baseline=True: None)
    with pytest.raises(UserError, match="advantage_estimator.calculate_baseline_and_std_per_prompt is not"):
        check_patch_targets()


@pytest.mark.parametrize(("where", "value", "words"), [
    ("data_plane", {"enabled": True}, "data_plane.enabled"),
    ("env", {"should_use_nemo_gym": True}, "NeMo-Gym"),
    ("grpo", {"async_grpo": {"enabled": True}}, "async GRPO"),
    ("policy", {"generation": {"vllm_cfg": {"async_engine": True}}}, "async_engine"),
])
def test_configurations_the_grouping_cannot_reach_are_refused(where: str, value: dict[str, Any], words: str) -> None:
    master = _master(3)
    current = getattr(master, where) or {}
    setattr(master, where, {**current, **value})
    with pytest.raises(UserError, match=words):
        check_supported(master)
