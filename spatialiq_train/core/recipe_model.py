"""The recipe's typed model: one pydantic model per YAML section, and the `Recipe` that holds them and checks them
against each other (loading, overrides and error messages are in `recipes`).

Every section forbids unknown keys. Counts and switches are strict (`max_steps: true` is refused, not read as 1);
numbers refuse booleans but accept YAML's `1e-6` (a string in YAML 1.1). The SFT and RL phases share one
`OptimizerSection` type (`sft.optimizer`, `rl.optimizer`) and one `ValidationSection` type.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from spatialiq_train.core.advantages import Baseline, Std, refuse_scale_rewards
from spatialiq_train.core.mixing import TraceSource, check_sources
from spatialiq_train.core.recipe_types import (
    MAX_BATCH,
    MAX_COUNT,
    MAX_EPOCHS,
    MAX_GENERATIONS,
    Count,
    Flag,
    MaxSteps,
    Num,
    Split,
    sane_learning_rate,
)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraSection(Section):
    """LoRA adapters via peft; disabled means full fine-tuning."""

    enabled: Flag = False
    r: Count = Field(16, gt=0)
    alpha: Count = Field(32, gt=0)
    dropout: Num = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


class ModelSection(Section):
    name_or_path: str = "Qwen/Qwen2.5-VL-7B-Instruct"
    """Hub id or local directory (safetensors) of the policy to start from."""
    tiny: Flag = False
    """Build the offline tiny Qwen2.5-VL (spatialiq_train.tiny) instead of loading `name_or_path`."""
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    """auto: bfloat16 on GPU, float32 on CPU."""
    attn_implementation: str | None = None
    min_pixels: Count = Field(56 * 56, gt=0)
    max_pixels: Count = Field(448 * 448, gt=0)
    freeze_vision: Flag = False
    liger_kernel: Flag | None = None
    """Liger's RMSNorm, SwiGLU and rotary kernels (`use_liger_kernel`); None: on for a GPU run with `liger_kernel`
    importable. The loss stays TRL 1.16's own fused LM head (it refuses Liger's fused cross-entropy)."""
    lora: LoraSection = Field(default_factory=LoraSection)


class DataSection(Section):
    traces_dir: str = "data/traces/cot"
    """Folder holding train.jsonl, val.jsonl, warmup.jsonl and rl.jsonl from `spatialiq traces`."""
    data_root: str = "data/train"
    """Dataset root that the image paths in the traces are relative to."""
    sft_split: Split = "train"
    rl_split: Split = "rl"
    eval_split: Split | None = "val"
    """Held-out split: validation during training (`*.validation`) and the eval area sample it."""
    max_examples: Count | None = Field(None, gt=0, le=MAX_COUNT)
    """Cap on rows read per split (None = all)."""
    sources: list[TraceSource] = Field(default_factory=list)
    """Replay: the training splits mixed from these trace folders with weights (`spatialiq_train.core.mixing`);
    empty: the training splits are data.traces_dir's."""

    @model_validator(mode="after")
    def _sources(self) -> DataSection:
        check_sources(self.sources, self.traces_dir)
        return self


class OptimizerSection(Section):
    """AdamW, its schedule and the batch/step budget of one phase; the keys are TrainingArguments' names."""

    learning_rate: Annotated[Num, AfterValidator(sane_learning_rate)] = 1e-5
    """Finite, > 0 and below :data:`MAX_LEARNING_RATE`."""
    lr_scheduler_type: str = "constant"
    warmup_steps: Num = Field(0, ge=0)
    """Below 1: fraction of the total steps; from 1: a number of steps."""
    warmup_start_factor: Num = Field(0.0, ge=0, lt=1)
    """Linear warm-up starts at this fraction of the learning rate (needs lr_scheduler_type constant_with_warmup
    when above 0; TRL cannot express it, the phase runner installs the schedule)."""
    num_train_epochs: Num = Field(1.0, gt=0, le=MAX_EPOCHS)
    max_steps: MaxSteps = -1
    global_batch_size: Count | None = Field(None, gt=0, le=MAX_BATCH)
    """SFT: sequences per optimizer step over all processes. Unset under ``rl.optimizer`` (see prompts_per_step)."""
    micro_batch_size: Count | None = Field(None, gt=0, le=MAX_BATCH)
    """Sequences per forward/backward on one device (None: GPU memory plan; CPU: each process's whole share);
    TRL's per-device batch and accumulation are derived from it, the global batch and the process count."""
    weight_decay: Num = Field(0.0, ge=0, le=1)
    adam_beta1: Num = Field(0.9, ge=0, lt=1)
    adam_beta2: Num = Field(0.999, ge=0, lt=1)
    max_grad_norm: Num = Field(1.0, gt=0)
    gradient_checkpointing: Flag | None = None
    """None: on a GPU only when the memory plan needs it (`core.memory_plan`), off on the CPU."""

    @model_validator(mode="after")
    def _warm_start_schedule(self) -> OptimizerSection:
        if self.warmup_start_factor > 0 and self.lr_scheduler_type != "constant_with_warmup":
            raise ValueError(f"warmup_start_factor {self.warmup_start_factor} needs lr_scheduler_type "
                             f"constant_with_warmup (got {self.lr_scheduler_type!r})")
        return self


