"""DAPO dynamic sampling for TRL's GRPOTrainer: drop groups whose rewards do not vary, refill from new prompts.

TRL 1.16 has no dynamic sampling (zero-variance groups only get advantage 0 but still count in the DAPO token
normaliser). `DynamicSamplingGRPOTrainer` overrides one hook, `_generate_and_score_completions`: it generates and
scores a batch with the parent implementation (whose advantages are the recipe's, `train.advantages`), keeps the
groups that `core.groups.filter_groups` accepts (the rule NeMo-RL runs use too), and generates again for freshly drawn
prompts until the batch is full or `max_refill_rounds` extra rounds were spent (verl's `max_num_gen_batches`). Each
generation draws `batch_multiplier` x the step's prompts (the recipe's draw size, NeMo-RL's `grpo.batch_multiplier`:
the first adds (m - 1) x the step's prompts to the sampler's, a refill draws m x). Slots
still empty after the cap are filled with dropped groups whose loss mask is zeroed, so they carry no gradient and do
not enter the normaliser. The per-function rewards that decide the filter are those
`train.advantages.RecipeAdvantageMixin` keeps from `_calculate_rewards`. With `frozen`, `training_step` generates and
scores but never computes a loss: the control of a learning curve, at the unchanged weights, through the same rollout
code and seeds.

Under data parallelism each process filters and refills its own groups (so the per-device generation batch must
hold whole groups), all processes run the same number of rounds (the parent's collectives stay in step), each
draws its refill prompts from its own disjoint slice of one refill order (`distributed.refill_indices`,
deterministic from the seed, the global step and the round), and the `dynamic_sampling/*` group counts are summed
over processes before they are logged; `refill_rounds` is the same on every process.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spatialiq_train.core.groups import filter_groups
from spatialiq_train.train.distributed import refill_indices, sum_over_ranks

log = logging.getLogger(__name__)

# --- merging generation outputs ---------------------------------------------------------------------------------

_LEFT = {"prompt_ids": "pad", "prompt_mask": 0}
_RIGHT = {
    "completion_ids": "pad",
    "completion_mask": 0,
    "old_per_token_logps": 0.0,
    "ref_per_token_logps": 0.0,
    "sampling_per_token_logps": 0.0,
    "importance_sampling_ratio": 1.0,
    "tool_mask": 1,
}
_SPLIT = ("token_type_ids", "mm_token_type_ids")  # (B, P + C): prompt part left-padded, completion part right-padded
_ROWS = ("advantages",)
_LISTS = ("pixel_values", "image_grid_thw", "num_images", "image_position_ids", "image_sizes", "num_tiles")
_SCALARS = ("num_items_in_batch",)


def _pad_cat(tensors: list[Any], side: str, value: float) -> Any:
    import torch

    width = max(t.size(1) for t in tensors)
    out = []
    for t in tensors:
        gap = width - t.size(1)
        if gap:
            fill = torch.full((t.size(0), gap, *t.shape[2:]), value, dtype=t.dtype, device=t.device)
            t = torch.cat([fill, t] if side == "left" else [t, fill], dim=1)
        out.append(t)
    return torch.cat(out, dim=0)


def select_rows(batch: dict[str, Any], rows: Sequence[int]) -> dict[str, Any]:
    """Rows `rows` of a split generation output (pixel values already split per sample)."""
    idx = list(rows)
    out: dict[str, Any] = {}
    for key, val in batch.items():
        if val is None or key in _SCALARS:
            out[key] = val
        elif isinstance(val, list):
            out[key] = [val[i] for i in idx]
        else:
            out[key] = val[idx]
    return out


def merge_outputs(parts: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Concatenate split generation outputs of different widths, re-padding each key on its own side."""
    import torch

    keys = list(parts[0])
    for part in parts[1:]:
        if list(part) != keys:
            raise ValueError(f"generation outputs disagree on keys: {sorted(keys)} vs {sorted(part)}")
    merged: dict[str, Any] = {}
    for key in keys:
        vals = [p[key] for p in parts]
        if all(v is None for v in vals):
            merged[key] = None
        elif key in _LEFT:
            merged[key] = _pad_cat(vals, "left", pad_token_id if _LEFT[key] == "pad" else _LEFT[key])
        elif key in _RIGHT:
            if vals[0].dim() == 2 and vals[0].size(1) == 1 and key == "importance_sampling_ratio":
                merged[key] = torch.cat(vals, dim=0)
            else:
                merged[key] = _pad_cat(vals, "right", pad_token_id if _RIGHT[key] == "pad" else _RIGHT[key])
        elif key in _SPLIT:
            widths = [p["prompt_ids"].size(1) for p in parts]
            left = _pad_cat([v[:, :w] for v, w in zip(vals, widths, strict=True)], "left", 0)
            right = _pad_cat([v[:, w:] for v, w in zip(vals, widths, strict=True)], "right", 0)
            merged[key] = torch.cat([left, right], dim=1)
        elif key in _ROWS:
            merged[key] = torch.cat(vals, dim=0)
        elif key in _LISTS:
            merged[key] = [x for v in vals for x in v]
        elif key in _SCALARS:
            merged[key] = vals[0]
        else:
            raise KeyError(f"dynamic sampling does not know how to merge generation output key {key!r}")
    return merged


