"""Training throughput of the SFT and RL phases of any shipped recipe, through the trainers a real run builds.

    python bench/bench_train.py --arch tiny --recipe dapo_tight_7b --steps 1      # CPU, the CI test
    python bench/bench_train.py --arch 7b --recipe dapo_tight_7b --steps 3        # one GPU (H100/H200)
    python bench/bench_train.py --arch 7b --dry-run                              # the plan, no weights

The model is random weights (nothing downloaded): `--arch tiny` the offline tiny Qwen2.5-VL, `--arch 7b` the
Qwen2.5-VL-7B architecture (`spatialiq_train.tiny.QWEN25_VL_7B`), bf16 on a GPU. Everything else is the recipe's
(`--recipe`, a shipped name or a path, plus trailing overrides): the global batch, its split over the processes
and the GPU efficiency settings (`train.plan`: micro-batch sized to memory, Liger kernels when installed, gradient
checkpointing only when the memory plan needs it), the optimizer, and validation. The trainers are built by the
phase runner's own `build_phase_trainer` on datasets loaded the way a run loads them (`phase.phase_datasets`): the
bench writes a small trace set with every split the recipe names (training splits and `data.eval_split`, disjoint
structures), so a recipe that validates gets its validation split and the trainer is built with it (validation
itself runs at the recipe's period, which the few timed steps do not reach; recorded per phase).

What differs from a run, and why: no checkpoint is written (a callback cancels every save, the final one
included; the bench counts `checkpoint-*` folders afterwards and reports them), nothing is exported; RL rollouts are
synthetic by default (`--rollouts synthetic`: random completions of exactly `generation.max_completion_length`
tokens, so the RL step times the training work at the recipe's lengths: old-logp and reference forwards, policy
forward and backward, optimizer; `--rollouts generate` samples with transformers instead), dynamic sampling and vLLM
are off (random completions score alike; vLLM is not timed here). Images are random views at 448 px (7b, the
recipes' pixel budget: 256 image tokens) or 112 px (tiny).

Per phase: the settings chosen, seconds per optimizer step (median over the timed steps; the first step is a
warm-up), tokens/s (TRL's `num_tokens`: prompt + completion tokens, no padding), MFU (`core.throughput`: 6 FLOPs per
parameter per token for SFT, 8 or 10 for RL), peak memory. A phase that fails (out of memory or any error) is
reported with its error and the other phase still runs (out of memory on a GPU is first retried at half the
micro-batch, twice at most, and the retries recorded: the memory plan is an estimate); the JSON is always written
(`--out`, default bench/results/train_<arch>_<recipe>.json), then a table is printed. Exit status 0 only when
every phase is ok.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere: the project's own package first
    sys.path.insert(0, str(REPO))

VIEW_SIDE = {"7b": 448, "tiny": 112}
ROWS_PER_SPLIT = 64
FIXED = ["logging.report_to=[]", "model.tiny=false", "vllm.enabled=false", "rl.dynamic_sampling.enabled=false"]
"""Overrides every bench run applies (and records): no reporting integrations, the bench's own random-weight model,
no vLLM, no dynamic sampling (synthetic rollouts score alike)."""

log = logging.getLogger("bench_train")

from bench_train_parts import (  # noqa: E402 - the bench folder is on sys.path when run as a script
    _peak_memory_gb,
    cot_target,
    measure,
    question,
    recipe_splits,
    table,
    write_json,
    write_traces,
)


def load_bench_recipe(recipe: str, steps: int, lora: bool, data: Path | None, extra: list[str]) -> Any:
    from spatialiq_train.core.recipes import load_recipe

    overrides = [*FIXED, f"sft.optimizer.max_steps={steps + 1}", f"rl.optimizer.max_steps={steps + 1}",
                 f"model.lora.enabled={str(lora).lower()}"]
    if data is not None:
        overrides += [f"data.traces_dir={data / 'traces'}", f"data.data_root={data}", "data.max_examples=null"]
    return load_recipe(recipe, [*overrides, *extra])


def plan(arch: str, recipe: Any, phases: list[str], gpu: bool, gpu_memory_gib: float | None = None) -> dict[str, Any]:
    """What the run will do, without weights: parameters, token lengths, and each phase's plan (`train.plan`);
    `gpu_memory_gib` plans for a GPU of that memory (a dry run's preview on any machine)."""
    import torch

    from spatialiq_train.core.memory_plan import ModelShape
    from spatialiq_train.core.processor import tokens_for
    from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT
    from spatialiq_train.tiny import QWEN25_VL_7B, build_model, build_tokenizer
    from spatialiq_train.train.plan import phase_plan

    tok = build_tokenizer()
    model = build_model(tok, device="meta", **(QWEN25_VL_7B if arch == "7b" else {}))
    n_params = sum(p.numel() for p in model.parameters())
    shape = ModelShape.from_config(model.config, n_params)
    side = VIEW_SIDE[arch]
    image = tokens_for(side, side, recipe.model.min_pixels, recipe.model.max_pixels)
    prompt_text = len(tok(COT_SYSTEM_PROMPT + question())["input_ids"]) + 16  # + chat-template tokens
    target = len(tok(cot_target())["input_ids"])
    completion = recipe.generation.max_completion_length
    lengths = {"sft": image + prompt_text + target, "rl": image + prompt_text + completion}
    device_bytes = float(torch.cuda.get_device_properties(0).total_memory) if gpu else None
    if gpu_memory_gib:
        gpu, device_bytes = True, gpu_memory_gib * 2**30
    plans: dict[str, Any] = {}
    for phase in phases:  # a phase whose plan is refused (an uneven split, say) fails alone, in run_phase
        try:
            plans[phase] = phase_plan(recipe, phase, gpu=gpu, shape=shape if gpu else None,
                                      device_bytes=device_bytes, tokens_per_sequence=lengths[phase])
        except Exception as exc:  # noqa: BLE001
            plans[phase] = exc
    from spatialiq_train.core import throughput as tp

    factors: dict[str, int | None] = {"sft": tp.flops_factor("sft"), "rl": None}
    if not isinstance(plans.get("rl"), Exception | None):
        b = plans["rl"].batch
        factors["rl"] = tp.rl_flops_factor_trl(recipe.rl.beta, b.accumulation, b.steps_per_generation,
                                               recipe.rl.num_iterations)
    return {"parameters": n_params, "view_side": side, "image_tokens": image, "prompt_text_tokens": prompt_text,
            "sft_target_tokens": target, "rl_completion_tokens": completion, "tokens_per_sequence": lengths,
            "flops_factor": factors, "plans": plans}


def _callbacks() -> tuple[Any, Any]:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._t = 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self._t)

    class NoSave(TrainerCallback):
        """Cancel every checkpoint save (periodic and final): a benchmark writes nothing it does not time."""

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            control.should_save = False
            return control

    return StepTimer(), NoSave()


