"""Parity of one update: TRL's trainer and NeMo-RL v0.7.0's loss and training call take the same step.

From the same weights (the tiny Qwen2.5-VL), the same prompts (two views of ``tiny_cpu`` at its pixel budget), the
same fixed completions (four per view, of different lengths) and the same rewards, with the recipe's advantage
(``dapo_tight``'s: leave-one-out baseline and std) and loss (``rl.loss_type: dapo``: token-level, normalised over the
global batch's completion tokens, v0.7.0's ``token_level_loss``):

* TRL: ``DynamicSamplingGRPOTrainer`` (``build_phase_trainer``) scores the batch with its own
  ``_generate_and_score_completions`` (the generation call returns the fixed completions: the one stand-in, for
  sampling), then its ``compute_loss``, gradient clipping at ``max_grad_norm`` and its AdamW take one step;
* NeMo-RL: the same rows as v0.7.0's training data (prompt + completion tokens, the completion as the token mask,
  the images), the generated config's ``loss_fn`` as v0.7.0's ``ClippedPGLossFn``, and the CPU policy worker's
  ``train`` (``_cpu_workers.CpuPolicy``: v0.7.0's optimizer set-up from the generated ``policy`` section, its global
  batch and micro-batches) take one step.

The losses agree within :data:`LOSS_TOL`, every parameter's gradient before clipping and the optimizer step within
:data:`GRAD_RTOL` of its norm (a gradient scaled by 2 is off by 1/2 and fails: Adam's first step, about the learning
rate times the gradient's sign, would not show it), and every weight within :data:`WEIGHT_TOL` (measured: see the
assertions' messages; docs/training.md gives the numbers). Both steps run at the recipe's learning rate with a constant
schedule (``warmup_steps`` 0), so the comparison is of the update, not of the two schedulers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _nemo_support import tiny_model, write_config
from _train_support import write_traces

from spatialiq_train.core.advantages import advantages

G = 4
REWARDS = [1.0, 0.0, 0.0, 0.5, 0.2, 0.9, 0.1, 0.1]
"""Two views of four samples: the first has one correct sample (the case where the rules differ most)."""
COMPLETIONS = ["<answer>8</answer>", "I count 7 blocks. <answer>7</answer>", "<answer>9", "8",
               "<answer>5</answer>", "There are 8. <answer>8</answer>", "<answer>12</answer>", "blocks"]
SETS = ("model.tiny=false", "rl.num_generations=4", "rl.prompts_per_step=2",
        "rl.optimizer.warmup_steps=0", "rl.optimizer.lr_scheduler_type=constant", "rl.overlong.enabled=false",
        "rl.advantage.baseline=leave_one_out", "rl.advantage.std=leave_one_out", "rl.optimizer.max_steps=1",
        "logging.save_steps=100", "generation.max_completion_length=24")
LOSS_TOL = 1e-5
WEIGHT_TOL = 1e-5
GRAD_RTOL = 1e-3
"""Largest relative difference ||g_trl - g_nemo|| / ||g|| allowed for one parameter's gradient."""


def grad_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest relative difference between two engines' gradients of one parameter (0 where both are 0)."""
    worst = 0.0
    for name, ga in a.items():
        gb = b[name]
        scale = max(float(ga.norm()), float(gb.norm()))
        if scale > 1e-12:
            worst = max(worst, float((ga - gb).norm()) / scale)
    return worst


def _fixed_reward(completions: Any, **kwargs: Any) -> list[float]:
    return list(REWARDS)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from spatialiq_train.core.recipes import load_recipe
    from spatialiq_train.train.data import load_split

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("update")
    traces = write_traces(root, "rl", 2, np.random.default_rng(3), answer=lambda i: 8)
    sets = (f"data.traces_dir={traces}", f"data.data_root={root}",
            f"model.name_or_path={tiny_model()}", f"run.output_dir={root / 'run'}", *SETS)
    recipe = load_recipe("tiny_cpu", list(sets))
    _, written = write_config("tiny_cpu", "rl", root, root / "nemo", gpus=1, extra=SETS)
    return {"recipe": recipe, "data": load_split(traces, "rl", root, "rl"), "written": written, "root": root}


