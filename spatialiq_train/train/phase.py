"""One training phase, used by SFT and RL alike: the phase's plan (`core.plan`, decided once on this machine by
`train.plan.machine_plan`), the TRL config and trainer settings it maps to (`train.mapper`), the trainer with our
callbacks, validation and early stopping, the warm-start schedule, resume, train and export.

A phase is described by a `PhaseSpec`: its name (`sft` or `rl`), the TRL config class and a function that builds
the TRL trainer from the plan. Everything else is shared, and reads the plan, never the recipe's fields (the recipe
itself is compared with the folder's record, whole, by `train.record`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from spatialiq_train.core.plan import PhasePlan
from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.train import common, mapper
from spatialiq_train.train.plan import machine_plan, write_plan

log = logging.getLogger(__name__)

PhaseName = Literal["sft", "rl"]


@dataclass(frozen=True)
class PhaseSpec:
    """What differs between the SFT and RL phases."""

    name: PhaseName
    config_class: Callable[..., Any]
    """trl.SFTConfig or trl.GRPOConfig (or a function with its keyword arguments)."""
    make_trainer: Callable[..., Any]
    """(plan, model_path, args, train_dataset, eval_dataset, processor, callbacks) -> TRL trainer."""
    reward_weights: list[float] | None = None
    """RL with the caller's own reward functions: their weights (None: the plan's reward terms)."""
    total_weights: dict[str, float] | None = None
    """RL with the caller's own reward functions: name -> weight of those the total reward sums (None: the plan's
    ``reward.weights``)."""
    after_run: Callable[[Path], None] | None = None
    """Called with the output folder when `run_phase` returns, trained or already complete (RL: the idle-phase
    warning)."""


def phase_config(spec: PhaseSpec, plan: PhasePlan, output_dir: str | Path) -> Any:
    """The TRL config of the phase: `train.mapper.config_kwargs` of the plan, in TRL's config class."""
    import torch

    kwargs = mapper.config_kwargs(plan, str(output_dir), spec.reward_weights)
    init = dict(kwargs["model_init_kwargs"])
    init["dtype"] = getattr(torch, init["dtype"])
    return spec.config_class(**{**kwargs, "model_init_kwargs": init})


def warmup_factor(step: int, warmup_steps: int, start_factor: float) -> float:
    """Learning-rate multiplier: linear from `start_factor` to 1 over `warmup_steps`, then 1 (constant)."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return 1.0
    return start_factor + (1.0 - start_factor) * step / warmup_steps


class WholeBatches:
    """A sampler's indices cut to whole global batches each epoch: the epoch's tail that fills none is left out (the
    next epoch reshuffles), so every optimizer step trains the recipe's global batch on any number of processes and
    with any accumulation, as v0.7.0's ``drop_last`` loaders do."""

    def __init__(self, sampler: Any, global_batch: int) -> None:
        self.sampler, self.global_batch = sampler, global_batch

    def __len__(self) -> int:
        return len(self.sampler) // self.global_batch * self.global_batch

    def __iter__(self) -> Any:
        keep = len(self)
        for i, index in enumerate(self.sampler):
            if i >= keep:
                return
            yield index

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)


def whole_global_batches(trainer: Any, global_batch: int) -> None:
    """Make the trainer's training sampler yield whole global batches only (:class:`WholeBatches`)."""
    original = trainer._get_train_sampler

    def sampler(*args: Any, **kwargs: Any) -> Any:
        inner = original(*args, **kwargs)
        return None if inner is None else WholeBatches(inner, global_batch)

    trainer._get_train_sampler = sampler


def install_warm_start(trainer: Any, start_factor: float) -> None:
    """Make `trainer` build a LambdaLR of `warmup_factor` instead of transformers' warm-up from 0."""
    from torch.optim.lr_scheduler import LambdaLR

    def create_scheduler(num_training_steps: int, optimizer: Any = None) -> Any:
        if trainer.lr_scheduler is None:
            warmup = trainer.args.get_warmup_steps(num_training_steps)
            factor = functools.partial(warmup_factor, warmup_steps=warmup, start_factor=start_factor)
            trainer.lr_scheduler = LambdaLR(optimizer if optimizer is not None else trainer.optimizer, factor)
            trainer._created_lr_scheduler = True
        return trainer.lr_scheduler

    trainer.create_scheduler = create_scheduler


