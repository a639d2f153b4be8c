"""Parts of bench/bench_train.py that need no trainer: the bench's trace files, the per-phase measurement from
the step timer and metrics.jsonl, the results table and the JSON writer."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import numpy as np


def cot_target() -> str:
    """An SFT-CoT target as the traces write it (every template field filled)."""
    from spatialiq_train.core.prompts import COT_TARGET_TEMPLATE

    return re.sub(r"\{\w+\}", "3", COT_TARGET_TEMPLATE.replace("{task1}", "blocks"))


def question() -> str:
    from spatialiq_train.core.prompts import TRAINING_CRITICAL_INSTRUCTION

    return TRAINING_CRITICAL_INSTRUCTION + "How many blocks are there in the structure?"


def write_traces(root: Path, splits: list[str], n: int, side: int, rng: np.random.Generator) -> Path:
    """Trace files for `splits`, `n` random `side` x `side` views each, the CoT prompt and target; every split has
    its own structures (the held-out check passes)."""
    from PIL import Image

    from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT

    (root / "img").mkdir(parents=True, exist_ok=True)
    traces = root / "traces"
    traces.mkdir(exist_ok=True)
    target = cot_target()
    for split in splits:
        lines = []
        for i in range(n):
            rel = f"img/{split}_{i}.png"
            Image.fromarray((rng.random((side, side, 3)) * 255).astype("uint8")).save(root / rel)
            messages = [
                {"role": "system", "content": [{"type": "text", "text": COT_SYSTEM_PROMPT}]},
                {"role": "user", "content": [{"type": "image", "image": rel}, {"type": "text", "text": question()}]},
                {"role": "assistant", "content": [{"type": "text", "text": target}]},
            ]
            lines.append(json.dumps({"messages": messages, "answer": 3, "structure_id": f"{split}{i}"}))
        (traces / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return traces


def recipe_splits(recipe: Any, phases: list[str]) -> list[str]:
    d = recipe.data
    names = [d.sft_split if p == "sft" else d.rl_split for p in phases]
    return sorted({*names, *([d.eval_split] if d.eval_split else [])})


def _peak_memory_gb(gpu: bool) -> float:
    import resource

    import torch

    if gpu:
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def measure(phase: str, out: Path, times: list[float], n_params: int, factor: int, peak: float | None,
            devices: int, gpu: bool) -> dict[str, Any]:
    """Median seconds and tokens per timed step (the first step is the warm-up), tokens/s, MFU, peak memory."""
    from spatialiq_train.core import throughput as tp
    from spatialiq_train.core.metrics import read_metrics

    rows = read_metrics(out / "metrics.jsonl")
    tokens = [r["train/num_tokens"] for r in rows if "train/num_tokens" in r]
    per_step = np.diff([0.0, *tokens])
    timed_t, timed_n = (times[1:], per_step[1:]) if len(times) > 1 else (times, per_step)
    sec = statistics.median(timed_t) if timed_t else float("nan")
    tok_step = float(np.median(timed_n)) if len(timed_n) else float("nan")
    rate = tok_step / sec if sec and np.isfinite(sec) else float("nan")
    gen = [r[tp.PERF_GENERATION_S] for r in rows[1:] if tp.PERF_GENERATION_S in r]
    result: dict[str, Any] = {
        "status": "ok", "s_per_step": sec, "tokens_per_step": tok_step, "tokens_per_s": rate,
        "tokens_per_s_per_gpu": rate / devices, "flops_factor": factor,
        "mfu": tp.mfu(factor, n_params, rate, peak, devices), "peak_memory_gb": _peak_memory_gb(gpu),
        "steps_timed": len(timed_t)}
    if phase == "rl" and gen:
        result["generation_s_per_step"] = statistics.median(gen)
        result["training_s_per_step"] = sec - statistics.median(gen)
    return result


def table(results: dict[str, Any]) -> str:
    """The per-phase results as a fixed-width table."""
    head = ["phase", "status", "micro x accum", "ckpt", "liger", "s/step", "tokens/s", "tok/s/GPU", "MFU", "peak GiB",
            "gen s"]
    lines = [f"{results['device']} | {results['arch']} | recipe {results['recipe']} | "
             f"{results['parameters'] / 1e6:,.1f} M parameters | peak {results['peak_tflops'] or '?'} TFLOP/s"]
    rows = []
    for r in results["phases"]:
        s = r.get("settings") or {}
        b = s.get("batch") or {}

        def num(key: str, fmt: str, row: dict = r) -> str:
            v = row.get(key)
            return format(v, fmt) if isinstance(v, int | float) and np.isfinite(v) else "-"

        mfu = f"{100 * r['mfu']:.1f} %" if isinstance(r.get("mfu"), float) else "-"
        rows.append([r["phase"], r.get("status", "?"), f"{b.get('micro_batch', '?')} x {b.get('accumulation', '?')}",
                     str((s.get("gradient_checkpointing") or {}).get("on", "?")),
                     str((s.get("liger_kernel") or {}).get("on", "?")), num("s_per_step", ".2f"),
                     num("tokens_per_s", ",.0f"), num("tokens_per_s_per_gpu", ",.0f"), mfu,
                     num("peak_memory_gb", ".1f"), num("generation_s_per_step", ".2f")])
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines += [fmt.format(*head), fmt.format(*["-" * w for w in widths]), *(fmt.format(*row) for row in rows)]
    lines += [f"{r['phase']}: {r['error']}" for r in results["phases"] if r.get("error")]
    lines += results.get("plan_lines", [])
    lines += [f"error: {results['error']}"] if results.get("error") else []
    return "\n".join(lines)


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
    tmp.rename(path)
