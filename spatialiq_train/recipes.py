"""Training recipes: pydantic models, YAML loading and dotted command-line overrides.

A recipe is one YAML file under `recipes/` with typed sections (model, data, sft, rl, generation, reward,
eval, logging, run). Every section forbids unknown keys: a typo is an error naming the key path and the
nearest valid key, unlike NeMo-RL which silently ignores `grpo.ratio_clip_max`.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from spatialiq_train.errors import InputError
from spatialiq_train.io import read_text


def _steps_or_epochs(value: int) -> int:
    if value == 0 or value < -1:
        raise ValueError("must be a positive number of steps, or -1 to train for num_train_epochs")
    return value


MaxSteps = Annotated[int, AfterValidator(_steps_or_epochs)]
"""``max_steps``: a positive step budget, or -1 (transformers' convention) to train by epochs."""


class RecipeError(InputError):
    """A recipe file or override is invalid; the message names the file, key path and what would be right."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraSection(_Section):
    """LoRA adapters via peft; disabled means full fine-tuning."""

    enabled: bool = False
    r: int = Field(16, gt=0)
    alpha: int = Field(32, gt=0)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


class ModelSection(_Section):
    name_or_path: str = "Qwen/Qwen2.5-VL-7B-Instruct"
    """Hub id or local directory (safetensors) of the policy to start from."""
    tiny: bool = False
    """Build the offline tiny Qwen2.5-VL (spatialiq_train.tiny) instead of loading `name_or_path`."""
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    """auto: bfloat16 on GPU, float32 on CPU."""
    attn_implementation: str | None = None
    min_pixels: int = Field(56 * 56, gt=0)
    max_pixels: int = Field(448 * 448, gt=0)
    freeze_vision: bool = False
    lora: LoraSection = Field(default_factory=LoraSection)


class DataSection(_Section):
    traces_dir: str = "data/traces/cot"
    """Folder holding train.jsonl, val.jsonl, warmup.jsonl and rl.jsonl from `spatialiq traces`."""
    data_root: str = "data/train"
    """Dataset root that the image paths in the traces are relative to."""
    sft_split: Literal["train", "val", "warmup", "rl"] = "train"
    rl_split: Literal["train", "val", "warmup", "rl"] = "rl"
    eval_split: Literal["train", "val", "warmup", "rl"] | None = "val"
    """Held-out split that evaluation (the eval area) samples; training does not read it."""
    max_examples: int | None = Field(None, gt=0)
    """Cap on rows read per split (None = all)."""


class SFTSection(_Section):
    learning_rate: float = Field(2e-5, gt=0)
    lr_scheduler_type: str = "cosine"
    warmup_steps: float = Field(0.03, ge=0)
    """Below 1: fraction of the total steps; from 1: a number of steps."""
    num_train_epochs: float = Field(1.0, gt=0)
    max_steps: MaxSteps = -1
    per_device_train_batch_size: int = Field(1, gt=0)
    gradient_accumulation_steps: int = Field(8, gt=0)
    max_length: int | None = None
    """None: never truncate (truncation could cut image tokens)."""
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    assistant_only_loss: bool = True
    gradient_checkpointing: bool | None = None
    """None: on for GPU runs, off on CPU."""


class DynamicSamplingSection(_Section):
    """DAPO dynamic sampling: drop groups whose rewards do not vary, refill from new prompts."""

    enabled: bool = True
    max_refill_rounds: int = Field(10, ge=0)
    """Extra generation rounds per batch before the remaining slots are filled with masked groups."""


class OverlongSection(_Section):
    """DAPO soft overlong punishment (trl.rewards.get_soft_overlong_punishment)."""

    enabled: bool = True
    buffer_length: int = Field(256, gt=0)
    """Completions longer than max_completion_length - buffer_length are penalised linearly up to -penalty."""
    penalty: float = Field(1.0, ge=0)


class RLSection(_Section):
    init_from: str | None = None
    """SFT-CoT checkpoint the policy starts from and the KL reference anchors to (None = model.name_or_path)."""
    learning_rate: float = Field(5e-7, gt=0)
    lr_scheduler_type: str = "constant_with_warmup"
    warmup_steps: float = Field(10, ge=0)
    num_train_epochs: float = Field(1.0, gt=0)
    max_steps: MaxSteps = -1
    per_device_train_batch_size: int = Field(4, gt=0)
    gradient_accumulation_steps: int = Field(4, gt=0)
    steps_per_generation: int | None = Field(None, gt=0)
    """Optimizer micro-steps served by one generation batch (None: gradient_accumulation_steps)."""
    num_generations: int = Field(16, ge=2)
    num_iterations: int = Field(1, gt=0)
    loss_type: Literal["dapo", "grpo", "bnpo", "dr_grpo"] = "dapo"
    epsilon: float = Field(0.2, gt=0)
    epsilon_high: float = Field(0.28, gt=0)
    beta: float = Field(0.05, ge=0)
    kl_estimator: Literal["k3"] = "k3"
    """TRL's per-token KL is Schulman's k3 estimator; kept explicit so the recipe says what it gets."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    mask_truncated_completions: bool = False
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    gradient_checkpointing: bool | None = None
    use_vllm: bool = True
    """Used only when vllm is importable; otherwise generation falls back to transformers."""
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    dynamic_sampling: DynamicSamplingSection = Field(default_factory=DynamicSamplingSection)
    overlong: OverlongSection = Field(default_factory=OverlongSection)

    @model_validator(mode="after")
    def _consistent(self) -> RLSection:
        if self.epsilon_high < self.epsilon:
            raise ValueError(f"rl.epsilon_high ({self.epsilon_high}) must be >= rl.epsilon ({self.epsilon})")
        per_device = self.per_device_train_batch_size * (self.steps_per_generation or self.gradient_accumulation_steps)
        if per_device % self.num_generations:
            raise ValueError(
                f"rl.per_device_train_batch_size x rl.steps_per_generation (default: gradient_accumulation_steps) = "
                f"{per_device} must be a multiple of rl.num_generations = {self.num_generations}: each device "
                "generates whole groups (needed by dynamic sampling)"
            )
        return self


class GenerationSection(_Section):
    """Rollout sampling during RL."""

    max_completion_length: int = Field(1024, gt=0)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)


