"""Under CI the main suite fails on a skip tests/allowed_skips.py does not list (issue 39): a module-level
importorskip of a required dependency, a missing tool; an allowed skip (the GPU tests on a CPU machine) passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from allowed_skips import ALLOWED, allowed

TESTS = Path(__file__).resolve().parent

CONFTEST = """from allowed_skips import (pytest_collectreport, pytest_runtest_logreport, pytest_sessionfinish,
                            pytest_terminal_summary)
"""


def _suite(tmp_path: Path, files: dict[str, str], ci: str | None) -> subprocess.CompletedProcess:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntestpaths = ['tests']\n")
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(TESTS)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


MISSING_DEP = "import pytest\n\npytest.importorskip('siq_no_such_module')\n\n\ndef test_x():\n    assert True\n"
MISSING_TOOL = "import pytest\n\n\ndef test_lint():\n    pytest.skip('shellcheck is not installed')\n"
GPU = "import pytest\n\n\ndef test_gpu():\n    pytest.skip('no CUDA GPU is visible (run on a GPU node)')\n"
PASS = "def test_ok():\n    assert True\n"


@pytest.mark.parametrize("broken", [MISSING_DEP, MISSING_TOOL])
def test_under_ci_an_unlisted_skip_fails_the_run_naming_it(tmp_path: Path, broken: str) -> None:
    files = {"tests/test_ok.py": PASS, "tests/test_broken.py": broken, "tests/gpu/test_gpu.py": GPU}
    proc = _suite(tmp_path, files, "true")
    assert proc.returncode == 1, proc.stdout
    assert "1 test(s) skipped for a reason tests/allowed_skips.py does not allow" in proc.stdout
    assert "SKIPPED tests/test_broken.py" in proc.stdout and "tests/gpu" not in proc.stdout.split("error:")[1]
    outside = _suite(tmp_path / "local", files, None)  # outside CI a skip stays a skip
    assert outside.returncode == 0, outside.stdout


def test_under_ci_the_allowed_skips_pass(tmp_path: Path) -> None:
    proc = _suite(tmp_path, {"tests/test_ok.py": PASS, "tests/gpu/test_gpu.py": GPU}, "true")
    assert proc.returncode == 0 and "1 passed, 1 skipped" in proc.stdout, proc.stdout


def test_every_allowed_skip_names_a_file_that_skips_with_that_reason() -> None:
    """No entry outlives its test: the file exists and holds the reason text (or the folder's conftest does)."""
    for entry in ALLOWED:
        target = TESTS.parent / entry.path
        texts = [p.read_text(encoding="utf-8") for p in ([target] if target.is_file() else target.glob("*.py"))]
        assert any(entry.reason in t for t in texts), entry
        assert entry.why
    assert allowed("tests/gpu/test_gpu_deepspeed.py::test_x", "no CUDA GPU is visible (...)") is not None
    assert allowed("tests/test_render_mitsuba.py", "the Mitsuba 3 renderer is not installed") is None