def _phase_callbacks(spec: PhaseSpec, plan: PhasePlan, settings: dict[str, Any], out: Path) -> list[Any]:
    from spatialiq_train.train.divergence import make_divergence_callback
    from spatialiq_train.train.logging import make_metrics_callback
    from spatialiq_train.train.perf import make_perf_callback

    weights = spec.total_weights or ({name: w for name, w, own in mapper.reward_terms(plan.rl) if own}
                                      if plan.phase == "rl" else None)
    callbacks = [make_perf_callback(), make_metrics_callback(out / "metrics.jsonl", plan.phase,
                                                             common.reporting(settings),
                                                             settings["wandb"]["project"], weights),
                 make_divergence_callback(plan.phase)]
    if settings["early_stopping"] is not None:
        from transformers import EarlyStoppingCallback

        callbacks.append(EarlyStoppingCallback(*settings["early_stopping"]))
    return callbacks


def build_phase_trainer(
    spec: PhaseSpec,
    recipe: Recipe | None,
    model_path: str,
    train_dataset: Any,
    output_dir: str | Path,
    eval_dataset: Any = None,
    callbacks: list[Any] | None = None,
    plan: PhasePlan | None = None,
) -> tuple[Any, Any]:
    """(trainer, processor) for the phase, `model_path` being the policy to start from; `plan` the phase's plan
    (default: `train.plan.machine_plan` of `recipe` on this machine)."""
    from spatialiq_train.core.versions import check_versions

    check_versions("trl", "transformers", *(("vllm",) if spec.name == "rl" else ()), "deepspeed")
    out = Path(output_dir)
    plan = plan or machine_plan(recipe, spec.name, model_path)  # type: ignore[arg-type]
    settings = mapper.trainer_settings(plan)
    processor = common.load_processor_for(settings, model_path)
    log.info("%s", plan.describe())
    args = phase_config(spec, plan, out)
    all_callbacks = [*_phase_callbacks(spec, plan, settings, out), *(callbacks or [])]
    trainer = spec.make_trainer(plan, model_path, args, train_dataset, eval_dataset, processor, all_callbacks)
    trainer.spatialiq_plan = plan  # read by run_phase (the plan record) and the perf callback
    from spatialiq_train.train.perf import attach_perf

    attach_perf(trainer, plan)
    from spatialiq_train.train.export import check_exportable

    check_exportable(trainer)  # before training: a ZeRO-3 run whose weights could not be saved is refused now
    # TRL writes a boilerplate model card (README.md, "fine-tuned version of [None]") into the run folder at every
    # checkpoint; the card of a trained model is `spatialiq release`'s
    trainer.create_model_card = lambda *args, **kwargs: None
    if settings["freeze_vision"]:
        common.freeze_vision_tower(trainer.model)
    if plan.phase == "sft":  # GRPO's repeat sampler already yields whole generation batches only
        whole_global_batches(trainer, plan.batch.global_batch)
    if settings["warmup_start_factor"] > 0:
        install_warm_start(trainer, settings["warmup_start_factor"])
    return trainer, processor


def phase_datasets(plan: PhasePlan, train_dataset: Any, eval_dataset: Any) -> tuple[Any, Any]:
    """The phase's training split and, when it validates, its validation rows (defaults from the plan); a global
    batch the training rows cannot fill once is refused (`core.batch.check_batch_fits`)."""
    from spatialiq_train.core.batch import check_batch_fits
    from spatialiq_train.train.data import load_split, load_training_split

    d = plan.data
    trains_on_traces = train_dataset is None
    if train_dataset is None:
        train_dataset = load_training_split(plan)
    check_batch_fits(plan.batch, len(train_dataset), f"the {d.train_split!r} split", plan.rl.batch_multiplier
                     if plan.phase == "rl" and plan.rl.dynamic_sampling else 1)
    if eval_dataset is None and d.eval_split is not None:
        if trains_on_traces:  # both splits come from trace files: validation must share no structure with training
            from spatialiq_train.train.held_out import check_validation_held_out

            sources = [s["traces_dir"] for s in d.sources]  # replay: every source's split is held out too
            check_validation_held_out(d.traces_dir, d.eval_split, [d.train_split], sources)
        limit = min(x for x in (plan.validation.max_samples, d.max_examples, 1 << 62) if x is not None)
        eval_dataset = load_split(d.traces_dir, d.eval_split, d.data_root, plan.phase, limit)
    return train_dataset, eval_dataset


