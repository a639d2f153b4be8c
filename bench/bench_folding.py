"""Does DAPO-tight RL learn paper folding on the CPU? RL runs against frozen controls, scored on held-out
configurations (docs/folding.md). Run by hand.

Data (built under `--work` unless present): `spatialiq fold gen` train tasks (`--train`) and benchmark tasks
(`--heldout`): the benchmark split's configurations (folds and holes) are in no training split by construction, so
they are held out. Their plain traces train `recipes/tiny_cpu_folding.yaml`: one SFT warm-up on the warm-up part,
shared by every run; then per seed the recipe's RL phase twice from it through the same code
(`train.phase.run_phase`): the RL run and a control identical except `rl.optimizer.learning_rate=1e-12` (no weight
moves). The training-side lift is `spatialiq_train.core.learning`'s (RL minus control over the last third of the
steps, Student-t across seeds);
then each final checkpoint is sampled once per held-out task (transformers, greedy, the recipe's completion budget)
and scored with the paper's metrics (`eval.folding`), and each held-out number gets its paired lift with a Student-t
interval across seeds. Writes `WORK/folding_learning.json` and prints the summary.

    python bench/bench_folding.py --work /tmp/fold --seeds 0 1 2 -- rl.optimizer.max_steps=16
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "tiny_cpu_folding.yaml"
CONTROL_LR = "1e-12"
HELD_OUT = ("exact_match", "partial_accuracy", "parsed", "location", "unfolding_exact")

log = logging.getLogger("bench_folding")


def ensure_data(work: Path, train: int, heldout: int, groups: list[str]) -> tuple[Path, Path]:
    from data_gen.folding_gen import generate
    from data_gen.folding_traces import write_fold_traces

    data, traces = work / "data", work / "traces"
    generate(data, "train", train, 0, groups)
    generate(data, "benchmark", heldout, 0, groups)
    if not (traces / "rl.jsonl").is_file():
        write_fold_traces(data, traces, "plain")
    return data, traces


def recipe(overrides: list[str]) -> Any:
    from spatialiq_train.core.recipes import load_recipe

    return load_recipe(RECIPE, overrides)


def heldout_scores(model: Path, data: Path, max_new_tokens: int) -> dict[str, float]:
    """One greedy completion per benchmark task from ``model``, scored with the paper's metrics."""
    from data_gen.folding_gen import iter_tasks
    from eval.engines import make_engine
    from eval.folding import score_completions, task_requests, truth_of
    from eval.sample import SamplingConfig

    tasks = list(iter_tasks(data, "benchmark"))
    requests = task_requests(tasks, 1, 0)
    config = SamplingConfig(k=1, temperature=0.0, max_new_tokens=max_new_tokens, batch_size=8)
    engine = make_engine("transformers", model)
    texts: list[list[str]] = []
    for i in range(0, len(requests), config.batch_size):
        texts += engine.generate(requests[i : i + config.batch_size], config)
    rows = [{"id": r.view, "completion": t[0]} for r, t in zip(requests, texts, strict=True)]
    _, table = score_completions(truth_of([rec for _, rec in tasks]), rows)
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--train", type=int, default=400, help="train-split tasks (warm-up, RL and val parts)")
    p.add_argument("--heldout", type=int, default=48, help="benchmark-split tasks (held-out configurations)")
    p.add_argument("--groups", default="one_step,two_step,two_step_with_rotation")
    p.add_argument("overrides", nargs="*", help="recipe overrides for every phase (after --)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from spatialiq_train.core.learning import learning_summary, summary_lines, t_interval, total_reward_series
    from spatialiq_train.core.metrics import read_metrics
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.rl import rl_phase
    from spatialiq_train.train.sft import sft_phase

    data, traces = ensure_data(a.work, a.train, a.heldout, a.groups.split(","))
    common = [f"data.traces_dir={traces}", f"data.data_root={data}", "logging.save_steps=100000", *a.overrides]
    sft = run_phase(sft_phase(), recipe(common), a.work / "sft")
    rl_curves: dict[int, list[float]] = {}
    control_curves: dict[int, list[float]] = {}
    held: dict[str, dict[int, dict[str, float]]] = {"rl": {}, "control": {}}
    for seed in a.seeds:
        for variant, curves in (("rl", rl_curves), ("control", control_curves)):
            lr = [f"rl.optimizer.learning_rate={CONTROL_LR}"] if variant == "control" else []
            r = recipe([*common, f"run.seed={seed}", *lr])
            out = a.work / f"{variant}-seed{seed}"
            run_phase(rl_phase(), r, out, model_path=str(sft))
            curves[seed] = total_reward_series(read_metrics(out / "metrics.jsonl"), r.reward.weights)
            held[variant][seed] = heldout_scores(out / "final", data, r.generation.max_completion_length)
    summary = learning_summary(rl_curves, control_curves)
    lifts = {m: t_interval([held["rl"][s][m] - held["control"][s][m] for s in a.seeds]) for m in HELD_OUT}
    result = {
        "recipe": str(RECIPE.relative_to(REPO)),
        "overrides": common,
        "seeds": a.seeds,
        "train_reward_lift": {
            "lift": summary.lift,
            "low": summary.low,
            "high": summary.high,
            "per_seed": [s.lift for s in summary.seeds],
        },
        "heldout": held,
        "heldout_lift": {m: dict(zip(("mean", "low", "high"), v, strict=True)) for m, v in lifts.items()},
    }
    (a.work / "folding_learning.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for line in summary_lines(summary, 0.0):
        print(line)
    for m, (mean, low, high) in lifts.items():
        print(f"held-out {m}: lift {mean:+.4f} [{low:+.4f}, {high:+.4f}] over {len(a.seeds)} seed(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
