"""Our NeMo-RL driver: GRPO/DAPO and SFT of Qwen2.5-VL on our traces, with our reward environments.

Pinned to NeMo-RL v0.7.0 (container ``nvcr.io/nvidia/nemo-rl:v0.7.0``). The stock ``examples/run_vlm_grpo.py``
calls ``setup_response_data(..., is_vlm=True)``, which builds every environment as the built-in ``vlm`` one, so a
custom reward needs its own driver. This one follows the stock flow and differs where our data and rewards enter:

1. load the YAML (``load_config``, NeMo-RL's ``defaults:`` inheritance), apply the command line's Hydra overrides,
   resolve it, read our ``spatialiq`` section (:class:`DriverSettings`) and the phase's plan it holds
   (`core.plan.PhasePlan`, written by ``spatialiq recipes nemo-rl``; the recipe is not reloaded);
2. check that the training split fills one global batch (`core.batch.check_batch_fits`), and the config's project
   pieces against the plan (:mod:`spatialiq_train.nemo.contract`: data entries,
   ``env.spatialiq`` / ``env.spatialiq_exact_match``, checkpoint metric, ``skip_tokenizer_init``); a difference
   is an error naming the keys, never rewritten; check that the validation split shares no structure with the
   phase's training split (:func:`spatialiq_train.core.splits.check_held_out`); then build ``MasterConfig`` from the
   config as it is;
3. ``get_next_experiment_dir``, ``init_ray``, ``get_tokenizer(..., get_processor=True)``; the recipe's pixel
   budget is set on that processor, and images are resized to it in our data processor (vLLM gets them resized);
4. register our environments in both registries NeMo-RL consults: ``register_env`` (``ENV_REGISTRY``, name ->
   actor class path) and ``ACTOR_ENVIRONMENT_REGISTRY`` (class path -> the system Python), without which
   ``create_env`` raises; environments are created here, before ``setup`` (as ``setup_response_data`` does);
5. build ``AllTaskProcessedDataset``s from our rows with :class:`spatialiq_train.nemo.data.DatumProcessor`
   (the first datum is built at once, so a bad row, image or length limit fails before any GPU work);
6. ``grpo.setup(master_config, tokenizer, dataset, val_dataset, processor=processor)`` (13-tuple) and
   ``grpo_train`` with its 12 positional parameters, both inside
   :func:`spatialiq_train.nemo.grouping.per_view_groups` (one GRPO group per view, not per prompt token ids: v0.7.0
   would make every batch of our views one group), and
   :class:`spatialiq_train.nemo.placeholders.VisionTokenGuard` (a sampled vision token would fail the
   policy's forward pass: it is replaced and its sample left out of the loss; above
   :data:`~spatialiq_train.nemo.placeholders.MAX_MASKED_SHARE` of a rollout's samples the run stops). The grouping
   checks the NeMo-RL version and the signatures it patches first, and ``policy.train`` is wrapped to check, per
   step, that both per-view call sites ran (:class:`spatialiq_train.nemo.grouping.StepCalls`); SFT:
   ``sft.setup(master_config, processor, train, val)`` (9-tuple) and ``sft_train`` (9 parameters), the processor
   passed as the tokenizer, as ``run_vlm_sft.py`` passes it.

Resuming: NeMo-RL's ``setup`` resumes from the newest ``step_N`` in ``checkpointing.checkpoint_dir`` (weights,
optimizer, dataloader position, step counters). This driver logs which one and refuses a checkpoint folder made
from another recipe, and a resume on other data than the ``data.json`` it records beside the checkpoints when
training starts (`core.run_folder`: trace and image digests; the changed file named). Rerun the same command to
continue.

Exit codes: 0 done; 2 bad input (config, recipe, rows, NeMo-RL not importable); 3 dynamic sampling reached
``grpo.dynamic_sampling_max_gen_batches`` without filling a batch (NeMo-RL raises and stops; the last checkpoint
stays resumable); 1 any other failure.

On NeMo-RL main (7ea279a, after v0.7.0): ``grpo_train`` takes ``processor=`` as a 13th, keyword parameter (pass
it there); ``GRPOConfig``/``RewardShapingConfig`` are pydantic models (attribute access); ``run_vlm_grpo.py``
dispatches to ``async_grpo_train`` when ``grpo.async_grpo.enabled``. ``setup``, ``sft.setup``, ``sft_train``,
``register_env`` and ``create_env`` keep their v0.7.0 signatures.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.plan import PhasePlan, from_record
from spatialiq_train.core.run_folder import check_same_data, write_data_record
from spatialiq_train.nemo.checkpoints import latest_step, read_step_config, writing
from spatialiq_train.nemo.contract import check_contract, check_held_out_plan, plan_data
from spatialiq_train.nemo.data import TASK_NAME, DatumError, datum_processor, load_rows
from spatialiq_train.nemo.env import ACTOR_CLASSES, TRAIN_ENV, VAL_ENV
from spatialiq_train.nemo.grouping import StepCalls, check_supported, per_view_groups
from spatialiq_train.nemo.perf import nemo_perf
from spatialiq_train.nemo.placeholders import VisionTokenGuard
from spatialiq_train.nemo.runtime import NemoApi, load_api
from spatialiq_train.nemo.settings import SECTION, DataPlan, DriverSettings, Phase, read_settings
from spatialiq_train.nemo.watch import StepWatch

log = logging.getLogger(__name__)

EXIT_DYNAMIC_SAMPLING_CAP = 3
"""Exit status when dynamic sampling reaches its cap (NeMo-RL raises and the run stops)."""
DYNAMIC_SAMPLING_CAP_MESSAGE = "Dynamic sampling has reached the maximum allowed number of batches"
"""The start of the ValueError NeMo-RL v0.7.0 raises at the cap (``nemo_rl.algorithms.grpo.dynamic_sampling``)."""

__all__ = ["DYNAMIC_SAMPLING_CAP_MESSAGE", "DynamicSamplingCapError", "EXIT_DYNAMIC_SAMPLING_CAP", "run"]


class DynamicSamplingCapError(UserError):
    """Dynamic sampling spent its generation batches without a full batch of groups whose rewards vary."""

    exit_code = EXIT_DYNAMIC_SAMPLING_CAP


@contextmanager
def dynamic_sampling_exit(cap: Any) -> Iterator[None]:
    """Turn NeMo-RL's ValueError at the dynamic-sampling cap into :class:`DynamicSamplingCapError` (exit 3)."""
    try:
        yield
    except ValueError as exc:
        if DYNAMIC_SAMPLING_CAP_MESSAGE not in str(exc):
            raise
        raise DynamicSamplingCapError(
            f"dynamic sampling reached grpo.dynamic_sampling_max_gen_batches ({cap}) without a full batch of "
            "prompt groups whose rewards vary, and NeMo-RL stopped the run. Raise the recipe's "
            "rl.dynamic_sampling.max_refill_rounds or rl.num_generations (regenerate the config with --set), or "
            "check the rewards (all samples of a group scoring alike); rerun the same command to resume from the "
            "last checkpoint") from exc


