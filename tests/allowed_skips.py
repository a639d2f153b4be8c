"""The main suite's allowed skips, each with its reason, in one place; under CI any other skip fails the run.

A skip is allowed when its test's node id starts with ``path`` and its reason contains ``reason``: a test that
cannot run on the machine at hand by the nature of the machine (no CUDA GPU, a GPU that is there, another CPU's
render identity, a package the GPU install adds). Everything else a CI install must have (Mitsuba, TRL, datasets,
peft, accelerate, scipy, Ray, import-linter, shellcheck, bash, ../shared) is no reason to skip: under ``CI`` (any
non-empty value; ``.ci/run`` sets ``CI=true``) such a skip, a module skipped at collection (a module-level
``pytest.importorskip``) included, turns a passing run into exit 1 and the summary names each one with its reason.
Outside CI skips stay skips. The engine stages (``tests/engines/conftest.py``) allow no skip at all.

``tests/conftest.py`` installs the hooks below for the main suite.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class AllowedSkip:
    path: str
    """Node id prefix (relative to the repository root)."""
    reason: str
    """Text the skip reason contains."""
    why: str
    """Why a CI machine may skip it."""


ALLOWED: tuple[AllowedSkip, ...] = (
    AllowedSkip("tests/gpu/", "no CUDA GPU is visible",
                "the GPU tests run on a GPU node (bash bench/gpu_check.sh); CI is CPU-only"),
    AllowedSkip("tests/test_nemo_config.py", "set NEMO_RL_GIT_DIR to a NeMo-RL git dir",
                "regenerating the NeMo-RL key list needs a NeMo-RL git clone, a maintainer's step"),
    AllowedSkip("tests/test_generated_bytes.py", "image bytes are pinned for render backend",
                "pinned Mitsuba image bytes belong to one render identity (CPU vector ISA and vendor)"),
    AllowedSkip("tests/test_slurm_scripts.py", "no hard limit on open files here",
                "the open-file test needs a hard ulimit -n below the Ray default, which some machines lack"),
    AllowedSkip("tests/test_render_mitsuba.py", "a CUDA device is present",
                "on a GPU machine auto picks cuda_ad_rgb, so the CPU default cannot be checked"),
    AllowedSkip("tests/test_gpu_check.py", "a CUDA GPU is visible",
                "on a GPU machine bench/gpu_check.sh would run its GPU stages for real"),
    AllowedSkip("tests/test_eval_pipeline.py", "vLLM is installed here",
                "the 'vLLM absent' message cannot be seen where the GPU install has vLLM"),
    AllowedSkip("tests/test_processor.py", "torchvision is installed",
                "the image-only fallback cannot be seen where the GPU install has torchvision"),
    AllowedSkip("tests/test_nemo_cli.py", "NeMo-RL is importable here",
                "the 'NeMo-RL absent' messages cannot be seen inside the NeMo-RL environment"),
    AllowedSkip("tests/test_render_isaac.py", "isaacsim is installed here",
                "the 'Isaac Sim absent' message cannot be seen where Isaac Sim is installed"),
    AllowedSkip("tests/test_trust.py", "this machine has that GPU",
                "a device index that is refused on this machine exists on a 4-GPU one"),
)

_skipped: list[tuple[str, str]] = []


def enforced() -> bool:
    return bool(os.environ.get("CI"))


def allowed(nodeid: str, reason: str) -> AllowedSkip | None:
    """The entry that allows this skip, or None."""
    nodeid = nodeid.replace("\\", "/")
    if not nodeid.startswith("tests/"):
        nodeid = "tests/" + nodeid  # pytest run from inside tests/
    return next((a for a in ALLOWED if nodeid.startswith(a.path) and a.reason in reason), None)


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _record(report: pytest.CollectReport | pytest.TestReport) -> None:
    reason = _reason(report)
    if allowed(report.nodeid, reason) is None:
        _skipped.append((report.nodeid, reason))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _record(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _record(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if enforced() and _skipped and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    if not (enforced() and _skipped):
        return
    terminalreporter.write_line(
        f"error: {len(_skipped)} test(s) skipped for a reason tests/allowed_skips.py does not allow; under CI "
        f"(CI={os.environ['CI']}) such a skip fails the run (a missing dependency or tool is a broken install):",
        red=True)
    for nodeid, reason in _skipped:
        terminalreporter.write_line(f"  SKIPPED {nodeid}: {reason}", red=True)
