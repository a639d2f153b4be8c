"""The NeMo-RL side of a phase's plan (`core.plan.PhasePlan`): the hardware a generated config is for, the released
values the plan has no field for, the plan values NeMo-RL v0.7.0 cannot honour (refused by name, with what to set
instead) and the small translations (advantage switches, refill rounds, importance sampling, step budget).

No module of spatialiq_train.nemo reads a `Recipe`'s fields but the generator's entry (`export.build`: the model's
size, for the tensor-parallel layout) and the plan's resolution in the core. Where a recipe has no
field for a value the paper's released configuration has, the released value is used (`RELEASED_*`, each naming
its source): NVIDIA/Spatial-IQ `training/configs/grpo_spatialiq.yaml` (GRPO) and `training/configs/sft_spatialiq.yaml`
(SFT).
"""

from __future__ import annotations

from typing import Any

from spatialiq_train.core.plan import PhasePlan
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.core.resolve import Hardware, engine_refusal, resolve

# --- released values the recipe schema has no field for ---------------------------------------------------------
# Source: NVIDIA/Spatial-IQ training/configs/grpo_spatialiq.yaml (the paper's released GRPO configuration).
RELEASED_GRPO: dict[str, Any] = {
    "max_val_samples": 64,                  # grpo.max_val_samples (when rl.validation.max_samples is null: all)
    "val_batch_size": 64,                   # grpo.val_batch_size (at most; fewer when max_val_samples is smaller)
    "kl_input_clamp_value": 20.0,           # loss_fn.kl_input_clamp_value
    "kl_output_clamp_value": 10.0,          # loss_fn.kl_output_clamp_value
    "max_total_sequence_length": 2048,      # policy.max_total_sequence_length (when vllm.max_model_len is null)
    "logprob_batch_size": 4,                # policy.logprob_batch_size
    "adam_eps": 1e-8,                       # policy.optimizer.kwargs.eps
    "num_val_samples_to_print": 5,          # logger.num_val_samples_to_print
}
# Source: NVIDIA/Spatial-IQ training/configs/sft_spatialiq.yaml (the paper's released SFT configuration).
RELEASED_SFT: dict[str, Any] = {
    "max_total_sequence_length": 2048,      # policy.max_total_sequence_length (when sft.max_length is null)
    "val_global_batch_size": 8,             # sft.val_global_batch_size (sft.val_batches: max_samples / 8)
    "adam_eps": 1e-8,
}
EPOCHS_UNBOUNDED_STEPS = 1_000_000
"""``max_num_steps`` of a phase the recipe bounds by epochs (v0.7.0 stops at whichever bound comes first)."""
WARMUP_FROM_ZERO = 1e-9
"""torch's LinearLR needs a start factor above 0; a warm-up from 0 (transformers' own) starts here instead, which
gives the same factor as TRL's at every step to 1e-9."""

NEMO_REFUSED: dict[str, tuple[Any, str]] = {
    "data.sources": ((), "data.sources mixes trace folders by weight (replay), which only the TRL engine reads "
                         "(`spatialiq train`); NeMo-RL's dataloader shuffles one split: train this recipe with "
                         "`spatialiq train`, or write one trace folder and leave data.sources empty"),
    "model.tiny": (False, "NeMo-RL loads model.name_or_path; build the tiny model (spatialiq_train.tiny.save_tiny), "
                          "point model.name_or_path at it and set model.tiny=false"),
    "model.attn_implementation": (None, "NeMo-RL's DTensor policy picks its attention kernel; set it to null"),
    "execution.device": ("cuda", "NeMo-RL v0.7.0 trains on GPUs; set run.device=auto or cuda"),
    "execution.liger_kernel": (False, "NeMo-RL's DTensor policy has no Liger kernels; set model.liger_kernel=false"),
    "execution.padding_free": (False, "NeMo-RL refuses sequence packing for vision-language models"),
    "algorithm.num_iterations": (1, "v0.7.0 GRPO makes one update per generation batch; set rl.num_iterations=1"),
    "algorithm.assistant_only_loss": (True, "NeMo-RL's SFT trains the assistant turns only; set it to true"),
    "generation.vllm": (True, "NeMo-RL generates with vLLM; set vllm.enabled=true"),
    "generation.mode": ("colocate", "the generated config colocates vLLM with the policy; set vllm.mode=colocate"),
    "generation.enable_sleep_mode": (True, "colocated vLLM in v0.7.0 always sleeps while the policy trains "
                                           "(vllm_worker: enable_sleep_mode=True); set vllm.enable_sleep_mode=true"),
    "generation.server_host": ("0.0.0.0", "a server-mode setting; NeMo-RL runs vLLM colocated"),
    "generation.server_port": (8000, "a server-mode setting; NeMo-RL runs vLLM colocated"),
    "logging.logging_steps": (1, "NeMo-RL v0.7.0 logs every step; set logging.logging_steps=1"),
}
"""Plan fields NeMo-RL v0.7.0 honours only at one value: field -> (that value, what to set instead)."""


class NemoRefusal(ValueError):
    """A plan value NeMo-RL cannot honour; the message names the recipe key and what to set instead."""


def refuse(plan: PhasePlan) -> None:
    """Raise `NemoRefusal` for a plan value NeMo-RL v0.7.0 cannot honour (`NEMO_REFUSED`, the loss type, a
    fractional epoch budget, a schedule without its step budget, an importance-sampling mode it lacks)."""
    why = engine_refusal(plan, NEMO_REFUSED, "NeMo-RL v0.7.0")
    if why:
        raise NemoRefusal(why)
    if plan.phase == "rl":
        token_level(plan.rl.loss_type)
        importance_sampling(plan)
        max_gen_batches(plan.rl.max_refill_rounds, plan.rl.dynamic_sampling)
    step_budget(plan)


