"""Recipe files: loading by path or shipped name, dotted command-line overrides, errors that name the key, YAML out.

A recipe is one YAML file under `recipes/`; its typed model (`Recipe` and one section per YAML section) is in
`recipe_model`. Every section forbids unknown keys: a typo is an error naming the key path and the nearest valid
key, unlike NeMo-RL which silently ignores `grpo.ratio_clip_max`.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from spatialiq_train.core.errors import InputError
from spatialiq_train.core.io import read_text
from spatialiq_train.core.recipe_model import OPTIMIZER_KEYS, Recipe


class RecipeError(InputError):
    """A recipe file or override is invalid; the message names the file, key path and what would be right."""


# --- error messages -------------------------------------------------------------------------------------------


def _fields_at(model: type[BaseModel], path: tuple[str | int, ...]) -> list[str]:
    """Valid keys of the section at `path` (empty when `path` leaves the typed sections)."""
    current: type[BaseModel] | None = model
    for key in path:
        if current is None or not isinstance(key, str) or key not in current.model_fields:
            return []
        annotation = current.model_fields[key].annotation
        current = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return [] if current is None else list(current.model_fields)


def _hint(loc: tuple[str | int, ...], valid: list[str]) -> str:
    """`did you mean ...?` for an unknown key: the nearest valid key; under a phase, the optimizer keys count too
    (`rl.learning_rate` is `rl.optimizer.learning_rate`)."""
    prefix = "".join(f"{p}." for p in loc[:-1])
    candidates = {key: f"{prefix}{key}" for key in valid}
    if len(loc) == 2 and loc[0] in ("sft", "rl"):
        candidates |= {key: f"{prefix}optimizer.{key}" for key in OPTIMIZER_KEYS if key not in candidates}
    near = difflib.get_close_matches(str(loc[-1]), list(candidates), n=1, cutoff=0.5)
    return f"did you mean '{candidates[near[0]]}'?" if near else ""


def _describe(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid recipe"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc)
        if err["type"] == "extra_forbidden":
            valid = _fields_at(Recipe, loc[:-1])
            hint = _hint(loc, valid)
            lines.append(f"  unknown key '{path}' {hint} (valid keys here: {', '.join(valid)})")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict) or "got " in err["msg"] else f" (got {got!r})"  # said once
            lines.append(f"  {path or '<top>'}: {err['msg']}{shown}")
    if len(lines) == 2:  # one problem: one line, naming the file and the key
        return f"{lines[0]}: {lines[1].strip()}"
    return "\n".join(lines)


# --- loading ----------------------------------------------------------------------------------------------------


def parse_override(text: str) -> tuple[list[str], Any]:
    """`rl.optimizer.learning_rate=1e-6` -> (["rl", "optimizer", "learning_rate"], 1e-6); the value goes through
    yaml.safe_load."""
    if "=" not in text:
        raise RecipeError(f"override {text!r}: expected KEY.PATH=VALUE, e.g. rl.optimizer.learning_rate=1e-6")
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
        set_key(out, parts, value, f"override {text!r}")
    return out


def set_key(data: dict[str, Any], parts: list[str], value: Any, what: str) -> None:
    """Set the key path ``parts`` of ``data`` to an already parsed ``value``, in place: sections are created as
    needed and the key's whole value is replaced. ``what`` names the setting in the RecipeError raised when a
    section on the path is a value."""
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise RecipeError(f"{what}: '{'.'.join(parts[: i + 1])}' is a value, not a section")
        node = child
    node[parts[-1]] = value


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
    return Path(__file__).resolve().parents[2] / "recipes"


SHIPPED_RECIPES = _shipped_recipes_dir()
"""Folder of the shipped recipes (found by name from any working directory: ``spatialiq recipes show tiny_cpu``)."""


def shipped_recipes() -> list[Path]:
    """The shipped recipe files: recipes/*.yaml and the experiments in recipes/experiments/*.yaml."""
    return sorted([*SHIPPED_RECIPES.glob("*.yaml"), *(SHIPPED_RECIPES / "experiments").glob("*.yaml")])


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Load `path` (YAML; or the name of a shipped recipe, e.g. `dapo_tight_7b` or the experiment
    `dapo_paper_7b`), apply dotted overrides, validate."""
    p = Path(path)
    if not p.is_file() and p.suffix == "" and len(p.parts) == 1:
        p = next((f for f in shipped_recipes() if f.stem == p.name), p)
    names = ", ".join(sorted(f.stem for f in shipped_recipes()))
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


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{"a.b.c": value}`` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def recipe_to_yaml(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
