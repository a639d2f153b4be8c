"""Worker for tests/test_batch_invariance.py: one optimizer step of SFT and one of RL on the tiny model, as the
phases build their trainers, under the process count it is launched with (`python` alone: 1; `accelerate launch`
with recipes/accelerate/ddp_2cpu.yaml: 2) and the micro-batch given. RL generation is replaced by fixed completions,
a pure function of the prompt's image and the completion's index in its group (sampling may differ per rank; the
update may not). Each rank writes, under --out, `<phase>_rank<r>.json` (the rows of each micro-batch, fingerprinted,
in the order it trained them) and rank 0 `<phase>_grads.safetensors` (the gradients the optimizer step applies) and
`<phase>_weights.safetensors` (the weights after the step).

    python tests/_batch_invariance_worker.py --model DIR --data ROOT --out DIR --micro 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import types
from pathlib import Path
from typing import Any

G = 4
PROMPTS = 4
SFT_BATCH = 4


def fingerprint(values: Any) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()[:12]


def length_reward(completions, completion_ids, **kwargs):  # noqa: ANN001, ANN201
    """Longer fixed completions score higher: every group varies, so dynamic sampling drops none."""
    return [len(ids) / 10 for ids in completion_ids]


length_reward.__name__ = "length"


def fixed_completions(trainer: Any, log: list[list[str]]) -> None:
    """Completion j of a prompt: 4 + j ordinary tokens drawn from a generator seeded by the prompt's image and j."""
    import numpy as np

    vocab = len(trainer._tokenizer)
    special = set(trainer.eos_token_ids) | {trainer._tokenizer.pad_token_id}
    ordinary = np.array([i for i in range(16, vocab) if i not in special])

    def generate(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):  # noqa: ANN001, ANN202
        keys = [fingerprint(np.asarray(im[0] if isinstance(im, list) else im)) for im in images]
        log.append(keys)
        out = []
        for i, key in enumerate(keys):
            j = i % num_generations  # whole groups per process, consecutive (TRL's RepeatSampler)
            rng = np.random.default_rng([int(key, 16), j])
            out.append(rng.choice(ordinary, size=4 + j).tolist())
        return out, None

    trainer._generate_single_turn = types.MethodType(generate, trainer)


def record_rows(trainer: Any, log: list[list[str]]) -> None:
    """Fingerprint the unpadded token rows of every SFT micro-batch the trainer computes a loss on."""
    original = trainer.compute_loss

    def compute_loss(model, inputs, *args, **kwargs):  # noqa: ANN001, ANN202
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        log.append([fingerprint(row[m.bool()].cpu().numpy()) for row, m in zip(ids, mask, strict=True)])
        return original(model, inputs, *args, **kwargs)

    trainer.compute_loss = compute_loss


def grad_catcher(store: dict[str, Any]) -> Any:
    from transformers import TrainerCallback

    class Grads(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
            for name, p in model.named_parameters():
                if p.grad is not None:
                    store[name.removeprefix("module.")] = p.grad.detach().float().clone()

    return Grads()


def save(out: Path, name: str, rank: int, rows: list, trainer: Any, grads: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    if rank == 0:
        weights = {k: v.detach().float().contiguous().clone()
                   for k, v in trainer.accelerator.unwrap_model(trainer.model).state_dict().items()}
        save_file(weights, str(out / f"{name}_weights.safetensors"))
        save_file({k: v.contiguous() for k, v in grads.items()}, str(out / f"{name}_grads.safetensors"))
    plan = trainer.spatialiq_plan.batch
    report = {"rank": rank, "world": plan.world_size, "micro_batch": plan.micro_batch,
              "accumulation": plan.accumulation, "rows": rows, "steps": trainer.state.global_step}
    tmp = out / f".{name}_rank{rank}.json.partial"
    tmp.write_text(json.dumps(report), encoding="utf-8")
    tmp.rename(out / f"{name}_rank{rank}.json")


def main() -> None:
    import torch
    from _train_support import tiny_recipe

    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.rl import RewardSetup, rl_phase
    from spatialiq_train.train.sft import sft_phase

    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--micro", default="null", help="micro_batch_size of both phases (null: each process's share)")
    a = p.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    sets = [f"sft.optimizer.global_batch_size={SFT_BATCH}", f"sft.optimizer.micro_batch_size={a.micro}",
            "rl.optimizer.max_steps=1", f"rl.prompts_per_step={PROMPTS}", f"rl.num_generations={G}",
            f"rl.optimizer.micro_batch_size={a.micro}", "rl.optimizer.warmup_steps=0",
            "generation.max_completion_length=12", "logging.save_steps=100", "run.device=cpu"]
    recipe = tiny_recipe(["sft.optimizer.max_steps=1", *sets])
    traces = a.data / "traces"

    rows: list[list[str]] = []
    grads: dict[str, Any] = {}
    sft, _ = build_phase_trainer(sft_phase(), recipe, a.model, load_split(traces, "warmup", a.data, "sft"),
                                 a.out / f"sft{rank}", callbacks=[grad_catcher(grads)])
    record_rows(sft, rows)
    sft.train()
    save(a.out, "sft", rank, rows, sft, grads)

    # the epoch's tail: 6 rows at a global batch of 4 train one step of 4 rows in every configuration
    rows, grads = [], {}
    tail = tiny_recipe([*sets, "sft.optimizer.max_steps=-1", "sft.optimizer.num_train_epochs=1"])
    sft, _ = build_phase_trainer(sft_phase(), tail, a.model, load_split(traces, "warmup", a.data, "sft", limit=6),
                                 a.out / f"tail{rank}", callbacks=[grad_catcher(grads)])
    record_rows(sft, rows)
    sft.train()
    save(a.out, "tail", rank, rows, sft, grads)

    rows, grads = [], {}
    rewards = RewardSetup([length_reward], [1.0], [True])
    rl, _ = build_phase_trainer(rl_phase(rewards=rewards), recipe, a.model, load_split(traces, "rl", a.data, "rl"),
                                a.out / f"rl{rank}", callbacks=[grad_catcher(grads)])
    fixed_completions(rl, rows)
    rl.train()
    save(a.out, "rl", rank, rows, rl, grads)


if __name__ == "__main__":
    from spatialiq_train.train.distributed import end_process_group

    main()
    end_process_group()  # as the train commands do: a live gloo group can abort the exit
