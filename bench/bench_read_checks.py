"""Benchmark (run by hand): what "checked on read" costs (docs/trust.md).

    python bench/bench_read_checks.py --data D [--split benchmark] [--repeats 3]

For a generated dataset D (rendered, with its shard records): the wall and CPU time of hashing every recorded
``view.png`` and ``gt.json`` against its recorded sha256 (what ``traces``, the trace loader and ``eval sample`` now
do before their work), next to the time of reading the views without it, and the hash rate in MB/s. Then the
safetensors completeness check (header only) on a checkpoint, with ``--model``. Medians over the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from spatialiq_train.core.dataset import iter_views
from spatialiq_train.core.truth import file_mismatches, recorded_sha256


def _timed(fn) -> tuple[float, float]:  # noqa: ANN001
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="benchmark")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", type=Path, default=None, help="A checkpoint folder for the safetensors check.")
    args = parser.parse_args()
    recorded = recorded_sha256(args.data)
    images = {rel: h for rel, h in recorded.items() if rel.endswith("view.png")}
    if not images:
        raise SystemExit(f"{args.data}: no recorded view.png (render the dataset: spatialiq gen --renderer mitsuba)")
    size = sum((args.data / rel).stat().st_size for rel in images)
    hashing = [_timed(lambda: file_mismatches(args.data, images)) for _ in range(args.repeats)]
    reading = [_timed(lambda: list(iter_views(args.data, args.split))) for _ in range(args.repeats)]
    wall = statistics.median(w for w, _ in hashing)
    cpu = statistics.median(c for _, c in hashing)
    print(f"{len(images)} view.png, {size / len(images) / 1e3:.0f} kB each on average")
    print(f"hash every view.png against its record: {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU "
          f"({size / 1e6 / max(cpu, 1e-9):.0f} MB/s; {cpu / len(images) * 1e6:.0f} us per view)")
    print(f"iter_views (truth + image checks included): {statistics.median(w for w, _ in reading) * 1e3:.1f} ms wall "
          f"for {len(images)} views")
    if args.model is not None:
        from spatialiq_train.core.weights import check_complete_weights, weight_files

        total = sum(p.stat().st_size for p in weight_files(args.model))
        runs = [_timed(lambda: check_complete_weights(args.model)) for _ in range(args.repeats)]
        print(f"safetensors completeness ({total / 1e6:.1f} MB of weights): "
              f"{statistics.median(w for w, _ in runs) * 1e3:.2f} ms wall (headers only)")


if __name__ == "__main__":
    main()
