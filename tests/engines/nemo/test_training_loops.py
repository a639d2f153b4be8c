"""v0.7.0's own training loops, ``sft_train`` and ``grpo_train``, end to end on the CPU through our driver.

``spatialiq nemo sft`` then ``spatialiq nemo rl`` (the driver, the real ``setup``s, the real loops) on the tiny model,
with the two GPU workers replaced by the CPU ones of ``_cpu_workers.py``: SFT teaches the answer format, its
checkpoint converts with ``spatialiq nemo convert``, and the DAPO-tight RL phase starts from it with dynamic sampling
on, one GRPO group per view (``spatialiq_train.nemo.grouping``), the recipe's shaped reward, the leave-one-out
baseline, validation in the loop and a checkpoint every step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _learning
import numpy as np
import pytest
from _cpu_workers import CONSOLIDATED, LOG, CpuGeneration, CpuPolicy, reset_log
from _nemo_support import write_config
from typer.testing import CliRunner

from spatialiq_train.cli import app

G = 4
"""Generations per view in the RL phase (the recipe's 8 halved: the CPU generates every sample)."""
RL_SETS = (f"rl.num_generations={G}", "rl.optimizer.max_steps=3", "rl.optimizer.learning_rate=1e-3",
           "rl.optimizer.warmup_steps=0", "generation.max_completion_length=10", "rl.overlong.buffer_length=4",
           "rl.overlong.max_response_length=10", "rl.validation.every_steps=3", "rl.validation.max_samples=8",
           "logging.save_steps=1", "sft.validation.early_stopping_patience=null", "logging.report_to=[tensorboard]")
"""The recipe's own draw (dapo_tight_7b: rl.dynamic_sampling.batch_multiplier 1, 1 x the step's prompts per
generation batch) is not overridden."""


class Kill(Exception):  # noqa: N818 - a signal, not an error
    """Raised from the policy's train call to stop a run the way a killed job stops: no checkpoint of that step."""


@pytest.fixture(scope="module")
def cpu_workers() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp, _learning.cpu_workers(), _learning.tiny_model_vision_limit():
        yield mp


class Spy:
    """Wraps v0.7.0's ``dynamic_sampling`` (the driver's per-view check wraps this in turn): what it got and kept."""

    def __init__(self) -> None:
        import nemo_rl.algorithms.grpo as grpo

        self.real, self.calls = grpo.dynamic_sampling, []
        self.__wrapped__ = self.real  # the driver checks the signature of what it wraps: v0.7.0's

    def __call__(self, repeated_batch: Any, std: Any, baseline: Any, *args: Any, **kwargs: Any) -> Any:
        rewards = repeated_batch.get("unshaped_total_reward", repeated_batch["total_reward"]).clone()
        idx = [int(i) for i in repeated_batch["idx"]]
        out = self.real(repeated_batch, std, baseline, *args, **kwargs)
        self.calls.append({"rewards": rewards.tolist(), "idx": idx, "std": std.tolist(),
                           "complete": out[1], "kept_idx": [int(i) for i in out[0]["idx"]] if out[1] else None,
                           "kept_reward": out[0]["filtered_reward"].tolist() if out[1] else None})
        return out


class LossSpy:
    """Wraps v0.7.0's ``ClippedPGLossFn.__call__``: the advantage and loss weight of every row the loss receives
    (each row's advantage at its first generated token), with the training step it belongs to."""

    def __init__(self) -> None:
        import nemo_rl.algorithms.grpo as grpo

        self.real, self.rows = grpo.ClippedPGLossFn.__call__, []

    def install(self, mp: pytest.MonkeyPatch) -> None:
        import nemo_rl.algorithms.grpo as grpo
        import torch

        spy = self

        def loss(fn: Any, *args: Any, **kwargs: Any) -> Any:
            data = kwargs["data"] if "data" in kwargs else args[1]
            first = data["token_mask"].float().argmax(1)
            adv = data["advantages"][torch.arange(first.numel()), first]
            step = len([r for r in LOG["train"] if not r["eval_mode"]]) + 1
            spy.rows += [(step, float(a), float(m)) for a, m in zip(adv, data["sample_mask"], strict=True)]
            return spy.real(fn, *args, **kwargs)

        mp.setattr(grpo.ClippedPGLossFn, "__call__", loss)


_run = _learning.run_driver


_metrics = _learning.scalars


@pytest.fixture(scope="module")
def runs(warm: _learning.WarmUp, cpu_workers: pytest.MonkeyPatch) -> dict[str, Any]:
    import nemo_rl.algorithms.grpo as grpo

    root = warm.root / "loops"
    reset_log()
    rl_cfg, rl_written = write_config("dapo_tight_7b", "rl", warm.data_root, root / "rl", gpus=1,
                                      extra=(*RL_SETS, f"rl.init_from={warm.hf}"))
    spy = Spy()
    cpu_workers.setattr(grpo, "dynamic_sampling", spy)
    losses = LossSpy()
    with pytest.MonkeyPatch.context() as mp:
        losses.install(mp)
        _run("rl", rl_cfg)
    return {"losses": losses.rows,"sft_written": warm.written, "sft_train": warm.train,
            "sft_ckpts": Path(warm.written["checkpointing"]["checkpoint_dir"]), "hf": warm.hf,
            "rl_written": rl_written, "rl_cfg": rl_cfg, "spy": spy, "log": {k: list(v) for k, v in LOG.items()},
            "root": root, "data_root": warm.data_root}


def test_sft_train_runs_and_learns_the_format(runs: dict[str, Any]) -> None:
    steps = [r for r in runs["sft_train"] if not r["eval_mode"]]
    assert len(steps) == 30
    losses = [float(r["loss"].sum()) for r in steps]
    assert all(np.isfinite(losses)) and all(float(r["grad_norm"]) > 0 for r in steps)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert any(r["eval_mode"] for r in runs["sft_train"])  # validation ran inside the loop
    assert sorted(p.name for p in runs["sft_ckpts"].iterdir()) == ["data.json", "step_15", "step_30"]


def test_grpo_train_runs_three_steps_with_finite_loss_and_gradient(runs: dict[str, Any]) -> None:
    steps = [r for r in runs["log"]["train"] if not r["eval_mode"]]
    assert len(steps) == 3
    for r in steps:
        assert np.isfinite(r["loss"].numpy()).all() and float(r["grad_norm"]) > 0


def test_step_one_is_on_policy(runs: dict[str, Any]) -> None:
    """Logprobs of the generation and of the policy agree on step 1 (no update has happened yet): the refit landed
    and the two compute the same distribution."""
    first = runs["log"]["train"][0]["all_mb_metrics"]
    # each micro-batch reports its share of the global mean; grpo_train sums them (as here) before logging
    assert np.sum(first["token_mult_prob_error"]) == pytest.approx(1.0, abs=1e-3)
    assert np.sum(first["gen_kl_error"]) == pytest.approx(0.0, abs=1e-3)
    logged = _metrics(Path(runs["rl_written"]["logger"]["log_dir"]), "train/token_mult_prob_error")
    assert logged[1] == pytest.approx(np.sum(first["token_mult_prob_error"]), rel=1e-5)


def test_refits_carry_the_policy_weights(runs: dict[str, Any]) -> None:
    import torch

    refits, saved = runs["log"]["refits"], runs["log"]["saved"]
    assert len(refits) >= 3
    gen = CpuGeneration(None, runs["log"]["generation_config"][0])
    first = refits[0]
    assert any(not torch.equal(first[k], gen.dummy[k]) for k in first)  # the dummy weights were replaced
    from transformers import AutoModelForImageTextToText

    def weights(folder: Path) -> dict[str, Any]:
        return AutoModelForImageTextToText.from_pretrained(folder).state_dict()

    init = weights(runs["hf"])
    assert set(first) == set(init)
    assert all(torch.equal(first[k], init[k]) for k in init)  # ... by the SFT checkpoint the policy loaded
    assert Path(saved[-1]).parent.parent.name == "tmp_step_3"  # the policy wrote it; the manager renamed it
    ckpts = Path(runs["rl_written"]["checkpointing"]["checkpoint_dir"])
    last = weights(ckpts / "step_3" / "policy" / "weights" / CONSOLIDATED)
    assert any(not torch.equal(refits[-1][k], init[k]) for k in init)  # training moved them
    assert all(torch.equal(refits[-1][k], last[k]) for k in last)  # the last refit is the saved policy


def _views_that_vary(rewards: list[float]) -> np.ndarray:
    """The rule, written out: a view is kept when its unshaped rewards span more than 1e-6 (max - min), per sample."""
    views = np.asarray(rewards, dtype=np.float64).reshape(-1, G)
    return np.repeat(views.max(1) - views.min(1) > 1e-6, G)


def _leave_one_out(view: list[float]) -> list[float]:
    """The released advantage, written out: each sample against the mean and the sample std of the view's other
    samples, divided only where that std is above 0 (plus 1e-6)."""
    out = []
    for i, r in enumerate(view):
        others = np.delete(np.asarray(view, dtype=np.float64), i)
        std = others.std(ddof=1) if others.size > 1 else 0.0
        out.append((r - others.mean()) / (std + 1e-6) if std > 0 else r - others.mean())
    return out


def test_the_loss_receives_each_views_leave_one_out_advantages(runs: dict[str, Any]) -> None:
    """Inside grpo_train, at v0.7.0's loss: every training row's advantage is the recipe's (dapo_tight_7b:
    leave-one-out baseline and std, as released) over its own view's shaped rewards, not over the batch."""
    kept = [c["kept_reward"] for c in runs["spy"].calls if c["complete"]]
    assert len(kept) == 3
    for step, rewards in enumerate(kept, start=1):
        rows = [(a, m) for s, a, m in runs["losses"] if s == step]
        got = [a for a, _ in rows]  # a sample whose sampled vision token the guard replaced keeps its advantage
        assert len(got) == len(rewards) == runs["rl_written"]["policy"]["train_global_batch_size"]
        assert sum(m == 0 for _, m in rows) <= len(rows) * _learning.TINY_MODEL_VISION_SHARE  # masked: few
        want = [a for v in range(0, len(rewards), G) for a in _leave_one_out(rewards[v : v + G])]
        assert got == pytest.approx(want, abs=1e-5), step
        one_group = _leave_one_out(rewards) if len(set(rewards)) > 1 else want
        assert not np.allclose(one_group, want, atol=1e-3)  # the batch as one group would differ


def _batches_per_epoch(runs: dict[str, Any]) -> int:
    """Generation batches in one pass of v0.7.0's loader: the split's rows // the draw (``drop_last``)."""
    (rows,) = {len(p.read_text(encoding="utf-8").splitlines()) for p in (runs["data_root"] / "traces").glob("*.jsonl")}
    grpo = runs["rl_written"]["grpo"]
    return rows // (grpo["num_prompts_per_step"] * grpo["batch_multiplier"])


def test_dynamic_sampling_drops_exactly_the_views_whose_samples_agree(runs: dict[str, Any]) -> None:
    """Each training batch is the first ``num_prompts_per_step`` kept views since the last training batch, or since
    the epoch began: v0.7.0's ``grpo_train`` starts every pass over its loader with an empty cache (``batch_cache =
    None`` and the batch count at 0), so views kept in the batches that end an epoch without filling a step are not
    trained on (docs/training.md, dynamic sampling)."""
    master_num_prompts = runs["rl_written"]["grpo"]["num_prompts_per_step"]
    calls = runs["spy"].calls
    assert calls and any(c["complete"] for c in calls)
    per_epoch = _batches_per_epoch(runs)
    dropped_any = False
    cache: list[int] = []
    for n, c in enumerate(calls):
        if n % per_epoch == 0:
            cache = []
        keep = _views_that_vary(c["rewards"])  # on the unshaped rewards
        expected = [i for i, k in zip(c["idx"], keep, strict=True) if k]
        dropped_any |= not keep.all()
        assert np.asarray(c["std"])[~keep].max(initial=0.0) == 0.0
        assert (np.asarray(c["std"])[keep] > 0).all()
        cache += expected
        if c["complete"]:
            assert c["kept_idx"] == cache[: master_num_prompts * G]
            cache = []
    assert dropped_any, "no view agreed in this run: the test did not exercise the filter"


def test_validation_accuracy_is_logged(runs: dict[str, Any]) -> None:
    log_dir = Path(runs["rl_written"]["logger"]["log_dir"])
    acc = _metrics(log_dir, "validation/accuracy")
    assert sorted(acc) == [3] and all(0.0 <= v <= 1.0 for v in acc.values())


def test_policy_section_reaches_the_worker_as_generated(runs: dict[str, Any]) -> None:
    """The worker gets the ``dtensor_cfg`` (and the rest of ``policy``) the GPU run uses, not test settings."""
    got = runs["log"]["policy_config"][0]
    written = runs["rl_written"]["policy"]
    for key in ("tensor_parallel_size", "sequence_parallel", "activation_checkpointing", "cpu_offload"):
        assert got["dtensor_cfg"][key] == written["dtensor_cfg"][key], key
    assert got["precision"] == written["precision"] and got["model_name"] == str(runs["hf"])


def test_the_checkpoint_converts_and_samples(runs: dict[str, Any], tmp_path: Path) -> None:
    from PIL import Image

    ckpts = Path(runs["rl_written"]["checkpointing"]["checkpoint_dir"])
    out = tmp_path / "hf"
    runner = CliRunner()
    result = runner.invoke(app, ["nemo", "convert", "--checkpoint", str(ckpts), "--out", str(out)])
    assert result.exit_code == 0, result.output
    bench = tmp_path / "bench"
    result = runner.invoke(app, ["gen", "--out", str(bench), "--structures", "1", "--seed", "0", "--split",
                                 "benchmark", "--renderer", "none", "--quiet"])
    assert result.exit_code == 0, result.output
    for gt in (bench / "benchmark").rglob("gt.json"):
        Image.new("RGB", (112, 112), (120, 80, 40)).save(gt.parent / "view.png")
    completions = tmp_path / "c.jsonl"
    result = runner.invoke(app, ["eval", "sample", "--model", str(out), "--data", str(bench), "--out",
                                 str(completions), "--k", "1", "--limit", "2", "--engine", "transformers",
                                 "--max-new-tokens", "8"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in completions.read_text().splitlines()]
    # a sampled completion may be empty (the tiny policy can draw its end-of-text token first); both requests are
    # answered with text, and the converted model generates
    assert len(rows) == 2 and all(isinstance(r["text"], str) for r in rows) and any(r["text"] for r in rows)


def test_a_killed_run_resumes_where_it_stopped(runs: dict[str, Any], cpu_workers: pytest.MonkeyPatch) -> None:
    """A copy of the RL run, two steps long, killed during step 2 resumes from ``step_1``: it runs step 2 only, and
    its step-2 batch comes from the same data-loader position as the uninterrupted run's."""
    import yaml

    root = runs["root"] / "killed"
    written = dict(runs["rl_written"])
    written["grpo"] = {**written["grpo"], "max_num_steps": 2}
    written["checkpointing"] = {**written["checkpointing"], "checkpoint_dir": str(root / "checkpoints"),
                                "save_period": 1}
    written["logger"] = {**written["logger"], "log_dir": str(root / "logs")}
    cfg = root / "rl.yaml"
    root.mkdir(parents=True)
    cfg.write_text(yaml.safe_dump(written), encoding="utf-8")

    real_train = CpuPolicy.train
    calls = {"n": 0}

    def train_then_die(self: CpuPolicy, data: Any, loss_fn: Any, eval_mode: bool = False, **kw: Any) -> Any:
        if not eval_mode:
            calls["n"] += 1
            if calls["n"] == 2:
                raise Kill("step 2")
        return real_train(self, data, loss_fn, eval_mode=eval_mode, **kw)

    spy = Spy()
    import nemo_rl.algorithms.grpo as grpo

    cpu_workers.setattr(grpo, "dynamic_sampling", spy)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CpuPolicy, "train", train_then_die)
        with pytest.raises(Kill):
            _run("rl", cfg)
    assert sorted(p.name for p in (root / "checkpoints").iterdir()) == ["data.json", "step_1"]

    reset_log()
    resumed = Spy()
    cpu_workers.setattr(grpo, "dynamic_sampling", resumed)
    _run("rl", cfg)
    assert str(LOG["policy_init"][0]["weights_path"]).endswith("step_1/policy/weights")
    assert len([r for r in LOG["train"] if not r["eval_mode"]]) == 1
    assert sorted(p.name for p in (root / "checkpoints").iterdir())[-1] == "step_2"
    info = json.loads((root / "checkpoints" / "step_2" / "training_info.json").read_text())
    assert info["total_steps"] == 2
    assert resumed.calls[0]["idx"] == _first_batch_of_step(runs["spy"].calls, 2)["idx"]


def _first_batch_of_step(calls: list[dict[str, Any]], step: int) -> dict[str, Any]:
    """The first generation batch of optimizer step ``step`` (steps end at a complete batch)."""
    done = 0
    start = True
    for c in calls:
        if start and done == step - 1:
            return c
        start = bool(c["complete"])
        done += int(c["complete"])
    raise AssertionError(f"no step {step} in the spy's calls")
