"""Does NeMo-RL v0.7.0's own GRPO loop make the tiny model better? RL against a policy that cannot move, on the CPU.

Run by hand in the NeMo-RL engine environment (built by ``bash tests/engines/run.sh nemo``):

    PYTHONPATH=../shared/vendor/nemo-rl-v0.7.0:.:tests/engines/nemo RAY_AUTH_MODE=disabled \\
        .venv-nemo/bin/python bench/bench_learning_nemo.py --seeds 0 1 2 --out /tmp/learn-nemo

One SFT warm-up through ``sft_train`` (``spatialiq nemo sft``), then per seed the DAPO-tight RL phase through
``grpo_train`` (``spatialiq nemo rl``) and its controls (``tests/engines/nemo/_learning.py``): ``frozen`` (learning
rate 1e-12) and, with ``--flipped``, the advantages' sign flipped. Prints the mean reward per step of each run, the
validation accuracy on held-out views, and the lift of RL over the frozen control averaged over the last third of the
steps, per seed and as a mean with a 95% t-interval across seeds; writes ``learning_nemo.json`` and, when matplotlib
is installed, ``learning_nemo.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engines" / "nemo"))

from _learning import Setting, rl_run, warm_up  # noqa: E402
from _nemo_support import local_ray_head  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=Setting.steps)
    ap.add_argument("--lr", type=float, default=Setting.learning_rate)
    ap.add_argument("--generations", type=int, default=Setting.generations)
    ap.add_argument("--flipped", action="store_true", help="also run the sign-flipped control")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        print(f"error: --out {args.out} is not empty; give a new folder", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    setting = Setting(steps=args.steps, learning_rate=args.lr, generations=args.generations)
    with local_ray_head(args.out / "ray"):
        return run(args, setting)


def run(args: argparse.Namespace, setting: Setting) -> int:
    start = time.monotonic()
    warm = warm_up(args.out / "warmup")
    data_root, hf = warm.data_root, warm.hf
    warm_s = time.monotonic() - start
    from spatialiq_train.core.learning import learning_summary, summary_lines, write_curves_plot

    runs = []
    variants = ("rl", "frozen", "flipped") if args.flipped else ("rl", "frozen")
    for seed in args.seeds:
        got = {v: rl_run(args.out / "runs", data_root, hf, setting, v, seed) for v in variants}
        runs.extend(got.values())
        for v, r in got.items():
            print(f"seed {seed} {v:8s} reward/step " + " ".join(f"{x:.3f}" for x in r["reward"])
                  + f"  val acc {dict(sorted(r['val_accuracy'].items()))}"
                  + (f"  (stopped at the dynamic-sampling cap in step {r['stopped_at']})" if r["stopped_at"] else ""),
                  flush=True)
    by = {v: {r["seed"]: r["reward"] for r in runs if r["variant"] == v} for v in variants}
    summary = learning_summary(by["rl"], by["frozen"])
    wall = time.monotonic() - start
    print("\n".join(summary_lines(summary, 0.10)))
    if args.flipped:
        flipped = learning_summary(by["flipped"], by["frozen"])
        print("sign-flipped advantages vs frozen:\n" + "\n".join(summary_lines(flipped, 0.10)[1:]))
    print(f"wall {wall:.0f} s (warm-up {warm_s:.0f} s)")
    report = {"setting": setting.__dict__, "seeds": args.seeds, "lift": summary.lift,
              "interval": [summary.low, summary.high], "spread": summary.spread,
              "per_seed": [s.__dict__ for s in summary.seeds], "wall_s": wall, "warmup_s": warm_s,
              "runs": [{k: v for k, v in r.items() if k in ("variant", "seed", "reward", "val_accuracy", "stopped_at")}
                       for r in runs]}
    (args.out / "learning_nemo.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    png = write_curves_plot(args.out / "learning_nemo.png", {v: by[v] for v in variants},
                            "NeMo-RL v0.7.0 grpo_train on the CPU: RL vs its controls")
    print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
