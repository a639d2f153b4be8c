"""`spatialiq run dapo-tight` end to end on the tiny model: SFT warm-up, then RL, one run folder, an interruption
and a resume that finishes at the same step count, and a final model loadable with transformers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _train_support import TINY_RECIPE, Interrupted, interrupt_at, one_thread, tiny_recipe, write_traces
from typer.testing import CliRunner

from spatialiq_train.core.metrics import read_metrics

one_thread()



@pytest.mark.slow
def test_dapo_tight_run_resumes_after_interruption(tmp_path: Path) -> None:
    from spatialiq_train.cli import app
    from spatialiq_train.train.run import run_dapo_tight

    root = tmp_path / "data"
    rng = np.random.default_rng(2)
    write_traces(root, "warmup", 8, rng, answer=lambda i: i % 10)
    traces = write_traces(root, "rl", 8, rng, answer=lambda i: 3)
    overrides = [f"data.traces_dir={traces}", f"data.data_root={root}", "sft.optimizer.max_steps=4",
                 "rl.optimizer.max_steps=4",
                 "logging.save_steps=2"]
    out = tmp_path / "run"
    with pytest.raises(Interrupted):  # first inside the SFT warm-up ...
        run_dapo_tight(tiny_recipe(overrides), out, sft_callbacks=[interrupt_at(3)])
    assert (out / "sft" / "checkpoint-2").is_dir() and not (out / "sft" / "final").exists()
    with pytest.raises(Interrupted):  # ... then inside RL
        run_dapo_tight(tiny_recipe(overrides), out, rl_callbacks=[interrupt_at(3)])
    assert json.loads((out / "sft" / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    assert (out / "sft" / "final" / "model.safetensors").is_file()
    assert (out / "rl" / "checkpoint-2").is_dir() and not (out / "final").exists()
    assert [r["step"] for r in read_metrics(out / "rl" / "metrics.jsonl")] == [1, 2, 3]
    sft_mtime = (out / "sft" / "final" / "model.safetensors").stat().st_mtime_ns

    res = CliRunner().invoke(app, ["run", "dapo-tight", "--recipe", str(TINY_RECIPE), "--out", str(out), *overrides])
    assert res.exit_code == 0, res.output
    assert (out / "sft" / "final" / "model.safetensors").stat().st_mtime_ns == sft_mtime  # SFT not redone

    sft_rows = read_metrics(out / "sft" / "metrics.jsonl")
    rl_rows = read_metrics(out / "rl" / "metrics.jsonl")
    assert [r["step"] for r in sft_rows] == [1, 2, 3, 4]
    assert [r["step"] for r in rl_rows] == [1, 2, 3, 4]  # resumed from checkpoint-2, no duplicated steps
    assert all("reward/total/mean" in r and "reward/exact_match/mean" in r and "train/kl" in r for r in rl_rows)
    assert all("dynamic_sampling/kept_groups" in r for r in rl_rows)
    state = json.loads((out / "rl" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4

    from transformers import AutoModelForImageTextToText

    from spatialiq_train.core.processor import load_processor
    from spatialiq_train.hf_export import eos_token_ids

    final = out / "final"
    assert (final / "model.safetensors").is_file() and not list(final.glob("*.bin"))
    model = AutoModelForImageTextToText.from_pretrained(final)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    # transformers 5.17 keeps a Qwen2.5-VL config's eos_token_id in its text_config only (hf_export.eos_token_ids)
    assert [load_processor(final).tokenizer.convert_tokens_to_ids("<|im_end|>")] == eos_token_ids(model.config)

    # A finished run is complete: a second run changes no byte of final/ (nor the phase folders) and says so.
    before = _snapshot(out)
    res = CliRunner().invoke(app, ["run", "dapo-tight", "--recipe", str(TINY_RECIPE), "--out", str(out), *overrides])
    assert res.exit_code == 0, res.output
    assert _snapshot(out) == before
    assert json.loads((out / "rl" / "complete.json").read_text())["global_step"] == 4
    # A larger budget is refused without --extend, and trains on from the last checkpoint with it.
    res = CliRunner().invoke(app, ["run", "dapo-tight", "--recipe", str(TINY_RECIPE), "--out", str(out), *overrides,
                                   "rl.optimizer.max_steps=5"])
    assert res.exit_code != 0 and "--extend" in res.output and _snapshot(out) == before
    res = CliRunner().invoke(app, ["run", "dapo-tight", "--recipe", str(TINY_RECIPE), "--out", str(out), "--extend",
                                   *overrides, "rl.optimizer.max_steps=5"])
    assert res.exit_code == 0, res.output
    assert [r["step"] for r in read_metrics(out / "rl" / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    assert json.loads((out / "rl" / "complete.json").read_text())["global_step"] == 5


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_finished_sft_run_is_complete_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    from spatialiq_train.cli import app

    root = tmp_path / "data"
    traces = write_traces(root, "warmup", 8, np.random.default_rng(3), answer=lambda i: i % 10)
    args = ["train", "sft", "--recipe", str(TINY_RECIPE), "--out", str(tmp_path / "sft"),
            f"data.traces_dir={traces}", f"data.data_root={root}", "sft.optimizer.max_steps=2", "logging.save_steps=2"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    before = _snapshot(tmp_path / "sft")
    assert "final/model.safetensors" in before and "complete.json" in before
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert _snapshot(tmp_path / "sft") == before  # no step 3 of 2, final/ not rewritten
    res = CliRunner().invoke(app, [*args, "sft.optimizer.max_steps=3"])
    assert res.exit_code != 0 and "finished at step 2 under max_steps 2" in " ".join(res.output.split())
    assert "--extend" in res.output and _snapshot(tmp_path / "sft") == before
    res = CliRunner().invoke(app, [*args, "sft.optimizer.max_steps=1", "--extend"])
    assert res.exit_code != 0 and "less than it already trained" in " ".join(res.output.split())
    assert "README.md" not in before  # no TRL boilerplate card ("fine-tuned version of [None]") in the run folder
    assert "recipe.yaml" in before  # the phase's record: what a resume or rerun is compared with
    # a finished run rerun with another learning rate is refused, naming the key and both values (not "nothing to do")
    res = CliRunner().invoke(app, [*args, "sft.optimizer.learning_rate=5e-4"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "sft.optimizer.learning_rate differ" in said, res.output
    assert "recorded 0.001, now 0.0005" in said and _snapshot(tmp_path / "sft") == before
    # an interrupted run (no completion record) resumed with other settings is refused, naming each difference
    (tmp_path / "sft" / "complete.json").unlink()
    res = CliRunner().invoke(app, [*args, "sft.optimizer.learning_rate=5e-4",
                                   "sft.optimizer.global_batch_size=2"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "sft.optimizer.global_batch_size, sft.optimizer.learning_rate differ" in said, said
    res = CliRunner().invoke(app, [*args, "sft.optimizer.max_steps=3"])  # a new budget without --extend: refused
    assert res.exit_code == 2 and "--extend" in res.output and "sft.optimizer.max_steps" in res.output
    # --extend trains on, and the counters continue (train/num_tokens does not restart from 0)
    res = CliRunner().invoke(app, [*args, "sft.optimizer.max_steps=3", "--extend"])
    assert res.exit_code == 0, res.output
    rows = read_metrics(tmp_path / "sft" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    tokens = [r["train/num_tokens"] for r in rows]
    assert tokens[0] < tokens[1] < tokens[2] and tokens[2] - tokens[1] == tokens[1] - tokens[0], tokens
    assert "max_steps: 3" in (tmp_path / "sft" / "recipe.yaml").read_text()


def test_a_phase_record_refuses_what_the_phase_reads_and_allows_what_it_does_not(tmp_path: Path) -> None:
    from spatialiq_train.core.recipes import RecipeError
    from spatialiq_train.train.record import check_phase_record, write_record

    write_record(tmp_path, tiny_recipe())
    assert check_phase_record(tmp_path, tiny_recipe(), "rl", extend=False) == []
    # the RL phase does not read the SFT section
    assert check_phase_record(tmp_path, tiny_recipe(["sft.optimizer.learning_rate=0.5"]), "rl", extend=False)
    with pytest.raises(RecipeError, match=r"rl\.beta, rl\.optimizer\.learning_rate differ .*rl\.beta: recorded "
                       r"0\.05, now 0\.5"):
        check_phase_record(tmp_path, tiny_recipe(["rl.beta=0.5", "rl.optimizer.learning_rate=1e-4"]), "rl", False)
    with pytest.raises(RecipeError, match="pass --extend"):
        check_phase_record(tmp_path, tiny_recipe(["rl.optimizer.max_steps=9"]), "rl", extend=False)
    assert check_phase_record(tmp_path, tiny_recipe(["rl.optimizer.max_steps=9"]), "rl", extend=True)
    with pytest.raises(RecipeError, match=r"rl\.beta differ"):  # the SFT phase does not read rl.*: allowed there
        check_phase_record(tmp_path, tiny_recipe(["rl.beta=0.5", "model.max_pixels=6272"]), "rl", extend=True)
    assert check_phase_record(tmp_path, tiny_recipe(["rl.beta=0.5"]), "sft", extend=False) == ["rl.beta"]


def test_run_refuses_a_different_recipe_in_the_same_folder(tmp_path: Path) -> None:
    from spatialiq_train.core.recipes import RecipeError
    from spatialiq_train.train.run import _write_run_recipe

    _write_run_recipe(tiny_recipe(), tmp_path)
    _write_run_recipe(tiny_recipe(), tmp_path)  # same recipe: fine
    with pytest.raises(RecipeError, match="different recipe"):  # an SFT key: RL-only keys may change (preflight)
        _write_run_recipe(tiny_recipe(["sft.optimizer.learning_rate=0.5"]), tmp_path)


def test_warmup_and_rl_partitions_must_be_disjoint(tmp_path: Path) -> None:
    from spatialiq_train.train.run import check_disjoint

    rng = np.random.default_rng(3)
    write_traces(tmp_path, "warmup", 3, rng, answer=lambda i: i)
    traces = write_traces(tmp_path, "rl", 3, rng, answer=lambda i: i)
    check_disjoint(traces, "warmup", "rl")
    write_traces(tmp_path, "rl", 3, rng, answer=lambda i: i)
    lines = (traces / "warmup.jsonl").read_text().splitlines()
    (traces / "rl.jsonl").write_text(lines[0] + "\n")
    with pytest.raises(ValueError, match="share 1 structures"):
        check_disjoint(traces, "warmup", "rl")


@pytest.mark.slow
def test_resume_restores_the_checkpoint_weights(tmp_path: Path) -> None:
    """A resumed phase continues from the checkpoint's weights, not from the phase's starting model."""
    import torch
    from transformers import AutoModelForImageTextToText

    from spatialiq_train.train import common
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import build_phase_trainer, run_phase
    from spatialiq_train.train.sft import sft_phase

    root = tmp_path / "data"
    traces = write_traces(root, "warmup", 8, np.random.default_rng(3), answer=lambda i: i % 10)
    recipe = tiny_recipe([f"data.traces_dir={traces}", f"data.data_root={root}", "data.sft_split=warmup",
                          "sft.optimizer.max_steps=4", "logging.save_steps=2"])
    out = tmp_path / "sft"
    with pytest.raises(Interrupted):
        run_phase(sft_phase(), recipe, out, callbacks=[interrupt_at(3)])
    base = str(out / "base")
    dataset = load_split(traces, "warmup", root, "sft", None)
    trainer, _ = build_phase_trainer(sft_phase(), recipe, base, dataset, out)
    start = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    ckpt = common.resume_from(trainer, out)
    assert ckpt is not None and ckpt.endswith("checkpoint-2")
    saved = AutoModelForImageTextToText.from_pretrained(ckpt).state_dict()
    now = trainer.model.state_dict()
    assert set(now) == set(saved)
    assert all(torch.equal(now[k], saved[k]) for k in now)
    assert any(not torch.equal(start[k], now[k]) for k in now)  # the starting weights were replaced