def _import_trl_trainer() -> None:
    """TRL's GRPO trainer module, imported with this stage's ``tests/engines`` folder off ``sys.path``: pytest puts it
    there (the stage's conftest), where the ``vllm`` test folder reads as a package without metadata, and TRL's
    ``is_vllm_available`` then fails on its version ('N/A'). vLLM is not installed in this environment."""
    import sys

    engines = Path(__file__).resolve().parents[1]
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != engines]
    try:
        import trl.trainer.grpo_trainer  # noqa: F401
    finally:
        sys.path[:] = saved


def _grads(model: Any) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _trl_step(setup: dict[str, Any]) -> tuple[dict[str, Any], float, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """TRL's batch (its own scoring of the fixed completions), its loss, its gradients before clipping, and the
    weights after one step."""
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.rl import RewardSetup, rl_phase

    _import_trl_trainer()
    trainer, processor = build_phase_trainer(rl_phase(rewards=RewardSetup([_fixed_reward], [1.0], [True])),
                                             setup["recipe"], str(tiny_model()), setup["data"], setup["root"] / "trl")
    trainer.model.train()
    tok = processor.tokenizer
    fixed = [tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for c in COMPLETIONS]

    def generate(prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: int) -> Any:
        assert len(prompt_ids) == len(fixed)
        return [list(ids) for ids in fixed], None

    trainer._generate_single_turn = generate
    out = trainer._generate_and_score_completions([setup["data"][0]] * G + [setup["data"][1]] * G)
    trainer.current_gradient_accumulation_steps = 1
    optimizer = trainer.create_optimizer()
    loss = trainer.compute_loss(trainer.model, out)
    loss.backward()
    grads = _grads(trainer.model)
    torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), setup["recipe"].rl.optimizer.max_grad_norm)
    optimizer.step()
    return out, float(loss.detach()), grads, {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def _nemo_rows(out: dict[str, Any], adv: np.ndarray) -> Any:
    """TRL's scored rows as v0.7.0's training data: prompt + completion right-padded, the completion as the token
    mask, the images as packed tensors, every sample in the loss."""
    from nemo_rl.data.multimodal_utils import PackedTensor
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    pm, cm = out["prompt_mask"].bool(), out["completion_mask"].bool()
    width = int((pm.sum(1) + cm.sum(1)).max())
    n = pm.shape[0]
    ids = torch.zeros((n, width), dtype=torch.long)
    token_mask = torch.zeros((n, width))
    types = torch.zeros((n, width), dtype=torch.long)
    mm = out.get("mm_token_type_ids")
    lengths = []
    for i in range(n):
        row = torch.cat([out["prompt_ids"][i][pm[i]], out["completion_ids"][i][cm[i]]])
        ids[i, : row.numel()] = row
        token_mask[i, int(pm[i].sum()) : row.numel()] = 1
        if mm is not None:
            full = torch.cat([pm[i], cm[i]])
            types[i, : row.numel()] = mm[i][full]
        lengths.append(row.numel())
    sizes = out["image_grid_thw"].prod(-1).tolist()
    pixels = list(torch.split(out["pixel_values"], sizes))
    data = BatchedDataDict({
        "input_ids": ids, "input_lengths": torch.tensor(lengths), "token_mask": token_mask,
        "sample_mask": torch.ones(n), "advantages": torch.tensor(adv, dtype=torch.float32)[:, None].expand(n, width),
        "pixel_values": PackedTensor(pixels, dim_to_pack=0),
        "image_grid_thw": PackedTensor(list(torch.split(out["image_grid_thw"], 1)), dim_to_pack=0)})
    if mm is not None:
        data["mm_token_type_ids"] = types
    return data


def _nemo_step(setup: dict[str, Any], data: Any,
               monkeypatch: pytest.MonkeyPatch) -> tuple[float, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """v0.7.0's loss and training call on the rows: the loss, the gradients before clipping (read when the worker
    clips them), the weights after the step."""
    from _cpu_workers import CpuPolicy
    from nemo_rl.algorithms.loss.loss_functions import ClippedPGLossConfig, ClippedPGLossFn
    from nemo_rl.algorithms.utils import get_tokenizer

    written = setup["written"]
    processor = get_tokenizer(written["policy"]["tokenizer"], get_processor=True)
    policy = CpuPolicy(None, written["policy"], processor.tokenizer, processor)
    data["prev_logprobs"] = policy.get_logprobs(data)["logprobs"]
    data["generation_logprobs"] = data["prev_logprobs"].clone()
    data["reference_policy_logprobs"] = policy.get_reference_policy_logprobs(data)["reference_logprobs"]
    loss_fn = ClippedPGLossFn(ClippedPGLossConfig(**written["loss_fn"]))
    grads: dict[str, torch.Tensor] = {}
    clip = torch.nn.utils.clip_grad_norm_

    def spy(params: Any, *args: Any, **kwargs: Any) -> Any:
        grads.update(_grads(policy.model))
        return clip(params, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    result = policy.train(data, loss_fn, gbs=data.size)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    return (float(result["loss"].sum()), grads,
            {k: v.detach().clone() for k, v in policy.model.state_dict().items()})


def test_parity_of_one_update_trl_and_nemo_rl(setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.torch import load_file

    # TRL's trainer runs here inside NeMo-RL's environment (transformers 5.8.1, the container's), below the TRL
    # path's tested 5.17: the comparison is of the algorithm, so the version check is waived for this test only.
    monkeypatch.setenv("SPATIALIQ_ALLOW_UNTESTED_VERSIONS", "1")

    written = setup["written"]
    assert written["loss_fn"]["token_level_loss"] is True and written["grpo"]["use_leave_one_out_baseline"]
    assert written["policy"]["train_global_batch_size"] == 2 * G
    start = load_file(str(next(tiny_model().glob("*.safetensors"))))
    out, trl_loss, trl_grads, trl_weights = _trl_step(setup)
    want = advantages(REWARDS, G, "leave_one_out", "leave_one_out")
    assert out["advantages"].numpy() == pytest.approx(want, abs=1e-6)  # the recipe's advantages on TRL
    nemo_loss, nemo_grads, nemo_weights = _nemo_step(setup, _nemo_rows(out, want), monkeypatch)
    assert set(trl_weights) == set(nemo_weights)
    assert set(trl_grads) == set(nemo_grads) and len(trl_grads) > 10
    gap = grad_gap(trl_grads, nemo_grads)
    doubled = grad_gap({k: 2 * v for k, v in trl_grads.items()}, nemo_grads)
    print(f"gradients: largest relative difference {gap:.3g} ({len(trl_grads)} parameters); at 2x: {doubled:.3g}")
    assert gap < GRAD_RTOL < doubled, (gap, doubled)  # per parameter, before clipping: a 2x gradient fails
    moved = max(float((trl_weights[k] - start[k]).abs().max()) for k in start if k in trl_weights)
    diff = max(float((trl_weights[k] - nemo_weights[k]).abs().max()) for k in trl_weights)
    detail = f"loss TRL {trl_loss:.8f} NeMo-RL {nemo_loss:.8f}; largest weight change {moved:.3g}, largest " \
             f"difference between the engines {diff:.3g}"
    print(detail)
    assert moved > 1e-4, detail  # the step moved the weights (Adam's first step: about the learning rate per weight)
    assert abs(trl_loss - nemo_loss) < LOSS_TOL, detail
    assert diff < WEIGHT_TOL, detail
