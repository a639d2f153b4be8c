"""GPU tests: every test here is marked ``gpu`` and skipped with a reason where no CUDA GPU is visible."""

from __future__ import annotations

import pytest


def _cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (these tests run on a GPU node: bash bench/gpu_check.sh)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _cuda_reason()
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/") or item.nodeid.startswith("gpu/"):
            item.add_marker(pytest.mark.gpu)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))



@pytest.fixture(scope="session")
def vllm_tiny(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The tiny model in bfloat16 (tests/gpu/_gpu_support.py)."""
    from _gpu_support import save_vllm_tiny

    return save_vllm_tiny(tmp_path_factory.mktemp("vllm-tiny") / "model")
