"""Benchmark (run by hand): structure sampling rate and ground-truth-only views per second per core.

    python bench/bench_truth.py [--structures 40] [--repeats 3] [--resolution 512] [--seed 0]

"Ground-truth only" is what ``spatialiq gen --renderer none`` does per structure: sample the
structure, cast its 16 leaf views at the given resolution, build and check every gt dict.
Timings use both process CPU time (robust on a shared machine) and wall time; the figure per
core is views / CPU second on one thread. Medians over the repeats are printed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from data_gen.structure import sample_structure, structure_rng  # noqa: E402
from data_gen.truth import structure_truth  # noqa: E402


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", type=int, default=40, help="structures per repeat for the GT figure")
    parser.add_argument("--samples", type=int, default=1000, help="structures per repeat for the sampling figure")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--resolution", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    sample_rates, gt_cpu_rates, gt_wall_rates = [], [], []
    for rep in range(args.repeats):
        base = rep * 1_000_000
        wall, cpu = _timed(lambda base=base: [sample_structure(structure_rng(args.seed, base + i))
                                              for i in range(args.samples)])
        sample_rates.append(args.samples / cpu)

        def ground_truth(base: int = base) -> None:
            for i in range(args.structures):
                structure_truth(sample_structure(structure_rng(args.seed, base + i)), resolution=args.resolution)

        wall, cpu = _timed(ground_truth)
        views = 16 * args.structures
        gt_cpu_rates.append(views / cpu)
        gt_wall_rates.append(views / wall)
        print(f"repeat {rep + 1}: sampling {sample_rates[-1]:.0f} structures/CPU-s; ground truth "
              f"{gt_cpu_rates[-1]:.1f} views/CPU-s ({gt_wall_rates[-1]:.1f} views/wall-s) at {args.resolution} px")
    print(f"median: structures sampled per second (one core): {statistics.median(sample_rates):.0f}")
    print(f"median: ground-truth-only views per second per core at {args.resolution}x{args.resolution}: "
          f"{statistics.median(gt_cpu_rates):.1f} (wall: {statistics.median(gt_wall_rates):.1f}; "
          f"load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
