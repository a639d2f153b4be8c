"""Render speed: seconds per 512x512 image per core for each Mitsuba variant that runs, and the id pass alone.

Run by hand (not a test):  python bench/bench_render.py --spp 8 16 --images 4 --out /some/tmp/folder

Every render runs on one thread (``dr.set_thread_count(1)``); the figure per image is the process CPU time
(``time.process_time``), i.e. seconds per image per core, which stays meaningful on a shared machine; the wall
time is printed beside it. The first render
of each variant is a warm-up (the llvm variant compiles its kernels then) and is reported separately.
One beauty image per variant is saved as a PNG under ``--out`` (a fresh temporary folder by default).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from data_gen.camera import leaf_camera
from data_gen.render.base import SceneSpec
from data_gen.render.mitsuba_backend import VARIANTS, MitsubaRenderer, find_libllvm
from spatialiq_train.core.views import LEAF_VIEWS

STRUCTURES = (
    ((3, 2, 1, 0), (2, 2, 1, 1), (1, 1, 0, 0), (4, 1, 0, 1)),
    ((4, 4, 4, 4),) * 4,
    ((1, 0, 2), (2, 3, 0), (0, 1, 1)),
)


def _specs(n: int) -> list[SceneSpec]:
    out = []
    for m in range(n):
        hm = STRUCTURES[m % len(STRUCTURES)]
        leaf = LEAF_VIEWS[(5 * m) % len(LEAF_VIEWS)]
        cam = leaf_camera(len(hm), len(hm[0]), max(max(r) for r in hm), leaf)
        out.append(SceneSpec(hm, cam, "cube", environment=m % 5, seed=m))
    return out


def _available(requested: list[str]) -> list[str]:
    import drjit as dr

    out = []
    for v in requested:
        if v == "llvm_ad_rgb" and find_libllvm() is None:
            print(f"skip {v}: no libLLVM >= 19 (apt-get install libllvm19)")
        elif v == "cuda_ad_rgb" and not dr.has_backend(dr.JitBackend.CUDA):
            print(f"skip {v}: no CUDA device")
        else:
            out.append(v)
    return out


def bench_variant(variant: str, spp: int, max_depth: int, n_images: int, out: Path) -> None:
    from PIL import Image

    r = MitsubaRenderer(variant=variant, spp=spp, max_depth=max_depth, threads=1)
    specs = _specs(n_images + 1)
    t0 = time.perf_counter()
    first = r.render(specs[0])
    warm = time.perf_counter() - t0
    beauty, wall, ids = [], [], []
    for spec in specs[1:]:
        t0, c0 = time.perf_counter(), time.process_time()
        res = r.render(spec)
        beauty.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
        c0 = time.process_time()
        r.render_ids(spec)
        ids.append(time.process_time() - c0)
        assert res.rgb.shape == (512, 512, 3) and res.instance_ids is not None
    path = out / f"mitsuba_{variant}_{spp}spp_depth{max_depth}.png"
    Image.fromarray(first.rgb).save(path)
    print(f"{variant:12s} spp={spp:3d} depth={max_depth}  beauty+ids {statistics.median(beauty):6.3f} CPU s/image "
          f"(min {min(beauty):.3f}, n={len(beauty)}, wall {statistics.median(wall):.3f} s; first {warm:.2f} s wall)"
          f"  id pass alone {statistics.median(ids):6.3f} CPU s  sample {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--spp", nargs="+", type=int, default=[16])
    ap.add_argument("--max-depth", nargs="+", type=int, default=[3], help="path lengths (2 = direct light only)")
    ap.add_argument("--images", type=int, default=4, help="timed images per variant and spp (after one warm-up)")
    ap.add_argument("--out", type=Path, default=None, help="folder for the sample PNGs (default: a temp folder)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_render_"))
    out.mkdir(parents=True, exist_ok=True)
    np.set_printoptions(precision=3)
    for variant in _available(args.variants):
        for spp in args.spp:
            for depth in args.max_depth:
                bench_variant(variant, spp, depth, args.images, out)


if __name__ == "__main__":
    main()
