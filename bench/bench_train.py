"""Training throughput of one SFT step and one GRPO/DAPO step through the project's own trainers.

On a GPU: the Qwen2.5-VL-7B architecture with random weights (spatialiq_train.tiny.QWEN25_VL_7B, nothing
downloaded), bf16, at the dapo_tight_7b recipe's sequence lengths: 448x448 views (the recipe's max_pixels, 256
image tokens), the CoT system prompt and instruction, the SFT-CoT target, and RL completions of exactly
`generation.max_completion_length` tokens, with the recipe's batch shape (per-device batch, gradient accumulation,
steps per generation, group size). On CPU: the tiny offline model with the tiny_cpu recipe.

RL rollouts are synthetic by default (`--rollouts synthetic`): the trainer's generation call returns random
completions of the full budget, so the step times the RL *training* work (old-logp and reference forwards, policy
forward and backward, optimizer) at the recipe's lengths, not sampling; `--rollouts generate` samples with
transformers instead (slow at 1024 tokens). Dynamic sampling is off (random completions score the same).

Per phase: seconds per optimizer step (median over the timed steps, the first is warm-up), tokens/s (TRL's
`num_tokens`: prompt + completion tokens), peak memory, and MFU = F * parameters * tokens/s / peak FLOP/s with F = 6
for SFT and 6 + 2 (reference forward, beta > 0) + 2 (old-logp forward, when TRL computes it) for RL.

    python bench/bench_train.py                    # auto: 7B on GPU, tiny on CPU
    python bench/bench_train.py --arch tiny --steps 2 --out bench/results/train_cpu.json
    python bench/bench_train.py --dry-run          # no weights: the plan (parameters, lengths, FLOP factors)
    python bench/bench_train.py --lora             # if full fine-tuning plus the KL reference does not fit

Full fine-tuning of the 7B with AdamW and a bf16 reference model needs roughly 16 (weights) + 16 (grads) +
64 (fp32 Adam moments) + 16 (reference) GB before activations, so one 141 GB H200 is close to its limit; a phase
that runs out of memory is reported as such and the other phase still runs.
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
RECIPES = {"7b": REPO / "recipes" / "dapo_tight_7b.yaml", "tiny": REPO / "recipes" / "tiny_cpu.yaml"}
VIEW_SIDE = {"7b": 448, "tiny": 112}
FIXED = ["logging.report_to=[]", "logging.save_steps=100000", "model.tiny=false", "vllm.enabled=false",
         "rl.dynamic_sampling.enabled=false"]

log = logging.getLogger("bench_train")


def rl_flops_factor(beta: float, grad_accum: int, steps_per_generation: int | None, num_iterations: int,
                    vllm_is: bool = False) -> int:
    """FLOPs per parameter per token of one RL step: 6 (policy forward + backward), + 2 for the reference forward
    when beta != 0, + 2 for the old-logp forward TRL runs when generations are reused or vLLM's IS is on.
    `steps_per_generation` None means TRL's default, the gradient accumulation."""
    spg = grad_accum if steps_per_generation is None else steps_per_generation
    old_logps = grad_accum % (spg * num_iterations) != 0 or vllm_is
    return 6 + (2 if beta != 0 else 0) + (2 if old_logps else 0)


