"""`run dapo-tight` checks everything the RL phase needs before the SFT warm-up starts, and a rerun may change
RL-only recipe keys until the RL phase has started (a refusal names the keys that differ)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _train_support import TINY_RECIPE, one_thread, tiny_model_dir, tiny_recipe, write_traces

from spatialiq_train.core.recipes import RecipeError
from spatialiq_train.train.preflight import PreflightError, check_rewards_on_row
from spatialiq_train.train.rl import RewardSetup

one_thread()


@pytest.fixture()
def traces(tmp_path: Path) -> Path:
    rng = np.random.default_rng(4)
    write_traces(tmp_path, "warmup", 4, rng, answer=lambda i: i)
    return write_traces(tmp_path, "rl", 4, rng, answer=lambda i: 3)


def _recipe(tmp_path: Path, traces: Path, *extra: str):  # noqa: ANN202
    return tiny_recipe([f"data.traces_dir={traces}", f"data.data_root={tmp_path}", "sft.optimizer.max_steps=1",
                        "rl.optimizer.max_steps=1", *extra])


def _broken(prompts=None, completions=None, **columns):  # noqa: ANN001, ANN003, ANN202
    return [columns["no_such_column"][0] for _ in completions]


def test_a_reward_failing_on_a_sample_row_stops_the_run_before_sft(tmp_path: Path, traces: Path) -> None:
    from spatialiq_train.train.run import run_dapo_tight

    rewards = RewardSetup(funcs=[_broken], weights=[1.0], filter_mask=[True])
    with pytest.raises(PreflightError, match=r"reward '_broken' fails on the first row of the 'rl' split"):
        run_dapo_tight(_recipe(tmp_path, traces), tmp_path / "run", rl_rewards=rewards)
    assert not (tmp_path / "run").exists()  # a refusal leaves nothing: no recipe.yaml, no base/


def test_a_missing_rl_split_stops_the_run_before_sft(tmp_path: Path, traces: Path) -> None:
    from spatialiq_train.core.traces import TraceError
    from spatialiq_train.train.run import run_dapo_tight

    (traces / "rl.jsonl").unlink()
    with pytest.raises(TraceError, match=r"rl\.jsonl does not exist"):
        run_dapo_tight(_recipe(tmp_path, traces, "data.sft_split=rl", "data.rl_split=rl"), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # a refusal leaves nothing: no recipe.yaml, no base/


def test_an_init_checkpoint_without_a_config_stops_the_run(tmp_path: Path, traces: Path) -> None:
    from spatialiq_train.train.run import run_dapo_tight

    empty = tmp_path / "not_a_checkpoint"
    empty.mkdir()
    with pytest.raises(PreflightError, match=r"rl.init_from .*not_a_checkpoint: its model config does not load"):
        run_dapo_tight(_recipe(tmp_path, traces, f"rl.init_from={empty}"), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # the same for a model that does not load (e.g. a hub model offline): refused before recipe.yaml is written
    with pytest.raises(PreflightError, match=r"model .*not_a_checkpoint: its model config does not load"):
        run_dapo_tight(_recipe(tmp_path, traces, "model.tiny=false", f"model.name_or_path={empty}"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_held_out_refusal_of_run_and_train_commands_leaves_nothing(tmp_path: Path, traces: Path) -> None:
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    base = ["--recipe", str(TINY_RECIPE), f"data.traces_dir={traces}", f"data.data_root={tmp_path}",
            "sft.validation.every_steps=1", "rl.validation.every_steps=1"]
    for command, split in ((["run", "dapo-tight"], "rl"), (["train", "sft"], "warmup"), (["train", "rl"], "rl")):
        out = tmp_path / "_".join(command)
        res = CliRunner().invoke(app, [*command, "--out", str(out), *base, f"data.eval_split={split}"])
        assert res.exit_code == 2, res.output
        assert f"data.eval_split '{split}' is also a training split" in res.output, (command, res.output)
        assert not out.exists(), command
    # the corrected command is not blocked by debris of the refused one
    assert not (tmp_path / "run_dapo-tight" / "recipe.yaml").exists()


def test_rl_init_from_with_non_finite_weights_is_refused_naming_the_tensor(tmp_path: Path, traces: Path) -> None:
    import shutil

    import torch
    from safetensors.torch import load_file, save_file
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir(), broken)
    weights = load_file(broken / "model.safetensors")
    name = next(k for k, v in sorted(weights.items()) if v.is_floating_point())
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = torch.nan
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    for command in (["train", "rl"], ["run", "dapo-tight"]):
        out = tmp_path / "_".join(command)
        res = CliRunner().invoke(app, [*command, "--recipe", str(TINY_RECIPE), "--out", str(out),
                                       f"data.traces_dir={traces}", f"data.data_root={tmp_path}",
                                       f"rl.init_from={broken}"])
        assert res.exit_code == 2, res.output
        said = " ".join(res.output.split())
        assert f"tensor {name!r} in model.safetensors holds NaN" in said and "rl.init_from" in said, said
        assert not out.exists()


def test_reward_output_shape_is_checked() -> None:
    row = {"prompt": [{"role": "user", "content": "n?"}], "answer": 3}
    check_rewards_on_row(RewardSetup([lambda completions, **kw: [1.0]], [1.0], [True]), row, "row 1")
    with pytest.raises(PreflightError, match="returned 1.0 for one completion of row 1"):
        check_rewards_on_row(RewardSetup([lambda completions, **kw: 1.0], [1.0], [True]), row, "row 1")
    with pytest.raises(PreflightError, match="returned nan on row 1"):
        check_rewards_on_row(RewardSetup([lambda completions, **kw: [float("nan")]], [1.0], [True]), row, "row 1")


def test_rl_only_keys_may_change_until_rl_starts(tmp_path: Path) -> None:
    from spatialiq_train.train.run import _write_run_recipe

    _write_run_recipe(tiny_recipe(), tmp_path)
    _write_run_recipe(tiny_recipe(["rl.beta=0.5", "vllm.gpu_memory_utilization=0.5", "reward.weights={format: 1}"]),
                      tmp_path)  # the SFT phase reads none of these: resuming SFT under them is fine
    assert "beta: 0.5" in (tmp_path / "recipe.yaml").read_text()
    with pytest.raises(RecipeError, match=r"sft\.optimizer\.learning_rate differ and they change the SFT phase"):
        _write_run_recipe(tiny_recipe(["rl.beta=0.5", "vllm.gpu_memory_utilization=0.5",
                                       "reward.weights={format: 1}", "sft.optimizer.learning_rate=0.5"]), tmp_path)
    (tmp_path / "rl" / "checkpoint-2").mkdir(parents=True)
    # a complete checkpoint (its trainer_state.json, written last): an incomplete one would be set aside on resume,
    # the RL phase restarting from its first step, and RL-only keys could still change (tests/test_train_checkpoints)
    (tmp_path / "rl" / "checkpoint-2" / "trainer_state.json").write_text("{}", encoding="utf-8")
    with pytest.raises(RecipeError, match=r"rl\.beta differ and the RL phase has started"):
        _write_run_recipe(tiny_recipe(["vllm.gpu_memory_utilization=0.5", "reward.weights={format: 1}"]), tmp_path)


def _leaky_val(traces: Path, shared_from: str, shared: int, own: int) -> None:
    """A val.jsonl holding the first `shared` rows of `<shared_from>.jsonl` plus `own` rows of its own structures."""
    import json

    rows = [json.loads(line) for line in (traces / f"{shared_from}.jsonl").read_text().splitlines()][:shared]
    rows += [{**rows[0], "structure_id": f"val-{i}"} for i in range(own)] if rows else []
    (traces / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_validation_sharing_structures_with_training_stops_the_run_before_sft(tmp_path: Path, traces: Path) -> None:
    from spatialiq_train.core.splits import HeldOutError
    from spatialiq_train.train.run import run_dapo_tight

    _leaky_val(traces, "rl", shared=2, own=1)
    recipe = _recipe(tmp_path, traces, "data.eval_split=val", "rl.validation.every_steps=1", "logging.save_steps=1")
    with pytest.raises(HeldOutError, match=r"val.jsonl shares 2 of its 3 structures with training split 'rl'"):
        run_dapo_tight(recipe, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before the warm-up, and nothing written (no recipe.yaml, base/)


def test_standalone_phase_refuses_validation_sharing_its_split(tmp_path: Path, traces: Path) -> None:
    from spatialiq_train.core.resolve import Hardware, resolve
    from spatialiq_train.core.splits import HeldOutError
    from spatialiq_train.train.phase import phase_datasets

    _leaky_val(traces, "warmup", shared=1, own=2)
    recipe = resolve(_recipe(tmp_path, traces, "data.eval_split=val", "sft.validation.every_steps=1",
                             "logging.save_steps=1"), "sft", Hardware(gpu=False))
    with pytest.raises(HeldOutError, match=r"shares 1 of its 3 structures with training split 'warmup'"):
        phase_datasets(recipe, None, None)
    _leaky_val(traces, "rl", shared=0, own=0)
    (traces / "val.jsonl").write_text((traces / "rl.jsonl").read_text().replace('"rl-', '"val-'))
    train, val = phase_datasets(recipe, None, None)  # held out: passes
    assert len(train) == 4 and len(val) == 4
