"""Ground-truth-only generation throughput, end to end (plan, ray casts, truth, JSON, parquet).

    python bench/bench_gen.py --structures 24 --workers 1 2

Prints, per worker count: wall seconds, views/s, views/s per core (wall), and views per CPU-second
(process plus worker CPU time), which is the per-core figure that stays meaningful on a shared machine.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from data_gen.config import VIEWS_PER_STRUCTURE, GenConfig
from data_gen.generate import run


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def bench(structures: int, workers: int, resolution: int, split: str, seed: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = GenConfig(out=Path(tmp) / "ds", structures=structures, seed=seed, split=split, workers=workers,
                        resolution=resolution, num_shards=min(structures, max(1, 2 * workers)))
        cpu0, t0 = _cpu_seconds(), time.perf_counter()
        run(cfg, progress=False)
        wall, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    views = structures * VIEWS_PER_STRUCTURE
    return {"wall_s": wall, "views_per_s": views / wall, "views_per_s_per_core": views / wall / workers,
            "views_per_cpu_s": views / cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", type=int, default=24)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--resolution", type=int, default=512)
    parser.add_argument("--split", default="train")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{args.structures} structures x {VIEWS_PER_STRUCTURE} views, {args.resolution}px, split {args.split}")
    for w in args.workers:
        r = bench(args.structures, w, args.resolution, args.split, args.seed)
        print(f"workers={w}: wall {r['wall_s']:.1f} s, {r['views_per_s']:.1f} views/s, "
              f"{r['views_per_s_per_core']:.1f} views/s/core (wall), {r['views_per_cpu_s']:.1f} views/CPU-s")


if __name__ == "__main__":
    main()