def nemo_plan(recipe: Recipe, phase: str, world_size: int, checkpointing: bool) -> PhasePlan:
    """The phase's plan for a NeMo-RL cluster run: GPUs (v0.7.0's policy workers are CUDA workers; ``run.device``
    chooses the device of a TRL run only), ``world_size`` data-parallel policy ranks, vLLM always (refused when the
    recipe turns it off), sleep mode unless the recipe says otherwise (then refused), no memory plan (micro-batch 1
    when the recipe leaves it open, as released), activation checkpointing from the tensor-parallel layout when the
    recipe leaves it open. The batch is shared as completions, not whole groups (NeMo-RL gathers every rollout
    before it shards the batch)."""
    return resolve(recipe, phase, nemo_hardware(world_size, checkpointing))  # type: ignore[arg-type]


def nemo_hardware(world_size: int, checkpointing: bool) -> Hardware:
    """A NeMo-RL cluster as `core.resolve` sees it (see :func:`nemo_plan`)."""
    return Hardware(gpu=True, world_size=world_size, vllm_importable=True, device_from_recipe=False,
                    checkpointing_default=checkpointing, whole_groups=False, sleep_mode=True)


def token_level(loss_type: str) -> bool:
    """TRL loss_type -> NeMo-RL loss_fn.token_level_loss (dapo/bnpo: mean over tokens; grpo: per sequence)."""
    if loss_type in ("dapo", "bnpo"):
        return True
    if loss_type == "grpo":
        return False
    raise NemoRefusal(f"rl.loss_type {loss_type!r} has no NeMo-RL equivalent (use dapo, bnpo or grpo)")


def adv_estimator(baseline: str, std: str) -> dict[str, bool]:
    """`rl.advantage` -> v0.7.0's `grpo.adv_estimator` switches: `use_leave_one_out_baseline` picks the baseline,
    `normalize_rewards` whether the estimator divides. Which std it divides by (group or leave-one-out) is not a
    v0.7.0 key (it ties the std to the baseline): the driver's per-view wrapper hands the estimator the recipe's
    (`grouping.per_view_groups`)."""
    return {"use_leave_one_out_baseline": baseline == "leave_one_out", "normalize_rewards": std != "none"}


def max_gen_batches(refill_rounds: int, enabled: bool) -> int:
    """`rl.dynamic_sampling.max_refill_rounds` -> `grpo.dynamic_sampling_max_gen_batches`: the same number.

    NeMo-RL v0.7.0 (`grpo_train` / `dynamic_sampling` in nemo_rl/algorithms/grpo.py) counts a step's generation
    batches from 1 and, while the batch is short after batch k, generates again if k <= the cap and raises
    otherwise: a cap of N allows N + 1 generation batches, the first and N more. TRL's refill rounds are the
    rounds after the first generation, so N rounds are also N + 1 batches. NeMo-RL asserts the cap is above 0.
    """
    if enabled and refill_rounds < 1:
        raise NemoRefusal(f"rl.dynamic_sampling.max_refill_rounds {refill_rounds}: NeMo-RL needs at least 1 (its "
                          "grpo.dynamic_sampling_max_gen_batches must be > 0); set rl.dynamic_sampling.enabled "
                          "false for one generation batch per step")
    return refill_rounds


def importance_sampling(plan: PhasePlan) -> float | None:
    """The plan's vLLM importance-sampling correction as NeMo-RL v0.7.0 expresses it: None (off, as released), or
    the cap of its token-level truncated correction. Only TRL's `token_truncate` without a lower bound has that
    meaning; the other modes are refused, naming the key."""
    a = plan.rl
    if not a.importance_sampling_correction:
        return None
    mode, low, high = a.importance_sampling_mode, a.importance_sampling_clip_min, a.importance_sampling_clip_max
    wrong = ("importance_sampling_mode", mode) if mode != "token_truncate" else (
        ("importance_sampling_clip_min", low) if low is not None else
        ("importance_sampling_clip_max", high) if high is None else None)
    if wrong is not None:
        raise NemoRefusal(f"vllm.{wrong[0]} = {wrong[1]!r} (mode {mode!r}, clip_min {low}, clip_max {high}) has no "
                          "NeMo-RL v0.7.0 equivalent: it truncates token-level ratios at one cap (token_truncate "
                          "with importance_sampling_clip_max, no clip_min), or set vllm.importance_sampling_correction "
                          "false (as released)")
    assert high is not None
    return float(high)


def step_budget(plan: PhasePlan) -> tuple[int, int]:
    """(``max_num_epochs``, ``max_num_steps``) that make v0.7.0's loop (``while epoch < max_num_epochs and step <
    max_num_steps``) stop where TRL does: a step budget overrides the epochs in TRL, so the epochs are set to the
    step budget (every epoch has at least one whole batch: `core.batch.check_batch_fits`); by epochs, a whole
    number of them and no step bound. A fractional epoch budget is refused."""
    o = plan.optimizer
    if o.max_steps > 0:
        return o.max_steps, o.max_steps
    if o.num_train_epochs != int(o.num_train_epochs):
        raise NemoRefusal(f"{plan.phase}.optimizer.num_train_epochs = {o.num_train_epochs}: NeMo-RL v0.7.0 trains "
                          f"whole epochs; set a whole number, or a step budget ({plan.phase}.optimizer.max_steps)")
    return int(o.num_train_epochs), EPOCHS_UNBOUNDED_STEPS


def max_steps_or_none(plan: PhasePlan) -> int | None:
    return plan.optimizer.max_steps if plan.optimizer.max_steps > 0 else None
