"""The minimum-versions stage (tests/min_versions/run.sh) installs exactly the lower bounds pyproject.toml declares:
each pin in tests/min_versions/lower_bounds.txt is a declared bound, every declared runtime bound is pinned, and CI
runs the stage. (The stage itself is CI's; it installs about 5 GB, so no test here runs it.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "tests" / "min_versions" / "run.sh"
BOUNDS = ROOT / "tests" / "min_versions" / "lower_bounds.txt"
NOT_PINNED = {"mitsuba", "vllm", "deepspeed", "torchvision", "isaacsim", "ruff", "import-linter", "ray"}
"""Declared dependencies the stage does not install (lower_bounds.txt's header says why)."""


def _declared_bounds() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    bounds: dict[str, Version] = {}
    for line in [*project["dependencies"], *extras["train"], *extras["dev"]]:
        req = Requirement(line)
        if req.name in NOT_PINNED:
            continue
        lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert len(lows) == 1, f"pyproject.toml: {line!r} has no single lower bound (>=) for the stage to install"
        assert bounds.setdefault(req.name, lows[0]) == lows[0], f"pyproject.toml: two lower bounds for {req.name}"
    return bounds


def _pins() -> dict[str, Version]:
    pins = {}
    for raw in BOUNDS.read_text(encoding="utf-8").splitlines():
        line = raw.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{BOUNDS.name}: {raw!r} is not NAME==VERSION"
            pins[name] = Version(version)
    return pins


def test_every_declared_lower_bound_is_pinned_and_nothing_else() -> None:
    declared, pins = _declared_bounds(), _pins()
    assert set(pins) == set(declared), (sorted(set(pins) ^ set(declared)))
    differ = {name: (str(declared[name]), str(pins[name])) for name in declared if declared[name] != pins[name]}
    assert not differ, f"pyproject.toml lower bound vs {BOUNDS.name} pin: {differ}"


def test_the_runtime_version_check_starts_where_the_declared_range_starts() -> None:
    from spatialiq_train.core.versions import SUPPORTED

    assert Version(SUPPORTED["transformers"][0]) == _pins()["transformers"]


def test_ci_runs_the_stage_and_the_script_parses() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^if .*bash tests/min_versions/run\.sh \|\| min_status=\$\?", ci, flags=re.M), ci
    parse = subprocess.run(["bash", "-n", str(STAGE)], capture_output=True, text=True)
    assert parse.returncode == 0, parse.stderr
    # the stage's test files exist (a renamed file would silently drop out of the stage)
    files = re.search(r"^TESTS=\(([^)]*)\)", STAGE.read_text(encoding="utf-8"), flags=re.M | re.S)
    assert files, "TESTS=(...) not found in tests/min_versions/run.sh"
    for pattern in files.group(1).split():
        assert list(ROOT.glob(pattern)), f"tests/min_versions/run.sh names {pattern}, which matches no file"


def test_shellcheck_is_clean() -> None:
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed")
    lint = subprocess.run(["shellcheck", str(STAGE)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
