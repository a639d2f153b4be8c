"""One GRPO group per view on NeMo-RL v0.7.0, for the baseline, the advantages and the dynamic-sampling filter.

v0.7.0 groups the samples of a batch by their prompt token ids (``calculate_baseline_and_std_per_prompt`` in
``nemo_rl/algorithms/utils.py``, ``torch.unique(prompts, dim=0)``). Our views ask one question about a same-size
image and image tokens do not depend on pixels, so every view of a batch tokenises identically and the whole batch
became one group: the baseline was the batch mean, and dynamic sampling never dropped a view whose samples agree.

What this module changes, for the run it is installed in (:func:`per_view_groups`, entered by the driver around
``grpo.setup`` and ``grpo_train``):

* **the grouping key.** Both call sites get a replacement that groups by view instead of by the prompt tokens (the
  filter's hands v0.7.0's own function a key per view): row ``i`` belongs to view ``i // G`` (``G =
  grpo.num_generations_per_prompt``). The rollout builds its batch with ``repeat_interleave(G)`` and writes results
  back by index, dynamic sampling keeps whole views in order, so blocks of ``G`` rows are views. That is checked on
  every call, not assumed: each block must hold one prompt (token ids) and one dataset ``idx``, and the batch that
  reaches training must be whole views. The two call sites are ``grpo.py`` (the std that feeds ``dynamic_sampling``)
  and ``advantage_estimator.py`` (which imports the function by name, so it is replaced there too).
* **the filter's spread.** v0.7.0's std is leave-one-out per sample: rewards ``[1, 0, 0, 0]`` give the correct
  sample a std of 0, and the per-sample filter ``std != 0`` drops that one sample and splits its group (upstream PR
  3469). The filter here sees the view's spread as DAPO defines it: a view is kept whole when its rewards (before
  shaping, as v0.7.0 reads them for the filter) vary by more than :data:`~spatialiq_train.core.groups.REWARD_STD_TOL`
  (:func:`~spatialiq_train.core.groups.filter_groups`, the rule the TRL path uses), and dropped whole otherwise.
* **the advantages.** The estimator's call site gets the recipe's ``rl.advantage`` per view, computed by
  :func:`spatialiq_train.core.advantages.baseline_and_std` (the function the TRL trainer uses): v0.7.0's estimator
  subtracts that baseline and, with ``normalize_rewards``, divides by that std where it is above 0. v0.7.0 alone
  ties the std to the baseline (leave-one-out std with the leave-one-out baseline, group std without); the recipe
  names both.

Before it patches, :func:`per_view_groups` checks the NeMo-RL version (:data:`NEMO_RL_VERSION`) and the exact
signatures of what it replaces, and that both modules call the function it replaces (:func:`check_patch_targets`);
while the run trains, :class:`StepCalls` counts, per training step, that both replaced call sites ran, and stops the
run naming the call that did not (a container whose loop moved a call would otherwise train with one group per
batch again, silently).

Configurations whose rollouts do not go through this path are refused (:func:`check_supported`): the data plane,
NeMo-Gym rollouts, async GRPO and vLLM's async engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from spatialiq_train.core.advantages import baseline_and_std
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.groups import filter_groups

__all__ = ["NEMO_RL_VERSION", "GroupingError", "StepCalls", "check_patch_targets", "check_supported",
           "per_view_groups", "view_baseline", "view_filter"]

NEMO_RL_VERSION = "0.7.0"
"""The NeMo-RL release whose functions the per-view grouping replaces (their signatures: :data:`PATCHED`)."""
PATCHED: dict[str, tuple[str, ...]] = {
    "nemo_rl.algorithms.utils.calculate_baseline_and_std_per_prompt":
        ("prompts", "rewards", "valid_mask", "leave_one_out_baseline", "std_rewards"),
    "nemo_rl.algorithms.grpo.dynamic_sampling":
        ("repeated_batch", "std", "baseline", "dynamic_sampling_num_gen_batches", "master_config", "timer",
         "batch_cache"),
    "nemo_rl.algorithms.advantage_estimator.GRPOAdvantageEstimator.compute_advantage":
        ("self", "prompt_ids", "rewards", "mask", "kwargs"),
}
"""What is replaced or wrapped, with v0.7.0's parameter names in order (checked before patching)."""
CALL_SITES = {"advantages": "nemo_rl.algorithms.advantage_estimator.calculate_baseline_and_std_per_prompt "
                            "(GRPOAdvantageEstimator.compute_advantage)",
              "filter": "nemo_rl.algorithms.grpo.calculate_baseline_and_std_per_prompt (grpo_train, before "
                        "dynamic_sampling)"}
