"""The resolved plan of a phase (`core.plan`, `core.resolve`): provenance, its record, one step budget on both engines,
and impossible batches refused before any work (issue 44, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _train_support import one_thread, tiny_recipe, write_traces

from spatialiq_train.core.batch import BatchError
from spatialiq_train.core.plan import from_record, plan_fields
from spatialiq_train.core.recipes import RecipeError
from spatialiq_train.core.resolve import Hardware, resolve, step_budget, steps_per_epoch
from spatialiq_train.nemo.recipe_values import nemo_plan
from spatialiq_train.nemo.recipe_values import step_budget as nemo_budget

one_thread()


def test_the_plan_records_every_value_with_its_source_and_reads_back() -> None:
    recipe = tiny_recipe(["rl.optimizer.learning_rate=1e-4"])
    plan = resolve(recipe, "rl", Hardware(gpu=False))
    s = plan.provenance
    assert set(s) == set(plan_fields(plan)) and set(s.values()) <= {"recipe", "default", "hardware"}
    assert s["optimizer.learning_rate"] == "recipe" and s["algorithm.num_iterations"] == "default"
    assert s["batch.micro_batch"] == s["generation.vllm"] == "hardware"
    assert s["execution.device"] == "recipe"  # tiny_cpu says run.device: cpu; auto leaves it to the hardware
    auto = resolve(tiny_recipe(["run.device=auto"]), "rl", Hardware(gpu=False)).provenance
    assert auto["execution.device"] == "hardware"
    assert plan.generation is not None and plan.generation.vllm is False  # the recipe asks, the CPU cannot
    assert from_record(json.loads(json.dumps(plan.record()))) == plan
    sft = resolve(recipe, "sft", Hardware(gpu=False))
    assert sft.generation is None and "generation.temperature" not in sft.fields()  # SFT has no rollouts


def _loop_steps(epochs: int, max_steps: int, per_epoch: int) -> int:
    """v0.7.0's loop: ``while epoch < max_num_epochs and steps < max_num_steps`` over epochs of whole batches."""
    steps = epoch = 0
    while epoch < epochs and steps < max_steps:
        for _ in range(per_epoch):
            steps += 1
            if steps >= max_steps:
                break
        epoch += 1
    return steps


@pytest.mark.parametrize(("sets", "rows"), [
    (["sft.optimizer.max_steps=400"], 128),  # step-bounded: 400 steps where v0.7.0 used to stop after 1 epoch (32)
    (["sft.optimizer.max_steps=-1", "sft.optimizer.num_train_epochs=3"], 30),  # epoch-bounded, 30 rows of 4: 7 a pass
    (["sft.optimizer.max_steps=5", "sft.optimizer.num_train_epochs=1"], 30),
])
def test_one_step_budget_on_both_engines(sets: list[str], rows: int) -> None:
    """TRL trains max_steps when set (it overrides the epochs), else ceil(epochs x whole batches per epoch); the
    generated NeMo-RL epochs/steps pair stops v0.7.0's loop at the same step."""
    recipe = tiny_recipe(sets)
    plan = nemo_plan(recipe, "sft", 1, False)
    epochs, max_steps = nemo_budget(plan)
    assert _loop_steps(epochs, max_steps, steps_per_epoch(plan, rows)) == step_budget(plan, rows)
    assert steps_per_epoch(plan, 30) == 7  # whole batches only: the 2-row tail is left to the next shuffle


def test_fractional_epochs_are_refused_on_nemo_rl() -> None:
    with pytest.raises(ValueError, match=r"num_train_epochs = 1.5: NeMo-RL v0.7.0 trains whole epochs"):
        nemo_budget(nemo_plan(tiny_recipe(["sft.optimizer.max_steps=-1", "sft.optimizer.num_train_epochs=1.5"]),
                              "sft", 1, False))


@pytest.mark.parametrize("override", ["sft.optimizer.global_batch_size=100000000000000000000",
                                      "rl.prompts_per_step=2000000", "rl.num_generations=5000",
                                      "sft.optimizer.max_steps=10000000000"])
def test_huge_values_are_refused_at_validation(override: str) -> None:
    with pytest.raises(RecipeError, match=override.split("=")[0]):
        tiny_recipe([override])