OPTIMIZER_KEYS: tuple[str, ...] = tuple(OptimizerSection.model_fields)


class ValidationSection(Section):
    """Validation on `data.eval_split` during a phase, and early stopping on it."""

    every_steps: Count | None = Field(None, gt=0)
    """Validate every this many optimizer steps (None: no validation)."""
    max_samples: Count | None = Field(None, gt=0)
    """Rows of the split used (None: all)."""
    early_stopping_patience: Count | None = Field(None, gt=0)
    """Stop after this many validations without improvement (None: never stop early); the best checkpoint is
    loaded at the end."""
    early_stopping_min_delta: Num = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _needs_validation(self) -> ValidationSection:
        if self.early_stopping_patience is not None and self.every_steps is None:
            raise ValueError("early_stopping_patience needs every_steps (early stopping reads the validations)")
        return self


class PhaseSection(Section):
    """A training phase: its optimizer (``sft.optimizer``, ``rl.optimizer``; the phase's own defaults under the
    recipe's keys) and its validation."""

    OPTIMIZER_DEFAULTS: ClassVar[dict[str, Any]] = {}
    optimizer: OptimizerSection = Field(default_factory=OptimizerSection)
    validation: ValidationSection = Field(default_factory=ValidationSection)

    @model_validator(mode="before")
    @classmethod
    def _optimizer_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("optimizer", {}), dict):
            return data
        cls._refuse_retired(data)
        return {**data, "optimizer": {**cls.OPTIMIZER_DEFAULTS, **data.get("optimizer", {})}}

    @classmethod
    def _refuse_retired(cls, data: dict[str, Any]) -> None:
        """Refuse the per-device batch keys, naming the keys that replace them (`core.batch`)."""
        from spatialiq_train.core.batch import retired_keys_message

        message = retired_keys_message("rl" if issubclass(cls, RLSection) else "sft", data)
        if message:
            raise ValueError(message)


class SFTSection(PhaseSection):
    OPTIMIZER_DEFAULTS: ClassVar[dict[str, Any]] = {
        "learning_rate": 2e-5, "lr_scheduler_type": "cosine", "warmup_steps": 0.03, "global_batch_size": 16}
    max_length: Count | None = Field(None, gt=0)
    """None: never truncate (truncation could cut image tokens)."""
    assistant_only_loss: Flag = True

    @model_validator(mode="after")
    def _global_batch(self) -> SFTSection:
        if self.optimizer.global_batch_size is None:
            raise ValueError("sft.optimizer.global_batch_size: set the sequences per optimizer step (the released "
                             "SFT recipes: 16)")
        return self


class DynamicSamplingSection(Section):
    """DAPO dynamic sampling: drop groups whose rewards do not vary, refill from new prompts."""

    enabled: Flag = True
    max_refill_rounds: Count = Field(10, ge=0)
    """Extra generation rounds per batch before the remaining slots are filled with masked groups (the number of
    generation batches is at most max_refill_rounds + 1)."""
    batch_multiplier: Count = Field(1, ge=1, le=64)
    """The draw size: each generation batch draws rl.prompts_per_step x this many prompts (NeMo-RL's
    grpo.batch_multiplier; the paper's released config: 2). TRL draws one ordinary batch per round (1 only)."""


class OverlongSection(Section):
    """DAPO soft overlong punishment (trl.rewards.get_soft_overlong_punishment)."""

    enabled: Flag = True
    buffer_length: Count = Field(256, gt=0)
    """Completions longer than max_response_length - buffer_length are penalised linearly up to -penalty."""
    max_response_length: Count | None = Field(None, gt=0)
    """Where the penalty window ends (None: generation.max_completion_length). The released configuration sets
    the total sequence budget (2048) with a 512 buffer, so at 1024 new tokens the window is never reached."""
    penalty: Num = Field(1.0, ge=0)


