"""One training phase, used by SFT and RL alike: TRL arguments from the recipe, the trainer with our callbacks,
validation and early stopping, the warm-start schedule, resume, train and export.

A phase is described by a `PhaseSpec`: its name (`sft` or `rl`, also the recipe section it reads), the trace
split it trains on, the TRL config class and a function that builds the TRL trainer. Everything else is shared.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from spatialiq_train.core.recipe_model import OptimizerSection, PhaseSection, Recipe, ValidationSection
from spatialiq_train.train import common
from spatialiq_train.train.data import sampling_args
from spatialiq_train.train.plan import PhasePlan, gpu_phase_plan, phase_plan, write_plan

log = logging.getLogger(__name__)

PhaseName = Literal["sft", "rl"]
NOT_TRL_ARGS = ("warmup_start_factor", "gradient_checkpointing", "global_batch_size", "micro_batch_size")
"""Optimizer keys that are not passed to TRL under their own name (the phase applies them; the batch keys become
TRL's per-device batch and accumulation through `train.plan`)."""


@dataclass(frozen=True)
class PhaseSpec:
    """What differs between the SFT and RL phases."""

    name: PhaseName
    config_class: Callable[..., Any]
    """trl.SFTConfig or trl.GRPOConfig (or a function with its keyword arguments)."""
    phase_kwargs: Callable[[Recipe], dict[str, Any]]
    """The config arguments only this phase has (completion-only loss; GRPO's clip, KL, rollout keys ...)."""
    make_trainer: Callable[..., Any]
    """(model_path, args, train_dataset, eval_dataset, processor, callbacks) -> TRL trainer."""
    eval_batch_size: Callable[[Recipe, PhasePlan], int]


def section_of(recipe: Recipe, name: PhaseName) -> PhaseSection:
    return recipe.sft if name == "sft" else recipe.rl


def split_of(recipe: Recipe, name: PhaseName) -> str:
    return recipe.data.sft_split if name == "sft" else recipe.data.rl_split


def optimizer_args(opt: OptimizerSection) -> dict[str, Any]:
    """The optimizer section as TrainingArguments keywords (same names, one to one)."""
    return opt.model_dump(exclude=set(NOT_TRL_ARGS))


def validation_args(val: ValidationSection, eval_batch_size: int) -> dict[str, Any]:
    """Evaluation keywords: every `every_steps` steps; with early stopping, the best checkpoint (lowest
    eval_loss) is kept and loaded at the end."""
    if val.every_steps is None:
        return {"eval_strategy": "no"}
    out: dict[str, Any] = {"eval_strategy": "steps", "eval_steps": val.every_steps,
                           "per_device_eval_batch_size": eval_batch_size}
    if val.early_stopping_patience is not None:
        out.update(metric_for_best_model="eval_loss", greater_is_better=False, load_best_model_at_end=True)
    return out


def phase_config(spec: PhaseSpec, recipe: Recipe, output_dir: str | Path, plan: PhasePlan | None = None) -> Any:
    """The TRL config of the phase: shared TrainingArguments, the optimizer section, the batch and efficiency
    settings of `plan` (default: `train.plan.phase_plan` for this process count, no memory plan), validation,
    phase keys."""
    section = section_of(recipe, spec.name)
    plan = plan or phase_plan(recipe, spec.name, gpu=common.on_gpu(recipe))
    return spec.config_class(
        **common.trainer_common(recipe, Path(output_dir), plan.gradient_checkpointing),
        **optimizer_args(section.optimizer),
        **plan.trl_args(),
        **validation_args(section.validation, spec.eval_batch_size(recipe, plan)),
        **spec.phase_kwargs(recipe),
        **sampling_args(recipe),
        model_init_kwargs=common.model_init_kwargs(recipe),
    )


def warmup_factor(step: int, warmup_steps: int, start_factor: float) -> float:
    """Learning-rate multiplier: linear from `start_factor` to 1 over `warmup_steps`, then 1 (constant)."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return 1.0
    return start_factor + (1.0 - start_factor) * step / warmup_steps


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


def _phase_callbacks(recipe: Recipe, name: PhaseName, out: Path) -> list[Any]:
    from spatialiq_train.train.divergence import make_divergence_callback
    from spatialiq_train.train.logging import make_metrics_callback
    from spatialiq_train.train.perf import make_perf_callback

    callbacks = [make_perf_callback(), make_metrics_callback(out / "metrics.jsonl", name, common.reporting(recipe),
                                                             recipe.logging.wandb_project),
                 make_divergence_callback(name)]
    val = section_of(recipe, name).validation
    if val.early_stopping_patience is not None:
        from transformers import EarlyStoppingCallback

        callbacks.append(EarlyStoppingCallback(val.early_stopping_patience, val.early_stopping_min_delta))
    return callbacks


def build_phase_trainer(
    spec: PhaseSpec,
    recipe: Recipe,
    model_path: str,
    train_dataset: Any,
    output_dir: str | Path,
    eval_dataset: Any = None,
    callbacks: list[Any] | None = None,
    plan: PhasePlan | None = None,
) -> tuple[Any, Any]:
    """(trainer, processor) for the phase, `model_path` being the policy to start from; `plan` the batch and
    efficiency settings (default: `train.plan.gpu_phase_plan` on this machine)."""
    from spatialiq_train.core.versions import check_versions

    check_versions("trl", "transformers", *(("vllm",) if spec.name == "rl" else ()), "deepspeed")
    out = Path(output_dir)
    processor = common.load_processor_for(recipe, model_path)
    plan = plan or gpu_phase_plan(recipe, spec.name, model_path)
    log.info("%s", plan.describe())
    args = phase_config(spec, recipe, out, plan)
    all_callbacks = [*_phase_callbacks(recipe, spec.name, out), *(callbacks or [])]
    trainer = spec.make_trainer(model_path, args, train_dataset, eval_dataset, processor, all_callbacks)
    trainer.spatialiq_plan = plan  # read by run_phase (the plan record) and the perf callback
    from spatialiq_train.train.perf import attach_perf

    attach_perf(trainer, spec.name, recipe, plan)
    from spatialiq_train.train.export import check_exportable

    check_exportable(trainer)  # before training: a ZeRO-3 run whose weights could not be saved is refused now
    # TRL writes a boilerplate model card (README.md, "fine-tuned version of [None]") into the run folder at every
    # checkpoint; the card of a trained model is `spatialiq release`'s
    trainer.create_model_card = lambda *args, **kwargs: None
    if recipe.model.freeze_vision:
        common.freeze_vision_tower(trainer.model)
    start = section_of(recipe, spec.name).optimizer.warmup_start_factor
    if start > 0:
        install_warm_start(trainer, start)
    return trainer, processor


def phase_datasets(recipe: Recipe, name: PhaseName, train_dataset: Any, eval_dataset: Any) -> tuple[Any, Any]:
    """The phase's training split and, when it validates, its validation rows (defaults from the recipe)."""
    from spatialiq_train.train.data import load_split, load_training_split

    d = recipe.data
    trains_on_traces = train_dataset is None
    if train_dataset is None:
        train_dataset = load_training_split(recipe, split_of(recipe, name), name)
    val = section_of(recipe, name).validation
    if eval_dataset is None and val.every_steps is not None and d.eval_split is not None:
        if trains_on_traces:  # both splits come from trace files: validation must share no structure with training
            from spatialiq_train.train.held_out import check_validation_held_out

            check_validation_held_out(recipe, [split_of(recipe, name)])
        limit = min(x for x in (val.max_samples, d.max_examples, 1 << 62) if x is not None)
        eval_dataset = load_split(d.traces_dir, d.eval_split, d.data_root, name, limit)
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
    policy to `final_dir` (default `output_dir/final`; a LoRA adapter is kept in `output_dir/adapter`).

    First the recipe is compared with the folder's record (`train.record`): a setting the phase reads that differs
    is refused, finished or not. A phase already finished under the same step budget is complete: nothing is loaded
    or written and `final_dir` is returned as it is. A larger budget needs `extend` (`train.completion`). Nothing
    is created before the training data has been read and checked; the record is written when training starts."""
    from spatialiq_train.train import completion, record
    from spatialiq_train.train.checkpoints import disk_full_as_one_line
    from spatialiq_train.train.export import export_final

    out = Path(output_dir)
    final = Path(final_dir) if final_dir else out / "final"
    budget = completion.budget_of(section_of(recipe, spec.name).optimizer)
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
    train_dataset, eval_dataset = phase_datasets(recipe, spec.name, train_dataset, eval_dataset)  # before creating
    data = run_folder.check_same_data(out, recipe, spec.name, common.last_checkpoint(out) is not None) \
        if from_files else None
    out.mkdir(parents=True, exist_ok=True)
    model_path = model_path or common.ensure_base_model(recipe, out)
    trainer, processor = build_phase_trainer(spec, recipe, model_path, train_dataset, out, eval_dataset, callbacks)
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
