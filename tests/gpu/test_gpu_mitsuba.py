"""Mitsuba's cuda_ad_rgb variant gives the same ground truth as the CPU's scalar_rgb: the same instance-id pass
(the per-view visible block sets the dataset's counts come from) on several structures and leaf views."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _gpu_support import needs, record_figure

STRUCTURES = (((4, 4, 4, 4),) * 4, ((4, 3, 2, 1), (3, 2, 1, 0), (2, 1, 0, 0), (1, 0, 0, 2)),
              ((2, 4, 1), (4, 0, 3), (1, 3, 2), (0, 1, 4)))


def test_cuda_variant_id_pass_equals_scalar() -> None:
    needs("mitsuba", "pip install -e '.[render]'")
    import mitsuba as mi

    from data_gen.camera import leaf_camera
    from data_gen.render.backends import get_renderer
    from data_gen.render.base import SceneSpec
    from data_gen.visibility import visible_set
    from spatialiq_train.core.views import LEAF_VIEWS

    if "cuda_ad_rgb" not in mi.variants():
        pytest.skip(f"this Mitsuba build has no cuda_ad_rgb variant (has {', '.join(mi.variants())})")
    cpu = get_renderer("mitsuba", variant="scalar_rgb", spp=1)
    gpu = get_renderer("mitsuba", variant="cuda_ad_rgb", spp=1)
    agreements, times = [], {"scalar_rgb": 0.0, "cuda_ad_rgb": 0.0}
    for hm in STRUCTURES:
        layers, cols = max(max(r) for r in hm), len(hm[0])
        for leaf in LEAF_VIEWS[::3]:
            spec = SceneSpec(hm, leaf_camera(len(hm), cols, layers, leaf, 512))
            ids = {}
            for name, renderer in (("scalar_rgb", cpu), ("cuda_ad_rgb", gpu)):
                t0 = time.perf_counter()
                ids[name] = renderer.render_ids(spec)
                times[name] += time.perf_counter() - t0
            a, b = ids["scalar_rgb"], ids["cuda_ad_rgb"]
            assert visible_set(a, cols) == visible_set(b, cols), (hm, leaf.relpath)
            cube = (a >= 0) | (b >= 0)
            agreements.append(float((a[cube] == b[cube]).mean()))
    assert min(agreements) >= 0.999, agreements
    record_figure("mitsuba-cuda", "views compared", len(agreements))
    record_figure("mitsuba-cuda", "min id-pixel agreement", round(min(agreements), 5))
    record_figure("mitsuba-cuda", "id pass s (scalar / cuda)", [round(times["scalar_rgb"], 2),
                                                                round(times["cuda_ad_rgb"], 2)])
    assert np.isfinite(list(times.values())).all()
