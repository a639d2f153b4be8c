"""Time scoring of 3000 scenes x 10 sampled CoT completions with every metric and statistic (one core).

Run by hand: ``python bench/bench_eval.py [--scenes 3000] [--k 10]``. Synthetic completions: the
ground-truth CoT trace with random perturbations of sub-task lines and the final answer, some
unparseable. Reports the time to parse, to compute the metrics, and for a paired McNemar + BH
comparison against a second responder, in CPU seconds of this process (wall time beside it; on a shared
machine the wall time also counts other processes). The goal is at most 2 s in total.

``--sample`` times sampling instead: ``eval sample --engine transformers`` on the offline tiny Qwen2.5-VL
(``spatialiq_train.tiny``), ``--requests`` requests of ``--k`` samples with synthetic 224x224 views, drawn one request
per ``generate`` call (as before batching) and ``--batch-size`` requests per call (one left-padded batch),
alternating ``--repeats`` times; it prints completions per second (CPU and wall) of each, their medians and ratio,
and checks that both give the same completions.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from eval.compare import pairwise_mcnemar  # noqa: E402
from eval.completions import Completion  # noqa: E402
from eval.score import collect_predictions, first_sample_table, score_predictions  # noqa: E402
from spatialiq_train.core.dataset import View  # noqa: E402
from spatialiq_train.core.tasks import fill_cot_template  # noqa: E402
from spatialiq_train.core.views import LEAF_VIEWS  # noqa: E402


def _letters(n: int) -> str:
    return "".join(chr(ord("a") + int(d)) for d in str(n))


def synthetic(scenes: int, k: int, rng: np.random.Generator, unique: bool = False) -> tuple[list[View], dict]:
    out_scenes, completions = [], {}
    for s in range(scenes):
        t3, t4, hidden = int(rng.integers(2, 12)), int(rng.integers(1, 5)), int(rng.integers(0, 5))
        t5 = int(rng.integers(t3, t3 + 8))
        gt = {"object_type": "cube", "task1": "blocks", "task2": int(rng.integers(1, t3 + 1)), "task3": t3,
              "task4": t4, "task5": t5, "task6": 1, "task7": 2, "task8": min(hidden, 1), "task9": 1,
              "num_hidden_blocks": hidden, "task_main": t5 + hidden, "total_blocks": t5 + hidden,
              "num_columns": t3, "num_layers": t4}
        leaf = LEAF_VIEWS[s % 16]
        view = f"benchmark/level_1/sample_{s // 16 + 1:05d}/{leaf.relpath}"
        out_scenes.append(View(view, leaf, gt, Path(".")))
        for i in range(k):
            g = dict(gt)
            if rng.random() < 0.4:
                g["task5"] = t5 + int(rng.integers(-2, 3))
            if rng.random() < 0.3:
                g["num_hidden_blocks"] = max(0, hidden + int(rng.integers(-1, 2)))
            g["task_main"] = g["task5"] + g["num_hidden_blocks"] + (1 if rng.random() < 0.05 else 0)
            text = fill_cot_template(g) if rng.random() > 0.02 else "I am not sure."
            if unique:  # defeat the parse cache: every text distinct, numbers unchanged
                text = f"Sample {_letters(s * k + i)}.\n{text}"
            completions[(view, "task_main", i)] = Completion(view, "task_main", i, text)
    return out_scenes, completions


def _view_png(seed: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def bench_sampling(n_requests: int, k: int, batch: int, max_new_tokens: int, temperature: float, repeats: int) -> None:
    """Completions per second of the transformers engine, one request per call vs ``batch`` requests per call."""
    import torch

    from eval.engines import TransformersEngine
    from eval.sample import Request, SamplingConfig
    from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT
    from spatialiq_train.core.tasks import build_prompt
    from spatialiq_train.tiny import save_tiny

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        engine = TransformersEngine(save_tiny(Path(tmp) / "tiny", seed=0))
    prompt = build_prompt("task_main", "training")
    requests = [Request(f"view{i}", "task_main", prompt, COT_SYSTEM_PROMPT, (_view_png(i),), tuple(range(k)), 100 + i)
                for i in range(n_requests)]
    config = SamplingConfig(k=k, temperature=temperature, max_new_tokens=max_new_tokens, batch_size=batch)
    modes = {"one request per call": 1, f"{batch} requests per call": batch}
    rates: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    texts: dict[str, list[list[str]]] = {}
    for _ in range(repeats):
        for mode, size in modes.items():
            w0, t0 = time.perf_counter(), time.process_time()
            texts[mode] = [t for i in range(0, n_requests, size) for t in engine.generate(requests[i:i + size], config)]
            cpu, wall = time.process_time() - t0, time.perf_counter() - w0
            rates[mode].append((n_requests * k / cpu, n_requests * k / wall))
            print(f"  {mode:24s} {n_requests * k / cpu:7.1f} completions/s CPU  {n_requests * k / wall:7.1f} /s wall "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    med = {m: (statistics.median(c for c, _ in r), statistics.median(w for _, w in r)) for m, r in rates.items()}
    (a, b) = modes
    print(f"{n_requests} requests x k={k}, {max_new_tokens} new tokens, temperature {temperature}, medians of "
          f"{repeats}: {a} {med[a][0]:.1f}/s CPU {med[a][1]:.1f}/s wall; {b} {med[b][0]:.1f}/s CPU "
          f"{med[b][1]:.1f}/s wall; batched/one {med[b][0] / med[a][0]:.2f}x CPU {med[b][1] / med[a][1]:.2f}x wall")
    print(f"same completions both ways: {texts[a] == texts[b]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenes", type=int, default=3000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--unique", action="store_true", help="Make every completion text distinct (worst case).")
    parser.add_argument("--sample", action="store_true", help="Time transformers sampling on the tiny model instead.")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()
    if args.sample:
        bench_sampling(args.requests, args.k, args.batch_size, args.max_new_tokens, args.temperature, args.repeats)
        return
    scenes, completions = synthetic(args.scenes, args.k, np.random.default_rng(0), args.unique)
    best = {"parse": np.inf, "metrics": np.inf, "compare": np.inf}
    best_wall = np.inf
    for _ in range(args.repeats):
        w0, t0 = time.perf_counter(), time.process_time()
        preds = collect_predictions(scenes, completions, "from-trace", args.k)
        t1 = time.process_time()
        metrics = score_predictions(preds, "dapo-bench", "dependent_given_prerequisite")
        t2 = time.process_time()
        a = first_sample_table(preds, "a")
        b = first_sample_table(preds, "b")
        b.correct["main"] = np.roll(b.correct["main"], 7)
        pairwise_mcnemar({"a": a, "b": b, "c": a}, "main")
        t3 = time.process_time()
        best_wall = min(best_wall, time.perf_counter() - w0)
        best = {"parse": min(best["parse"], t1 - t0), "metrics": min(best["metrics"], t2 - t1),
                "compare": min(best["compare"], t3 - t2)}
    total = sum(best.values())
    oc = metrics["object_counting"]
    print(f"{args.scenes} scenes x {args.k} samples ({len(completions)} completions), best of {args.repeats}, "
          "CPU seconds:")
    print(f"  parse {best['parse']:.3f}  metrics {best['metrics']:.3f}  McNemar+BH {best['compare']:.3f}  "
          f"total {total:.3f}  (wall {best_wall:.3f})")
    unique = len({c.text for c in completions.values()})
    print(f"  {unique} distinct completion texts (identical texts are parsed once)")
    k = args.k
    print(f"  acc@1 {oc['acc@1']:.3f}  maj@{k} {oc[f'maj@{k}']:.3f}  pass@{k} {oc[f'pass@{k}']:.3f}")


if __name__ == "__main__":
    main()