@pytest.fixture
def small_split(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for split in ("warmup", "rl"):
        write_traces(tmp_path, split, 3, rng, answer=lambda i: i)
    return tmp_path


@pytest.mark.parametrize(("sets", "message"), [
    (["sft.optimizer.global_batch_size=4"], r"sft.optimizer.global_batch_size = 4 sequences per step is larger than "
                                            r"the 'warmup' split, which has 3 rows"),
    (["sft.optimizer.global_batch_size=2", "data.max_examples=1"], r"which has 1 rows \(after data.max_examples"),
])
def test_a_global_batch_larger_than_the_split_is_refused_before_any_work(small_split: Path, sets: list[str],
                                                                         message: str) -> None:
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.sft import sft_phase

    recipe = tiny_recipe([f"data.traces_dir={small_split / 'traces'}", f"data.data_root={small_split}", *sets])
    with pytest.raises(BatchError, match=message):
        run_phase(sft_phase(), recipe, small_split / "out")
    assert not (small_split / "out").exists()  # nothing created


def test_prompts_per_step_larger_than_the_rl_split_refuses_the_two_phase_run(small_split: Path) -> None:
    from spatialiq_train.train.run import run_dapo_tight

    recipe = tiny_recipe([f"data.traces_dir={small_split / 'traces'}", f"data.data_root={small_split}",
                          "sft.optimizer.global_batch_size=2"])  # SFT fits; RL's 4 prompts do not
    with pytest.raises(BatchError, match=r"rl.prompts_per_step = 4 prompts per step is larger than the 'rl' split"):
        run_dapo_tight(recipe, small_split / "run")
    assert not (small_split / "run").exists()  # refused before the warm-up: no base/, no record
    draw = tiny_recipe([f"data.traces_dir={small_split / 'traces'}", f"data.data_root={small_split}",
                        "sft.optimizer.global_batch_size=2", "rl.prompts_per_step=2",
                        "rl.dynamic_sampling.batch_multiplier=2"])  # the draw is 2 x 2 prompts: 4 > 3 rows
    with pytest.raises(BatchError, match=r"x rl.dynamic_sampling.batch_multiplier 2"):
        run_dapo_tight(draw, small_split / "run")


def _torch_schedule(parts: list[dict] | None, steps: int) -> list[float]:
    """The factors v0.7.0's DTensor set-up gets from a generated ``policy.scheduler`` (SequentialLR of the parts)."""
    import torch

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    if parts is None:
        return [1.0] * steps
    *schedulers, last = parts
    built = [getattr(torch.optim.lr_scheduler, p["name"].rsplit(".", 1)[1])(opt, **p["kwargs"]) for p in schedulers]
    sched = built[0] if len(built) == 1 and "milestones" not in last else torch.optim.lr_scheduler.SequentialLR(
        opt, built, milestones=last["milestones"])
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize(("kind", "warmup", "start", "total"), [
    ("constant_with_warmup", 1, 0.0, 6),   # tiny_cpu's RL: one warm-up step from factor 0
    ("constant_with_warmup", 4, 0.0, 8),
    ("constant_with_warmup", 4, 0.1, 8),   # the DAPO-tight recipes' warm start at 0.1
    ("constant", 0, 0.0, 5),
])
def test_the_learning_rate_factor_is_the_same_at_every_step(kind: str, warmup: int, start: float, total: int) -> None:
    """TRL's factor per step (transformers' schedule, or the phase runner's warm start) against the generated NeMo-RL
    scheduler run through torch, step by step."""
    import transformers

    from spatialiq_train.nemo.config import lr_schedule
    from spatialiq_train.train.phase import warmup_factor

    if start > 0:
        trl = [warmup_factor(s, warmup, start) for s in range(total)]
    else:
        import torch

        opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        sched = transformers.get_scheduler(kind, opt, num_warmup_steps=warmup, num_training_steps=total)
        trl = []
        for _ in range(total):
            trl.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    nemo = _torch_schedule(lr_schedule(kind, warmup, total, start)[0], total)
    assert nemo == pytest.approx(trl, abs=1e-8), (trl, nemo)
