"""Code shape (house style): no source module over 400 lines, no function over 60 lines; tests excluded.

A function's length runs from its ``def`` line to its last line, nested functions and classes included, so a
factory that defines a class of methods counts whole. Read with ``ast``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("spatialiq_train", "data_gen", "reward", "eval", "bench")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def source_files() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py"))


def offenders_in(text: str, where: str) -> list[str]:
    """Every way ``text`` breaks the shape rules, as ``where[:line] [name]: N lines``."""
    out = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        out.append(f"{where}: {lines} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if length > MAX_FUNCTION_LINES:
                out.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    return out


def all_offenders() -> list[str]:
    out = []
    for path in source_files():
        out += offenders_in(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return sorted(out)


def test_the_rules_are_measured_as_stated() -> None:
    short = "def f():\n" + "    x = 1\n" * 59
    long = "def g():\n" + "    x = 1\n" * 60
    assert offenders_in(short, "m.py") == []
    assert offenders_in(long, "m.py") == ["m.py:1 g: 61 lines"]
    nested = "class A:\n    def h(self):\n        def inner():\n" + "            pass\n" * 60
    assert offenders_in(nested, "n.py") == ["n.py:2 h: 62 lines", "n.py:3 inner: 61 lines"]
    assert offenders_in("x = 1\n" * 401, "big.py") == ["big.py: 401 lines"]
    assert len(source_files()) > 50 and not any("tests" in p.relative_to(ROOT).parts for p in source_files())


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    assert all_offenders() == []
