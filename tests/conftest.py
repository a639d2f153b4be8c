"""Shared test setup: one torch thread, the shared/ folder beside the project, and (main suite) the CI skip rule
of tests/allowed_skips.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

ENGINE_STAGE = os.environ.get("SIQ_ENGINE_STAGE", "")
"""Which engine-contract stage this run is (``nemo`` or ``engines``), set by ``tests/engines/run.sh``; empty in the
main suite, which then does not collect ``tests/engines/`` (those tests need their own virtual environments)."""

collect_ignore = [] if ENGINE_STAGE else ["engines"]
"""Ignored as a whole folder, so that its conftest.py is not loaded either: loading it puts tests/engines on
``sys.path``, where the folder ``vllm/`` would pass for the vLLM package (TRL then fails to read its version)."""

if not ENGINE_STAGE:  # the main suite's skip rule: under CI only the skips tests/allowed_skips.py lists
    from allowed_skips import (  # noqa: F401 - pytest hooks, found by name in this module
        pytest_collectreport,
        pytest_runtest_logreport,
        pytest_sessionfinish,
        pytest_terminal_summary,
    )

SHARED_DIR = Path(__file__).resolve().parents[2] / "shared"
"""The shared/ folder beside the project root (docs, fixtures); absent on some machines."""


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED_DIR.is_dir():
        pytest.skip(f"../shared is absent (looked for {SHARED_DIR.name}/ beside the project root)")
    return SHARED_DIR
