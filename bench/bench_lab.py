"""Speed of `spatialiq reward analyze`: 3000 views x 8 samples x 5 rewards, timed stage by stage.

Run by hand (times are CPU seconds of this single-threaded process, so per core even on a shared machine):

    python bench/bench_lab.py [--views 3000] [--k 8] [--rewards default,stepwise,consistency,format,exact_match]

Completions are the benchmark CoT template filled with each view's ground truth, half of them perturbed (a wrong
answer, a wrong line, an inconsistent total, tags removed, a bare answer tag), so every column has both kinds.
Stages: parsing the completions into the eval facts (``lab.table.build_table``), scoring the completions and the
probe suite with every reward and computing the summary (``lab.analyze.analyze``), writing the CSVs, the plots
and report.md (``lab.analyze.write_analysis``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from eval.completions import Completion
from spatialiq_train.core.dataset import View
from spatialiq_train.core.tasks import fill_cot_template
from spatialiq_train.core.views import LEAF_VIEWS, view_relpath
from spatialiq_train.lab.analyze import analyze, write_analysis
from spatialiq_train.lab.scoring import parse_reward_list
from spatialiq_train.lab.table import build_table


def sample_gt(rng: np.random.Generator) -> dict[str, object]:
    visible, hidden = int(rng.integers(3, 30)), int(rng.integers(0, 6))
    gt: dict[str, object] = {f"task{i}": int(rng.integers(0, 12)) for i in range(2, 10)}
    gt.update(task1="cubes", task5=visible, num_hidden_blocks=hidden, task_main=visible + hidden)
    return gt


def completion(gt: dict[str, object], rng: np.random.Generator) -> str:
    text = fill_cot_template(gt)
    main = int(gt["task_main"])  # type: ignore[call-overload]
    kind = int(rng.integers(0, 10))
    if kind == 0:
        return text.replace(f"<answer>{main}</answer>", f"<answer>{main + int(rng.integers(1, 4))}</answer>")
    if kind == 1:
        line = "layers in the object structure is: {}."
        return text.replace(line.format(gt["task4"]), line.format(99))
    if kind == 2:
        return text.replace(f"The total is {gt['task5']} +", f"The total is {int(gt['task5']) + 1} +")  # type: ignore[call-overload]
    if kind == 3:
        return text.replace("<answer>", "").replace("</answer>", "")
    if kind == 4:
        return f"<answer>{main + int(rng.integers(-2, 3))}</answer>"
    return text


def make_inputs(views: int, k: int, seed: int) -> tuple[list[View], dict]:
    rng = np.random.default_rng(seed)
    scenes, records = [], {}
    for v in range(views):
        leaf = LEAF_VIEWS[v % len(LEAF_VIEWS)]
        rel = view_relpath("benchmark", v // len(LEAF_VIEWS) + 1, leaf)
        gt = sample_gt(rng)
        scenes.append(View(rel, leaf, gt, Path("."), rel))
        for s in range(k):
            records[(rel, "task_main", s)] = Completion(rel, "task_main", s, completion(gt, rng))
    return scenes, records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--views", type=int, default=3000)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--rewards", default="default,stepwise,consistency,format,exact_match")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    scenes, records = make_inputs(args.views, args.k, args.seed)
    rewards = parse_reward_list(args.rewards)
    t0 = time.process_time()
    table = build_table(scenes, records, args.k)
    t1 = time.process_time()
    result = analyze(table, rewards)
    t2 = time.process_time()
    with tempfile.TemporaryDirectory() as out:
        write_analysis(result, out, {"bench": "bench_lab"})
    t3 = time.process_time()
    n = len(table.texts)
    print(f"{args.views} views x {args.k} samples = {n} completions, {len(rewards)} rewards "
          f"({len(result.columns)} columns), 7 probes + reference per view")
    print(f"parse (eval facts)        {t1 - t0:6.2f} s CPU")
    print(f"rewards + probes + stats  {t2 - t1:6.2f} s CPU")
    print(f"csv + plots + report      {t3 - t2:6.2f} s CPU")
    print(f"total                     {t3 - t0:6.2f} s CPU  ({n / (t3 - t0):,.0f} completions/s)")


if __name__ == "__main__":
    main()
