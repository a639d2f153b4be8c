"""One phase's resolved plan: every value the phase trains with, read once from the recipe (pure).

`core.resolve.resolve(recipe, phase, hardware)` is the only reader of a `Recipe` after loading and validation that a
training engine needs: the TRL mapper (`spatialiq_train.train.mapper`) and the NeMo-RL mapper
(`spatialiq_train.nemo.config`) build their configs from the plan alone, and both runs keep it as ``plan.json``. Each
leaf value carries where it came from (`PhasePlan.provenance`): ``recipe`` (the recipe sets it), ``default`` (the recipe
model's default), ``hardware`` (decided from `core.resolve.Hardware`: the device, the process count, the memory plan)
or ``released`` (the paper's released configuration, where the recipe has no value).

The groups follow the recipe's sections and keep its key names, so a refusal names the recipe key to change
(`recipe_key`): ``model``, ``data``, ``algorithm`` (SFT: the loss; RL: loss, clipping, KL, advantage, dynamic sampling
with its draw size, overlong shaping, reward weights, iterations, importance sampling), ``batch`` (`core.batch`),
``optimizer`` (with the step budget), ``validation``, ``generation`` (RL), ``execution`` (device, dtype, kernels,
checkpointing, vLLM) and ``logging`` (with the seed and checkpoint cadence). The training data is one source today
(``data.traces_dir`` + the phase's split), or a weighted mix of trace folders (``data.sources``, replay).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from spatialiq_train.core.batch import BatchPlan
from spatialiq_train.core.memory_plan import MemoryPlan

Phase = Literal["sft", "rl"]
PADDING_FREE_REASON = ("TRL 1.16 refuses padding_free for vision datasets (SFTTrainer) and GRPOTrainer has no "
                       "padding-free batches; Qwen2.5-VL's 3-D rotary positions are computed over the padded batch")


@dataclass(frozen=True)
class PlanModel:
    name_or_path: str
    tiny: bool
    init_from: str | None
    attn_implementation: str | None
    min_pixels: int
    max_pixels: int
    freeze_vision: bool
    lora: bool
    r: int
    alpha: int
    dropout: float
    target_modules: tuple[str, ...]


@dataclass(frozen=True)
class PlanData:
    traces_dir: str
    data_root: str
    train_split: str
    eval_split: str | None
    """The held-out split this phase validates on (None: the phase does not validate)."""
    max_examples: int | None
    sources: tuple[dict[str, Any], ...] = ()
    """Replay (``data.sources``): trace folders mixed with weights into every global batch (`core.mixing`); empty:
    ``traces_dir`` alone. Each: ``traces_dir``, ``weight``, ``data_root``."""


@dataclass(frozen=True)
class SftAlgorithm:
    assistant_only_loss: bool
    max_length: int | None


@dataclass(frozen=True)
class RlAlgorithm:
    num_generations: int
    num_iterations: int
    loss_type: str
    epsilon: float
    epsilon_high: float
    beta: float
    kl_estimator: str
    baseline: str
    std: str
    mask_truncated_completions: bool
    dynamic_sampling: bool
    max_refill_rounds: int
    batch_multiplier: int
    """Dynamic sampling's draw size: prompts drawn per generation batch = prompts_per_step x this."""
    overlong: bool
    buffer_length: int
    max_response_length: int
    """Where the overlong window ends (the recipe's, else generation.max_completion_length)."""
    penalty: float
    weights: dict[str, float]
    importance_sampling_correction: bool
    importance_sampling_mode: str
    importance_sampling_clip_max: float | None
    importance_sampling_clip_min: float | None


@dataclass(frozen=True)
class PlanOptimizer:
    learning_rate: float
    lr_scheduler_type: str
    warmup_steps: float
    warmup_start_factor: float
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    max_grad_norm: float
    max_steps: int
    """The step budget (-1: by epochs)."""
    num_train_epochs: float


@dataclass(frozen=True)
class PlanValidation:
    every_steps: int | None
    max_samples: int | None
    early_stopping_patience: int | None
    early_stopping_min_delta: float


@dataclass(frozen=True)
class PlanGeneration:
    """RL rollouts: sampling, and the vLLM engine that generates them (the recipe's ``generation`` and ``vllm``)."""

    max_completion_length: int
    temperature: float
    top_p: float
    top_k: int
    vllm: bool
    """Rollouts through vLLM: the recipe asks (``vllm.enabled``), and the engine can (TRL: a GPU run with vLLM
    importable; NeMo-RL: always)."""
    mode: str
    gpu_memory_utilization: float
    tensor_parallel_size: int
    max_model_len: int | None
    enable_sleep_mode: bool
    server_host: str
    server_port: int


@dataclass(frozen=True)
class PlanExecution:
    device: Literal["cpu", "cuda"]
    dtype: Literal["bfloat16", "float32"]
    gradient_checkpointing: bool
    liger_kernel: bool
    padding_free: bool


@dataclass(frozen=True)
class PlanLogging:
    report_to: tuple[str, ...]
    wandb_project: str
    wandb_mode: str
    logging_steps: int
    save_steps: int
    save_total_limit: int | None
    output_dir: str
    seed: int


