"""Worker for tests/gpu/test_gpu_deepspeed.py, run by `accelerate launch` under DeepSpeed ZeRO-3: LoRA SFT on the
tiny model for two steps, then the project's export (adapters merged into a plain checkpoint).

    accelerate launch --config_file recipes/accelerate/zero3_1gpu.yaml tests/gpu/_zero3_worker.py \
        --model DIR --data ROOT --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    from _train_support import tiny_recipe

    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.export import export_final
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.sft import sft_phase

    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args()
    recipe = tiny_recipe(["run.device=cuda", "model.dtype=bfloat16", "sft.optimizer.max_steps=2",
                          "logging.save_steps=100",
                          "model.lora.enabled=true", "model.lora.r=4", "sft.optimizer.gradient_checkpointing=false"])
    ds = load_split(a.data / "traces", "warmup", a.data, "sft")
    trainer, processor = build_phase_trainer(sft_phase(), recipe, a.model, ds, a.out / "sft")
    trainer.train()
    final = export_final(trainer, processor, a.out / "final")
    if trainer.accelerator.is_main_process:
        info = {"deepspeed": bool(trainer.is_deepspeed_enabled),
                "zero_stage": trainer.accelerator.state.deepspeed_plugin.zero_stage
                if trainer.accelerator.state.deepspeed_plugin else None, "final": str(final)}
        (a.out / "worker.json").write_text(json.dumps(info), encoding="utf-8")


if __name__ == "__main__":
    from spatialiq_train.train.distributed import end_process_group

    main()
    end_process_group()  # as the train commands do: a live gloo group can abort the exit