"""The two per-view call sites a training step must run, by the names the errors give."""

BaselineFn = Callable[..., tuple[Any, Any]]


class GroupingError(RuntimeError):
    """A batch whose rows are not whole views in blocks of ``G``: the per-view grouping would be wrong."""


def check_supported(master_config: Any) -> None:
    """Refuse the configurations the per-view grouping cannot reach (their rollouts bypass the patched calls)."""
    problems = []
    plane = getattr(master_config, "data_plane", None) or {}
    if plane.get("enabled"):
        problems.append("data_plane.enabled is true (the data plane computes advantages outside grpo_train)")
    env = getattr(master_config, "env", None) or {}
    if env.get("should_use_nemo_gym"):
        problems.append("env.should_use_nemo_gym is true (NeMo-Gym rollouts)")
    grpo = master_config.grpo
    if (grpo.get("async_grpo") or {}).get("enabled"):
        problems.append("grpo.async_grpo.enabled is true (async GRPO has its own training loop)")
    generation = (getattr(master_config, "policy", None) or {}).get("generation") or {}
    if (generation.get("vllm_cfg") or {}).get("async_engine"):
        problems.append("policy.generation.vllm_cfg.async_engine is true (its rollouts bypass the per-view "
                        "grouping, the vision-token guard and the idle-run watch)")
    if grpo["num_generations_per_prompt"] < 2:
        problems.append(f"grpo.num_generations_per_prompt is {grpo['num_generations_per_prompt']} (a group needs 2)")
    if problems:
        raise UserError("this project's NeMo-RL driver groups GRPO samples per view and supports only the "
                        "synchronous colocated loop; " + "; ".join(problems))


# --- checks -----------------------------------------------------------------------------------------------------


def _blocks(n_rows: int, group_size: int, what: str) -> int:
    if n_rows % group_size:
        raise GroupingError(f"{what}: {n_rows} rows do not split into views of {group_size} samples")
    return n_rows // group_size


def check_prompt_blocks(prompts: Any, group_size: int, what: str) -> None:
    """Every block of ``group_size`` rows holds one prompt (identical token rows)."""
    n = _blocks(int(prompts.shape[0]), group_size, what)
    blocks = prompts.reshape(n, group_size, *prompts.shape[1:])
    same = (blocks == blocks[:, :1]).reshape(n, group_size, -1).all(-1).all(-1)
    if not bool(same.all()):
        first = int((~same).nonzero()[0][0])
        raise GroupingError(f"{what}: rows {first * group_size}..{(first + 1) * group_size - 1} should be the "
                            f"{group_size} samples of one view but hold different prompts")


def check_view_blocks(idx: Any, group_size: int, what: str) -> None:
    """Every block of ``group_size`` rows carries one dataset ``idx``."""
    values = np.asarray([int(i) for i in idx])
    n = _blocks(values.size, group_size, what)
    blocks = values.reshape(n, group_size)
    bad = np.flatnonzero((blocks != blocks[:, :1]).any(axis=1))
    if bad.size:
        b = int(bad[0])
        raise GroupingError(f"{what}: rows {b * group_size}..{(b + 1) * group_size - 1} should be the {group_size} "
                            f"samples of one view but come from dataset rows {sorted(set(blocks[b].tolist()))}")


# --- the replacements -------------------------------------------------------------------------------------------