@dataclass(frozen=True)
class PhasePlan:
    """Every value one phase trains with, and where each came from (``provenance``: dotted field -> recipe, default,
    hardware or released)."""

    phase: Phase
    name: str
    model: PlanModel
    data: PlanData
    algorithm: SftAlgorithm | RlAlgorithm
    batch: BatchPlan
    optimizer: PlanOptimizer
    validation: PlanValidation
    generation: PlanGeneration | None
    execution: PlanExecution
    logging: PlanLogging
    memory: MemoryPlan | None = None
    provenance: dict[str, str] = field(default_factory=dict)

    @property
    def rl(self) -> RlAlgorithm:
        if not isinstance(self.algorithm, RlAlgorithm):
            raise TypeError("an SFT plan has no RL algorithm")
        return self.algorithm

    @property
    def memory_open(self) -> bool:
        """On a GPU, the micro-batch or gradient checkpointing is the hardware's to size (the memory plan, once the
        model's shape and the device's memory are known)."""
        return self.execution.device == "cuda" and "hardware" in (
            self.provenance.get("batch.micro_batch"), self.provenance.get("execution.gradient_checkpointing"))

    @property
    def vllm_training_share(self) -> float:
        """The share of the GPU colocated vLLM holds while the policy trains: none when vLLM does not run in this
        phase, runs as a server, or sleeps (sleep mode frees its weights and cache for the optimizer step)."""
        g = self.generation
        if g is None or not g.vllm or g.mode != "colocate" or g.enable_sleep_mode:
            return 0.0
        return g.gpu_memory_utilization

    def fields(self) -> dict[str, Any]:
        """Dotted field -> value, every leaf of the plan (``batch.*`` included; the memory plan is a record)."""
        return plan_fields(self)

    def record(self) -> dict[str, Any]:
        """JSON-ready: the groups as written, the memory plan and the provenance (``plan.json``)."""
        out = {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["batch"] = self.batch.record()
        out["memory"] = self.memory.record() if self.memory else None
        return out

    def describe(self) -> str:
        x = self.execution
        extra = [f"gradient checkpointing {'on' if x.gradient_checkpointing else 'off'} "
                 f"({self.provenance.get('execution.gradient_checkpointing', '?')})",
                 f"Liger kernels {'on' if x.liger_kernel else 'off'} ({self.provenance.get('execution.liger_kernel')})"]
        if self.memory is not None:
            extra.append(f"memory plan ~{self.memory.estimate_gib:.0f} of {self.memory.device_gib:.0f} GiB")
        return f"{self.batch.describe()}; {'; '.join(extra)}"


GROUPS = ("model", "data", "algorithm", "batch", "optimizer", "validation", "generation", "execution", "logging")
BATCH_FIELDS = ("global_batch", "world_size", "micro_batch", "accumulation", "micro_source", "prompts_per_step",
                "num_generations")


def plan_fields(plan: PhasePlan) -> dict[str, Any]:
    out: dict[str, Any] = {"phase": plan.phase, "name": plan.name}
    for group in GROUPS:
        value = getattr(plan, group)
        if value is None:
            continue
        names = BATCH_FIELDS if group == "batch" else [f.name for f in dataclasses.fields(value)]
        out.update({f"{group}.{n}": getattr(value, n) for n in names})
    return out


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def replace_field(plan: PhasePlan, dotted: str, value: Any) -> PhasePlan:
    """The plan with one field changed (``group.name``), the rest as it is (for what-if checks and tests)."""
    group, _, name = dotted.partition(".")
    if not name:
        return dataclasses.replace(plan, **{group: value})
    return dataclasses.replace(plan, **{group: dataclasses.replace(getattr(plan, group), **{name: value})})


def from_record(record: dict[str, Any]) -> PhasePlan:
    """A plan back from its record (``plan.json``, or the NeMo-RL config's ``spatialiq.plan``)."""
    r = dict(record)
    algorithm = (SftAlgorithm if r["phase"] == "sft" else RlAlgorithm)(**r["algorithm"])
    model = PlanModel(**{**r["model"], "target_modules": tuple(r["model"]["target_modules"])})
    batch = {k: v for k, v in r["batch"].items() if k in BATCH_FIELDS or k == "phase"}
    memory = r.get("memory")
    return PhasePlan(
        phase=r["phase"], name=r["name"], model=model,
        data=PlanData(**{**r["data"], "sources": tuple(r["data"].get("sources") or ())}), algorithm=algorithm,
        batch=BatchPlan(**batch), optimizer=PlanOptimizer(**r["optimizer"]),
        validation=PlanValidation(**r["validation"]),
        generation=PlanGeneration(**r["generation"]) if r.get("generation") else None,
        execution=PlanExecution(**r["execution"]),
        logging=PlanLogging(**{**r["logging"], "report_to": tuple(r["logging"]["report_to"])}),
        memory=MemoryPlan(**{k: v for k, v in memory.items() if k in _MEMORY_FIELDS}) if memory else None,
        provenance=dict(r.get("provenance") or {}))


_MEMORY_FIELDS = tuple(f.name for f in dataclasses.fields(MemoryPlan))


def refuse_inert(plan: PhasePlan) -> None:
    """Raise ValueError for plan values no engine can act on: early stopping in RL (no validation loss to stop on)
    and an early-stopping min_delta without a patience. Both mappers call it."""
    val = plan.validation
    if plan.phase == "rl" and val.early_stopping_patience is not None:
        raise ValueError("rl.validation.early_stopping_patience: the RL phase has no validation loss to stop on; "
                         "leave it null")
    if val.early_stopping_patience is None and val.early_stopping_min_delta:
        raise ValueError(f"{plan.phase}.validation.early_stopping_min_delta = {val.early_stopping_min_delta} "
                         f"without {plan.phase}.validation.early_stopping_patience has no effect; set the patience "
                         "or leave min_delta 0")
