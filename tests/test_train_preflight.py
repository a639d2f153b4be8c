"""`run dapo-tight` checks everything the RL phase needs before the SFT warm-up starts, and a rerun may change
RL-only recipe keys until the RL phase has started (a refusal names the keys that differ)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _train_support import one_thread, tiny_recipe, write_traces

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
    assert not (tmp_path / "run" / "sft").exists()


def test_a_missing_rl_split_stops_the_run_before_sft(tmp_path: Path, traces: Path) -> None:
    from spatialiq_train.core.traces import TraceError
    from spatialiq_train.train.run import run_dapo_tight

    (traces / "rl.jsonl").unlink()
    with pytest.raises(TraceError, match=r"rl\.jsonl does not exist"):
        run_dapo_tight(_recipe(tmp_path, traces, "data.sft_split=rl", "data.rl_split=rl"), tmp_path / "run")
    assert not (tmp_path / "run" / "sft").exists()


def test_an_init_checkpoint_without_a_config_stops_the_run(tmp_path: Path, traces: Path) -> None:
    from spatialiq_train.train.run import run_dapo_tight

    empty = tmp_path / "not_a_checkpoint"
    empty.mkdir()
    with pytest.raises(PreflightError, match=r"rl.init_from .*not_a_checkpoint: its model config does not load"):
        run_dapo_tight(_recipe(tmp_path, traces, f"rl.init_from={empty}"), tmp_path / "run")


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
    assert not (tmp_path / "run" / "sft").exists()  # refused before the warm-up


def test_standalone_phase_refuses_validation_sharing_its_split(tmp_path: Path, traces: Path) -> None:
    from spatialiq_train.core.splits import HeldOutError
    from spatialiq_train.train.phase import phase_datasets

    _leaky_val(traces, "warmup", shared=1, own=2)
    recipe = _recipe(tmp_path, traces, "data.eval_split=val", "sft.validation.every_steps=1", "logging.save_steps=1")
    with pytest.raises(HeldOutError, match=r"shares 1 of its 3 structures with training split 'warmup'"):
        phase_datasets(recipe, "sft", None, None)
    _leaky_val(traces, "rl", shared=0, own=0)
    (traces / "val.jsonl").write_text((traces / "rl.jsonl").read_text().replace('"rl-', '"val-'))
    train, val = phase_datasets(recipe, "sft", None, None)  # held out: passes
    assert len(train) == 4 and len(val) == 4
