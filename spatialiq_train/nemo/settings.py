"""The ``spatialiq`` section of a NeMo-RL config: which recipe and which traces the driver trains on.

NeMo-RL's ``MasterConfig`` keeps unknown top-level sections (``extra="allow"``) and saves the whole config in every
checkpoint's ``config.yaml``, so the section travels with the run. It is validated here (unknown keys are errors,
unlike anywhere else in a NeMo-RL config):

```yaml
spatialiq:
  recipe: recipes/dapo_tight_32b.yaml   # or a shipped recipe name: pixel budget, reward weights, data defaults
  recipe_overrides: []                  # dotted recipe overrides, as on `spatialiq train` command lines
  traces_dir: null                      # default: the recipe's data.traces_dir
  data_root: null                       # default: the recipe's data.data_root
  train_split: null                     # default: data.rl_split (nemo rl) or data.sft_split (nemo sft)
  val_split: null                       # default: data.eval_split; validation: false turns validation off
  validation: true
  max_examples: null                    # default: the recipe's data.max_examples
  phase: null                           # written by the driver (sft or rl); must match the command if set
```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spatialiq_train.errors import UserError

SECTION = "spatialiq"


class DriverSettings(BaseModel):
    """The validated ``spatialiq`` section."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    recipe_overrides: list[str] = Field(default_factory=list)
    traces_dir: str | None = None
    data_root: str | None = None
    train_split: str | None = None
    val_split: str | None = None
    validation: bool = True
    max_examples: int | None = Field(None, gt=0)
    phase: Literal["sft", "rl"] | None = None


@dataclass(frozen=True)
class DataPlan:
    """What the driver reads and how: the recipe's budget and rewards, the traces and splits."""

    recipe: str
    traces_dir: str
    data_root: str
    train_split: str
    val_split: str | None
    max_examples: int | None
    min_pixels: int
    max_pixels: int
    reward_weights: dict[str, float]

    def dataset_name(self, split: str) -> str:
        """The name NeMo-RL records for a split (its resume guard compares it with the checkpoint's)."""
        return f"spatialiq:{Path(self.traces_dir) / f'{split}.jsonl'}"


def read_settings(config: dict[str, Any], source: Path) -> DriverSettings:
    """The section of a resolved config, or a UserError naming the file and the bad key."""
    section = config.get(SECTION)
    if section is None:
        raise UserError(f"{source}: no '{SECTION}' section (recipe, traces); generate the config with "
                        "`spatialiq recipes nemo-rl` or add one (see spatialiq_train/nemo/settings.py)")
    if not isinstance(section, dict):
        raise UserError(f"{source}: '{SECTION}' must be a mapping, got {type(section).__name__}")
    try:
        return DriverSettings.model_validate(section)
    except ValidationError as exc:
        problems = "; ".join(f"{SECTION}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        valid = ", ".join(DriverSettings.model_fields)
        raise UserError(f"{source}: {problems} (valid keys: {valid})") from None


def load_recipe_checked(recipe: str | Path, overrides: list[str] | None = None, what: str = "recipe") -> Any:
    """A recipe (file or shipped name) whose every reward name exists in the reward registry."""
    from reward.registry import get_reward
    from spatialiq_train.recipes import RecipeError, load_recipe

    try:
        rec = load_recipe(Path(recipe), list(overrides or []))
    except RecipeError as exc:
        raise UserError(f"{what}: {exc}") from None
    for name in rec.reward.weights:
        try:
            get_reward(name)
        except ValueError as exc:
            raise UserError(f"{what} {recipe}: reward.weights.{name}: {exc}") from None
    return rec


def plan_data(settings: DriverSettings, phase: Literal["sft", "rl"]) -> DataPlan:
    """Settings over the recipe's defaults; the recipe's reward names are checked against the registry."""
    if settings.phase is not None and settings.phase != phase:
        raise UserError(f"{SECTION}.phase is {settings.phase!r}: this config is for `spatialiq nemo "
                        f"{settings.phase}`, not `spatialiq nemo {phase}`")
    recipe = load_recipe_checked(settings.recipe, settings.recipe_overrides, what=f"{SECTION}.recipe")
    data = recipe.data
    default_split = data.rl_split if phase == "rl" else data.sft_split
    val = (settings.val_split or data.eval_split) if settings.validation else None
    return DataPlan(
        recipe=settings.recipe,
        traces_dir=settings.traces_dir or data.traces_dir,
        data_root=settings.data_root or data.data_root,
        train_split=settings.train_split or default_split,
        val_split=val,
        max_examples=settings.max_examples or data.max_examples,
        min_pixels=recipe.model.min_pixels,
        max_pixels=recipe.model.max_pixels,
        reward_weights=dict(recipe.reward.weights),
    )