class AdvantageSection(Section):
    """The GRPO advantage of a view's samples, the same on both engines (spatialiq_train.core.advantages)."""

    baseline: Baseline = "group_mean"
    std: Std = "group"


class RLSection(PhaseSection):
    OPTIMIZER_DEFAULTS: ClassVar[dict[str, Any]] = {
        "learning_rate": 5e-7, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 10}
    init_from: str | None = None
    """SFT-CoT checkpoint the policy starts from and the KL reference anchors to (None = model.name_or_path)."""
    prompts_per_step: Count | None = Field(8, gt=0, le=MAX_BATCH)
    """Prompts per optimizer step over all processes; x num_generations completions, generated once a step."""
    num_generations: Count = Field(16, ge=2, le=MAX_GENERATIONS)
    num_iterations: Count = Field(1, gt=0, le=MAX_GENERATIONS)
    loss_type: Literal["dapo", "grpo", "bnpo", "dr_grpo"] = "dapo"
    epsilon: Num = Field(0.2, gt=0, lt=1)
    epsilon_high: Num = Field(0.28, gt=0)
    beta: Num = Field(0.05, ge=0)
    kl_estimator: Literal["k3"] = "k3"
    """TRL's per-token KL is Schulman's k3 estimator; kept explicit so the recipe says what it gets."""
    advantage: AdvantageSection = Field(default_factory=AdvantageSection)
    mask_truncated_completions: Flag = False
    dynamic_sampling: DynamicSamplingSection = Field(default_factory=DynamicSamplingSection)
    overlong: OverlongSection = Field(default_factory=OverlongSection)

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        return refuse_scale_rewards(data)

    @model_validator(mode="after")
    def _consistent(self) -> RLSection:
        if self.epsilon_high < self.epsilon:
            raise ValueError(f"rl.epsilon_high ({self.epsilon_high}) must be >= rl.epsilon ({self.epsilon})")
        if self.validation.early_stopping_patience is not None:
            raise ValueError("rl.validation.early_stopping_patience: TRL's GRPO validation reward is not a metric the "
                             "Trainer can select on; leave it null (the released RL config disables it too)")
        if self.prompts_per_step is None:
            raise ValueError("rl.prompts_per_step: set the prompts per optimizer step (the released RL recipes: 8)")
        if self.optimizer.global_batch_size is not None:
            raise ValueError(f"rl.optimizer.global_batch_size: the RL global batch is rl.prompts_per_step x "
                             f"rl.num_generations = {self.prompts_per_step * self.num_generations} completions; "
                             "leave it unset and set rl.prompts_per_step")
        return self


class VllmSection(Section):
    """vLLM rollouts; each key but `enabled` is one trl.GRPOConfig field (see VLLM_TO_GRPO)."""

    enabled: Flag = True
    """Used only when vllm is importable and a GPU is present; otherwise rollouts use transformers."""
    mode: Literal["colocate", "server"] = "colocate"
    gpu_memory_utilization: Num = Field(0.3, gt=0, le=1)
    tensor_parallel_size: Count = Field(1, gt=0)
    max_model_len: Count | None = Field(None, gt=0)
    """Prompt + completion token budget of the engine (None: the model's own maximum)."""
    enable_sleep_mode: Flag | None = None
    """Colocate mode: offload vLLM's weights and cache during the optimizer step. None: the engine's way (TRL: off;
    NeMo-RL v0.7.0: on, the only way its colocated vLLM runs)."""
    server_host: str = "0.0.0.0"
    """Server mode: where `trl vllm-serve` listens."""
    server_port: Count = Field(8000, gt=0, le=65535)
    importance_sampling_correction: Flag = False
    """Reweight the loss by the ratio of the trainer's to vLLM's log-probabilities of each rollout. TRL 1.16 turns
    it on by default with vLLM; off here, as in NeMo-RL v0.7.0 and the released config (docs/training.md)."""
    importance_sampling_mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = (
        "sequence_mask")
    importance_sampling_clip_max: Num | None = Field(3.0, gt=0)
    importance_sampling_clip_min: Num | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _importance_sampling_bounds(self) -> VllmSection:
        low, high = self.importance_sampling_clip_min, self.importance_sampling_clip_max
        if low is not None and high is not None and low >= high:
            raise ValueError(f"importance_sampling_clip_min ({low}) must be below importance_sampling_clip_max "
                             f"({high})")
        if self.importance_sampling_mode.endswith("_truncate") and low is None and high is None:
            raise ValueError(f"importance_sampling_mode {self.importance_sampling_mode} needs "
                             "importance_sampling_clip_max or importance_sampling_clip_min")
        return self