def mfu(flops_factor: int, n_params: int, tokens_per_s: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation; None without a known peak."""
    if not peak_tflops or not np.isfinite(tokens_per_s):
        return None
    return flops_factor * n_params * tokens_per_s / (peak_tflops * 1e12)


def cot_target() -> str:
    """An SFT-CoT target as the traces write it (every template field filled)."""
    import re

    from spatialiq_train.core.prompts import COT_TARGET_TEMPLATE

    return re.sub(r"\{\w+\}", "3", COT_TARGET_TEMPLATE.replace("{task1}", "blocks"))


def write_traces(root: Path, n: int, side: int, rng: np.random.Generator) -> Path:
    """`warmup` and `rl` trace splits of random `side` x `side` views with the CoT prompt and target."""
    from PIL import Image

    from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT, TRAINING_CRITICAL_INSTRUCTION

    (root / "img").mkdir(parents=True, exist_ok=True)
    traces = root / "traces"
    traces.mkdir(exist_ok=True)
    target = cot_target()
    for split in ("warmup", "rl"):
        lines = []
        for i in range(n):
            rel = f"img/{split}_{i}.png"
            Image.fromarray((rng.random((side, side, 3)) * 255).astype("uint8")).save(root / rel)
            question = TRAINING_CRITICAL_INSTRUCTION + "How many blocks are there in the structure?"
            messages = [
                {"role": "system", "content": [{"type": "text", "text": COT_SYSTEM_PROMPT}]},
                {"role": "user", "content": [{"type": "image", "image": rel}, {"type": "text", "text": question}]},
                {"role": "assistant", "content": [{"type": "text", "text": target}]},
            ]
            lines.append(json.dumps({"messages": messages, "answer": 3, "structure_id": f"{split}{i}"}))
        (traces / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return traces


def plan(arch: str, steps: int, lora: bool) -> dict[str, Any]:
    """What the run will do, without building weights: recipe, overrides, lengths, parameter count, FLOP factors."""
    from spatialiq_train.core.processor import tokens_for
    from spatialiq_train.core.recipes import load_recipe
    from spatialiq_train.tiny import QWEN25_VL_7B, build_model, build_tokenizer

    recipe = load_recipe(RECIPES[arch], [*FIXED, f"sft.optimizer.max_steps={steps + 1}",
                                         f"rl.optimizer.max_steps={steps + 1}",
                                         f"model.lora.enabled={str(lora).lower()}"])
    tok = build_tokenizer()
    model = build_model(tok, device="meta", **(QWEN25_VL_7B if arch == "7b" else {}))
    n_params = sum(p.numel() for p in model.parameters())
    side, r = VIEW_SIDE[arch], recipe.rl
    return {"arch": arch, "recipe": RECIPES[arch].name, "parameters": n_params, "view_side": side,
            "image_tokens": tokens_for(side, side, recipe.model.min_pixels, recipe.model.max_pixels),
            "sft_target_tokens": len(tok(cot_target())["input_ids"]),
            "rl_completion_tokens": recipe.generation.max_completion_length,
            "sft_batch": [recipe.sft.optimizer.per_device_train_batch_size,
                          recipe.sft.optimizer.gradient_accumulation_steps],
            "rl_batch": [r.optimizer.per_device_train_batch_size, r.optimizer.gradient_accumulation_steps,
                         r.steps_per_generation, r.num_generations],
            "flops_factor": {"sft": 6, "rl": rl_flops_factor(r.beta, r.optimizer.gradient_accumulation_steps,
                                                             r.steps_per_generation, r.num_iterations)},
            "recipe_obj": recipe}


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


def synthetic_rollouts(trainer: Any, length: int, vocab: int, seed: int = 0) -> None:
    """Replace the trainer's generation with random completions of exactly `length` ordinary tokens."""
    import types

    special = set(trainer.eos_token_ids) | {trainer._tokenizer.pad_token_id}
    ordinary = np.array([i for i in range(vocab) if i not in special and i >= 16])
    rng = np.random.default_rng(seed)

    def generate(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):  # noqa: ANN001, ANN202
        return [rng.choice(ordinary, size=length).tolist() for _ in prompt_ids], None

    trainer._generate_single_turn = types.MethodType(generate, trainer)


def _peak_memory_gb(gpu: bool) -> float:
    import resource

    import torch

    if gpu:
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def phase_result(name: str, output_dir: Path, times: list[float], n_params: int, factor: int,
                 peak: float | None, gpu: bool) -> dict:
    from spatialiq_train.core.metrics import read_metrics

    rows = read_metrics(output_dir / "metrics.jsonl")
    tokens = [r["train/num_tokens"] for r in rows if "train/num_tokens" in r]
    per_step = np.diff([0.0, *tokens])[1:] if len(tokens) > 1 else np.array(tokens)
    timed = times[1:] if len(times) > 1 else times
    sec = statistics.median(timed)
    tok_step = float(np.median(per_step)) if len(per_step) else float("nan")
    tok_s = tok_step / sec
    return {"phase": name, "status": "ok", "s_per_step": sec, "tokens_per_step": tok_step, "tokens_per_s": tok_s,
            "peak_memory_gb": _peak_memory_gb(gpu), "flops_factor": factor, "mfu": mfu(factor, n_params, tok_s, peak),
            "steps_timed": len(timed)}


def run_phase(phase: str, p: dict[str, Any], root: Path, rollouts: str, peak: float | None, gpu: bool) -> dict:
    """Train one phase for steps + 1 optimizer steps and measure it; out-of-memory is reported, not raised."""
    import torch

    from spatialiq_train.train.data import load_split
    from spatialiq_train.train.rl import build_rl_trainer
    from spatialiq_train.train.sft import build_sft_trainer

    recipe, timer = p["recipe_obj"], _step_timer()
    ds = load_split(root / "data" / "traces", "warmup" if phase == "sft" else "rl", root / "data", phase)
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    build = build_sft_trainer if phase == "sft" else build_rl_trainer
    trainer = None
    try:
        trainer, processor = build(recipe, str(root / "base"), ds, root / phase, callbacks=[timer])
        if phase == "rl" and rollouts == "synthetic":
            synthetic_rollouts(trainer, recipe.generation.max_completion_length, len(processor.tokenizer))
        trainer.train()
    except torch.OutOfMemoryError as exc:
        log.warning("%s: out of memory: %s", phase, str(exc).splitlines()[0])
        return {"phase": phase, "status": "out of memory", "peak_memory_gb": _peak_memory_gb(gpu)}
    finally:
        del trainer
    return phase_result(phase, root / phase, timer.times, p["parameters"], p["flops_factor"][phase], peak, gpu)


def build_base(arch: str, out: Path, gpu: bool) -> None:
    """Random-weight model (bf16 on the GPU for the 7B) and the offline processor, saved under `out`."""
    import torch

    from spatialiq_train.tiny import QWEN25_VL_7B, build_model, build_processor, build_tokenizer

    tok = build_tokenizer()
    if arch == "7b":
        model = build_model(tok, dtype=torch.bfloat16, device="cuda" if gpu else "cpu", **QWEN25_VL_7B)
    else:
        model = build_model(tok)
    model.save_pretrained(str(out), safe_serialization=True)
    build_processor(tok).save_pretrained(str(out))
    del model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=["auto", "tiny", "7b"], default="auto")
    parser.add_argument("--steps", type=int, default=2, help="Timed optimizer steps per phase (plus one warm-up).")
    parser.add_argument("--phases", default="sft,rl", help="Comma-separated: sft, rl.")
    parser.add_argument("--rollouts", choices=["synthetic", "generate"], default="synthetic")
    parser.add_argument("--peak-tflops", type=float, default=None, help="Override the device's peak FLOP/s.")
    parser.add_argument("--out", type=Path, default=None, help="Write the results as JSON here.")
    parser.add_argument("--lora", action="store_true", help="Train LoRA adapters instead of all weights.")
    parser.add_argument("--dry-run", action="store_true", help="Print the plan (no weights built, no training).")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import torch

    gpu = torch.cuda.is_available()
    arch = ("7b" if gpu else "tiny") if args.arch == "auto" else args.arch
    if not gpu:
        torch.set_num_threads(1)
    device_name = torch.cuda.get_device_name() if gpu else "cpu"
    peak = args.peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in device_name), None)
    p = plan(arch, args.steps, args.lora)
    results: dict[str, Any] = {"device": device_name, "peak_tflops": peak, "lora": args.lora,
                               "rollouts": args.rollouts, "dry_run": args.dry_run,
                               **{k: v for k, v in p.items() if k != "recipe_obj"}, "phases": []}
    if not args.dry_run:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            build_base(arch, root / "base", gpu)
            write_traces(root / "data", 64, VIEW_SIDE[arch], np.random.default_rng(0))
            for phase in args.phases.split(","):
                results["phases"].append(run_phase(phase.strip(), p, root, args.rollouts, peak, gpu))
    text = json.dumps(results, indent=2)
    print(text)  # noqa: T201 - a bench script reports on stdout
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = args.out.with_name(args.out.name + ".partial")
        tmp_out.write_text(text + "\n")
        tmp_out.rename(args.out)
    return results


if __name__ == "__main__":
    phases = main()["phases"]
    raise SystemExit(0 if all(ph.get("status") == "ok" for ph in phases) else 1)
