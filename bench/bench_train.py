"""Throughput of one SFT step and one GRPO/DAPO step through the project's own trainers.

On a GPU: the Qwen2.5-VL-7B architecture with random weights (dimensions from its published config, nothing
downloaded), bf16, 448x448 views, the dapo_tight_7b recipe with short budgets. On CPU: the tiny offline model
with the tiny_cpu recipe. Reports per phase: seconds per step (median over the timed steps, the first step is
warm-up), tokens/s (TRL's `num_tokens`: prompt + completion tokens processed), peak memory, and MFU estimated
as 6 * parameters * tokens/s / peak FLOP/s (training FLOPs only; generation and the reference forward in the RL
step are counted in the time but not in the FLOPs, so RL MFU is a lower bound).

    python bench/bench_train.py                    # auto: 7B on GPU, tiny on CPU
    python bench/bench_train.py --arch tiny --steps 4 --out bench/results/train_cpu.json
    python bench/bench_train.py --lora             # if full fine-tuning plus the KL reference does not fit

Full fine-tuning of the 7B with AdamW and a bf16 reference model needs roughly 16 (weights) + 16 (grads) +
64 (fp32 Adam moments) + 16 (reference) GB before activations, so one 141 GB H200 is close to its limit.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "GB300": 2500.0, "B200": 2250.0, "A100": 312.0}
"""Dense bf16 peak TFLOP/s by device-name substring."""

log = logging.getLogger("bench_train")


def _write_traces(root: Path, n: int, side: int, rng: np.random.Generator) -> Path:
    from PIL import Image

    (root / "img").mkdir(parents=True, exist_ok=True)
    traces = root / "traces"
    traces.mkdir(exist_ok=True)
    for split in ("warmup", "rl"):
        lines = []
        for i in range(n):
            rel = f"img/{split}_{i}.png"
            Image.fromarray((rng.random((side, side, 3)) * 255).astype("uint8")).save(root / rel)
            messages = [
                {"role": "user", "content": [{"type": "image", "image": rel},
                                             {"type": "text", "text": "How many blocks are there?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": f"<answer>{i % 10}</answer>"}]},
            ]
            lines.append(json.dumps({"messages": messages, "answer": i % 10, "structure_id": f"{split}{i}"}))
        (traces / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return traces


def _step_timer() -> Any:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._t = 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            self.times.append(time.perf_counter() - self._t)

    return StepTimer()


def _peak_memory_gb(gpu: bool) -> float:
    import resource

    import torch

    if gpu:
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _phase_result(name: str, trainer: Any, timer: Any, n_params: int, peak: float | None, gpu: bool) -> dict:
    from spatialiq_train.train.logging import read_metrics

    rows = read_metrics(Path(trainer.args.output_dir) / "metrics.jsonl")
    tokens = [r["num_tokens"] for r in rows if "num_tokens" in r]
    per_step = np.diff([0.0, *tokens])[1:] if len(tokens) > 1 else np.array(tokens)
    times = timer.times[1:] if len(timer.times) > 1 else timer.times
    sec = statistics.median(times)
    tok_s = float(np.median(per_step)) / sec if len(per_step) else float("nan")
    mfu = 6 * n_params * tok_s / (peak * 1e12) if peak else None
    return {"phase": name, "s_per_step": sec, "tokens_per_step": float(np.median(per_step)), "tokens_per_s": tok_s,
            "peak_memory_gb": _peak_memory_gb(gpu), "mfu": mfu, "steps_timed": len(times)}


def _save_base_model(arch: str, gpu: bool, out: Path) -> tuple[int, Path, int, list[str]]:
    """Build the benchmarked model with random weights and save it with its processor under ``out``.

    Returns the parameter count, the recipe file, the image side and the recipe overrides of ``arch``.
    """
    import torch

    from spatialiq_train.tiny import QWEN25_VL_7B, build_model, build_processor, build_tokenizer

    tok = build_tokenizer()
    if arch == "7b":
        model = build_model(tok, dtype=torch.bfloat16, device="cuda" if gpu else "cpu", **QWEN25_VL_7B)
        recipe_file, side = REPO / "recipes" / "dapo_tight_7b.yaml", 448
        overrides = ["rl.num_generations=8", "rl.per_device_train_batch_size=8", "rl.gradient_accumulation_steps=1",
                     "rl.steps_per_generation=1", "generation.max_completion_length=256", "rl.use_vllm=false",
                     "sft.gradient_accumulation_steps=1", "sft.per_device_train_batch_size=4"]
    else:
        model = build_model(tok)
        recipe_file, side, overrides = REPO / "recipes" / "tiny_cpu.yaml", 112, []
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(str(out), safe_serialization=True)
    build_processor(tok).save_pretrained(str(out))
    return n_params, recipe_file, side, overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=["auto", "tiny", "7b"], default="auto")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--peak-tflops", type=float, default=None, help="Override the device's peak FLOP/s.")
    parser.add_argument("--out", type=Path, default=None, help="Write the results as JSON here.")
    parser.add_argument("--lora", action="store_true", help="Train LoRA adapters instead of all weights.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    import torch

    from spatialiq_train.recipes import load_recipe
    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.rl import build_rl_trainer
    from spatialiq_train.train.sft import build_sft_trainer

    gpu = torch.cuda.is_available()
    arch = ("7b" if gpu else "tiny") if args.arch == "auto" else args.arch
    if not gpu:
        torch.set_num_threads(1)
    device_name = torch.cuda.get_device_name() if gpu else "cpu"
    peak = args.peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in device_name), None)
    n = args.steps
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        n_params, recipe_file, side, overrides = _save_base_model(arch, gpu, root / "base")
        traces = _write_traces(root / "data", 32, side, np.random.default_rng(0))
        recipe = load_recipe(recipe_file, [*overrides, f"sft.max_steps={n + 1}", f"rl.max_steps={n + 1}",
                                           "logging.report_to=[]", "logging.save_steps=100000", "model.tiny=false",
                                           f"model.lora.enabled={str(args.lora).lower()}"])
        results = {"device": device_name, "arch": arch, "parameters": n_params, "peak_tflops": peak,
                   "lora": args.lora, "phases": []}
        for phase in ("sft", "rl"):
            timer = _step_timer()
            ds = load_split(traces, "warmup" if phase == "sft" else "rl", root / "data", phase)
            if gpu:
                torch.cuda.reset_peak_memory_stats()
            build = build_sft_trainer if phase == "sft" else build_rl_trainer
            kwargs = {"callbacks": [timer]}
            trainer, _ = build(recipe, str(root / "base"), ds, root / phase, **kwargs)
            trainer.train()
            results["phases"].append(_phase_result(phase, trainer, timer, n_params, peak, gpu))
            del trainer
            if gpu:
                torch.cuda.empty_cache()
    text = json.dumps(results, indent=2)
    print(text)  # noqa: T201 - a bench script reports on stdout
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
