"""Layering: who may import whom, and which imports stay light.

Three floors, visible in the folders. ``spatialiq_train.core`` (the vocabulary) depends on nothing else in the
project. ``data_gen``, ``reward`` and ``eval`` import from ``spatialiq_train`` only its core, and none imports
another. The CLI and the backends (``spatialiq_train.train``, ``.release``, ``.nemo``, ``.lab``) sit on top; the
backends are peers, and what two of them share lives in the core or in a module named for it (``hf_export``,
``tiny``), which imports only the core. Every import statement counts, function-level (lazy) ones included: a lazy
import is still a dependency. ``pyproject.toml``'s ``[tool.importlinter]`` holds the same rules for ``lint-imports``.
No two project modules import each other, directly or through others, by any kind of import (the last tests below).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AREAS = ("spatialiq_train", "data_gen", "reward", "eval")
BACKENDS = ("spatialiq_train.train", "spatialiq_train.release", "spatialiq_train.nemo", "spatialiq_train.lab")
HEAVY = ("torch", "transformers", "trl", "vllm", "mitsuba", "ray", "nemo_rl", "isaacsim")
"""Libraries that importing the core and the areas must not load (each command imports them in its body)."""

CORE = "spatialiq_train.core"
SHARED = ("spatialiq_train.hf_export", "spatialiq_train.tiny")
"""Modules two or more backends use; each imports only the core."""
FLOOR2 = ("data_gen", "reward", "eval")
ABOVE_CORE = ("spatialiq_train.cli", *BACKENDS, *SHARED)
"""Everything of ``spatialiq_train`` outside its core."""

RULES: dict[str, tuple[str, ...]] = {
    CORE: (*FLOOR2, *ABOVE_CORE),
    **{area: (*(peer for peer in FLOOR2 if peer != area), *ABOVE_CORE) for area in FLOOR2},
    **{shared: (*FLOOR2, "spatialiq_train.cli", *BACKENDS) for shared in SHARED},
    **{backend: tuple(peer for peer in BACKENDS if peer != backend) for backend in BACKENDS},
}
"""Layer -> the packages its modules may not import (a backend: every other backend)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_files(layer: str) -> list[Path]:
    path = ROOT.joinpath(*layer.split("."))
    return [path.with_suffix(".py")] if path.with_suffix(".py").is_file() else sorted(path.rglob("*.py"))


def test_every_module_of_spatialiq_train_is_in_one_layer() -> None:
    """A new top-level module or package must be placed on a floor (and in the contracts) before it lands."""
    placed = {CORE, "spatialiq_train.cli", *BACKENDS, *SHARED}
    found = {_module_name(p if p.suffix == ".py" else p / "__init__.py")
             for p in (ROOT / "spatialiq_train").iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()}
    assert found == placed


