"""DAPO dynamic sampling: the pure group filter, re-padding merged batches, and the trainer subclass really
dropping zero-variance groups and refilling from new prompts (tiny Qwen2.5-VL on CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _train_support import disjoint_capacity, one_thread, state_digest, tiny_model_dir, tiny_recipe, write_traces
from hypothesis import given
from hypothesis import strategies as st

from spatialiq_train.core.groups import filter_groups
from spatialiq_train.train.distributed import refill_indices, refill_order, sum_over_ranks
from spatialiq_train.train.dynamic_sampling import merge_outputs, select_rows

one_thread()


def test_filter_groups_keeps_only_varying_groups() -> None:
    rewards = [1, 1, 1, 1, 0, 1, 0, 0, 0.5, 0.5, 0.5, 0.5 + 1e-9, np.nan, 0.2, np.nan, np.nan]
    mask = filter_groups(rewards, 4)
    assert mask.tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [False] * 4  # nan group: one scored value
    assert filter_groups([np.nan, 0.0, 1.0, np.nan], 4).all()


def test_filter_groups_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="groups of 4"):
        filter_groups([0.0] * 6, 4)
    with pytest.raises(ValueError, match="group_size"):
        filter_groups([0.0, 1.0], 1)


@given(st.lists(st.lists(st.sampled_from([0.0, 0.1, 0.9, 1.0, float("nan")]), min_size=3, max_size=3),
                min_size=1, max_size=6))
def test_filter_groups_matches_definition(groups: list[list[float]]) -> None:
    mask = filter_groups([r for g in groups for r in g], 3)
    for i, g in enumerate(groups):
        scored = {r for r in g if not np.isnan(r)}
        assert bool(mask[3 * i]) == (len(scored) >= 2)
        assert len(set(mask[3 * i : 3 * i + 3].tolist())) == 1


@given(n_rows=st.integers(1, 40), n_groups=st.integers(1, 4), world=st.integers(1, 4), rounds=st.integers(1, 3),
       seed=st.integers(0, 2**31), step=st.integers(0, 10**6), gen=st.integers(0, 3))
def test_refill_draws_are_disjoint_over_ranks_and_rounds(n_rows: int, n_groups: int, world: int, rounds: int,
                                                         seed: int, step: int, gen: int) -> None:
    kw = {"seed": seed, "step": step, "generation": gen}
    draws = [refill_indices(n_rows, n_groups, round_=r, rank=k, world=world, **kw)
             for r in range(rounds) for k in range(world)]
    flat = [i for d in draws for i in d]
    assert all(len(d) == n_groups for d in draws) and all(0 <= i < n_rows for i in flat)
    if rounds <= disjoint_capacity(n_rows, n_groups, world):
        assert len(set(flat)) == len(flat)  # no prompt drawn twice: not by two ranks, not in two rounds
    else:  # the order wraps only after listing every row once
        assert set(flat[:n_rows]) == set(range(min(n_rows, len(flat))))
    # every rank computes the same order on its own: its slice is rank k's part of one shared sequence
    order = refill_order(n_rows, rounds * world * n_groups, seed, step, gen)
    assert flat == order[: len(flat)].tolist()
    assert draws == [refill_indices(n_rows, n_groups, round_=r, rank=k, world=world, **kw)
                     for r in range(rounds) for k in range(world)]  # deterministic


def test_refill_order_depends_on_seed_step_and_generation() -> None:
    base = refill_order(50, 50, seed=0, step=3).tolist()
    assert sorted(base) == list(range(50))
    assert base != refill_order(50, 50, seed=1, step=3).tolist()
    assert base != refill_order(50, 50, seed=0, step=4).tolist()
    assert base != refill_order(50, 50, seed=0, step=3, generation=1).tolist()
    with pytest.raises(ValueError, match="empty dataset"):
        refill_order(0, 4, seed=0, step=0)
    with pytest.raises(ValueError, match="rank 2 is not in a world of 2"):
        refill_indices(10, 2, seed=0, step=0, round_=0, rank=2, world=2)


def test_sum_over_ranks_single_process_and_state_digest() -> None:
    class One:
        num_processes = 1

    assert sum_over_ranks(One(), [1, 2.5]) == [1.0, 2.5]
    a = {"w": torch.arange(6, dtype=torch.float32).view(2, 3), "b": torch.zeros(2)}
    assert state_digest(a) == state_digest({"b": torch.zeros(2), "w": torch.arange(6.0).view(2, 3)})
    assert state_digest(a) != state_digest({**a, "b": torch.tensor([0.0, 1e-30])})
    assert state_digest(a) != state_digest({**a, "w": a["w"].view(3, 2)})


def _fake_output(prompt_len: int, comp_len: int, n: int, base: int) -> dict:
    prompt = torch.arange(base, base + n * prompt_len).view(n, prompt_len)
    comp = torch.arange(base + 500, base + 500 + n * comp_len).view(n, comp_len)
    return {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": comp,
        "completion_mask": torch.ones_like(comp),
        "advantages": torch.arange(n, dtype=torch.float32) + base,
        "num_items_in_batch": torch.tensor(n * comp_len),
        "mm_token_type_ids": torch.cat([torch.ones_like(prompt), torch.zeros_like(comp)], dim=1),
        "pixel_values": [torch.full((4, 3), float(base + i)) for i in range(n)],
        "num_images": [1] * n,
    }


def test_merge_outputs_repads_each_side() -> None:
    a = _fake_output(prompt_len=3, comp_len=2, n=2, base=0)
    b = _fake_output(prompt_len=5, comp_len=4, n=2, base=100)
    merged = merge_outputs([select_rows(a, [1]), select_rows(b, [0, 1])], pad_token_id=-7)
    assert merged["prompt_ids"].shape == (3, 5) and merged["completion_ids"].shape == (3, 4)
    assert merged["prompt_ids"][0].tolist() == [-7, -7, 3, 4, 5]  # left-padded, prompt ends next to the completion
    assert merged["prompt_mask"][0].tolist() == [0, 0, 1, 1, 1]
    assert merged["completion_ids"][0].tolist() == [502, 503, -7, -7]  # right-padded
    assert merged["completion_mask"][0].tolist() == [1, 1, 0, 0]
    assert merged["mm_token_type_ids"][0].tolist() == [0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert merged["advantages"].tolist() == [1.0, 100.0, 101.0]
    assert [float(p[0, 0]) for p in merged["pixel_values"]] == [1.0, 100.0, 101.0]
    with pytest.raises(KeyError, match="unknown_key"):
        merge_outputs([{**a, "unknown_key": torch.zeros(2)}, {**b, "unknown_key": torch.zeros(2)}], 0)


G = 4


def parity_reward(completions, answer, **kwargs):  # noqa: ANN001, ANN201
    """Constant for even answers (zero-variance groups), alternating 0/1 within the group for odd ones."""
    return [0.5 if a % 2 == 0 else float(i % 2) for i, a in enumerate(answer)]


parity_reward.__name__ = "parity"


@pytest.fixture(scope="module")
def ds_env(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from spatialiq_train.train.data import load_split

    root = tmp_path_factory.mktemp("ds")
    rng = np.random.default_rng(0)
    traces = write_traces(root, "rl", 6, rng, answer=lambda i: 2 * i + 1)  # all odd: every group varies
    write_traces(root, "even", 6, rng, answer=lambda i: 2 * i)  # all even: no group varies
    recipe = tiny_recipe(["rl.optimizer.max_steps=1", f"rl.num_generations={G}",
                          "rl.prompts_per_step=2",
                          "rl.dynamic_sampling.max_refill_rounds=2", "logging.save_steps=100"])
    model = tiny_model_dir()
    odd = load_split(traces, "rl", root, "rl")
    even = load_split(traces, "even", root, "rl")
    return recipe, model, odd, even, root


def _trainer(ds_env, dataset, out: Path):  # noqa: ANN001, ANN202
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.rl import RewardSetup, rl_phase

    recipe, model, *_ = ds_env
    trainer, _ = build_phase_trainer(rl_phase(rewards=RewardSetup([parity_reward], [1.0], [True])), recipe, model,
                                     dataset, out)
    trainer.model.train()
    return trainer


def test_trainer_drops_zero_variance_group_and_refills(ds_env, tmp_path: Path) -> None:  # noqa: ANN001
    _, _, odd, even, _ = ds_env
    trainer = _trainer(ds_env, odd, tmp_path / "a")
    inputs = [even[0]] * G + [odd[0]] * G  # first group constant, second varies
    out = trainer._generate_and_score_completions(inputs)
    m = trainer._metrics["train"]
    assert m["dynamic_sampling/dropped_groups"] == [1.0]
    assert m["dynamic_sampling/refill_rounds"] == [1.0]
    assert m["dynamic_sampling/kept_groups"] == [2.0] and m["dynamic_sampling/filler_groups"] == [0.0]
    (entry,) = trainer.refill_log
    assert entry["drawn"] == [refill_indices(len(odd), 2, seed=0, step=0, round_=0, rank=0, world=1)]
    assert out["completion_ids"].shape[0] == 2 * G and len(out["num_images"]) == 2 * G
    assert (out["advantages"].abs() > 0.5).all()  # only varying groups: +-1 after group scaling
    assert int(out["num_items_in_batch"]) == int(out["completion_mask"].sum())
    assert out["image_grid_thw"].shape[0] == 2 * G
    assert out["pixel_values"].shape[0] == int(out["image_grid_thw"].prod(-1).sum())


def test_the_draw_size_draws_more_prompts_per_generation(ds_env, tmp_path: Path) -> None:  # noqa: ANN001
    """rl.dynamic_sampling.batch_multiplier 2 (NeMo-RL's grpo.batch_multiplier): the first generation scores the
    step's 2 prompts and 2 more from the refill order; here both extra groups vary, so no refill round is needed."""
    _, _, odd, even, _ = ds_env
    trainer = _trainer(ds_env, odd, tmp_path / "m")
    trainer.batch_multiplier = 2
    out = trainer._generate_and_score_completions([even[0]] * G + [odd[0]] * G)  # one constant group of the two
    m = trainer._metrics["train"]
    assert m["dynamic_sampling/refill_rounds"] == [0.0] and m["dynamic_sampling/kept_groups"] == [2.0]
    assert m["dynamic_sampling/dropped_groups"] == [1.0]  # of the 4 groups generated at once, 2 kept, 1 dropped
    (entry,) = trainer.refill_log
    assert entry["drawn"] == [refill_indices(len(odd), 4, seed=0, step=0, round_=0, rank=0, world=1)[:2]]
    assert out["completion_ids"].shape[0] == 2 * G  # the step trains its global batch, not the draw


def test_trainer_fills_with_masked_groups_after_the_cap(ds_env, tmp_path: Path) -> None:  # noqa: ANN001
    _, _, _, even, _ = ds_env
    trainer = _trainer(ds_env, even, tmp_path / "b")  # refills can only draw constant groups
    out = trainer._generate_and_score_completions([even[1]] * (2 * G))
    m = trainer._metrics["train"]
    assert m["dynamic_sampling/refill_rounds"] == [2.0]  # the recipe's cap
    assert m["dynamic_sampling/kept_groups"] == [0.0] and m["dynamic_sampling/filler_groups"] == [2.0]
    assert m["dynamic_sampling/dropped_groups"] == [6.0]
    assert int(out["completion_mask"].sum()) == 0 and int(out["num_items_in_batch"]) == 0


def test_training_step_logs_dynamic_sampling_counts(ds_env, tmp_path: Path) -> None:  # noqa: ANN001
    from spatialiq_train.core.metrics import read_metrics

    _, _, odd, _, _ = ds_env
    trainer = _trainer(ds_env, odd, tmp_path / "c")
    trainer.train()
    rows = read_metrics(tmp_path / "c" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1]
    assert rows[0]["dynamic_sampling/kept_groups"] == 2.0 and rows[0]["dynamic_sampling/dropped_groups"] == 0.0
    assert rows[0]["reward/total/mean"] == pytest.approx(0.5)


def test_rl_trainer_rows_and_refills_come_at_the_recipe_pixel_budget(ds_env, tmp_path: Path) -> None:  # noqa: ANN001
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.rl import RewardSetup, rl_phase

    recipe, model, odd, *_ = ds_env
    upscaled = recipe.model_copy(update={"model": recipe.model.model_copy(update={"min_pixels": 112 * 112})})
    assert odd[0]["images"][0].size == (56, 56)
    trainer, _ = build_phase_trainer(rl_phase(rewards=RewardSetup([parity_reward], [1.0], [True])), upscaled, model,
                                     odd, tmp_path)
    assert trainer.train_dataset[0]["images"][0].size == (112, 112)  # what the refill draws read too
    assert len(trainer.train_dataset) == len(odd)
