"""Engine contract stages (``tests/engines/run.sh``): under CI a skip fails the stage.

When ``CI`` is set to anything non-empty, a contract test that skips (a skip marker, ``pytest.skip`` in the test or a
fixture, or a module skipped at collection) does not count as a pass: the run exits 1 and the summary names every
skipped test with its reason. Outside CI skips stay skips (e.g. the NeMo-RL stage without ``../shared/vendor``).
Only the engine stages load these hooks (``SIQ_ENGINE_STAGE`` set by run.sh); the main suite ignores this folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_skipped: list[tuple[str, str]] = []


def _enforced() -> bool:
    return bool(os.environ.get("CI")) and bool(os.environ.get("SIQ_ENGINE_STAGE"))


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


_root: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    _root[:] = [config.rootpath]


def _under_here(report: pytest.CollectReport | pytest.TestReport) -> bool:
    """True for a report of a test or module in this folder (node ids are relative to pytest's rootdir)."""
    path = report.nodeid.split("::")[0]
    if not path or not _root:
        return False
    return (_root[0] / path).resolve().is_relative_to(HERE)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and _under_here(report):
        _skipped.append((report.nodeid, _reason(report)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped and _under_here(report):
        _skipped.append((report.nodeid, _reason(report)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _enforced() and _skipped and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    if not (_enforced() and _skipped):
        return
    terminalreporter.write_line(
        f"error: {len(_skipped)} engine contract test(s) skipped; under CI (CI={os.environ['CI']}) a skip fails "
        "the stage:", red=True)
    for nodeid, reason in _skipped:
        terminalreporter.write_line(f"  SKIPPED {nodeid}: {reason}", red=True)
