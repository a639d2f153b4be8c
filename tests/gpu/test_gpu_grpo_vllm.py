"""GRPO/DAPO with colocated vLLM generation for two steps on the tiny model (bfloat16), through the
project's own trainer (dynamic sampling on): vLLM really generates, the loss is finite, the weights move."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from _gpu_support import needs, record_figure
from _train_support import tiny_recipe, write_traces

G = 4


def parity_reward(completions, answer, **kwargs):  # noqa: ANN001, ANN201
    """Constant for even answers (zero-variance groups, refilled), alternating 0/1 within the group for odd ones."""
    return [0.5 if a % 2 == 0 else float(i % 2) for i, a in enumerate(answer)]


parity_reward.__name__ = "parity"


def test_grpo_with_colocated_vllm_two_steps(vllm_tiny: Path, tmp_path: Path) -> None:
    needs("vllm", "pip install -e '.[gpu]'")
    from _train_support import model_digest

    from spatialiq_train.core.metrics import read_metrics
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.rl import RewardSetup, rl_phase

    traces = write_traces(tmp_path, "rl", 16, np.random.default_rng(0), answer=lambda i: i)
    recipe = tiny_recipe(["run.device=cuda", "model.dtype=bfloat16", "vllm.enabled=true", "vllm.mode=colocate",
                          "vllm.gpu_memory_utilization=0.2", "rl.optimizer.max_steps=2", f"rl.num_generations={G}",
                          "rl.prompts_per_step=2", "generation.max_completion_length=16",
                          "logging.save_steps=100"])
    trainer, _ = build_phase_trainer(rl_phase(rewards=RewardSetup([parity_reward], [1.0], [True])), recipe,
                                     str(vllm_tiny), load_split(traces, "rl", tmp_path, "rl"), tmp_path / "rl")
    assert trainer.use_vllm and trainer.args.vllm_mode == "colocate"
    before = model_digest(trainer.accelerator.unwrap_model(trainer.model))
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    rows = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in rows)
    assert all(r["rollout/length_mean"] > 0 for r in rows)  # vLLM produced completions
    assert model_digest(trainer.accelerator.unwrap_model(trainer.model)) != before
    record_figure("grpo-vllm", "2 steps wall s (after vLLM start)", round(wall, 1))
    record_figure("grpo-vllm", "refill rounds per step", [r.get("dynamic_sampling/refill_rounds") for r in rows])
