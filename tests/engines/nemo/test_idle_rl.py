"""An RL phase that learned nothing says so on NeMo-RL too: ``spatialiq nemo rl`` through v0.7.0's ``grpo_train``.

Two GRPO steps from the loop tests' warm-up with a one-token completion budget: every completion is cut before its
answer tag, every sample of a view scores the same, every advantage is 0 and no step moves the weights (weight
decay off: AdamW's decoupled decay would move them on a zero gradient, and the KL term would then have one). The command
still exits 0 (the run is complete and resumable) and its summary warns, naming the cause and the knobs.
"""

from __future__ import annotations

from pathlib import Path

import _learning
from _cpu_workers import LOG, reset_log
from _nemo_support import run_driver, write_config

SETS = ("rl.num_generations=2", "rl.optimizer.max_steps=2", "rl.optimizer.learning_rate=1e-3",
        "rl.optimizer.weight_decay=0",
        "rl.optimizer.warmup_steps=0", "generation.max_completion_length=1", "rl.overlong.enabled=false",
        "rl.dynamic_sampling.enabled=false", "logging.save_steps=1000", "sft.validation.early_stopping_patience=null")


def test_rl_that_updates_nothing_warns_with_the_cause_and_the_knobs(warm: _learning.WarmUp, tmp_path: Path) -> None:
    cfg, _ = write_config("dapo_tight_7b", "rl", warm.data_root, tmp_path, gpus=1,
                          extra=(*SETS, f"rl.init_from={warm.hf}"))
    reset_log()
    with _learning.cpu_workers(), _learning.tiny_model_vision_limit():
        result = run_driver("rl", cfg, "grpo.num_prompts_per_step=2", "policy.train_global_batch_size=4")
    assert result.exit_code == 0, result.output
    steps = [r for r in LOG["train"] if not r["eval_mode"]]
    assert len(steps) == 2 and all(float(r["grad_norm"]) == 0 for r in steps)
    assert "WARNING: the RL phase learned nothing: none of its 2 steps updated the weights" in result.output
    assert "100% of the completions were cut at generation.max_completion_length=1" in result.output
    assert "policy.generation.max_new_tokens" in result.output