class RewardSection(_Section):
    weights: dict[str, float] = Field(default_factory=lambda: {"format": 0.1, "integer_distance": 0.9})
    """Reward name (reward.registry) -> weight."""


class EvalSamplingSection(_Section):
    k: int = Field(10, gt=0)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(1024, gt=0)


class LoggingSection(_Section):
    report_to: list[Literal["tensorboard", "wandb"]] = Field(default_factory=lambda: ["tensorboard"])
    """Used only for the integrations that are installed."""
    wandb_project: str = "spatialiq"
    wandb_mode: Literal["offline", "online"] = "offline"
    logging_steps: int = Field(1, gt=0)
    save_steps: int = Field(100, gt=0)
    save_total_limit: int | None = Field(2, gt=0)


class RunSection(_Section):
    output_dir: str = "runs/default"
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"


class Recipe(_Section):
    name: str
    description: str = ""
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    sft: SFTSection = Field(default_factory=SFTSection)
    rl: RLSection = Field(default_factory=RLSection)
    generation: GenerationSection = Field(default_factory=GenerationSection)
    reward: RewardSection = Field(default_factory=RewardSection)
    eval: EvalSamplingSection = Field(default_factory=EvalSamplingSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    run: RunSection = Field(default_factory=RunSection)


# --- error messages -------------------------------------------------------------------------------------------


def _fields_at(model: type[BaseModel], path: tuple[str | int, ...]) -> list[str]:
    """Valid keys of the section at `path` (empty when `path` leaves the typed sections)."""
    current: type[BaseModel] | None = model
    for key in path:
        if current is None or not isinstance(key, str) or key not in current.model_fields:
            return []
        annotation = current.model_fields[key].annotation
        current = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return list(current.model_fields) if current is not None else []


def _describe(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid recipe"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc)
        if err["type"] == "extra_forbidden":
            valid = _fields_at(Recipe, loc[:-1])
            near = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            hint = f"did you mean '{'.'.join([*map(str, loc[:-1]), near[0]])}'?" if near else ""
            lines.append(f"  unknown key '{path}' {hint} (valid keys here: {', '.join(valid)})")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict) else f" (got {got!r})"
            lines.append(f"  {path or '<top>'}: {err['msg']}{shown}")
    return "\n".join(lines)


# --- loading ----------------------------------------------------------------------------------------------------


def parse_override(text: str) -> tuple[list[str], Any]:
    """`rl.learning_rate=1e-6` -> (["rl", "learning_rate"], 1e-6); the value goes through yaml.safe_load."""
    if "=" not in text:
        raise RecipeError(f"override {text!r}: expected KEY.PATH=VALUE, e.g. rl.learning_rate=1e-6")
    key, _, raw = text.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise RecipeError(f"override {text!r}: empty key path")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise RecipeError(f"override {text!r}: value is not valid YAML ({exc})") from exc
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of `data` with each dotted override set (sections are created as needed)."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(data)) if data else {}
    for text in overrides:
        parts, value = parse_override(text)
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RecipeError(f"override {text!r}: '{'.'.join(parts[: i + 1])}' is a value, not a section")
            node = child
        node[parts[-1]] = value
    return out


def recipe_from_dict(data: dict[str, Any], source: str = "<recipe>") -> Recipe:
    if not isinstance(data, dict):
        raise RecipeError(f"{source}: a recipe is a YAML mapping, got {type(data).__name__}")
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(_describe(exc, source)) from None


def _shipped_recipes_dir() -> Path:
    """The shipped recipes: package data of the ``recipes`` package in any install, else the checkout's folder."""
    import importlib.util

    spec = importlib.util.find_spec("recipes")
    if spec is not None and spec.origin and (Path(spec.origin).parent / "tiny_cpu.yaml").is_file():
        return Path(spec.origin).parent
    return Path(__file__).resolve().parents[1] / "recipes"


SHIPPED_RECIPES = _shipped_recipes_dir()
"""Folder of the shipped recipes (found by name from any working directory: ``spatialiq recipes show tiny_cpu``)."""


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Load `path` (YAML; or the name of a shipped recipe, e.g. `dapo_tight_7b`), apply dotted overrides, validate."""
    p = Path(path)
    shipped = SHIPPED_RECIPES / f"{p.name}.yaml"
    if not p.is_file() and p.suffix == "" and len(p.parts) == 1 and shipped.is_file():
        p = shipped
    names = ", ".join(sorted(f.stem for f in SHIPPED_RECIPES.glob("*.yaml")))
    if p.is_dir():
        raise RecipeError(f"recipe path {p} is a directory; give a recipe YAML file in it (or a shipped recipe "
                          f"name: {names})")
    if not p.is_file():
        raise RecipeError(f"recipe file {p} does not exist (a YAML path, or a shipped recipe name: {names})")
    try:
        data = yaml.safe_load(read_text(p, "recipe")) or {}
    except InputError as exc:  # not UTF-8
        raise RecipeError(exc.message) from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{p}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise RecipeError(f"{p}: a recipe is a YAML mapping, got {type(data).__name__}")
    return recipe_from_dict(apply_overrides(data, list(overrides or [])), source=str(p))


def recipe_to_yaml(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