def _from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` statement imports from, a relative one resolved in ``package``."""
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, base] if base else parts)
    return base


def imports_in(text: str, package: str) -> list[tuple[int, str]]:
    """Every module an import statement of ``text`` names, with its line; relative imports resolved in ``package``.

    ``from pkg import name`` yields both ``pkg`` and ``pkg.name`` (the name may be a module).
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def imported_modules(path: Path) -> list[tuple[int, str]]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), package)


def _is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def banned_imports(imports: list[tuple[int, str]], layer: str, where: str) -> list[str]:
    return [f"{where}:{line} imports {module} (layer {layer} may not import {banned})"
            for line, module in imports for banned in RULES[layer] if _is_within(module, banned)]


def violations(layer: str) -> list[str]:
    out = []
    for path in layer_files(layer):
        out += banned_imports(imported_modules(path), layer, str(path.relative_to(ROOT)))
    return sorted(set(out))


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_imports_nothing_above_it(layer: str) -> None:
    assert layer_files(layer), f"no files found for layer {layer}"
    assert violations(layer) == []


def test_the_checker_sees_lazy_and_relative_imports() -> None:
    text = "import json\n\ndef f():\n    import torch\n    from ..generate import run\n    from . import base\n"
    assert imports_in(text, "data_gen.render") == [
        (1, "json"), (4, "torch"), (5, "data_gen.generate"), (5, "data_gen.generate.run"),
        (6, "data_gen.render"), (6, "data_gen.render.base")]
    lazy = imports_in("def f():\n    from data_gen.generate import run\n", "reward")
    assert banned_imports(lazy, "reward", "reward/x.py") == [
        "reward/x.py:2 imports data_gen.generate (layer reward may not import data_gen)",
        "reward/x.py:2 imports data_gen.generate.run (layer reward may not import data_gen)"]


def _light_modules() -> list[str]:
    """Every module of the four areas except the training/release/NeMo backends."""
    names = []
    for area in AREAS:
        for path in sorted((ROOT / area).rglob("*.py")):
            name = _module_name(path)
            if not any(_is_within(name, b) for b in BACKENDS):
                names.append(name)
    return names


def test_importing_the_areas_loads_no_heavy_library() -> None:
    modules = _light_modules()
    assert {"spatialiq_train", "spatialiq_train.cli", "data_gen", "reward", "eval", "eval.engines"} <= set(modules)
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "print(','.join(loaded))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "", f"heavy libraries loaded at import time: {res.stdout.strip()}"


def test_pyproject_contracts_cover_every_core_module() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    contracts = {c["id"]: c for c in config["contracts"]}
    assert contracts["core"]["source_modules"] == [CORE]
    assert set(config["root_packages"]) == set(AREAS)
    peers = {c["id"]: set(c["modules"]) for c in contracts.values() if c["type"] == "independence"}
    assert peers == {"backends": set(BACKENDS), "floor2": set(FLOOR2)}
    for layer, banned in RULES.items():
        listed = {m.removesuffix(".**") for c in contracts.values() if layer in c.get("source_modules", ())
                  for m in c["forbidden_modules"]}
        listed |= {m for group in peers.values() if layer in group for m in group - {layer}}
        assert set(banned) <= listed, (layer, set(banned) - listed)


def test_lint_imports_keeps_every_contract() -> None:
    exe = shutil.which("lint-imports") or (Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([str(exe), "--no-cache", "--no-logo"], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


# --- no import circles ----------------------------------------------------------------------------------------------
#
# Every kind of import counts: module-level, function-level (lazy), under ``TYPE_CHECKING``, and dynamic ones:
# ``importlib.import_module("pkg.mod")`` (or ``__import__``) with a literal name, and, in a module that calls
# ``import_module`` with a computed name, every string literal that is the dotted name of a project module (a
# table of backend modules is such a dynamic import; a bare word such as ``"reward"`` is not taken for one). An edge
# goes to the module a statement names: ``from pkg import mod`` to ``pkg.mod`` when that is a module, else to
# ``pkg`` (its ``__init__``). The parent packages Python imports before
# a module are no edges unless the module names them: a package that imports its submodules is no circle, but a
# submodule that imports a name back from that package's ``__init__`` closes one.

_DYNAMIC = {"import_module", "__import__"}


def installed_packages() -> list[str]:
    """The top-level packages ``pip install`` puts in place (``[tool.setuptools.packages.find]``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [name.removesuffix("*") for name in config["tool"]["setuptools"]["packages"]["find"]["include"]]


def _project_modules() -> dict[str, Path]:
    return {_module_name(p): p for package in installed_packages() for p in sorted((ROOT / package).rglob("*.py"))}


def _resolve(name: str, known: set[str]) -> str | None:
    """The project module ``name`` imports: itself, or its nearest enclosing package (a name inside it)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def module_edges(text: str, package: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, project module) for every import of ``text``, static or dynamic; see the note above."""
    tree = ast.parse(text)
    named: list[tuple[int, str]] = []
    computed = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            named += [(node.lineno, f"{base}.{a.name}" if f"{base}.{a.name}" in known else base) for a in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _DYNAMIC and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    named.append((node.lineno, arg.value))
                else:
                    computed = True
    if computed:
        named += [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and isinstance(node.value, str) and "." in node.value and node.value in known]
    return [(line, mod) for line, name in named if (mod := _resolve(name, known)) is not None]


def import_graph(sources: dict[str, tuple[str, str]]) -> dict[str, dict[str, int]]:
    """module -> {imported project module: first line}; ``sources`` maps module -> (text, package)."""
    known = set(sources)
    graph: dict[str, dict[str, int]] = {}
    for name, (text, package) in sources.items():
        edges: dict[str, int] = {}
        for line, mod in sorted(module_edges(text, package, known)):
            if mod != name:
                edges.setdefault(mod, line)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[str]:
    """One circle per strongly connected group of modules, as ``a:LINE -> b:LINE -> ... -> a`` (sorted)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graph is a few hundred modules: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(_circle(graph, group) for group in groups)


def _circle(graph: dict[str, dict[str, int]], group: set[str]) -> str:
    """A shortest circle through the group's first module, each step with the line of its import."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    for v in queue:  # breadth first, within the group
        for w in sorted(graph[v]):
            if w == start:
                path = paths[v]
                steps = [f"{a}:{graph[a][b]}" for a, b in zip(path, [*path[1:], start], strict=True)]
                return " -> ".join([*steps, start])
            if w in group and w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"no circle through {start}")  # a strongly connected group always has one


def project_import_graph() -> dict[str, dict[str, int]]:
    sources = {}
    for name, path in _project_modules().items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        sources[name] = (path.read_text(encoding="utf-8"), package)
    return import_graph(sources)


def test_no_import_circle_among_project_modules() -> None:
    assert set(AREAS) < set(installed_packages())
    graph = project_import_graph()
    assert {"reward.registry", "data_gen.generate", "spatialiq_train.train.phase", "recipes"} <= set(graph)
    assert import_cycles(graph) == []


def test_the_circle_checker_sees_lazy_typing_and_dynamic_imports() -> None:
    sources = {
        "pkg": ("from pkg import a\n", "pkg"),  # a package importing its module: no circle with a's imports
        "pkg.f": ("def f():\n    from pkg import VALUE\n", "pkg"),
        "pkg.g": ("from pkg.g import x\n", "pkg"),  # a module naming itself is no circle
        "pkg.a": ("import json\n\ndef f():\n    from pkg.b import g\n", "pkg"),
        "pkg.b": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n", "pkg"),
        "pkg.c": ("import importlib\n\nimportlib.import_module('pkg.a')\n", "pkg"),
        "pkg.d": ("import importlib\nTABLE = {'x': 'pkg.e', 'y': 'pkg'}\n\n"
                  "def load(k):\n    return importlib.import_module(TABLE[k])\n", "pkg"),
        "pkg.e": ("from pkg.d import TABLE\nfrom pkg import a\n", "pkg"),
    }
    graph = import_graph(sources)
    assert graph["pkg.a"] == {"pkg.b": 4} and graph["pkg.e"] == {"pkg.d": 1, "pkg.a": 2}
    assert graph["pkg.f"] == {"pkg": 2} and graph["pkg.g"] == {}
    assert import_cycles(graph) == ["pkg.a:4 -> pkg.b:3 -> pkg.c:3 -> pkg.a", "pkg.d:2 -> pkg.e:1 -> pkg.d"]
