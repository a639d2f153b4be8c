"""Reward throughput on realistic CoT completions, and the time to score 1 MB adversarial text.

Run by hand. Times are CPU seconds of this single-threaded process (``time.process_time``), so
the figures are per core even on a shared machine:

    python bench/bench_reward.py [--n 20000] [--repeats 3] [--seed 0]

Completions are the benchmark CoT template (~250 tokens, ~1,000 characters) filled with varied
ground truth; a third are perturbed (a wrong total, a wrong sub-task line, tags missing or doubled,
extra whitespace) so every branch of the rewards runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from reward import get_reward
from reward.registry import RewardFn
from spatialiq_train.core.tasks import fill_cot_template

GT_FIELDS = ("task2", "task3", "task4", "task5", "task6", "task7", "task8", "task9", "num_hidden_blocks", "task_main")


def sample_gt(rng: np.random.Generator) -> dict[str, object]:
    visible = int(rng.integers(3, 30))
    hidden = int(rng.integers(0, 6))
    gt: dict[str, object] = {f"task{i}": int(rng.integers(0, 12)) for i in range(2, 10)}
    gt.update(task1="blocks", task5=visible, num_hidden_blocks=hidden, task_main=visible + hidden)
    return gt


def perturb(text: str, gt: dict[str, object], rng: np.random.Generator) -> str:
    kind = int(rng.integers(0, 6))
    if kind == 0:
        return text.replace(f"<answer>{gt['task_main']}</answer>", f"<answer>{int(gt['task_main']) + 2}</answer>")
    if kind == 1:
        return text.replace("<answer>", "").replace("</answer>", "")
    if kind == 2:
        return text + "\n<answer>3</answer>"
    if kind == 3:
        return text.replace("<answer>", "<answer>  \n")
    if kind == 4:
        line3 = "layers in the object structure is: {}."
        return text.replace(line3.format(gt["task4"]), line3.format(99))
    return text[: len(text) // 2]  # truncated mid-trace


def make_batch(n: int, rng: np.random.Generator) -> tuple[list[str], dict[str, list[object]]]:
    completions, rows = [], []
    for _ in range(n):
        gt = sample_gt(rng)
        text = fill_cot_template(gt)
        if rng.random() < 1 / 3:
            text = perturb(text, gt, rng)
        completions.append(text)
        rows.append(gt)
    columns = {f: [r[f] for r in rows] for f in GT_FIELDS}
    columns["answer"] = columns["task_main"]
    return completions, columns


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Best CPU seconds of this process over ``repeats`` runs (per core, unaffected by other processes)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


ADVERSARIAL: dict[str, str] = {
    "open tags x125k": "<answer>" * 125_000,
    "spaces in one pair": "<answer>" + " " * 1_000_000 + "x</answer>",
    "1M digits in one pair": "<answer>" + "1" * 1_000_000 + "</answer>",
    "numbered lines + total": ("2) " + "9" * 100 + "\n") * 9_000 + "The total is " + "1 + " * 50_000,
    "think/close soup": "<think>" * 70_000 + "</answer>" * 50_000,
    "non-ASCII digits": "\u0663" * 1_000_000,
    "one valid pair at the end": "x" * 1_000_000 + "<answer>12</answer>",
    "1M newlines": "\n" * 1_000_000,
    "200k labelled lines": "2) 5\n" * 200_000,
    "55k answer pairs": "<answer>1</answer>" * 55_000,
    "500k CRLF": "\r\n" * 500_000,
}


def rewards_under_test() -> dict[str, RewardFn]:
    names = ("default", "format", "integer_distance", "exact_match", "stepwise", "consistency")
    fns = {n: get_reward(n) for n in names}
    fns["overlong(1024,256)"] = get_reward("overlong", max_len=1024, cache=256)
    return fns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="completions per timed batch")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats; the best is reported")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    completions, columns = make_batch(args.n, rng)
    mean_chars = sum(map(len, completions)) / len(completions)
    print(f"{args.n} completions, mean {mean_chars:.0f} chars (~{mean_chars / 4:.0f} tokens), best of {args.repeats}")
    print(f"{'reward':<20} {'completions/s':>14} {'us/completion':>14}")
    for name, fn in rewards_under_test().items():
        seconds = best_time(lambda fn=fn: fn(completions, **columns), args.repeats)
        print(f"{name:<20} {args.n / seconds:>14,.0f} {seconds / args.n * 1e6:>14.2f}")

    print(f"\n1 MB adversarial completions (ms per completion, best of {args.repeats})")
    fns = rewards_under_test()
    print(f"{'input':<28}" + "".join(f"{n[:12]:>13}" for n in fns))
    gt_cols = {f: [columns[f][0]] for f in GT_FIELDS} | {"answer": [12]}
    for label, text in ADVERSARIAL.items():
        cells = [best_time(lambda fn=fn, t=text: fn([t], **gt_cols), args.repeats) * 1e3 for fn in fns.values()]
        print(f"{label:<28}" + "".join(f"{c:>13.2f}" for c in cells))


if __name__ == "__main__":
    main()
