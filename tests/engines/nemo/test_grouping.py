"""One GRPO group per view (``spatialiq_train.nemo.grouping``) inside v0.7.0's real functions, against the TRL path.

A reward grid of views, every view tokenising identically (as ours do), goes through v0.7.0's
``calculate_baseline_and_std_per_prompt`` at both call sites, its ``dynamic_sampling`` and its
``GRPOAdvantageEstimator``, with the driver's per-view grouping installed; the same grid goes through the TRL path's
filter (``core.groups.filter_groups``, which ``DynamicSamplingGRPOTrainer`` calls) and TRL 1.16's group-normalised
advantages (its ``nanstd``). Both must keep the same views and give the same advantages."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.groups import filter_groups
from spatialiq_train.nemo.grouping import GroupingError, check_supported, per_view_groups

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
                           env={}, data_plane=None)


def _batch(grid: list[list[float]]) -> Any:
    import torch
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    rewards = torch.tensor([r for view in grid for r in view])
    n = rewards.numel()
    return BatchedDataDict({"total_reward": rewards, "idx": [i // G for i in range(n)],
                            "loss_multiplier": torch.ones(n)}), torch.ones((n, 5), dtype=torch.long) * 7


def _trl_advantages(grid: list[list[float]]) -> np.ndarray:
    """TRL 1.16's ``scale_rewards="group"`` advantages (grpo_trainer.py), with its own ``nanstd``."""
    import torch
    from trl.trainer.utils import nanstd

    rewards = torch.tensor(grid).reshape(-1)
    views = rewards.view(-1, G)
    mean = torch.nanmean(views, dim=1).repeat_interleave(G)
    std = nanstd(views, dim=1).repeat_interleave(G)
    return ((rewards - mean) / (std + 1e-4)).numpy()


def _nemo(grid: list[list[float]], loo: bool, prompts: int) -> tuple[Any, Any, Any]:
    import nemo_rl.algorithms.grpo as grpo
    import torch
    from nemo_rl.algorithms.advantage_estimator import GRPOAdvantageEstimator
    from nemo_rl.utils.timer import Timer

    master = _master(prompts, loo)
    batch, prompt_ids = _batch(grid)
    with per_view_groups(master):
        baseline, std = grpo.calculate_baseline_and_std_per_prompt(
            prompt_ids, batch["total_reward"], torch.ones_like(batch["total_reward"]), leave_one_out_baseline=loo)
        kept, complete, _, _ = grpo.dynamic_sampling(batch, std, baseline, 1, master, Timer())
        estimator = GRPOAdvantageEstimator({"use_leave_one_out_baseline": loo, "normalize_rewards": True}, None)
        rows = kept.size
        adv = estimator.compute_advantage(prompt_ids=prompt_ids[:rows], rewards=kept["filtered_reward"],
                                          mask=torch.ones((rows, 3)))
    return kept, complete, adv[:, 0]


def test_both_engines_keep_the_same_views_and_give_the_same_advantages() -> None:
    keep = filter_groups([r for view in GRID for r in view], G)
    varying = [v for v in range(len(GRID)) if keep[v * G]]
    assert varying == [0, 2, 4]
    kept, complete, adv = _nemo(GRID, loo=False, prompts=3)
    assert complete and [int(i) for i in kept["idx"]][::G] == varying
    trl = _trl_advantages([GRID[v] for v in varying])
    assert adv.numpy() == pytest.approx(trl, rel=2e-3, abs=2e-3)  # epsilons: NeMo-RL 1e-6, TRL 1e-4


def test_the_recipes_leave_one_out_baseline_is_taken_within_each_view() -> None:
    kept, complete, adv = _nemo(GRID, loo=True, prompts=3)
    views = np.asarray([GRID[v] for v in (0, 2, 4)])
    baseline = (views.sum(1, keepdims=True) - views) / (G - 1)
    sign = np.sign(views - baseline).reshape(-1)
    assert complete and np.array_equal(np.sign(adv.numpy()), sign)
    assert adv[0] > 0 and (adv[1:4] < 0).all()  # the one right sample of view 0 is kept and pushed up


def test_rows_that_are_not_whole_views_are_refused() -> None:
    import nemo_rl.algorithms.grpo as grpo
    import torch
    from nemo_rl.utils.timer import Timer

    master = _master(3)
    batch, prompt_ids = _batch(GRID)
    prompt_ids[5, 0] = 8  # view 1 holds two prompts
    with per_view_groups(master), pytest.raises(GroupingError, match="rows 4..7"):
        grpo.calculate_baseline_and_std_per_prompt(prompt_ids, batch["total_reward"],
                                                   torch.ones_like(batch["total_reward"]))
    batch, prompt_ids = _batch(GRID)
    batch["idx"][6] = 9  # a sample of another view in view 1's block
    with per_view_groups(master), pytest.raises(GroupingError, match="dataset rows"):
        grpo.dynamic_sampling(batch, torch.ones(20), torch.zeros(20), 1, master, Timer())
    assert grpo.dynamic_sampling.__module__ == "nemo_rl.algorithms.grpo"  # restored on exit


@pytest.mark.parametrize(("where", "value", "words"), [
    ("data_plane", {"enabled": True}, "data_plane.enabled"),
    ("env", {"should_use_nemo_gym": True}, "NeMo-Gym"),
    ("grpo", {"async_grpo": {"enabled": True}}, "async GRPO"),
])
def test_configurations_the_grouping_cannot_reach_are_refused(where: str, value: dict[str, Any], words: str) -> None:
    master = _master(3)
    current = getattr(master, where) or {}
    setattr(master, where, {**current, **value})
    with pytest.raises(UserError, match=words):
        check_supported(master)