# --- checkpoints ------------------------------------------------------------------------------------------------


def check_resume(config: dict[str, Any]) -> Path | None:
    """The checkpoint NeMo-RL will resume from (logged), refused when it was made from another recipe or data."""
    ckpt = config.get("checkpointing") or {}
    if not ckpt.get("enabled", False):
        log.warning("checkpointing.enabled is false: this run cannot be resumed")
        return None
    if not ckpt.get("checkpoint_dir"):
        raise UserError("checkpointing.enabled is true but checkpointing.checkpoint_dir is not set")
    step = latest_step(ckpt["checkpoint_dir"])
    if step is None:
        log.info("no checkpoint in %s: starting fresh", ckpt["checkpoint_dir"])
        return None
    saved_file = step / "config.yaml"
    saved = read_step_config(step) if saved_file.is_file() else {}
    mine, theirs = config.get("spatialiq") or {}, saved.get("spatialiq") or {}
    if theirs and (theirs.get("recipe"), theirs.get("phase")) != (mine.get("recipe"), mine.get("phase")):
        raise UserError(f"{saved_file}: this checkpoint folder was made by phase {theirs.get('phase')!r} of recipe "
                        f"{theirs.get('recipe')!r}; this run is phase {mine.get('phase')!r} of "
                        f"{mine.get('recipe')!r}: set checkpointing.checkpoint_dir to a new folder")
    log.info("resuming from %s", step)
    return step


