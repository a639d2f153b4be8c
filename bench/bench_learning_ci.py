"""The spread of the CI learning test's statistic, from which its margin comes (tests/test_learning.py, MARGIN).

The test computes one number per run: the lift of the RL run's total reward over its frozen control, averaged over
the last third of the steps of `tests/test_learning.SETTING` (recipes/tiny_cpu.yaml's RL as shipped, 16 steps, on
the test's synthetic data), for RL seed 0; and the same for the run whose advantages' sign is flipped. This runs
that computation, with the test's own functions, for several RL seeds from the test's one SFT warm-up, and prints
the lifts, their mean and sample standard deviation and 3 x that deviation (the margin). Writes JSON to --out.

    python bench/bench_learning_ci.py --work /tmp/learning-ci --seeds 0 1 2 3 4 --out learning_ci.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import numpy as np
    from _train_support import one_thread
    from test_learning import MARGIN, SETTING, rl_series, warm_up

    from spatialiq_train.core.learning import learning_summary
    from spatialiq_train.core.weights import checkpoint_digest

    one_thread()
    t0 = time.perf_counter()
    a.work.mkdir(parents=True, exist_ok=True)
    warm = warm_up(a.work / "data")
    runs: dict[str, dict[int, list[float]]] = {"rl": {}, "control": {}, "flipped": {}}
    for seed in a.seeds:
        for variant in runs:
            runs[variant][seed] = rl_series(warm, a.work / f"seed{seed}" / variant, seed=seed,
                                            frozen=variant == "control", flip=variant == "flipped")
            print(f"seed {seed} {variant}: " + " ".join(f"{x:.3f}" for x in runs[variant][seed]), flush=True)
    rl = learning_summary(runs["rl"], runs["control"])
    flipped = learning_summary(runs["flipped"], runs["control"])
    sd = float(np.std([s.lift for s in rl.seeds], ddof=1)) if len(a.seeds) > 1 else 0.0
    record = {"setting": SETTING, "seeds": a.seeds, "sft_checkpoint_digest": checkpoint_digest(warm[2]),
              "rl_lifts": {s.seed: s.lift for s in rl.seeds}, "flipped_lifts": {s.seed: s.lift for s in flipped.seeds},
              "rl_mean": rl.lift, "rl_sd": sd, "three_sd": 3 * sd, "margin_in_test": MARGIN,
              "flipped_max": max(s.lift for s in flipped.seeds), "rl_min": rl.min_lift,
              "curves": runs, "wall_s": time.perf_counter() - t0}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(f"RL lifts {[round(s.lift, 3) for s in rl.seeds]}, mean {rl.lift:+.3f}, sd {sd:.3f}, 3 sd {3 * sd:.3f}; "
          f"flipped lifts {[round(s.lift, 3) for s in flipped.seeds]}; test margin {MARGIN}; "
          f"wall {record['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