def _view_keys(prompts: Any, group_size: int) -> Any:
    import torch

    return (torch.arange(int(prompts.shape[0]), device=prompts.device) // group_size)[:, None]


class StepCalls:
    """How often each per-view call site ran since the last training call (:data:`CALL_SITES`)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(CALL_SITES, 0)
        self.steps = 0

    def ran(self, site: str) -> None:
        self.counts[site] += 1

    def check_step(self) -> None:
        """Called as a training step starts: both call sites ran for it, else a GroupingError naming the missing
        one; the counts start again for the next step."""
        missing = [CALL_SITES[site] for site, n in self.counts.items() if n == 0]
        self.steps += 1
        if missing:
            raise GroupingError(f"training step {self.steps} reached policy.train without the per-view call "
                                f"{' and '.join(missing)}: this NeMo-RL's grpo_train does not call what the driver "
                                f"replaced (not v{NEMO_RL_VERSION}'s loop?), so its groups would not be views; "
                                "stopped before the update")
        self.counts = dict.fromkeys(CALL_SITES, 0)

    def guard(self, policy: Any) -> None:
        """Check the counts whenever ``policy.train`` is called (the loop's one training call per step)."""
        real = policy.train

        def train(*args: Any, **kwargs: Any) -> Any:
            self.check_step()
            return real(*args, **kwargs)

        policy.train = train


def view_baseline(group_size: int, baseline: str, std: str, calls: StepCalls | None = None) -> BaselineFn:
    """The advantage estimator's call site: the recipe's baseline and std per view
    (:func:`~spatialiq_train.core.advantages.baseline_and_std`), on the rewards' device and dtype."""
    want_loo = baseline == "leave_one_out"

    def per_view(prompts: Any, rewards: Any, valid_mask: Any, leave_one_out_baseline: bool = True,
                 std_rewards: Any = None) -> tuple[Any, Any]:
        import torch

        check_prompt_blocks(prompts, group_size, "advantages")
        if bool(leave_one_out_baseline) != want_loo or std_rewards is not None:
            raise GroupingError(f"the advantage estimator asked for leave_one_out_baseline={leave_one_out_baseline}"
                                f"{'' if std_rewards is None else ' with separate std rewards'}; the recipe's "
                                f"rl.advantage is baseline {baseline}, std {std}: regenerate the config")
        b, s = baseline_and_std(rewards.detach().cpu().double().numpy(), group_size, baseline, std,
                                valid_mask.detach().cpu().double().numpy())
        if calls is not None:
            calls.ran("advantages")
        return (torch.as_tensor(b, dtype=rewards.dtype, device=rewards.device),
                torch.as_tensor(s, dtype=rewards.dtype, device=rewards.device))

    return per_view


def view_filter(original: BaselineFn, group_size: int, calls: StepCalls | None = None) -> BaselineFn:
    """The call site that feeds ``dynamic_sampling``: v0.7.0's baseline per view, and as std the view's own spread
    (the same for every sample of the view; 0 where :func:`filter_groups` finds the rewards constant)."""

    def per_view(prompts: Any, rewards: Any, valid_mask: Any, leave_one_out_baseline: bool = True,
                 std_rewards: Any = None) -> tuple[Any, Any]:
        import torch

        check_prompt_blocks(prompts, group_size, "dynamic sampling")
        keys = _view_keys(prompts, group_size)
        baseline, _ = original(keys, rewards, valid_mask, leave_one_out_baseline=leave_one_out_baseline,
                               std_rewards=std_rewards)
        _, spread = original(keys, rewards, valid_mask, leave_one_out_baseline=False, std_rewards=std_rewards)
        source = rewards if std_rewards is None else std_rewards
        scored = torch.where(valid_mask.bool(), source, torch.full_like(source, float("nan")))
        varies = torch.as_tensor(filter_groups(scored.detach().cpu().double().numpy(), group_size),
                                 device=spread.device)
        if calls is not None:
            calls.ran("filter")
        return baseline, torch.where(varies, spread, torch.zeros_like(spread))

    return per_view


def checked_dynamic_sampling(original: Callable[..., Any], group_size: int) -> Callable[..., Any]:
    """v0.7.0's ``dynamic_sampling``, with the batch it gets and the batch it hands to training checked to be
    whole views (one ``idx`` per block of ``group_size`` rows)."""

    def dynamic_sampling(repeated_batch: Any, *args: Any, **kwargs: Any) -> Any:
        check_view_blocks(repeated_batch["idx"], group_size, "generation batch")
        out = original(repeated_batch, *args, **kwargs)
        batch, complete = out[0], out[1]
        if complete:
            check_view_blocks(batch["idx"], group_size, "training batch")
        return out

    return dynamic_sampling


def _parameters(fn: Any) -> tuple[str, ...]:
    """The parameter names of ``fn``, or of the function a wrapper names as its ``__wrapped__``."""
    import inspect

    return tuple(inspect.signature(fn).parameters)


def check_patch_targets() -> None:
    """Refuse to patch anything but v0.7.0's functions: its version, the exact parameters of each function replaced
    or wrapped (:data:`PATCHED`), and both call sites naming v0.7.0's own function (so the replacement is what they
    call). A UserError names what differs."""
    import importlib

    import nemo_rl
    from nemo_rl.algorithms import advantage_estimator, grpo, utils

    version = str(getattr(nemo_rl, "__version__", "unknown")).split("+")[0]
    problems = [] if version == NEMO_RL_VERSION else [f"NeMo-RL is {version}, not {NEMO_RL_VERSION}"]
    for dotted, want in PATCHED.items():
        module, _, attr = dotted.rpartition(".")
        try:
            obj = importlib.import_module(module)
        except ImportError:
            owner, _, cls = module.rpartition(".")
            obj = getattr(importlib.import_module(owner), cls, None)
        target = getattr(obj, attr, None)
        got = _parameters(target) if callable(target) else None
        if got != want:
            problems.append(f"{dotted} takes {got}, v{NEMO_RL_VERSION} takes {want}")
    original = utils.calculate_baseline_and_std_per_prompt
    for module in (grpo, advantage_estimator):
        if getattr(module, "calculate_baseline_and_std_per_prompt", None) is not original:
            problems.append(f"{module.__name__}.calculate_baseline_and_std_per_prompt is not "
                            "nemo_rl.algorithms.utils'")
    if problems:
        raise UserError("the per-view GRPO grouping patches NeMo-RL v0.7.0's functions and refuses any other: "
                        + "; ".join(problems) + " (run the pinned container image, or port spatialiq_train/nemo/"
                        "grouping.py and its tests to this release)")


@contextmanager
def per_view_groups(master_config: Any, baseline: str, std: str, calls: StepCalls | None = None) -> Iterator[None]:
    """Install the per-view grouping in v0.7.0's modules for the duration of a run, with the recipe's
    ``rl.advantage`` (``baseline``, ``std``); restored on exit. ``calls`` counts the call sites per step."""
    from nemo_rl.algorithms import advantage_estimator, grpo, utils

    check_supported(master_config)
    check_patch_targets()
    g = int(master_config.grpo["num_generations_per_prompt"])
    original = utils.calculate_baseline_and_std_per_prompt
    saved = {(grpo, "calculate_baseline_and_std_per_prompt"): grpo.calculate_baseline_and_std_per_prompt,
             (advantage_estimator, "calculate_baseline_and_std_per_prompt"):
                 advantage_estimator.calculate_baseline_and_std_per_prompt,
             (grpo, "dynamic_sampling"): grpo.dynamic_sampling}
    grpo.calculate_baseline_and_std_per_prompt = view_filter(original, g, calls)
    advantage_estimator.calculate_baseline_and_std_per_prompt = view_baseline(g, baseline, std, calls)
    grpo.dynamic_sampling = checked_dynamic_sampling(saved[(grpo, "dynamic_sampling")], g)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)
