"""One total reward: the same rollouts' rewards through both engines' logging give the same ``reward/total/mean``.

The definition (`core.learning.total_reward`): the sum over the recipe's rewards of weight x the reward's mean,
unshaped. TRL's metrics callback computes it from the per-function means TRL logs (TRL's own shaped sum, overlong
penalty included, is kept as ``reward/shaped_total/mean``); NeMo-RL's environment sums the same terms per sample
(`nemo.env`); the learning analysis reads the same definition (`total_reward_series`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reward.trl import make_trl_reward_funcs
from spatialiq_train.core.learning import total_reward_series
from spatialiq_train.core.metrics import read_metrics
from spatialiq_train.nemo.env import SpatialIQEnvironment
from spatialiq_train.train.logging import make_metrics_callback

WEIGHTS = {"format": 0.1, "integer_distance": 0.9}
TEXTS = ["<answer>11</answer>", "<answer>9</answer>", "11", "<answer>3</answer>", "<answer>11</answer> and more"]


def _rollouts() -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    logs = [[{"role": "user", "content": "How many?"}, {"role": "assistant", "content": t}] for t in TEXTS]
    meta = [{"answer": 11, "task_id": "task_main", "structure_id": f"s{i}"} for i in range(len(TEXTS))]
    return logs, meta


def _trl_logs(logs: list[Any], meta: list[dict[str, Any]]) -> dict[str, float]:
    """What TRL's GRPOTrainer logs for this batch: each reward function's mean, the overlong shaping term's and its
    own weighted sum of all of them (``reward``)."""
    funcs, weights = make_trl_reward_funcs(WEIGHTS)
    columns = {k: [m[k] for m in meta] for k in meta[0]}
    completions = [[m for m in log if m["role"] == "assistant"] for log in logs]
    out: dict[str, float] = {}
    shaped = 0.0
    for f, w in zip(funcs, weights, strict=True):
        mean = sum(f(prompts=None, completions=completions, **columns)) / len(logs)
        out[f"rewards/{f.__name__}/mean"] = mean
        shaped += w * mean
    out["rewards/soft_overlong_punishment/mean"] = -0.25  # the shaping term, weight 1
    out["reward"] = shaped - 0.25
    return out


def test_both_engines_log_the_same_total_reward(tmp_path: Path) -> None:
    logs, meta = _rollouts()
    env = SpatialIQEnvironment({"reward": WEIGHTS})
    env.step(logs, meta)
    nemo = env.last_metrics()["reward/total/mean"]

    callback = make_metrics_callback(tmp_path / "metrics.jsonl", "rl", [], weights=WEIGHTS)
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    callback.on_log(None, state, None, logs=_trl_logs(logs, meta))
    (row,) = read_metrics(tmp_path / "metrics.jsonl")
    assert row["reward/total/mean"] == pytest.approx(nemo, abs=1e-9)
    assert 0 < nemo < 1 and len({t for t in TEXTS}) == len(TEXTS)
    assert row["reward/shaped_total/mean"] == pytest.approx(nemo - 0.25)  # TRL's own sum, shaping included
    assert total_reward_series([row], WEIGHTS) == [pytest.approx(nemo)]  # what the learning analysis reads
