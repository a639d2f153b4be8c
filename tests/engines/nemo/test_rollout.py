"""One GRPO step's worth of real v0.7.0 code on our data, with vLLM replaced by fixed completions:

the data loader ``grpo.setup`` built (a real ``StatefulDataLoader`` worker running ``rl_collate_fn``), the
multimodal flattening (``PackedTensor``), the vLLM prompt formatter, ``create_env`` starting our environments as Ray
actors, ``calculate_rewards`` inside ``run_multi_turn_rollout``, reward shaping, the leave-one-out baseline and the
dynamic-sampling filter with the driver's per-view grouping, ``grpo.validate``; then an HF forward and backward of
the tiny model on the flattened batch with the assistant-only mask."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _nemo_support import ANSWERS, Placement, PlacementReached, write_all_traces, write_config

from reward.trl import make_trl_reward_funcs
from spatialiq_train.nemo import driver
from spatialiq_train.nemo.env import TRAIN_ENV, VAL_ENV
from spatialiq_train.nemo.grouping import per_view_groups

LONG = "<answer>{a}</answer>" + " 1" * 700
"""About 700 new tokens: inside the released overlong window (penalty only past 2048 - 512 tokens)."""


def completions_for(answer: int, group: int) -> list[str]:
    """Eight completions of one prompt: rewards vary, except in group 3 where all eight are the same."""
    if group == 3:
        return [f"<answer>{answer}</answer>"] * 8
    return [f"<answer>{answer}</answer>", f"<answer>{answer + 1}</answer>", f"{answer}", "<answer>x</answer>",
            LONG.format(a=answer), f"<answer>{answer + 3}</answer>", f"<answer>{answer}</answer>", ""]


class GenerationFake:
    """vLLM's place (it needs a GPU): prompts go through the real ``format_prompt_for_vllm_generation``; each
    sample's reply is the next fixed text, returned in the shape ``VllmGeneration.generate`` returns."""

    def __init__(self, tokenizer: Any, texts: list[str]) -> None:
        self.tokenizer, self.texts, self.prompts = tokenizer, list(texts), []

    def generate(self, data: Any, greedy: bool = False) -> Any:
        import torch
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict
        from nemo_rl.models.generation.vllm.utils import format_prompt_for_vllm_generation

        self.prompts.extend(format_prompt_for_vllm_generation(data))
        ids, lengths = data["input_ids"], data["input_lengths"]
        replies = [self.tokenizer.encode(self.texts.pop(0), add_special_tokens=False) + [self.tokenizer.eos_token_id]
                   for _ in range(ids.shape[0])]
        total = max(int(n) + len(r) for n, r in zip(lengths, replies, strict=True))
        out = torch.full((ids.shape[0], total), self.tokenizer.pad_token_id, dtype=torch.long)
        for i, (n, reply) in enumerate(zip(lengths.tolist(), replies, strict=True)):
            out[i, :n] = ids[i, :n]
            out[i, n:n + len(reply)] = torch.tensor(reply)
        gen = torch.tensor([len(r) for r in replies])
        return BatchedDataDict({"output_ids": out, "logprobs": torch.zeros(out.shape), "generation_lengths": gen,
                                "unpadded_sequence_lengths": lengths + gen, "truncated": torch.zeros_like(gen).bool()})

    def finish_generation(self) -> None:
        pass


@pytest.fixture(scope="module")
def rl_state(tmp_path_factory: pytest.TempPathFactory, ray_head: str) -> Any:
    """What the real ``grpo.setup`` built for the shipped 7B DAPO recipe on our traces, at GPU placement."""
    import nemo_rl.algorithms.grpo as grpo

    root = tmp_path_factory.mktemp("rollout")
    # 16 rows: with dynamic sampling the loader draws num_prompts_per_step x batch_multiplier (8 x 2, the released
    # draw, set here as the recipe's rl.dynamic_sampling.batch_multiplier) prompts per batch and drops the last
    # partial batch, so a split of 8 rows would give no batch at all
    data_root = write_all_traces(root / "data", rows=16)
    cfg, _ = write_config("dapo_tight_7b", "rl", data_root, root, extra=("rl.dynamic_sampling.batch_multiplier=2",))
    stop, real = Placement(), grpo.RayVirtualCluster
    grpo.RayVirtualCluster = stop
    try:  # the driver function itself, not through CliRunner: its captured streams close when it returns, and
        with pytest.raises(PlacementReached):  # Ray's log threads keep writing to the process's stdout after that
            driver.run("rl", cfg)
    finally:
        grpo.RayVirtualCluster = real
    yield stop.state
    import ray

    ray.shutdown()


