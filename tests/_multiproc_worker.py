"""Worker for tests/test_multiprocess.py, run by `accelerate launch` on every rank: SFT on the tiny model, export,
then RL with dynamic sampling from the SFT export. Each rank writes `rank<r>.json` under --out with its weight
digests after each phase and its dynamic-sampling refill log; rank 0 also leaves the phases' metrics.jsonl.

    accelerate launch --config_file recipes/accelerate/ddp_2cpu.yaml tests/_multiproc_worker.py \
        --model DIR --data ROOT --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

G = 4
SFT_STEPS = 3
RL_STEPS = 2


def parity_reward(completions, answer, **kwargs):  # noqa: ANN001, ANN201
    """Constant for answers that are not 1 mod 4 (zero-variance groups, dropped), alternating 0/1 otherwise."""
    return [0.5 if a % 4 != 1 else float(i % 2) for i, a in enumerate(answer)]


parity_reward.__name__ = "parity"


def overrides() -> list[str]:
    return [f"sft.optimizer.max_steps={SFT_STEPS}", "sft.optimizer.global_batch_size=4",
            f"rl.optimizer.max_steps={RL_STEPS}",
            f"rl.num_generations={G}", "rl.prompts_per_step=4",
            "rl.dynamic_sampling.max_refill_rounds=2", "generation.max_completion_length=12",
            "logging.save_steps=100", "run.device=cpu"]


def main() -> None:
    import torch
    from _train_support import model_digest, tiny_recipe

    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.export import export_final
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.rl import RewardSetup, rl_phase
    from spatialiq_train.train.sft import sft_phase

    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args()
    torch.set_num_threads(1)
    recipe = tiny_recipe(overrides())
    traces = a.data / "traces"
    report: dict = {"rank": int(os.environ.get("RANK", "0")), "world": int(os.environ.get("WORLD_SIZE", "1"))}

    sft, processor = build_phase_trainer(sft_phase(), recipe, a.model, load_split(traces, "warmup", a.data, "sft"),
                                         a.out / "sft")
    sft.train()
    report["sft_digest"] = model_digest(sft.accelerator.unwrap_model(sft.model))
    report["distributed_type"] = str(sft.accelerator.distributed_type)
    init = export_final(sft, processor, a.out / "sft" / "final")

    rewards = RewardSetup([parity_reward], [1.0], [True])
    rl_data = load_split(traces, "rl", a.data, "rl")
    rl, _ = build_phase_trainer(rl_phase(rewards=rewards), recipe, str(init), rl_data, a.out / "rl")
    rl.train()
    report["rl_digest"] = model_digest(rl.accelerator.unwrap_model(rl.model))
    report["refill_log"] = rl.refill_log
    report["rl_answers"] = [int(x) for x in rl_data["answer"]]
    tmp = a.out / f".rank{report['rank']}.json.partial"
    tmp.write_text(json.dumps(report), encoding="utf-8")
    tmp.rename(a.out / f"rank{report['rank']}.json")


if __name__ == "__main__":
    from spatialiq_train.train.distributed import end_process_group

    main()
    end_process_group()  # as the train commands do: a live gloo group can abort the exit
