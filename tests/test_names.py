"""The code's public names come from the one table of names (docs/names.md).

Walked: every option and argument of the ``spatialiq`` typer app, every field of the recipe models (from
``Recipe`` down), and every field of the public dataclasses and pydantic models in ``spatialiq_train``,
``data_gen``, ``reward`` and ``eval``. Each must be a name the doc lists, and none may be a retired name.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import typing
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel

from spatialiq_train.cli import app
from spatialiq_train.core.recipes import Recipe

DOC = Path(__file__).resolve().parents[1] / "docs" / "names.md"
PACKAGES = ("spatialiq_train", "data_gen", "reward", "eval")
_TICKED = re.compile(r"`([^`]+)`")


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## +(.+)$", text, flags=re.MULTILINE)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def doc_names() -> tuple[set[str], set[str]]:
    """(allowed, retired): backticked names of the concept table's name and boundary columns plus the
    vocabulary lists, and those of its retired column."""
    sections = _sections(DOC.read_text(encoding="utf-8"))
    allowed: set[str] = set()
    retired: set[str] = set()
    for line in sections["Concepts"].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 4 or set(cells[1]) <= {"-", " "}:
            continue
        allowed.update(_TICKED.findall(cells[1]) + _TICKED.findall(cells[2]))
        retired.update(_TICKED.findall(cells[3]))
    allowed.update(_TICKED.findall(sections["Vocabulary"]))
    return allowed, retired


def cli_names() -> dict[str, set[str]]:
    """Option (``--name``) or argument name -> the commands that take it."""
    out: dict[str, set[str]] = {}

    def walk(cmd: typing.Any, path: str) -> None:
        for p in cmd.params:
            if p.param_type_name == "argument":
                out.setdefault(p.name, set()).add(path)
            for opt in (*p.opts, *p.secondary_opts):
                if opt.startswith("--"):
                    out.setdefault(opt, set()).add(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "spatialiq")
    return out


def recipe_fields() -> dict[str, set[str]]:
    """Recipe key (at any depth) -> the recipe models that have it."""
    out: dict[str, set[str]] = {}
    seen: set[type] = set()

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, f in model.model_fields.items():
            out.setdefault(name, set()).add(model.__name__)
            for t in (f.annotation, *typing.get_args(f.annotation)):
                if inspect.isclass(t) and issubclass(t, BaseModel):
                    walk(t)

    walk(Recipe)
    return out


def record_fields() -> dict[str, set[str]]:
    """Field of a public dataclass or pydantic model defined in the project's packages -> where."""
    out: dict[str, set[str]] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if name.startswith("_") or not inspect.isclass(obj) or obj.__module__ != module.__name__:
                    continue
                if dataclasses.is_dataclass(obj):
                    fields = [f.name for f in dataclasses.fields(obj)]
                elif issubclass(obj, BaseModel):
                    fields = list(obj.model_fields)
                else:
                    continue
                for field in fields:
                    if not field.startswith("_"):
                        out.setdefault(field, set()).add(f"{module.__name__}.{name}")
    return out


@pytest.fixture(scope="module")
def names() -> tuple[set[str], set[str]]:
    return doc_names()


def test_the_doc_lists_concepts_and_retired_names(names: tuple[set[str], set[str]]) -> None:
    allowed, retired = names
    assert {"task_main", "answer", "pred", "View", "gated", "strict", "official"} <= allowed
    assert {"Scene"} <= retired
    assert not allowed & retired, f"a name is both allowed and retired: {sorted(allowed & retired)}"


@pytest.mark.parametrize("walk", [cli_names, recipe_fields, record_fields], ids=["cli", "recipe", "records"])
def test_public_names_come_from_the_table(walk: typing.Callable[[], dict[str, set[str]]],
                                          names: tuple[set[str], set[str]]) -> None:
    allowed, retired = names
    found = walk()
    unknown = {n: sorted(w) for n, w in found.items() if n not in allowed}
    assert not unknown, f"names missing from docs/names.md (add them, or use a listed name): {unknown}"
    old = {n: sorted(w) for n, w in found.items() if n in retired}
    assert not old, f"retired names still in use: {old}"