# --- config -----------------------------------------------------------------------------------------------------


def plan_for(settings: DriverSettings, phase: Phase, source: Path) -> tuple[PhasePlan, DataPlan]:
    """The phase's plan the section holds, and what the driver reads and applies from it; the plan's reward names
    are checked against the registry (dotted ``pkg.module:function`` rewards imported, as training does)."""
    from reward.registry import check_reward_names

    if settings.phase != phase:
        raise UserError(f"{source}: {SECTION}.phase is {settings.phase!r}: this config is for `spatialiq nemo "
                        f"{settings.phase}`, not `spatialiq nemo {phase}`")
    if not settings.plan:
        raise UserError(f"{source}: {SECTION}.plan is absent (a config written before the plan was recorded); "
                        "regenerate it with `spatialiq recipes nemo-rl`")
    try:
        plan = from_record(settings.plan)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{source}: {SECTION}.plan is not a plan record ({exc}); regenerate the config with "
                        "`spatialiq recipes nemo-rl`") from None
    if plan.phase != phase:
        raise UserError(f"{source}: {SECTION}.plan is the {plan.phase!r} phase's, not {phase!r}'s")
    if phase == "rl":
        check_reward_names(plan.rl.weights, f"{source}: {SECTION}.plan", import_modules=True)
    return plan, plan_data(plan, settings.recipe)


def check_rows(plan: PhasePlan, data: DataPlan) -> None:
    """The training split fills one global batch (after data.max_examples and the RL filter), before any work."""
    from spatialiq_train.core.batch import check_batch_fits

    rows = load_rows(data.traces_dir, data.train_split, data.data_root, plan.phase, data.max_examples)
    multiplier = plan.rl.batch_multiplier if plan.phase == "rl" and plan.rl.dynamic_sampling else 1
    try:
        check_batch_fits(plan.batch, len(rows), data.dataset_name(data.train_split), multiplier)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def load_resolved(api: NemoApi, config_path: str | Path, overrides: Sequence[str]) -> dict[str, Any]:
    """The YAML with NeMo-RL's inheritance and the Hydra overrides applied, resolved to plain containers."""
    path = Path(config_path)
    if path.is_dir():
        raise UserError(f"--config {path}: a directory; give the YAML file `spatialiq recipes nemo-rl` wrote in it")
    if not path.is_file():
        raise UserError(f"--config {path}: no such file (write one with `spatialiq recipes nemo-rl`)")
    api.register_omegaconf_resolvers()
    try:
        cfg = api.load_config(str(path))
    except yaml.YAMLError as exc:  # OmegaConf reads the file with PyYAML
        raise UserError(f"--config {path}: not valid YAML ({' '.join(str(exc).split())}); regenerate it with "
                        "`spatialiq recipes nemo-rl`") from None
    if overrides:
        try:
            cfg = api.parse_hydra_overrides(cfg, list(overrides))
        except Exception as exc:  # NeMo-RL raises its OverridesError for unknown keys and bad syntax
            raise UserError(f"{path}: overrides {' '.join(overrides)} rejected: {exc}") from exc
    resolved = api.to_container(cfg)
    if not isinstance(resolved, dict):
        raise UserError(f"{path}: a NeMo-RL config is a YAML mapping")
    return resolved


# --- run --------------------------------------------------------------------------------------------------------

PLAN_FILE = "plan.json"