def synthetic_rollouts(trainer: Any, length: int, vocab: int, seed: int = 0) -> None:
    """Replace the trainer's generation with random completions of exactly `length` ordinary tokens."""
    import types

    special = set(trainer.eos_token_ids) | {trainer._tokenizer.pad_token_id}
    ordinary = np.array([i for i in range(vocab) if i not in special and i >= 16])
    rng = np.random.default_rng(seed)

    def generate(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):  # noqa: ANN001, ANN202
        return [rng.choice(ordinary, size=length).tolist() for _ in prompt_ids], None

    trainer._generate_single_turn = types.MethodType(generate, trainer)


def _error(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:500]


def _halved(p: Any) -> Any:
    """The plan with half the micro-batch (twice the accumulation), for a retry after running out of memory."""
    import dataclasses

    b = p.batch
    return dataclasses.replace(p, batch=dataclasses.replace(b, micro_batch=b.micro_batch // 2,
                                                            accumulation=b.accumulation * 2,
                                                            micro_source="memory plan"))


def run_phase(phase: str, recipe: Any, info: dict[str, Any], root: Path, rollouts: str, peak: float | None,
              gpu: bool, oom_retries: int = 2) -> dict[str, Any]:
    """Build the phase's trainer as a run does, train steps + 1 optimizer steps, measure. Any failure is
    reported (status and error), never raised. Out of memory on a GPU: retried with half the micro-batch (the
    memory plan is an estimate), up to `oom_retries` times; the retries are recorded."""
    p = info["plans"][phase]
    retried: list[str] = []
    while True:
        result = _run_phase_once(phase, recipe, p, info, root, rollouts, peak, gpu)
        if result["status"] != "out of memory" or not gpu or len(retried) >= oom_retries or isinstance(p, Exception) \
                or p.batch.micro_batch < 2:
            break
        retried.append(f"micro-batch {p.batch.micro_batch}: {result['error']}")
        log.warning("%s: out of memory at micro-batch %d; retrying at %d", phase, p.batch.micro_batch,
                    p.batch.micro_batch // 2)
        p = _halved(p)
        import shutil

        shutil.rmtree(root / phase, ignore_errors=True)
    result["oom_retries"] = retried
    return result


def _run_phase_once(phase: str, recipe: Any, p: Any, info: dict[str, Any], root: Path, rollouts: str,
                    peak: float | None, gpu: bool) -> dict[str, Any]:
    import torch

    from spatialiq_train.core import throughput as tp
    from spatialiq_train.train import phase as phase_mod
    from spatialiq_train.train.rl import rl_phase
    from spatialiq_train.train.sft import sft_phase

    val = (recipe.sft if phase == "sft" else recipe.rl).validation
    result: dict[str, Any] = {
        "phase": phase, "settings": None if isinstance(p, Exception) else p.record(),
        "validation": (f"eval split '{recipe.data.eval_split}' loaded, every {val.every_steps} steps (not reached)"
                       if val.every_steps else "off in the recipe")}
    out = root / phase
    if isinstance(p, Exception):
        return {**result, "status": "failed", "error": _error(p), "checkpoints_written": []}
    timer, no_save = _callbacks()
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer = None
    try:
        spec = sft_phase() if phase == "sft" else rl_phase()
        train, evals = phase_mod.phase_datasets(p, None, None)
        trainer, processor = phase_mod.build_phase_trainer(spec, None, str(root / "base"), train, out, evals,
                                                           [timer, no_save], plan=p)
        if phase == "rl" and rollouts == "synthetic":
            synthetic_rollouts(trainer, recipe.generation.max_completion_length, len(processor.tokenizer))
        factor = (tp.flops_factor("sft") if phase == "sft" else tp.rl_flops_factor_trl(
            recipe.rl.beta, trainer.args.gradient_accumulation_steps, trainer.args.steps_per_generation,
            trainer.args.num_iterations))
        trainer.train()
        result.update(measure(phase, out, timer.times, info["parameters"], factor, peak, p.batch.world_size, gpu))
    except torch.OutOfMemoryError as exc:
        log.warning("%s: out of memory: %s", phase, _error(exc))
        result.update(status="out of memory", error=_error(exc), peak_memory_gb=_peak_memory_gb(gpu))
    except Exception as exc:  # noqa: BLE001 - a bench reports a failed phase and runs the other
        log.warning("%s failed:\n%s", phase, traceback.format_exc())
        result.update(status="failed", error=_error(exc), peak_memory_gb=_peak_memory_gb(gpu))
    finally:
        del trainer
        gc.collect()
        if gpu:
            torch.cuda.empty_cache()
    result["checkpoints_written"] = sorted(str(c.relative_to(root)) for c in out.glob("**/checkpoint-*"))
    return result


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
    gc.collect()
    if gpu:
        torch.cuda.empty_cache()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=["auto", "tiny", "7b"], default="auto",
                        help="auto: 7b on a GPU, tiny on the CPU.")
    parser.add_argument("--recipe", default="dapo_tight_7b", help="A shipped recipe name or a recipe YAML path.")
    parser.add_argument("--steps", type=int, default=2, help="Timed optimizer steps per phase (plus one warm-up).")
    parser.add_argument("--phases", default="sft,rl", help="Comma-separated: sft, rl.")
    parser.add_argument("--rollouts", choices=["synthetic", "generate"], default="synthetic")
    parser.add_argument("--peak-tflops", type=float, default=None, help="Override the device's peak TFLOP/s.")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON results (default bench/results/train_<arch>_<recipe>.json).")
    parser.add_argument("--lora", action="store_true", help="Train LoRA adapters instead of all weights.")
    parser.add_argument("--dry-run", action="store_true", help="Print the plan (no weights built, no training).")
    parser.add_argument("--gpu-memory-gib", type=float, default=None,
                        help="With --dry-run: plan for a GPU of this memory (e.g. 139.8 for an H200).")
    parser.add_argument("overrides", nargs="*", help="Recipe overrides KEY.PATH=VALUE (after the fixed ones).")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import torch

    from spatialiq_train.core import throughput as tp

    gpu = torch.cuda.is_available()
    arch = ("7b" if gpu else "tiny") if args.arch == "auto" else args.arch
    if not gpu:
        torch.set_num_threads(1)
    device_name = torch.cuda.get_device_name() if gpu else "cpu"
    peak = args.peak_tflops or tp.peak_tflops(device_name)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    stem = Path(args.recipe).stem
    out_json = args.out or REPO / "bench" / "results" / f"train_{arch}_{stem}.json"
    results: dict[str, Any] = {"device": device_name, "peak_tflops": peak, "arch": arch, "recipe": stem,
                               "steps_timed": args.steps, "lora": args.lora, "rollouts": args.rollouts,
                               "dry_run": args.dry_run, "fixed_overrides": FIXED, "overrides": args.overrides,
                               "parameters": 0, "phases": []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
            root = Path(tmp)
            recipe = load_bench_recipe(args.recipe, args.steps, args.lora, root / "data", args.overrides)
            info = plan(arch, recipe, phases, gpu, args.gpu_memory_gib if args.dry_run else None)
            results.update(parameters=info["parameters"],
                           **{k: v for k, v in info.items() if k not in ("plans", "parameters")})
            results["plans"] = {k: _error(v) if isinstance(v, Exception) else v.record()
                                for k, v in info["plans"].items()}
            results["plan_lines"] = [f"{k}: {_error(v)}" if isinstance(v, Exception) else v.describe()
                                     for k, v in info["plans"].items()]
            if not args.dry_run:
                rows = max(ROWS_PER_SPLIT, (args.steps + 1) * max(
                    recipe.sft.optimizer.global_batch_size or 1, recipe.rl.prompts_per_step or 1))
                write_traces(root / "data", recipe_splits(recipe, phases), rows, VIEW_SIDE[arch],
                             np.random.default_rng(0))
                build_base(arch, root / "base", gpu)
                for phase in phases:
                    results["phases"].append(run_phase(phase, recipe, info, root, args.rollouts, peak, gpu))
    except Exception as exc:  # noqa: BLE001 - the JSON is written whatever happened
        log.error("bench_train failed before or between phases:\n%s", traceback.format_exc())
        results["error"] = _error(exc)
    finally:
        write_json(out_json, results)
    print(json.dumps(results, indent=2, default=str))  # noqa: T201 - a bench script reports on stdout
    print("\n" + table(results))  # noqa: T201
    print(f"\nwritten: {out_json}")  # noqa: T201
    return results


if __name__ == "__main__":
    res = main()
    ok = not res.get("error") and (res["dry_run"] or all(ph.get("status") == "ok" for ph in res["phases"]))
    raise SystemExit(0 if ok else 1)
