"""Worker for test_zero3_sft_export.py, run on every rank by `accelerate launch` under ZeRO-3 on the CPU: one LoRA
SFT step, then the export with the merge made to fail on the main rank. Each rank writes `rank<r>.txt` with the
error it raised, which shows that no rank is left waiting for the others.

    accelerate launch --config_file recipes/accelerate/zero3_2cpu.yaml _merge_failure_worker.py --model DIR \
        --data ROOT --out DIR
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def main() -> None:
    from spatialiq_train.core.recipes import load_recipe
    from spatialiq_train.train import export
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.phase import build_phase_trainer
    from spatialiq_train.train.sft import sft_phase

    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args()
    repo = Path(__file__).resolve().parents[3]
    recipe = load_recipe(repo / "recipes" / "tiny_cpu.yaml",
                         ["run.device=cpu", "sft.optimizer.max_steps=1", "sft.optimizer.global_batch_size=4",
                          "logging.save_steps=100", "model.lora.enabled=true", "model.lora.r=4"])
    trainer, processor = build_phase_trainer(sft_phase(), recipe, a.model,
                                             load_split(a.data / "traces", "warmup", a.data, "sft"), a.out / "sft")
    trainer.train()

    def broken_merge(*args: object, **kwargs: object) -> Path:
        raise RuntimeError("injected merge failure")

    export.merge_adapter = broken_merge  # only the main rank merges, so only it fails
    try:
        export.export_final(trainer, processor, a.out / "final", a.out / "adapter")
        outcome = "exported"
    except Exception as exc:  # the test reads which error each rank raised
        outcome = f"{type(exc).__name__}: {exc}"
    (a.out / f"rank{os.environ.get('RANK', '0')}.txt").write_text(outcome, encoding="utf-8")


if __name__ == "__main__":
    main()
