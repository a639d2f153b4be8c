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
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engines" / "nemo"))

from _learning import Setting, last_third_mean, rl_run, warm_up  # noqa: E402


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a t-interval across seeds (the interval is the mean alone for one seed)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def plot(runs: list[dict], out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    colours = {"rl": "tab:blue", "frozen": "tab:grey", "flipped": "tab:red"}
    for run in runs:
        ax.plot(range(1, len(run["reward"]) + 1), run["reward"], color=colours[run["variant"]], alpha=0.7,
                label=run["variant"] if run["seed"] == runs[0]["seed"] else None)
    ax.set_xlabel("RL step")
    ax.set_ylabel("mean total reward (0-1)")
    ax.set_title("NeMo-RL v0.7.0 grpo_train on the CPU: RL vs controls")
    ax.legend()
    path = out / "learning_nemo.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return path


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
    start = time.monotonic()
    warm = warm_up(args.out / "warmup")
    data_root, hf = warm.data_root, warm.hf
    warm_s = time.monotonic() - start
    runs, lifts = [], []
    variants = ("rl", "frozen", "flipped") if args.flipped else ("rl", "frozen")
    for seed in args.seeds:
        got = {v: rl_run(args.out / "runs", data_root, hf, setting, v, seed) for v in variants}
        runs.extend(got.values())
        lift = last_third_mean(got["rl"]["reward"]) - last_third_mean(got["frozen"]["reward"])
        lifts.append(lift)
        for v, r in got.items():
            print(f"seed {seed} {v:8s} reward/step " + " ".join(f"{x:.3f}" for x in r["reward"])
                  + f"  val acc {dict(sorted(r['val_accuracy'].items()))}", flush=True)
        print(f"seed {seed}: lift over frozen (last third) {lift:+.3f}", flush=True)
    mean, lo, hi = t_interval(lifts)
    wall = time.monotonic() - start
    print(f"lift over frozen: mean {mean:+.3f}, 95% t-interval [{lo:+.3f}, {hi:+.3f}] over {len(lifts)} seed(s); "
          f"min {min(lifts):+.3f}; wall {wall:.0f} s (warm-up {warm_s:.0f} s)")
    report = {"setting": setting.__dict__, "seeds": args.seeds, "lifts": lifts, "mean": mean, "interval": [lo, hi],
              "wall_s": wall, "warmup_s": warm_s,
              "runs": [{k: (str(v) if isinstance(v, Path) else v) for k, v in r.items() if k != "written"}
                       for r in runs]}
    (args.out / "learning_nemo.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    png = plot(runs, args.out)
    if png:
        print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
