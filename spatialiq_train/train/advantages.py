"""The recipe's advantages (`rl.advantage`) in TRL's GRPOTrainer: `spatialiq_train.core.advantages`, the function
NeMo-RL's per-view wrapper uses, in place of TRL's own group normalisation.

TRL 1.16 computes the advantages inline in `GRPOTrainer._generate_and_score_completions` (group mean, then
`scale_rewards`' std + 1e-4) from the rewards of every process (`_calculate_rewards` gathers them) and keeps this
process's slice. `RecipeAdvantageMixin` keeps those gathered per-function rewards, lets TRL finish the batch, and
replaces `advantages` with the recipe's over the same gathered rewards (TRL's weighted sum of every reward term,
shaping included, as NeMo-RL's baseline reads the shaped reward), sliced for this process the same way. A completion
every reward function left unscored (NaN) is out of its view's statistics and gets advantage 0, as in TRL.
"""

from __future__ import annotations

from typing import Any

from spatialiq_train.core.advantages import advantages as view_advantages


def recipe_advantages(rewards_per_func: Any, weights: Any, group_size: int, baseline: str, std: str) -> Any:
    """Advantages (float32 tensor, on the rewards' device) of the gathered ``rewards_per_func`` (rows x reward
    functions) weighted by ``weights``, views of ``group_size`` consecutive rows."""
    import numpy as np
    import torch

    unscored = torch.isnan(rewards_per_func).all(dim=1)
    total = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    r = total.detach().cpu().double().numpy()
    valid = ~unscored.cpu().numpy()
    adv = view_advantages(np.where(valid, r, 0.0), group_size, baseline, std, valid.astype(np.float64))
    adv[~valid] = 0.0
    return torch.as_tensor(adv, dtype=torch.float32, device=rewards_per_func.device)


class RecipeAdvantageMixin:
    """Put before TRL's GRPOTrainer in the MRO; `advantage` is the recipe's `rl.advantage` (baseline, std)."""

    def __init__(self, *args: Any, advantage: tuple[str, str] = ("group_mean", "group"), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.advantage = advantage
        self._last_rewards_per_func: Any = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards
        return rewards

    def _generate_and_score_completions(self, inputs):  # noqa: ANN001, ANN202
        out = super()._generate_and_score_completions(inputs)
        rpf = self._last_rewards_per_func
        group = self.num_generations if self.model.training else self.num_generations_eval
        adv = recipe_advantages(rpf, self.reward_weights, group, *self.advantage)
        n_local = out["advantages"].shape[0]
        start = self.accelerator.process_index * n_local
        out["advantages"] = adv[start : start + n_local].to(out["advantages"].device)
        return out
