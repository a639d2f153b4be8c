"""NeMo-RL v0.7.0's own timing and token metrics mapped to the perf/* names (spatialiq_train/nemo/perf.py), and the
names' place in the metric table. The mapping is pure; the Logger patch is exercised by the NeMo-RL engine tests."""

from __future__ import annotations

import pytest
from _metric_names import is_known

from spatialiq_train.core import throughput as tp
from spatialiq_train.nemo.perf import NemoPerf, perf_from_nemo, row_names


def test_grpo_step_maps_to_perf_names() -> None:
    train = {"total_num_tokens": 80_000, "loss": 0.1, "global_valid_toks": 60_000}
    timing = {"total_step_time": 40.0, "generation": 10.0, "policy_training": 20.0}
    row = perf_from_nemo(train, timing, devices=8, factor=10, parameters=8_000_000_000, peak=989.0)
    assert row[tp.PERF_TOKENS_PER_S] == 2000 and row[tp.PERF_TOKENS_PER_S_PER_GPU] == 250
    assert (row[tp.PERF_STEP_S], row[tp.PERF_GENERATION_S], row[tp.PERF_TRAINING_S]) == (40, 10, 30)
    assert row[tp.PERF_GENERATION_SHARE] == 0.25
    assert row[tp.PERF_MFU] == pytest.approx(10 * 8e9 * 2000 / (8 * 989e12))
    assert all(is_known(k) for k in row)
    # no parameter count or no known device: everything but MFU
    assert tp.PERF_MFU not in perf_from_nemo(train, timing, devices=8, factor=10, parameters=None, peak=989.0)
    assert tp.PERF_MFU not in perf_from_nemo(train, timing, devices=8, factor=10, parameters=10, peak=None)
    # async GRPO's exposed generation counts as generation time
    both = perf_from_nemo(train, {**timing, "exposed_generation": 2.0}, devices=8, factor=10, parameters=None,
                          peak=None)
    assert both[tp.PERF_GENERATION_S] == 12
    assert perf_from_nemo(train, {"total_step_time": 0}, devices=1, factor=6, parameters=1, peak=1.0) == {}


def test_sft_step_has_no_total_token_count() -> None:
    row = perf_from_nemo({"global_valid_toks": 900}, {"total_step_time": 3.0, "policy_training": 2.5}, devices=1,
                         factor=6, parameters=10, peak=989.0)
    assert row == {tp.PERF_STEP_S: 3.0}  # loss tokens only in v0.7.0's SFT metrics: no tokens/s under our definition


def test_nemo_perf_closes_a_step_at_its_timing_log() -> None:
    perf = NemoPerf("rl", devices=2, factor=8, parameters=None, peak=None)
    assert perf.observe({"accuracy": 0.5}, 3, "validation") is None
    assert perf.observe({"total_num_tokens": 1000}, 3, "train") is None
    row = perf.observe({"total_step_time": 2.0, "generation": 0.5}, 3, "timing/train")
    assert row is not None and row[tp.PERF_TOKENS_PER_S] == 500 and row[tp.PERF_TOKENS_PER_S_PER_GPU] == 250
    assert perf.rows == [{"step": 3, "phase": "rl", **row}]
    assert row_names(row)["tokens_per_s"] == 500  # the Logger's prefix "perf" adds the namespace back
    assert perf.observe({"total_step_time": 1.0}, 4, "timing/train") == {tp.PERF_STEP_S: 1.0}  # no train log