def _envs(master: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    from nemo_rl.environments.utils import create_env

    return ({"spatialiq": create_env(TRAIN_ENV, master.env[TRAIN_ENV])},
            {"spatialiq": create_env(VAL_ENV, master.env[VAL_ENV])})


def _trl_rewards(weights: dict[str, float], texts: list[str], metadata: list[dict[str, Any]]) -> list[float]:
    funcs, ws = make_trl_reward_funcs(weights)
    columns = {k: [m[k] for m in metadata] for k in metadata[0]}
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    per_func = [f(prompts=None, completions=completions, **columns) for f in funcs]
    return [sum(w * s[i] for w, s in zip(ws, per_func, strict=True)) for i in range(len(texts))]


def test_a_grpo_step_on_our_data(rl_state: dict[str, Any], ray_head: str) -> None:
    import nemo_rl.algorithms.grpo as grpo
    import torch
    from nemo_rl.algorithms.reward_functions import apply_reward_shaping
    from nemo_rl.data.llm_message_utils import batched_message_log_to_flat_message
    from nemo_rl.data.multimodal_utils import PackedTensor
    from nemo_rl.experience.rollouts import run_multi_turn_rollout
    from nemo_rl.utils.timer import Timer

    master, tokenizer = rl_state["master_config"], rl_state["tokenizer"]
    g = master.grpo["num_generations_per_prompt"]
    batch = next(iter(rl_state["dataloader"]))  # a real worker process, rl_collate_fn
    assert batch.size == master.grpo["num_prompts_per_step"] * master.grpo["batch_multiplier"] == 16
    answers = [info["answer"] for info in batch["extra_env_info"]]
    assert sorted(answers) == sorted(ANSWERS * 2)
    repeated = batch.repeat_interleave(g)
    flat, _ = batched_message_log_to_flat_message(repeated["message_log"],
                                                  pad_value_dict={"token_ids": tokenizer.pad_token_id})
    assert isinstance(flat.get_multimodal_dict(as_tensors=False)["pixel_values"], PackedTensor)

    texts = [t for i, a in enumerate(answers) for t in completions_for(a, i)]
    fake = GenerationFake(tokenizer, texts)
    task_to_env, _ = _envs(master)
    repeated, metrics = run_multi_turn_rollout(fake, repeated, tokenizer, task_to_env,
                                               max_seq_len=master.policy["max_total_sequence_length"],
                                               max_rollout_turns=master.grpo["max_rollout_turns"])
    prompt = fake.prompts[0]
    assert prompt["prompt"].count("<|vision_start|><|image_pad|><|vision_end|>") == 1
    assert prompt["multi_modal_data"]["image"].size == (56, 56)  # already at the recipe's pixel budget
    want = _trl_rewards(master.env[TRAIN_ENV]["reward"], texts, list(repeated["extra_env_info"]))
    assert repeated["total_reward"].tolist() == pytest.approx(want, abs=1e-6)

    before = repeated["total_reward"].clone()
    shaped = apply_reward_shaping(repeated, master.grpo["reward_shaping"])
    assert shaped["total_reward"].tolist() == pytest.approx(before.tolist())  # ~700 tokens: inside the window
    # v0.7.0 groups samples by their prompt's token ids: our 16 views (different images, the same question, the
    # same image size) tokenise identically, so without the driver's per-view grouping they are ONE group.
    assert len(torch.unique(flat["token_ids"], dim=0)) == 1
    pixels = {np.asarray(im[0] if isinstance(im, list | tuple) else im).tobytes() for im in batch["vllm_images"]}
    assert len(pixels) == 16  # ... though their images all differ
    with per_view_groups(master, "leave_one_out", "leave_one_out"):  # what the driver installs (dapo_tight_7b)
        baseline, std = grpo.calculate_baseline_and_std_per_prompt(
            flat["token_ids"], shaped["total_reward"], torch.ones_like(before),
            leave_one_out_baseline=master.grpo["use_leave_one_out_baseline"],
            std_rewards=shaped.get("unshaped_total_reward"))
        kept, complete, _, _ = grpo.dynamic_sampling(shaped, std, baseline, 1, master, Timer())
    group3 = slice(3 * g, 4 * g)
    assert std[group3].abs().max() == 0  # group 3's eight completions agree: no spread
    assert (std.view(-1, g)[[i for i in range(16) if i != 3]] > 0).all()
    assert complete and kept.size == master.grpo["num_prompts_per_step"] * g
    views = [int(i) for i in kept["idx"]][::g]
    agreeing = int(batch["idx"][3])
    assert views == [int(i) for i in batch["idx"] if int(i) != agreeing][: master.grpo["num_prompts_per_step"]]
    loo = shaped["total_reward"].view(-1, g)
    expected = (loo.sum(1, keepdim=True) - loo) / (g - 1)  # each sample's baseline: the other samples of its view
    assert torch.allclose(baseline.view(-1, g), expected, atol=1e-6)

    _forward_backward(rl_state, shaped, master)


def _forward_backward(rl_state: dict[str, Any], batch: Any, master: Any) -> None:
    """The tiny model on the flattened rollout: a finite loss over the generated tokens only."""
    import torch
    from nemo_rl.algorithms.grpo import add_grpo_token_loss_masks_and_generation_logprobs
    from nemo_rl.data.llm_message_utils import batched_message_log_to_flat_message
    from transformers import AutoModelForImageTextToText

    tokenizer = rl_state["tokenizer"]
    logs = batch["message_log"][:8]
    add_grpo_token_loss_masks_and_generation_logprobs(logs)
    flat, lengths = batched_message_log_to_flat_message(
        logs, pad_value_dict={"token_ids": tokenizer.pad_token_id},
        make_sequence_length_divisible_by=master.policy["make_sequence_length_divisible_by"])
    mask = flat["token_loss_mask"].bool()
    first = flat["token_ids"][0][mask[0]]
    assert tokenizer.decode(first, skip_special_tokens=False).startswith(batch["message_log"][0][-1]["content"])
    model = AutoModelForImageTextToText.from_pretrained(master.policy["model_name"])
    media = flat.get_multimodal_dict(as_tensors=True)
    positions = torch.arange(flat["token_ids"].shape[1])[None, :]
    out = model(input_ids=flat["token_ids"], attention_mask=(positions < lengths[:, None]).long(),
                pixel_values=media["pixel_values"], image_grid_thw=media["image_grid_thw"])
    logp = torch.log_softmax(out.logits[:, :-1].float(), -1).gather(-1, flat["token_ids"][:, 1:, None])[..., 0]
    loss = -(logp * mask[:, 1:]).sum() / mask[:, 1:].sum()
    loss.backward()
    assert torch.isfinite(loss) and mask.sum() > 0
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(gr).all() for gr in grads)


