"""Engine contract stage for NeMo-RL v0.7.0: the real, unmodified code from ``../shared/vendor`` on the CPU.

Runs in the Python 3.13 environment ``tests/engines/run.sh nemo`` builds, with the vendored tree on
``PYTHONPATH``. The only fakes are the two things that need a GPU, both here in tests/: GPU placement (NeMo-RL's
``RayVirtualCluster`` replaced by :class:`Placement`, which records the set-up's state and stops it) and vLLM
generation (:class:`GenerationFake`, which returns fixed completions through the real prompt formatter).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _nemo_support import VENDOR_NAME, Placement, local_ray_head, vendored_tree  # noqa: E402

# A throwaway local cluster: Ray 2.60's token authentication off for it (the driver and the head share this env).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if vendored_tree() is not None:
        return
    if os.environ.get("CI"):
        raise pytest.UsageError(f"../shared/vendor/{VENDOR_NAME} is absent: the NeMo-RL stage cannot run in CI")
    skip = pytest.mark.skip(reason=f"../shared/vendor/{VENDOR_NAME} is absent (NeMo-RL v0.7.0 source)")
    for item in items:
        item.add_marker(skip)


@pytest.fixture
def placement(monkeypatch: pytest.MonkeyPatch) -> Placement:
    import nemo_rl.algorithms.grpo as grpo
    import nemo_rl.algorithms.sft as sft

    stop = Placement()
    monkeypatch.setattr(grpo, "RayVirtualCluster", stop)
    monkeypatch.setattr(sft, "RayVirtualCluster", stop)
    return stop


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One local Ray head for the session (``_nemo_support.local_ray_head``)."""
    with local_ray_head(tmp_path_factory.mktemp("ray")) as address:
        yield address


@pytest.fixture
def ray_driver(ray_head: str) -> Any:
    """A test that runs NeMo-RL code which calls ``init_ray``; the connection is closed afterwards."""
    import ray

    ray.shutdown()
    yield ray_head
    ray.shutdown()




@pytest.fixture(scope="session")
def warm(tmp_path_factory: pytest.TempPathFactory, ray_head: str) -> Any:
    """The loop tests' SFT warm-up through v0.7.0's ``sft_train`` (CPU workers), converted: shared by the loop
    tests, which start their RL phases from it."""
    import _learning

    return _learning.loop_warm_up(tmp_path_factory.mktemp("warm"))
