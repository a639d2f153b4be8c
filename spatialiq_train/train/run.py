"""The two-phase DAPO-tight run: SFT-CoT warm-up on the `warmup` partition, then GRPO/DAPO on the disjoint `rl`
partition, under one run directory:

    DIR/base/        the tiny model when the recipe builds one (else the hub id / path in model.name_or_path)
    DIR/sft/         SFT checkpoints, metrics.jsonl, final/ (the SFT-CoT initialisation and KL reference)
    DIR/rl/          RL checkpoints, metrics.jsonl
    DIR/final/       the trained policy (safetensors), loadable with AutoModelForImageTextToText
    DIR/recipe.yaml  the recipe as run (overrides applied)

Before the SFT phase starts, everything the RL phase needs is built and checked (`train.preflight`). Rerunning the
same command resumes: a finished SFT phase is skipped and each phase continues from its newest checkpoint; RL-only
recipe keys may change until the RL phase has started. With `rl.init_from` set, that checkpoint is the SFT-CoT
initialisation and the warm-up is skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from spatialiq_train.core.plan import PhasePlan
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.train import common, mapper, record

log = logging.getLogger(__name__)


def check_disjoint(traces_dir: str | Path, split_a: str, split_b: str) -> None:
    """Raise if any structure appears in both trace splits (the warm-up and RL data must not share one)."""
    from spatialiq_train.core.traces import read_traces, split_file

    ids_a = {r.get("structure_id") for r in read_traces(split_file(traces_dir, split_a))} - {None}
    ids_b = {r.get("structure_id") for r in read_traces(split_file(traces_dir, split_b))} - {None}
    shared = sorted(ids_a & ids_b)
    if shared:
        raise ValueError(
            f"{traces_dir}: splits {split_a!r} and {split_b!r} share {len(shared)} structures (e.g. {shared[0]}); "
            "DAPO-tight needs disjoint partitions (spatialiq_train.core.splits.partition_of)"
        )


RL_ONLY: tuple[str, ...] = record.PHASE_FREE["sft"]
"""Recipe keys (and sections) the SFT phase does not read: they may change while the RL phase has not started."""

EXTEND_KEYS: tuple[str, ...] = record.budget_keys("rl")
"""The RL step budget: with `--extend` it may grow after the RL phase has started."""


def check_run_recipe(recipe: Recipe, out: Path, extend: bool = False) -> None:
    """Refuse a rerun whose recipe differs from the run's record (`train.record.check_record`): the hardware keys
    (`record.HARDWARE_KEYS`) and keys whose values both phases train with alike may always change, RL-only keys
    (`RL_ONLY`) until the RL phase has started, and with `extend` the RL step budget (`EXTEND_KEYS`) after; any
    other difference is refused, naming each key. Writes nothing."""
    rl_started = common.last_checkpoint(out / "rl") is not None
    if rl_started:
        record.check_record(out, recipe, record.HARDWARE_KEYS, EXTEND_KEYS, extend, "the RL phase has started")
    else:
        changed = record.check_record(out, recipe, (*RL_ONLY, *record.HARDWARE_KEYS), (), extend,
                                      "they change the SFT phase")
        if changed:
            log.info("%s: keys that leave the SFT phase as it trained changed before the RL phase (%s); recipe "
                     "updated", out / record.RECORD, ", ".join(changed))


def _write_run_recipe(recipe: Recipe, out: Path, extend: bool = False) -> None:
    """`check_run_recipe`, then keep the recipe as the run's record."""
    check_run_recipe(recipe, out, extend)
    out.mkdir(parents=True, exist_ok=True)
    record.write_record(out, recipe)


def check_batches_fit(plans: list[PhasePlan]) -> None:
    """Each phase's global batch fits its training split once (`core.batch.check_batch_fits`), before anything
    trains: rows counted after data.max_examples and the RL filter, as the phase will read them."""
    from spatialiq_train.core.batch import check_batch_fits
    from spatialiq_train.train.data import training_examples

    for plan in plans:
        d = plan.data
        rows = len(training_examples(plan))
        check_batch_fits(plan.batch, rows, f"the {d.train_split!r} split",
                         plan.rl.batch_multiplier if plan.phase == "rl" and plan.rl.dynamic_sampling else 1)


def run_dapo_tight(
    recipe: Recipe,
    out_dir: str | Path,
    sft_dataset: Any = None,
    rl_dataset: Any = None,
    rl_rewards: Any = None,
    sft_callbacks: list[Any] | None = None,
    rl_callbacks: list[Any] | None = None,
    extend: bool = False,
) -> Path:
    """Run (or resume) both phases; returns DIR/final. Datasets default to the recipe's trace splits. A finished
    run is complete and a rerun changes nothing; a larger RL step budget needs `extend`."""
    from spatialiq_train.train.held_out import check_validation_held_out
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.plan import machine_plan
    from spatialiq_train.train.preflight import check_rl_ready
    from spatialiq_train.train.rl import rl_phase
    from spatialiq_train.train.sft import sft_phase

    out = Path(out_dir)
    check_run_recipe(recipe, out, extend)  # every check before anything is created: a refusal leaves nothing
    sft, rl = machine_plan(recipe, "sft"), machine_plan(recipe, "rl")
    init_from, traces = rl.model.init_from, rl.data.traces_dir
    if sft_dataset is None and rl_dataset is None and sft.data.train_split != rl.data.train_split:
        check_disjoint(traces, sft.data.train_split, rl.data.train_split)
    if sft_dataset is None and rl_dataset is None:  # before the warm-up: validation must be held out of both
        splits = [rl.data.train_split] if init_from else [sft.data.train_split, rl.data.train_split]
        check_validation_held_out(traces, rl.data.eval_split or (None if init_from else sft.data.eval_split), splits,
                                  [s["traces_dir"] for s in rl.data.sources])  # replay sources too
        check_batches_fit([rl] if init_from else [sft, rl])
    settings = mapper.trainer_settings(rl)
    sft_final = out / "sft" / "final"
    if init_from:
        rl_model: str | None = common.check_init_from(init_from)
    else:  # the warm-up's output does not exist yet; its base has the same architecture (the tiny one: built below)
        rl_model = common.base_model_if_built(settings, out)
    check_rl_ready(rl, out / "rl", rl_model, rl_dataset, rl_rewards)
    out.mkdir(parents=True, exist_ok=True)
    record.write_record(out, recipe)
    if not init_from:
        rl_model = common.ensure_base_model(settings, out)
    if init_from:
        log.info("rl.init_from is set (%s): using it as the SFT-CoT initialisation, no warm-up", init_from)
    elif (sft_final / "config.json").is_file():
        log.info("SFT warm-up already finished (%s); skipping to RL", sft_final)
    else:
        run_phase(sft_phase(), recipe, out / "sft", model_path=rl_model, train_dataset=sft_dataset,
                  callbacks=sft_callbacks)
    return run_phase(rl_phase(rewards=rl_rewards), recipe, out / "rl", model_path=init_from or str(sft_final),
                     train_dataset=rl_dataset, final_dir=out / "final", callbacks=rl_callbacks, extend=extend)