def test_validation_is_exact_match_accuracy(rl_state: dict[str, Any], ray_head: str) -> None:
    from nemo_rl.algorithms.grpo import validate

    master, tokenizer = rl_state["master_config"], rl_state["tokenizer"]
    val_batch = next(iter(rl_state["val_dataloader"]))
    answers = [info["answer"] for info in val_batch["extra_env_info"]]
    texts = [f"<answer>{a}</answer>" if i % 4 else f"<answer>{a + 1}</answer>" for i, a in enumerate(answers)]
    _, val_to_env = _envs(master)
    metrics, _ = validate(GenerationFake(tokenizer, texts), rl_state["val_dataloader"], tokenizer, val_to_env,
                          step=0, master_config=master)
    assert metrics["accuracy"] == pytest.approx(sum(1 for i in range(len(texts)) if i % 4) / len(texts))


def test_reward_shaping_fires_on_the_dapo_paper_recipe(tmp_path_factory: pytest.TempPathFactory,
                                                       ray_head: str) -> None:
    """recipes/experiments/dapo_paper_7b.yaml: its 256-token overlong window sits inside the 1024-token budget, so
    the real set-up's config makes v0.7.0's ``apply_reward_shaping`` penalise a long answer, linearly from 768
    tokens to the full penalty at 1024."""
    import nemo_rl.algorithms.grpo as grpo
    import torch
    from nemo_rl.algorithms.reward_functions import apply_reward_shaping
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe

    root = tmp_path_factory.mktemp("paper")
    data_root = write_all_traces(root / "data", rows=16)
    recipe_file = SHIPPED_RECIPES / "experiments" / "dapo_paper_7b.yaml"
    cfg, _ = write_config(str(recipe_file), "rl", data_root, root)
    import ray

    stop, real = Placement(), grpo.RayVirtualCluster
    grpo.RayVirtualCluster = stop
    ray.shutdown()  # the module's set-up left a connection open; the driver makes its own
    try:
        with pytest.raises(PlacementReached):
            driver.run("rl", cfg)
    finally:
        grpo.RayVirtualCluster = real
        ray.shutdown()
    shaping = stop.state["master_config"].grpo["reward_shaping"]
    over = load_recipe(recipe_file).rl.overlong
    budget = over.max_response_length or load_recipe(recipe_file).generation.max_completion_length
    start = budget - over.buffer_length
    lengths = [100, start, start + over.buffer_length // 2, budget]
    batch = BatchedDataDict({
        "total_reward": torch.ones(len(lengths)),
        "message_log": [[{"role": "user", "token_ids": torch.ones(5, dtype=torch.long)},
                         {"role": "assistant", "token_ids": torch.ones(n, dtype=torch.long)}] for n in lengths]})
    shaped = apply_reward_shaping(batch, shaping)
    want = [1.0, 1.0, 1.0 - 0.5 * over.penalty, 1.0 - over.penalty]
    assert shaped["total_reward"].tolist() == pytest.approx(want, abs=1e-6)
    assert shaped["unshaped_total_reward"].tolist() == [1.0] * 4


def test_the_runs_seed_reaches_the_sampling() -> None:
    """The NeMo-RL learning runs of seeds 0-4 shared their first steps' rewards: the CPU generation worker re-seeded
    torch's generator (12345, for vLLM's dummy weights) after v0.7.0's set-up had seeded it with grpo.seed. It now
    draws those weights from a generator of its own: the state the run's seed set is the one sampling starts from,
    and two seeds sample differently."""
    import torch
    from _cpu_workers import CpuGeneration
    from _nemo_support import tiny_model

    states = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = torch.get_rng_state()
        CpuGeneration(None, {"model_name": str(tiny_model())})
        assert torch.equal(torch.get_rng_state(), expected), seed  # the worker's start leaves the run's generator
        states.append(torch.rand(4))
    assert not torch.equal(states[0], states[1])
