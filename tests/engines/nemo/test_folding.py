"""The paper-folding task family on NeMo-RL (docs/folding.md): ``spatialiq fold gen`` and ``fold traces``, then the
shipped ``tiny_cpu_folding`` recipe's SFT phase through v0.7.0's ``sft_train`` and, from its converted checkpoint,
its DAPO-tight RL phase through ``grpo_train`` (CPU workers), rewarded by the folding rewards from the traces'
``holes`` metadata."""

from __future__ import annotations

import json
from pathlib import Path

import _learning
import pytest
from _cpu_workers import LOG, reset_log
from _nemo_support import run_driver, write_config
from typer.testing import CliRunner

from spatialiq_train.cli import app

SFT = ("sft.optimizer.max_steps=1", "sft.optimizer.global_batch_size=2", "logging.save_steps=1000")
RL = (
    "rl.num_generations=2",
    "rl.optimizer.max_steps=1",
    "rl.prompts_per_step=2",
    "generation.max_completion_length=8",
    "rl.overlong.buffer_length=2",
    "rl.dynamic_sampling.enabled=false",
    "logging.save_steps=1000",
)


def _cli(*args: object) -> None:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output


def test_folding_sft_then_dapo_tight_on_nemo_rl(
    ray_driver: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from spatialiq_train.nemo import placeholders

    # a one-step warm-up of the random tiny model samples vision tokens often (4 samples here): the rule that stops
    # such runs is tested in test_placeholders.py; this test is about the folding family's data and rewards
    monkeypatch.setattr(placeholders, "MAX_MASKED_SHARE", 1.0)

    data = tmp_path / "data"
    _cli("fold", "gen", "--out", data, "--count", "40", "--groups", "one_step,two_step", "--seed", "0")
    _cli("fold", "traces", "--data", data, "--out", data / "traces", "--kind", "plain")
    sft_cfg, written = write_config(
        "tiny_cpu_folding", "sft", data, tmp_path / "sft", gpus=1, extra=("model.tiny=false", *SFT)
    )
    reset_log()
    with _learning.cpu_workers():
        result = run_driver("sft", sft_cfg)
    assert result.exit_code == 0, result.output
    assert len([r for r in LOG["train"] if not r["eval_mode"]]) == 1
    hf = _learning.convert(written["checkpointing"]["checkpoint_dir"], tmp_path / "sft_hf")
    rl_cfg, rl_written = write_config(
        "tiny_cpu_folding", "rl", data, tmp_path / "rl", gpus=1, extra=("model.tiny=false", *RL, f"rl.init_from={hf}")
    )
    ray.shutdown()  # each driver run connects to the session's Ray head itself
    reset_log()
    with _learning.cpu_workers():
        result = run_driver("rl", rl_cfg)
    assert result.exit_code == 0, result.output
    assert len([r for r in LOG["train"] if not r["eval_mode"]]) == 1
    env_log = [
        json.loads(x)
        for p in (tmp_path / "rl").rglob("spatialiq_metrics.jsonl")
        for x in p.read_text(encoding="utf-8").splitlines()
    ]  # the reward environment's per-call metrics
    assert env_log and all(r["reward/hole_partial/errors"] == 0 and "reward/hole_partial/mean" in r for r in env_log)
