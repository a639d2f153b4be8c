"""Does NeMo-RL v0.7.0's own GRPO loop make the tiny model better? RL against a policy that cannot move, on the CPU.

The NeMo-RL half of the learning benchmark (the TRL half is ``bench/bench_learning.py``). It starts from the same
SFT checkpoint and data as the TRL half, so the two engines are compared from one starting point:

    python bench/bench_learning.py --work /tmp/learning --seeds 0 1 2          # data, SFT warm-up, the TRL half
    PYTHONPATH=../shared/vendor/nemo-rl-v0.7.0:. RAY_AUTH_MODE=disabled \\
        .venv-nemo/bin/python bench/bench_learning_nemo.py --sft /tmp/learning/sft/final \\
        --data /tmp/learning/data-train --traces /tmp/learning/traces --seeds 0 1 2 --out /tmp/learn-nemo

(``.venv-nemo`` is built by ``bash tests/engines/run.sh --build-only nemo``.) Per seed, the RL phase of
``recipes/tiny_cpu.yaml`` runs through ``spatialiq nemo rl`` (the driver, v0.7.0's ``setup`` and ``grpo_train``) with
the CPU workers of ``tests/engines/nemo/_cpu_workers.py`` (the only stand-ins: GPU placement and vLLM), on the TRL
recipe's batch (4 prompts x 8 completions; the generated config keeps the paper's 8 prompts, overridden here), and
so does its control at learning rate 1e-12 (``frozen``); with ``--flipped`` also the run whose advantages have their
sign flipped. The analysis is the TRL half's (``spatialiq_train.core.learning``): the lift of the mean total reward
(0-1, unshaped) over the control, averaged over the last third of the steps, per seed with a t-interval over the
paired steps and across seeds with a t-interval. Writes ``learning_nemo.json`` and ``learning_nemo.png`` under
``--out`` and prints the summary and the wall time. Exit status 0 when every seed's lift reaches 0.10, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "engines" / "nemo")]

from _learning import Data, Setting, rl_run  # noqa: E402
from _nemo_support import local_ray_head  # noqa: E402

THRESHOLD = 0.10
"""Issue 26: every seed's lift must reach this."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft", type=Path, required=True, help="The SFT checkpoint (bench_learning.py's sft/final).")
    ap.add_argument("--data", type=Path, required=True, help="The dataset root (bench_learning.py's data-train).")
    ap.add_argument("--traces", type=Path, required=True, help="Its traces (bench_learning.py's traces).")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=Setting.steps)
    ap.add_argument("--lr", type=float, default=Setting.learning_rate)
    ap.add_argument("--flipped", action="store_true", help="also run the sign-flipped control")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    for flag, path in (("--sft", args.sft), ("--data", args.data), ("--traces", args.traces)):
        if not path.is_dir():
            ap.error(f"{flag} {path}: not a folder (run bench/bench_learning.py first; see --help)")
    if args.out.exists() and any(args.out.iterdir()):
        ap.error(f"--out {args.out} is not empty; give a new folder")
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(1)
    with local_ray_head(args.out / "ray"):
        return run(args, Setting(steps=args.steps, learning_rate=args.lr))


def run(args: argparse.Namespace, setting: Setting) -> int:
    from spatialiq_train.core.learning import learning_summary, summary_lines, write_curves_plot

    start = time.monotonic()
    data = Data(args.traces.resolve(), args.data.resolve())
    variants = ("rl", "frozen", "flipped") if args.flipped else ("rl", "frozen")
    runs = []
    for seed in args.seeds:
        for v in variants:
            t0 = time.monotonic()
            r = rl_run(args.out / "runs", data, args.sft.resolve(), setting, v, seed)
            runs.append(r)
            print(f"seed {seed} {v:8s} {time.monotonic() - t0:5.0f} s  reward/step "
                  + " ".join(f"{x:.3f}" for x in r["reward"])
                  + (f"  (stopped at the dynamic-sampling cap in step {r['stopped_at']})" if r["stopped_at"] else ""),
                  flush=True)
    by = {v: {r["seed"]: r["reward"] for r in runs if r["variant"] == v} for v in variants}
    summary = learning_summary(by["rl"], by["frozen"])
    wall = time.monotonic() - start
    lines = summary_lines(summary, THRESHOLD)
    flipped = learning_summary(by["flipped"], by["frozen"]) if args.flipped else None
    if flipped is not None:
        lines += ["sign-flipped advantages vs frozen:", *summary_lines(flipped, THRESHOLD)[1:]]
    lines.append(f"wall {wall:.0f} s, {len(args.seeds)} seeds x {len(variants)} RL phases of {setting.steps} steps")
    print("\n".join(lines))
    report = {"setting": setting.__dict__, "seeds": args.seeds, "threshold": THRESHOLD, "wall_s": wall,
              "summary": _asdict(summary), "flipped_summary": _asdict(flipped) if flipped else None,
              "curves": {v: by[v] for v in variants},
              "runs": [{k: r[k] for k in ("variant", "seed", "reward", "stopped_at")} for r in runs]}
    (args.out / "learning_nemo.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    labels = {"rl": "RL", "frozen": "control (lr 1e-12)", "flipped": "sign-flipped"}
    png = write_curves_plot(args.out / "learning_nemo.png", {labels[v]: by[v] for v in variants},
                            f"NeMo-RL v0.7.0 grpo_train on the CPU, tiny_cpu: RL vs control, {len(args.seeds)} seeds")
    print(f"plot: {png}")
    return 0 if summary.learned(THRESHOLD) else 1


def _asdict(obj: object) -> object:
    import dataclasses

    return dataclasses.asdict(obj)


if __name__ == "__main__":
    raise SystemExit(main())
