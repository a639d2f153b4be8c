"""Replay (`data.sources`): the per-batch quota rule against hand-computed batches and its bounds, a reproducible
order the same for any process count, the recipe's refusals, the TRL data path reading the mix in order, and the
NeMo-RL refusal."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _train_support import one_thread, tiny_model_dir, tiny_recipe, trace_row, write_traces

from spatialiq_train.core.mixing import batch_quotas, batches_for, mixed_order
from spatialiq_train.core.recipes import RecipeError, recipe_from_dict
from spatialiq_train.core.resolve import Hardware, resolve

one_thread()


def test_quotas_of_a_four_row_batch_at_80_20_by_hand() -> None:
    # ideal 3.2 / 0.8 rows: floors 3 / 0, one row left; credits (.2, .8) -> source 1 (reaches 1 first), then
    # (.4, .6) and (.6, .4) -> source 1, (.8, .2): both reach 1 next batch, the earlier source wins; (0, 1) -> 1
    assert batch_quotas([0.8, 0.2], 4, 5).tolist() == [[3, 1], [3, 1], [3, 1], [4, 0], [3, 1]]
    assert batch_quotas([2, 1, 1], 2, 4).tolist() == [[1, 1, 0], [1, 0, 1], [1, 1, 0], [1, 0, 1]]
    assert batch_quotas([1, 1], 8, 2).tolist() == [[4, 4], [4, 4]]


@pytest.mark.parametrize("weights,batch", [([0.8, 0.2], 16), ([5, 3, 1, 1], 7), ([0.45, 0.45, 0.1], 1),
                                           ([1, 2, 3, 4, 5, 6, 7], 10), ([0.999, 0.001], 3)])
def test_every_batch_holds_floor_or_ceiling_and_the_running_mix_stays_within_one_row(weights: list[float],
                                                                                     batch: int) -> None:
    quotas = batch_quotas(weights, batch, 200)
    share = [Fraction(w) / sum(map(Fraction, weights)) for w in weights]
    assert (quotas.sum(axis=1) == batch).all()
    for i, p in enumerate(share):
        assert set(quotas[:, i]) <= {math.floor(batch * p), math.floor(batch * p) + 1}
        running = np.cumsum(quotas[:, i])
        assert all(abs(Fraction(int(c)) - (b + 1) * batch * p) < 1 for b, c in enumerate(running))


def test_the_order_is_reproducible_and_each_batch_holds_its_quota() -> None:
    sizes, weights, batch = [10, 3, 50], [0.6, 0.3, 0.1], 5
    order = mixed_order(sizes, weights, batch, seed=7)
    assert order == mixed_order(sizes, weights, batch, seed=7)
    assert order != mixed_order(sizes, weights, batch, seed=8)
    n_batches = batches_for(10, weights, batch)
    assert n_batches == 4 and len(order) == n_batches * batch  # ceil(10 / (5 x 0.6))
    quotas = batch_quotas(weights, batch, n_batches)
    for b in range(n_batches):
        got = np.bincount([s for s, _ in order[b * batch:(b + 1) * batch]], minlength=3)
        assert got.tolist() == quotas[b].tolist()
    rows = {s: [r for t, r in order if t == s] for s in range(3)}
    assert sorted(rows[0][:10]) == list(range(10))  # the first source used once, in a seeded permutation
    assert sorted(rows[1][:3]) == sorted(rows[1][3:6]) == [0, 1, 2]  # a short source restarts in a new pass
    assert len(set(rows[2])) == len(rows[2])  # a long one is not repeated


def test_every_process_count_trains_step_s_on_batch_s() -> None:
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    order = mixed_order([12, 12], [0.75, 0.25], 8, seed=0)
    for processes, per_device in ((1, 8), (2, 2), (4, 1)):
        accumulation = 8 // (processes * per_device)
        shards = [list(BatchSamplerShard(BatchSampler(SequentialSampler(order), per_device, False), processes, p))
                  for p in range(processes)]
        for step in range(len(order) // 8):
            micro = range(step * accumulation, (step + 1) * accumulation)
            seen = sorted(i for shard in shards for m in micro for i in shard[m])
            assert seen == list(range(step * 8, (step + 1) * 8))


def _sources(*entries: tuple[str, float]) -> list[dict[str, object]]:
    return [{"traces_dir": d, "weight": w} for d, w in entries]


@pytest.mark.parametrize("sources,message", [
    (_sources(("a", 0.8), ("b", 0.0)), r"data.sources.1.weight: .*must be a finite number above 0"),
    (_sources(("a", 0.8), ("b", float("inf"))), r"data.sources.1.weight: .*finite"),
    (_sources(("a", 1.0)), r"data.sources lists one source"),
    (_sources(("a", 0.8), ("a", 0.2)), r"data.sources\[1\].traces_dir 'a' is listed twice"),
    (_sources(("b", 0.8), ("c", 0.2)), r"data.sources: no entry is data.traces_dir \('a'\)"),
])
def test_a_mixed_recipe_is_refused_naming_the_key(sources: list[dict[str, object]], message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        recipe_from_dict({"name": "x", "data": {"traces_dir": "a", "sources": sources}})


def _folder(root: Path, name: str, n: int, system: str | None, split: str = "warmup") -> Path:
    """A trace folder ``root/name/traces`` whose images lie under ``root/name`` (that source's data root)."""
    traces = write_traces(root / name, split, n, np.random.default_rng(0), answer=lambda i: i)
    rows = [trace_row(f"img/{split}_{i}.png", i, f"{name}-{i}", system) for i in range(n)]
    (traces / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return traces


def _mixed_recipe(own: Path, other: Path, steps: int = 2) -> Any:
    """own 3 : other 1 in global batches of 4; ``steps`` steps a phase (2: one pass over own's 6 rows)."""
    sources = [{"traces_dir": str(d), "weight": w, "data_root": str(d.parent)} for d, w in ((own, 3), (other, 1))]
    return tiny_recipe([f"data.traces_dir={own}", f"data.data_root={own.parent}", f"data.sources={json.dumps(sources)}",
                        "sft.optimizer.global_batch_size=4", f"sft.optimizer.max_steps={steps}",
                        f"rl.optimizer.max_steps={steps}"])


def test_a_step_budget_longer_than_a_pass_goes_on_to_fresh_passes(tmp_path: Path) -> None:
    from spatialiq_train.train.data import training_examples

    assert mixed_order([6, 2], [3, 1], 4, seed=0, n_batches=6)[:8] == mixed_order([6, 2], [3, 1], 4, seed=0)
    own, other = _folder(tmp_path, "own", 6, "sys"), _folder(tmp_path, "other", 2, "sys")
    rows = training_examples(resolve(_mixed_recipe(own, other, steps=6), "sft", Hardware(gpu=False)))
    assert len(rows) == 24  # one batch of 4 per step, not one pass of 2 batches read three times
    paths = [str(r["images"][0]) for r in rows]
    own_rows = [p for p in paths if Path(p).parent.parent.name == "own"]
    passes = [own_rows[k * 6:(k + 1) * 6] for k in range(3)]
    assert len(own_rows) == 18 and all(sorted(p) == sorted(passes[0]) for p in passes)  # each pass every row once
    assert len({tuple(p) for p in passes}) == 3  # in three different orders: a pass is not the first one again


def test_the_trl_path_reads_the_mix_in_order_and_refuses_other_kinds(tmp_path: Path) -> None:
    from datasets import Image, Sequence

    from spatialiq_train.core.traces import TraceError
    from spatialiq_train.train.data import load_training_split
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.sft import sft_phase

    own, other = _folder(tmp_path, "own", 6, "sys"), _folder(tmp_path, "other", 2, "sys")
    recipe = _mixed_recipe(own, other)
    dataset = load_training_split(resolve(recipe, "sft", Hardware(gpu=False)))
    paths = [ims[0]["path"] for ims in dataset.cast_column("images", Sequence(Image(decode=False)))["images"]]
    origin = [Path(p).parent.parent.name for p in paths]  # each source's images resolve under its own data_root
    assert len(origin) == 8 and [origin[b * 4:(b + 1) * 4].count("own") for b in range(2)] == [3, 3]
    assert sorted(p for p, o in zip(paths, origin, strict=True) if o == "own") == sorted(
        str(own.parent / f"img/warmup_{i}.png") for i in range(6))  # the run's own rows once each
    trainer, _ = build_phase_trainer(sft_phase(), recipe, tiny_model_dir(), dataset, tmp_path / "sft")
    assert list(trainer._get_train_sampler()) == list(range(8))  # steps read the batches in the mix's order

    plain = _folder(tmp_path, "plain", 2, None)
    with pytest.raises(TraceError, match=r"data.sources\[1\].traces_dir: .*holds plain traces but data.sources\[0\] "
                                         r"holds cot"):
        load_training_split(resolve(_mixed_recipe(own, plain), "sft", Hardware(gpu=False)))
    with pytest.raises(TraceError, match=r"data.sources\[1\].traces_dir: .*gone/traces is not a folder"):
        load_training_split(resolve(_mixed_recipe(own, tmp_path / "gone" / "traces"), "sft", Hardware(gpu=False)))


def test_a_resume_on_changed_images_of_a_replay_source_is_refused_naming_it(tmp_path: Path) -> None:
    """The phase's data record (``data.json``) holds each other source's images as it holds the main data's (here:
    no manifest, so the digest over the images its split uses); a resume whose source image changed is refused in
    one line naming ``data.sources[1]``, and the same data resumes (`core.run_folder.check_same_data`, what the TRL
    phase and the NeMo-RL driver call before anything is written)."""
    from PIL import Image

    from spatialiq_train.core.run_folder import DataChangedError, check_same_data, write_data_record

    own, other = _folder(tmp_path, "own", 6, "sys"), _folder(tmp_path, "other", 2, "sys")
    plan = resolve(_mixed_recipe(own, other), "sft", Hardware(gpu=False))
    out = tmp_path / "run"
    out.mkdir()
    write_data_record(out, check_same_data(out, plan, resuming=False))  # as the phase's first start
    record = json.loads((out / "data.json").read_text())
    assert [{k: v for k, v in s.items() if k != "images_sha256"} for s in record["sources"]] == [
        {"source": "data.sources[1]", "traces_dir": "traces", "data_root": "other", "images": 2}]
    assert check_same_data(out, plan, resuming=True) == record
    Image.new("RGB", (56, 56), (1, 2, 3)).save(tmp_path / "other" / "img" / "warmup_1.png")
    with pytest.raises(DataChangedError) as info:
        check_same_data(out, plan, resuming=True)
    said = str(info.value)
    assert "\n" not in said and said.count("recorded sha256") == 1  # the source alone: its own images unchanged
    assert (f"since this run started (data.sources[1].data_root (other) images of the split: recorded sha256 "
            f"{record['sources'][0]['images_sha256'][:12]} (2 images), now ") in said


def test_grpo_reads_the_mix_one_step_of_prompts_at_a_time(tmp_path: Path) -> None:
    from spatialiq_train.train.data import load_training_split
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.rl import rl_phase

    own, other = _folder(tmp_path, "own", 6, "sys", "rl"), _folder(tmp_path, "other", 2, "sys", "rl")
    recipe = _mixed_recipe(own, other)
    # rl.prompts_per_step = 4 prompts a step: 3 own, 1 other
    dataset = load_training_split(resolve(recipe, "rl", Hardware(gpu=False)))
    origin = [sid.split("-")[0] for sid in dataset["structure_id"]]
    assert [origin[b * 4:(b + 1) * 4].count("other") for b in range(2)] == [1, 1]
    trainer, _ = build_phase_trainer(rl_phase(), recipe, tiny_model_dir(), dataset, tmp_path / "rl")
    assert trainer.args.shuffle_dataset is False
    drawn = list(trainer._get_train_sampler())  # TRL's repeat sampler: each prompt num_generations times
    assert list(dict.fromkeys(drawn)) == list(range(8)) and drawn[:8] == [0] * 8


def test_nemo_rl_refuses_a_mixed_recipe_naming_the_key() -> None:
    from spatialiq_train.nemo.recipe_values import nemo_plan, refuse

    recipe = recipe_from_dict({"name": "x", "data": {"traces_dir": "a", "sources": _sources(("a", 1), ("b", 1))}})
    with pytest.raises(ValueError, match=r"data.sources = .*mixes trace folders by weight .* train this recipe with "
                                         r"`spatialiq train`"):
        refuse(nemo_plan(recipe, "rl", 1, False))


def _split_file(root: Path, split: str, ids: list[str]) -> Path:
    """``root/traces/<split>.jsonl`` with one CoT row per structure id (images under ``root/img``)."""
    traces = write_traces(root, split, len(ids), np.random.default_rng(1), answer=lambda i: i)
    rows = [trace_row(f"img/{split}_{i}.png", i, sid, "sys") for i, sid in enumerate(ids)]
    (traces / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return traces


def test_validation_is_held_out_of_every_source(tmp_path: Path) -> None:
    """A replay source whose training split holds a structure of the run's validation split is refused, naming the
    source's key, its file and the structure: by the phase runner, and by the two-phase run before it writes
    anything; a source that shares none passes."""
    from spatialiq_train.core.splits import HeldOutError
    from spatialiq_train.train.phase import phase_datasets
    from spatialiq_train.train.run import run_dapo_tight

    own, other = tmp_path / "own", tmp_path / "other"
    for split, ids in (("warmup", ["w0", "w1", "w2", "w3"]), ("rl", ["r0", "r1", "r2", "r3"]), ("val", ["v0", "v1"])):
        _split_file(own, split, ids)
    _split_file(other, "warmup", ["o0", "o1"])
    _split_file(other, "rl", ["o2", "v1"])  # a validation structure in the replayed RL rows
    sources = [{"traces_dir": str(d / "traces"), "weight": w, "data_root": str(d)} for d, w in ((own, 3), (other, 1))]
    recipe = tiny_recipe([f"data.traces_dir={own / 'traces'}", f"data.data_root={own}", "data.eval_split=val",
                          f"data.sources={json.dumps(sources)}", "sft.optimizer.global_batch_size=4",
                          "sft.validation.every_steps=2", "rl.validation.every_steps=2"])
    leak = r"data.sources\[1\].traces_dir: .*other/traces/rl.jsonl holds 1 of the 2 structures of the validation "
    leak += r"split .*own/traces/val.jsonl, e.g. v1: "
    _, val = phase_datasets(resolve(recipe, "sft", Hardware(gpu=False)), None, None)  # warm-up rows share none
    assert len(val) == 2
    with pytest.raises(HeldOutError, match=leak) as info:
        phase_datasets(resolve(recipe, "rl", Hardware(gpu=False)), None, None)
    assert "\n" not in str(info.value)
    with pytest.raises(HeldOutError, match=leak):
        run_dapo_tight(recipe, tmp_path / "run")
    assert not (tmp_path / "run").exists()