def write_plan_record(log_dir: Path, plan: PhasePlan) -> None:
    """Keep the plan the run trains with beside its logs (``<log_dir>/exp_NNN/plan.json``; written whole)."""
    from spatialiq_train.core.io import atomic_write_text

    log_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(log_dir / PLAN_FILE, json.dumps(plan.record(), indent=2) + "\n")



def register_environments(api: NemoApi) -> None:
    """Our environments in both registries (idempotent; a name taken by another class is refused)."""
    for name, fqn in ACTOR_CLASSES.items():
        api.actor_registry[fqn] = api.system_executable
        entry = api.env_registry.get(name)
        if entry is None:
            api.register_env(name, fqn)
        elif entry.get("actor_class_fqn") != fqn:
            raise UserError(f"NeMo-RL environment name {name!r} is already registered to "
                            f"{entry.get('actor_class_fqn')!r}, not {fqn!r}")


def build_dataset(api: NemoApi, plan: DataPlan, split: str, phase: Phase, processor: Any,
                  max_seq_length: int | None) -> Any:
    """One split as NeMo-RL's ``AllTaskProcessedDataset``; its first datum is built now, as a check."""
    rows = load_rows(plan.traces_dir, split, plan.data_root, phase, plan.max_examples)
    fn = datum_processor(plan.data_root, plan.min_pixels, plan.max_pixels, phase)
    dataset = api.AllTaskProcessedDataset(rows, processor, api.TaskDataSpec(task_name=TASK_NAME), fn,
                                          max_seq_length=max_seq_length)
    first = dataset[0]
    if first["loss_multiplier"] == 0.0:
        raise DatumError(f"{plan.dataset_name(split)}: the first row has {first['length']} tokens, at or over "
                         f"data.max_input_seq_length = {max_seq_length}; raise it (image tokens included)")
    log.info("%s: %d rows, %d tokens in the first", plan.dataset_name(split), len(rows), first["length"])
    return dataset


def _datasets(api: NemoApi, plan: DataPlan, phase: Phase, processor: Any, master: Any) -> tuple[Any, Any]:
    limit = master.data.get("max_input_seq_length")
    train = build_dataset(api, plan, plan.train_split, phase, processor, limit)
    val = None if plan.val_split is None else build_dataset(api, plan, plan.val_split, phase, processor, limit)
    return train, val


def _run_rl(api: NemoApi, master: Any, processor: Any, plan: DataPlan) -> str | None:
    master.policy["generation"] = api.configure_generation_config(master.policy["generation"], processor.tokenizer)
    register_environments(api)
    train, val = _datasets(api, plan, "rl", processor, master)
    log_dir = Path(master.logger["log_dir"])
    for name in (TRAIN_ENV, VAL_ENV):
        if name in master.env:
            master.env[name].setdefault("metrics_file", str(log_dir / f"{name}_metrics.jsonl"))
    task_to_env = {TASK_NAME: api.create_env(TRAIN_ENV, master.env[TRAIN_ENV])}
    val_task_to_env = None if val is None else {TASK_NAME: api.create_env(VAL_ENV, master.env[VAL_ENV])}
    generation = master.policy["generation"]
    watch = StepWatch(int(generation["max_new_tokens"]), generation.get("stop_token_ids") or ())
    calls = StepCalls()
    vision = VisionTokenGuard(processor.tokenizer)
    with (per_view_groups(master, plan.advantage_baseline, plan.advantage_std, calls), vision.installed(),
          watch.rollouts_of(task_to_env)):
        (policy, policy_generation, _gym, _cluster, dataloader, val_dataloader, loss_fn, logger, checkpointer,
         grpo_state, master_config, _teachers, _aliases) = api.grpo_setup(
            master, processor.tokenizer, train, val, processor=processor)
        calls.guard(policy)
        watch.attach(logger)
        vision.attach(logger)
        with dynamic_sampling_exit(master.grpo.get("dynamic_sampling_max_gen_batches")):
            api.grpo_train(policy, policy_generation, dataloader, val_dataloader, processor.tokenizer, loss_fn,
                           task_to_env, val_task_to_env, logger, checkpointer, grpo_state, master_config)
    return watch.learned_nothing()


