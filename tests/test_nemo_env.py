"""The NeMo-RL reward environments: same rewards as the TRL reward functions, metrics under the project's names,
and the Ray actors NeMo-RL creates (real Ray, one CPU)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from _train_support import REPO, tiny_recipe

from reward.trl import make_trl_reward_funcs
from spatialiq_train.core.prompts import COT_TARGET_TEMPLATE
from spatialiq_train.nemo import env as nemo_env
from spatialiq_train.nemo.env import ExactMatchEnvironment, SpatialIQEnvironment

GT = {"task1": "cube", "task2": 2, "task3": 4, "task4": 3, "task5": 9, "task6": 2, "task7": 3, "task8": 1,
      "task9": 1, "num_hidden_blocks": 2, "task_main": 11}
COT = COT_TARGET_TEMPLATE.format(**GT)
COMPLETIONS: list[Any] = [
    "<answer>11</answer>",           # exact
    "<answer>9</answer>",            # off by two
    "11",                            # no tags: format 0, gated distance 0
    "<answer>11</answer><answer>11</answer>",  # two pairs: format 0
    COT,                             # full chain of thought
    COT.replace("<answer>11</answer>", "<answer>12</answer>"),
    None,                            # no assistant turn at all
]


def _batch() -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    logs, meta = [], []
    for i, text in enumerate(COMPLETIONS):
        log = [{"role": "system", "content": "sys"}, {"role": "user", "content": "How many?"}]
        if text is not None:
            log.append({"role": "assistant", "content": text})
        log.append({"role": "environment", "content": ""})  # as after an earlier observation: ignored
        logs.append(log)
        meta.append({"answer": 11, "task_id": "task_main", "structure_id": f"s{i}",
                     **{k: v for k, v in GT.items() if k != "task1"}})
    return logs, meta


def _trl_totals(weights: dict[str, float], logs: list[Any], meta: list[dict[str, Any]]) -> list[float]:
    """The weighted reward the TRL path computes: TRL sums weight x each reward function's output."""
    funcs, ws = make_trl_reward_funcs(weights)
    columns = {k: [m[k] for m in meta] for k in meta[0]}
    completions = [[m for m in log if m["role"] == "assistant"] for log in logs]
    per_func = [f(prompts=None, completions=completions, **columns) for f in funcs]
    return [sum(w * scores[i] for w, scores in zip(ws, per_func, strict=True)) for i in range(len(logs))]


@pytest.mark.parametrize("weights", [
    tiny_recipe().reward.weights,
    {"format": 0.1, "integer_distance": 0.8, "stepwise": 0.05, "consistency": 0.05},
])
def test_step_rewards_equal_the_trl_reward_functions(weights: dict[str, float]) -> None:
    logs, meta = _batch()
    env = SpatialIQEnvironment({"reward": weights})
    out = env.step(logs, meta)
    expected = _trl_totals(weights, logs, meta)
    assert out.rewards.tolist() == pytest.approx(expected, abs=1e-6)
    assert out.rewards.shape == (len(logs),)
    assert len(set(expected)) >= 4  # the batch really separates the samples
    assert out.observations == [{"role": "environment", "content": ""}] * len(logs)
    assert out.terminateds.tolist() == [1.0] * len(logs)
    assert out.metadata == meta and out.next_stop_strings == [None] * len(logs) and out.answers is None


def test_metrics_use_the_namespaced_names() -> None:
    from _metric_names import is_known

    logs, meta = _batch()
    env = SpatialIQEnvironment({"reward": {"format": 0.1, "integer_distance": 0.9}})
    env.step(logs, meta)
    m = env.last_metrics()
    assert all(is_known(k) for k in m), [k for k in m if not is_known(k)]
    assert m["reward/format/mean"] == pytest.approx(4 / 7)
    assert m["reward/exact_match/mean"] == pytest.approx(2 / 7)  # rollout accuracy, though not a reward term
    assert m["reward/total/mean"] == pytest.approx(sum(_trl_totals({"format": 0.1, "integer_distance": 0.9},
                                                                    logs, meta)) / 7)
    assert m["reward/format/errors"] == 1.0  # the sample without an assistant turn
    assert "eval/exact_match" not in m


def test_validation_environment_scores_exact_match() -> None:
    logs, meta = _batch()
    env = ExactMatchEnvironment({})
    out = env.step(logs, meta)
    assert out.rewards.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert env.last_metrics()["eval/exact_match"] == pytest.approx(2 / 7)
    with pytest.raises(ValueError, match="scores 'exact_match'"):
        ExactMatchEnvironment({"reward": "default"})


def test_bad_configs_fail_when_the_environment_starts() -> None:
    with pytest.raises(ValueError, match="unknown key.*rewrad"):
        SpatialIQEnvironment({"rewrad": "default"})
    with pytest.raises(ValueError, match="unknown reward 'formt'"):
        SpatialIQEnvironment({"reward": {"formt": 1.0}})
    with pytest.raises(AttributeError):
        nemo_env.NoSuchActor  # noqa: B018


@pytest.fixture(scope="module")
def ray_cpu() -> Any:
    """Real Ray on one CPU; workers import this worktree's package (not an installed copy)."""
    ray = pytest.importorskip("ray")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), *([old] if old else [])])
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.mark.slow
def test_ray_actors_as_nemo_rl_creates_them(ray_cpu: Any, tmp_path: Path) -> None:
    import importlib

    weights = tiny_recipe().reward.weights
    logs, meta = _batch()
    actors = {}
    for name, fqn in nemo_env.ACTOR_CLASSES.items():
        module, _, attr = fqn.rpartition(".")
        cls = getattr(importlib.import_module(module), attr)  # what NeMo-RL's create_env resolves
        cfg = {"reward": weights} if name == nemo_env.TRAIN_ENV else {}
        cfg["metrics_file"] = str(tmp_path / f"{name}.jsonl")
        actors[name] = cls.options(runtime_env={"env_vars": {"SPATIALIQ_TEST": "1"}}).remote(cfg)
    train, val = actors[nemo_env.TRAIN_ENV], actors[nemo_env.VAL_ENV]
    out_train, out_val = ray_cpu.get([train.step.remote(logs, meta), val.step.remote(logs, meta)])
    assert out_train.rewards.tolist() == pytest.approx(_trl_totals(weights, logs, meta), abs=1e-6)
    assert out_val.rewards.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    ray_cpu.get(train.step.remote(logs[:2], meta[:2]))
    rows = [json.loads(x) for x in (tmp_path / "spatialiq.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["call"], r["samples"]) for r in rows] == [(1, 7), (2, 2)]
    assert rows[1]["reward/exact_match/mean"] == 0.5
    assert ray_cpu.get(val.last_metrics.remote())["eval/exact_match"] == pytest.approx(2 / 7)
    ray_cpu.get([a.shutdown.remote() for a in actors.values()])