# --- the trainer -----------------------------------------------------------------------------------------------


@dataclass
class _Collected:
    """What one batch's generate-filter-refill rounds gathered on this process."""

    kept: list[dict[str, Any]] = field(default_factory=list)  # split generation outputs of accepted groups
    drawn: list[list[int]] = field(default_factory=list)  # refill dataset indices, one list per refill round
    n_kept: int = 0
    n_dropped: int = 0
    rounds: int = 0  # refill rounds run (the same on every process)
    last: dict[str, Any] | None = None  # the last round's output and keep mask: where filler groups come from
    last_mask: np.ndarray | None = None

    def counts(self, n_filler: int) -> dict[str, float]:
        """This process's `dynamic_sampling/*` counts for the batch (summed over processes before logging)."""
        return {"kept_groups": float(self.n_kept), "dropped_groups": float(self.n_dropped),
                "filler_groups": float(n_filler), "refill_rounds": float(self.rounds)}


class DynamicSamplingMixin:
    """The dynamic-sampling methods of `DynamicSamplingGRPOTrainer`; needs TRL's GRPOTrainer after it in the MRO.

    Kept apart from the class so that importing this module does not import TRL; see the module docstring.
    """

    def __init__(
        self,
        *args: Any,
        dynamic_sampling: bool = True,
        max_refill_rounds: int = 10,
        batch_multiplier: int = 1,
        filter_reward_mask: Sequence[bool] | None = None,
        refill_seed: int | None = None,
        frozen: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.frozen = frozen
        self.dynamic_sampling = dynamic_sampling
        self.max_refill_rounds = max_refill_rounds
        self.batch_multiplier = batch_multiplier
        n_funcs = len(self.reward_funcs)
        self.filter_reward_mask = list(filter_reward_mask) if filter_reward_mask is not None else [True] * n_funcs
        if len(self.filter_reward_mask) != n_funcs:
            raise ValueError(f"filter_reward_mask has {len(self.filter_reward_mask)} entries for {n_funcs} rewards")
        self.refill_seed = self.args.seed if refill_seed is None else refill_seed
        self.refill_log: list[dict[str, Any]] = []  # this rank's draws and local counts, one entry per batch
        self._generation_key = (-1, -1)  # (global step, generation within the step) of the last batch
        local = self.args.per_device_train_batch_size * self.args.steps_per_generation
        if dynamic_sampling and local % self.num_generations:
            raise ValueError(
                f"dynamic sampling needs whole groups per device: per_device_train_batch_size x "
                f"steps_per_generation = {local} is not a multiple of num_generations = {self.num_generations}"
            )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
        """A frozen trainer (the learning curve's control) generates, filters and scores every batch exactly as the
        RL run does (TRL's `training_step` and `_prepare_inputs`, logging the same rollout and reward metrics), but
        its loss is a constant 0 with no graph to the weights: no forward, no gradient, and the optimizer has
        nothing to apply, so the weights stay those it started from."""
        if not self.frozen:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        import torch

        return torch.zeros((), device=self.accelerator.device, requires_grad=True)

    def _filter_rewards(self, n_local: int) -> np.ndarray:
        """Weighted sum of the filter rewards for this process's rows (shaping terms excluded)."""
        import torch

        rpf = self._last_rewards_per_func
        weights = self.reward_weights.to(rpf.device) * torch.tensor(self.filter_reward_mask, device=rpf.device)
        total = (rpf * weights.unsqueeze(0)).nansum(dim=1)
        total[torch.isnan(rpf).all(dim=1)] = float("nan")
        start = self.accelerator.process_index * n_local
        return total[start : start + n_local].detach().cpu().numpy()

    def _next_generation_key(self) -> tuple[int, int]:
        """(global step, index of this generation within the step): the same on every rank, restored on resume."""
        step, gen = self._generation_key
        now = int(self.state.global_step)
        self._generation_key = (now, gen + 1 if step == now else 0)
        return self._generation_key

    def _draw_refill(self, n_groups: int, key: tuple[int, int], round_: int) -> tuple[list[int], list[Any]]:
        """This rank's disjoint share of the refill order for `key` (distributed.refill_indices)."""
        acc = self.accelerator
        idx = refill_indices(len(self.train_dataset), n_groups, seed=self.refill_seed, step=key[0],
                             generation=key[1], round_=round_, rank=acc.process_index, world=acc.num_processes)
        rows = [self.train_dataset[i] for i in idx]
        return idx, [row for row in rows for _ in range(self.num_generations)]

    def _log_counts(self, key: tuple[int, int], local: dict[str, float], drawn: list[list[int]]) -> None:
        """Record this rank's counts and draws; log the counts summed over ranks (`rounds` is already global)."""
        names = ("kept_groups", "dropped_groups", "filler_groups")
        total = sum_over_ranks(self.accelerator, [local[n] for n in names])
        metrics = self._metrics["train"]
        for name, value in zip(names, total, strict=True):
            metrics[f"dynamic_sampling/{name}"].append(value)
        metrics["dynamic_sampling/refill_rounds"].append(local["refill_rounds"])
        entry = {"step": key[0], "generation": key[1], "rank": self.accelerator.process_index, **local,
                 "drawn": drawn}
        self.refill_log.append(entry)
        log.debug("dynamic sampling: %s", entry)

    def _generate_and_score_completions(self, inputs):  # noqa: ANN001, ANN202
        if not (self.dynamic_sampling and self.model.training):
            return super()._generate_and_score_completions(inputs)
        from trl.trainer.utils import unsplit_pixel_values_by_grid

        target = len(inputs) // self.num_generations
        key = self._next_generation_key()
        got = self._collect_groups(inputs, target, key)
        n_filler = self._add_filler(got, target)
        merged = self._merge_kept(got.kept)
        self._log_counts(key, got.counts(n_filler), got.drawn)
        return unsplit_pixel_values_by_grid(merged)

    def _collect_groups(self, inputs: list[Any], target: int, key: tuple[int, int]) -> _Collected:
        """Generate, score and filter; refill from new prompts until every rank has `target` groups or the cap."""
        from trl.trainer.utils import split_pixel_values_by_grid

        g, m = self.num_generations, self.batch_multiplier
        got = _Collected()
        batch = inputs
        if m > 1:  # the draw size: the step's prompts and (m - 1) x as many more, from refill slot 0
            idx, extra = self._draw_refill(target * m, key, 0)
            drop = (m - 1) * target
            batch, idx = list(inputs) + extra[: drop * g], idx[:drop]
            got.drawn.append(idx)
        while True:
            out = split_pixel_values_by_grid(super()._generate_and_score_completions(batch))
            mask = filter_groups(self._filter_rewards(len(batch)), g)
            take = np.flatnonzero(mask)[: max(0, target - got.n_kept) * g]
            if take.size:
                got.kept.append(select_rows(out, take))
            got.n_kept += take.size // g
            got.n_dropped += int((~mask).sum()) // g
            got.last, got.last_mask = out, mask
            if self._all_ranks_full(target - got.n_kept) or got.rounds >= self.max_refill_rounds:
                return got
            # a refill round draws m x the step's prompts (slots after the first draw's when m > 1)
            idx, batch = self._draw_refill(target * m, key, got.rounds + (m > 1))
            got.drawn.append(idx)
            got.rounds += 1

    def _all_ranks_full(self, missing: int) -> bool:
        """True when no rank misses any group (a collective: every rank calls it once per round)."""
        import torch

        need = torch.tensor([max(0, missing)], device=self.accelerator.device)
        return self.accelerator.gather(need).max().item() == 0

    def _add_filler(self, got: _Collected, target: int) -> int:
        """Fill the slots still empty with dropped groups of the last round, loss mask zeroed; returns how many."""
        import torch

        n_filler = target - got.n_kept
        if n_filler:
            filler = select_rows(got.last, np.flatnonzero(~got.last_mask)[: n_filler * self.num_generations])
            filler["completion_mask"] = torch.zeros_like(filler["completion_mask"])
            got.kept.append(filler)
        return n_filler

    def _merge_kept(self, kept: list[dict[str, Any]]) -> dict[str, Any]:
        """One batch from the kept parts; `num_items_in_batch` recounted over all ranks from the loss mask."""
        merged = merge_outputs(kept, self._tokenizer.pad_token_id)
        loss_mask = merged["completion_mask"]
        if merged.get("tool_mask") is not None:
            loss_mask = loss_mask * merged["tool_mask"]
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        return merged


def build_dynamic_sampling_trainer_class() -> type:
    """The GRPOTrainer subclass (built lazily so importing this module does not import TRL)."""
    from trl import GRPOTrainer

    from spatialiq_train.train.advantages import RecipeAdvantageMixin

    class DynamicSamplingGRPOTrainer(DynamicSamplingMixin, RecipeAdvantageMixin, GRPOTrainer):
        """GRPOTrainer with DAPO dynamic sampling (see the module docstring)."""

    return DynamicSamplingGRPOTrainer