def _run_sft(api: NemoApi, master: Any, processor: Any, plan: DataPlan) -> None:
    from spatialiq_train.nemo.early_stop import EarlyStopped, early_stopping

    train, val = _datasets(api, plan, "sft", processor, master)
    with early_stopping(plan.early_stopping_patience, plan.early_stopping_min_delta) as stop:
        (policy, _cluster, train_dataloader, val_dataloader, loss_fn, logger, checkpointer, sft_state,
         master_config) = api.sft_setup(master, processor, train, val)
        if stop is not None:
            stop.attach(logger)
        try:
            api.sft_train(policy, train_dataloader, val_dataloader, processor, loss_fn, master_config, logger,
                          checkpointer, sft_state)
        except EarlyStopped as done:
            log.info("%s", done)


def _master(api: NemoApi, phase: Phase, config: dict[str, Any], source: Path) -> Any:
    try:
        return (api.grpo_master_config if phase == "rl" else api.sft_master_config)(**config)
    except (ValidationError, TypeError) as exc:
        raise UserError(f"{source}: not a NeMo-RL {'GRPO' if phase == 'rl' else 'SFT'} config: {exc}") from exc


def run(phase: Phase, config_path: str | Path, overrides: Sequence[str] = ()) -> str | None:
    """Train with NeMo-RL from a generated YAML (``spatialiq recipes nemo-rl``) plus Hydra-style overrides.

    Returns, for an RL phase in which no step updated the weights, the warning that names the cause and the knobs
    (also logged; :class:`StepWatch`); else None."""
    api = load_api()
    source = Path(config_path)
    config = load_resolved(api, config_path, overrides)
    phase_plan, plan = plan_for(read_settings(config, source), phase, source)
    check_contract(config, plan, phase, str(source))
    check_held_out_plan(plan)
    check_rows(phase_plan, plan)  # a split smaller than one batch would train no step: refused before any work
    with writing(config):  # one writer per checkpoint folder; incomplete step_N set aside (nemo/checkpoints.py)
        return _train(api, phase, config, phase_plan, plan, source)


def _train(api: NemoApi, phase: Phase, config: dict[str, Any], phase_plan: PhasePlan, plan: DataPlan,
           source: Path) -> str | None:
    """`run` once the config is checked and its checkpoint folder held: resume guard, set-up, training."""
    from spatialiq_train.core.processor import apply_pixel_budget

    resumed = check_resume(config)
    master = _master(api, phase, config, source)
    if phase == "rl":
        check_supported(master)
    if phase == "rl" and plan.val_split is None and any(master.grpo.get(k) for k in ("val_period", "val_at_start",
                                                                                     "val_at_end")):
        raise UserError("grpo.val_period/val_at_start/val_at_end ask for validation but the recipe gives no "
                        "validation split (data.eval_split or rl.validation.every_steps is null)")
    if (ckpt := config.get("checkpointing") or {}).get("enabled"):  # a resume continues the same data, recorded
        folder = Path(ckpt["checkpoint_dir"])  # beside the checkpoints (core/run_folder.py), before Ray starts
        write_data_record(folder, check_same_data(folder, phase_plan, resumed is not None))
    master.logger["log_dir"] = api.get_next_experiment_dir(master.logger["log_dir"])
    write_plan_record(Path(master.logger["log_dir"]), phase_plan)
    os.environ.setdefault("WANDB_MODE", plan.wandb_mode)
    api.init_ray()
    processor = api.get_tokenizer(master.policy["tokenizer"], get_processor=True)
    apply_pixel_budget(processor, plan.min_pixels, plan.max_pixels)
    with nemo_perf(phase, master):  # perf/* from v0.7.0's own timing metrics (nemo/perf.py)
        if phase == "rl":
            return _run_rl(api, master, processor, plan)
        _run_sft(api, master, processor, plan)
    return None
