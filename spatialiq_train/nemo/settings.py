"""The ``spatialiq`` section of a NeMo-RL config, and the data plan both sides derive from the recipe it names.

`spatialiq recipes nemo-rl` writes the section; `spatialiq nemo rl|sft` reads it. It names the recipe and its
overrides, so the driver rebuilds exactly the recipe the config was generated from:

```yaml
spatialiq:
  recipe: dapo_tight_32b                # a shipped recipe name, or an absolute recipe path
  recipe_overrides: [data.traces_dir=/lustre/siq/traces/cot, run.output_dir=/lustre/runs/dapo_32b]
  phase: rl                             # the command this config is for: `spatialiq nemo rl`
```

NeMo-RL's ``MasterConfig`` keeps unknown top-level sections (``extra="allow"``) and saves the whole config in every
checkpoint's ``config.yaml``, so the section travels with the run (the resume guard reads it). Unknown keys in it
are errors. Everything else the driver uses (traces, image root, pixel budget, rewards) comes from the recipe through
:class:`DataPlan`, and the config's data and environment entries must equal what the recipe gives
(:mod:`spatialiq_train.nemo.contract`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spatialiq_train.core.errors import UserError

SECTION = "spatialiq"
Phase = Literal["sft", "rl"]


class DriverSettings(BaseModel):
    """The validated ``spatialiq`` section."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    """A shipped recipe name or a recipe path (the generator writes files as absolute paths)."""
    recipe_overrides: list[str] = Field(default_factory=list)
    """Dotted recipe overrides, as `--set` gave them to `spatialiq recipes nemo-rl`."""
    phase: Phase
    """The command this config is for (`spatialiq nemo rl` or `spatialiq nemo sft`)."""
    plan: dict[str, Any] | None = None
    """The phase's resolved plan (`core.plan.PhasePlan.record`): what the driver trains with."""


@dataclass(frozen=True)
class DataPlan:
    """What the driver reads and how: the traces, splits, image root, pixel budget and rewards of the recipe."""

    recipe: str
    traces_dir: str
    data_root: str
    train_split: str
    val_split: str | None
    max_examples: int | None
    min_pixels: int
    max_pixels: int
    reward_weights: dict[str, float]
    advantage_baseline: str = "group_mean"
    advantage_std: str = "group"
    """`rl.advantage` (spatialiq_train.core.advantages): the per-view wrapper computes the advantages with it."""
    wandb_mode: str = "offline"
    """`logging.wandb_mode`: the driver sets WANDB_MODE from it (an explicit environment setting wins)."""
    early_stopping_patience: int | None = None
    early_stopping_min_delta: float = 0.0
    """SFT early stopping on the validation loss (`nemo.early_stop`; None: never stop early)."""

    def traces_file(self, split: str) -> str:
        """The traces JSONL of one split (`spatialiq traces` writes train/val/warmup/rl.jsonl)."""
        return str(PurePosixPath(self.traces_dir) / f"{split}.jsonl")

    def dataset_name(self, split: str) -> str:
        """The name NeMo-RL records for a split (its resume guard compares it with the checkpoint's)."""
        return f"{SECTION}:{self.traces_file(split)}"


def recipe_reference(recipe: str | Path) -> str:
    """How the section names a recipe: an existing file as its absolute path (the driver may run from another
    folder), anything else (a shipped recipe name) as given."""
    path = Path(recipe)
    return str(path.resolve()) if path.is_file() else str(recipe)


def read_settings(config: dict[str, Any], source: Path) -> DriverSettings:
    """The section of a resolved config, or a UserError naming the file and the bad key."""
    section = config.get(SECTION)
    if section is None:
        raise UserError(f"{source}: no '{SECTION}' section (recipe, recipe_overrides, phase); generate the config "
                        "with `spatialiq recipes nemo-rl`")
    if not isinstance(section, dict):
        raise UserError(f"{source}: '{SECTION}' must be a mapping, got {type(section).__name__}")
    try:
        return DriverSettings.model_validate(section)
    except ValidationError as exc:
        problems = "; ".join(f"{SECTION}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        valid = ", ".join(DriverSettings.model_fields)
        raise UserError(f"{source}: {problems} (valid keys: {valid})") from None


def load_recipe_checked(recipe: str | Path, overrides: list[str] | None = None, what: str = "recipe") -> Any:
    """A recipe (file or shipped name) whose every reward name exists in the reward registry (dotted
    ``pkg.module:function`` rewards imported, as training does)."""
    from reward.registry import check_reward_names
    from spatialiq_train.core.recipes import RecipeError, load_recipe

    try:
        rec = load_recipe(Path(recipe), list(overrides or []))
        check_reward_names(rec.reward.weights, str(recipe), import_modules=True)
    except RecipeError as exc:
        raise UserError(f"{what}: {exc}") from None
    return rec