def run_phase(
    spec: PhaseSpec,
    recipe: Recipe,
    output_dir: str | Path,
    model_path: str | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    final_dir: str | Path | None = None,
    callbacks: list[Any] | None = None,
    extend: bool = False,
) -> Path:
    """Train the phase (resuming from the newest checkpoint under `output_dir`, weights included) and export the
    policy to `final_dir` (default `output_dir/final`; a LoRA adapter is kept in `output_dir/adapter`). The policy
    starts from `model_path`, else the plan's `rl.init_from` (RL), else the base model. Datasets default to the
    plan's splits (`data.{sft,rl}_split`, `data.eval_split`).

    First the recipe is compared with the folder's record (`train.record`): a setting the phase reads that differs
    is refused, finished or not. A phase already finished under the same step budget is complete: nothing is loaded
    or written and `final_dir` is returned as it is. A larger budget needs `extend` (`train.completion`). Nothing
    is created before the training data has been read and checked; the record is written when training starts.
    `spec.after_run` is called with `output_dir` last."""
    final = _run_phase(spec, recipe, Path(output_dir), model_path, train_dataset, eval_dataset, final_dir, callbacks,
                       extend)
    if spec.after_run is not None:
        spec.after_run(Path(output_dir))
    return final


def _run_phase(spec: PhaseSpec, recipe: Recipe, out: Path, model_path: str | None, train_dataset: Any,
               eval_dataset: Any, final_dir: str | Path | None, callbacks: list[Any] | None, extend: bool) -> Path:
    from spatialiq_train.train import completion, record
    from spatialiq_train.train.checkpoints import disk_full_as_one_line
    from spatialiq_train.train.export import export_final

    final = Path(final_dir) if final_dir else out / "final"
    plan = machine_plan(recipe, spec.name)  # the values; the GPU memory plan is added once the model is known
    if model_path is None and plan.model.init_from is not None:
        model_path = common.check_init_from(plan.model.init_from)
    budget = completion.budget_of(plan.optimizer)
    marker = completion.read_marker(out, budget)
    ready = completion.final_ready(final)
    # settings first: a finished phase's larger budget is left to `completion.decide`, which says how to extend
    record.check_phase_record(out, recipe, spec.name, extend or (marker is not None and ready))
    if completion.decide(marker, budget, ready, extend, str(out)) == "complete":
        log.info("%s is complete (step %s of its budget; %s kept as it is): nothing to do. Pass --extend with a "
                 "larger budget to train on", out, (marker or {}).get("global_step", "?"), final)
        return final
    from spatialiq_train.core import run_folder

    from_files = train_dataset is None  # datasets given in code are not recorded (nothing to compare on resume)
    train_dataset, eval_dataset = phase_datasets(plan, train_dataset, eval_dataset)  # before creating anything
    data = run_folder.check_same_data(out, plan, common.last_checkpoint(out) is not None) if from_files else None
    out.mkdir(parents=True, exist_ok=True)
    model_path = model_path or common.ensure_base_model(mapper.trainer_settings(plan), out)
    if plan.execution.device == "cuda":
        plan = machine_plan(recipe, spec.name, model_path)  # the memory plan reads the model's shape
    trainer, processor = build_phase_trainer(spec, None, model_path, train_dataset, out, eval_dataset, callbacks,
                                             plan)
    resume = common.resume_from(trainer, out)
    if resume:
        log.info("resuming %s from %s", spec.name, resume)
        common.restore_token_count(trainer, resume)
    record.write_record(out, recipe)
    run_folder.write_data_record(out, data)
    write_plan(out, trainer.spatialiq_plan)
    with disk_full_as_one_line(out):
        trainer.train(resume_from_checkpoint=resume)
        run_folder.check_trained(trainer.state.global_step, out, spec.name)  # no step-less success
        exported = export_final(trainer, processor, final, out / "adapter")
    completion.write_marker(out, spec.name, budget, trainer.state.global_step, exported)
    return exported
