"""perf/* on the NeMo-RL path: v0.7.0's own Logger, patched for a phase by `spatialiq_train.nemo.perf.nemo_perf`,
turns a step's `train` and `timing/train` metrics into the perf/* row, which reaches TensorBoard under `perf/...`
and `<log_dir>/perf_metrics.jsonl`, and the patch is gone after the block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _nemo_support import tiny_model

from spatialiq_train.core import throughput as tp


def _logger(log_dir: Path):  # noqa: ANN202
    from nemo_rl.utils.logger import Logger

    return Logger({"log_dir": str(log_dir), "wandb_enabled": False, "swanlab_enabled": False,
                   "tensorboard_enabled": True, "mlflow_enabled": False, "monitor_gpus": False,
                   "wandb": {}, "tensorboard": {}, "gpu_monitoring": {}})


def test_v070_logger_logs_the_perf_row(tmp_path: Path) -> None:
    from nemo_rl.utils.logger import Logger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from spatialiq_train.nemo.perf import PERF_FILE, nemo_perf

    master = {"cluster": {"num_nodes": 1, "gpus_per_node": 2}, "loss_fn": {"reference_policy_kl_penalty": 0.05},
              "policy": {"model_name": tiny_model()}}
    original = Logger.log_metrics
    with nemo_perf("rl", master) as perf:
        assert perf.factor == 10 and perf.devices == 2 and perf.parameters and perf.parameters > 0
        logger = _logger(tmp_path)
        logger.log_metrics({"total_num_tokens": 3000, "loss": 0.5}, 1, prefix="train")
        logger.log_metrics({"total_step_time": 3.0, "generation": 1.0}, 1, prefix="timing/train",
                           step_finished=True)
        for backend in logger.loggers:  # the events file holds what its writer flushed: close it before reading
            if hasattr(backend, "writer"):
                backend.writer.close()
    assert Logger.log_metrics is original
    rows = [json.loads(line) for line in (tmp_path / PERF_FILE).read_text().splitlines()]
    assert rows == perf.rows and rows[0]["step"] == 1 and rows[0]["phase"] == "rl"
    assert rows[0][tp.PERF_TOKENS_PER_S] == 1000 and rows[0][tp.PERF_TOKENS_PER_S_PER_GPU] == 500
    assert rows[0][tp.PERF_GENERATION_SHARE] == pytest.approx(1 / 3)
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents*")).parent)).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"perf/tokens_per_s", "perf/step_s", "perf/generation_s", "train/loss"} <= tags
    assert events.Scalars("perf/tokens_per_s")[0].value == pytest.approx(1000)