VLLM_TO_GRPO: dict[str, str] = {
    "mode": "vllm_mode",
    "gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "tensor_parallel_size": "vllm_tensor_parallel_size",
    "max_model_len": "vllm_max_model_length",
    "enable_sleep_mode": "vllm_enable_sleep_mode",
    "server_host": "vllm_server_host",
    "server_port": "vllm_server_port",
    "importance_sampling_correction": "vllm_importance_sampling_correction",
    "importance_sampling_mode": "vllm_importance_sampling_mode",
    "importance_sampling_clip_max": "vllm_importance_sampling_clip_max",
    "importance_sampling_clip_min": "vllm_importance_sampling_clip_min",
}
"""`vllm.<key>` -> `trl.GRPOConfig` field, one to one."""


class GenerationSection(Section):
    """Rollout sampling during RL."""

    max_completion_length: Count = Field(1024, gt=0)
    temperature: Num = Field(1.0, gt=0, le=2)
    """vLLM >= 0.31 rejects temperatures above 2 (vllm/sampling_params.py)."""
    top_p: Num = Field(1.0, gt=0, le=1)
    top_k: Count = Field(0, ge=0)


class RewardSection(Section):
    weights: dict[str, Num] = Field(default_factory=lambda: {"format": 0.1, "integer_distance": 0.9})
    """Reward name (reward.registry, or a dotted `pkg.module:function`) -> weight."""

    @field_validator("weights")
    @classmethod
    def _usable_weights(cls, weights: dict[str, float]) -> dict[str, float]:
        from spatialiq_train.core.reward_weights import weights_problem  # the rule `reward score` applies too

        if problem := weights_problem(weights):
            raise ValueError(problem)
        return weights


class EvalSamplingSection(Section):
    k: Count = Field(10, gt=0)
    temperature: Num = Field(1.0, ge=0, le=2)
    """0 is greedy; vLLM >= 0.31 rejects temperatures above 2 (`eval sample` applies vLLM's whole rule)."""
    top_p: Num = Field(1.0, gt=0, le=1)
    max_new_tokens: Count = Field(1024, gt=0)


class LoggingSection(Section):
    report_to: list[Literal["tensorboard", "wandb"]] = Field(default_factory=lambda: ["tensorboard"])
    """Used only for the integrations that are installed."""
    wandb_project: str = "spatialiq"
    wandb_mode: Literal["offline", "online"] = "offline"
    logging_steps: Count = Field(1, gt=0)
    save_steps: Count = Field(100, gt=0)
    save_total_limit: Count | None = Field(2, gt=0)


class RunSection(Section):
    output_dir: str = "runs/default"
    seed: Count = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"


class Recipe(Section):
    name: str
    description: str = ""
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    sft: SFTSection = Field(default_factory=SFTSection)
    rl: RLSection = Field(default_factory=RLSection)
    vllm: VllmSection = Field(default_factory=VllmSection)
    generation: GenerationSection = Field(default_factory=GenerationSection)
    reward: RewardSection = Field(default_factory=RewardSection)
    eval: EvalSamplingSection = Field(default_factory=EvalSamplingSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    run: RunSection = Field(default_factory=RunSection)

    @model_validator(mode="after")
    def _across_sections(self) -> Recipe:
        budget, window = self.generation.max_completion_length, self.rl.overlong.max_response_length
        if self.vllm.max_model_len is not None and self.vllm.max_model_len <= budget:
            raise ValueError(f"vllm.max_model_len ({self.vllm.max_model_len}) must exceed "
                             f"generation.max_completion_length ({budget}): it holds the prompt and the completion")
        if self.rl.overlong.enabled and self.rl.overlong.buffer_length > (window or budget):
            raise ValueError(f"rl.overlong.buffer_length ({self.rl.overlong.buffer_length}) must not exceed the "
                             f"window end ({window or budget}): the penalty would reach every completion")
        for phase in ("sft", "rl"):
            val = getattr(self, phase).validation
            if val.every_steps is not None and self.data.eval_split is None:
                raise ValueError(f"{phase}.validation.every_steps needs data.eval_split (the split validated on)")
            if val.early_stopping_patience is not None and self.logging.save_steps % val.every_steps:
                raise ValueError(f"{phase}.validation.early_stopping_patience loads the best checkpoint at the end, "
                                 f"so logging.save_steps ({self.logging.save_steps}) must be a multiple of "
                                 f"{phase}.validation.every_steps ({val.every_steps})")
        return self
