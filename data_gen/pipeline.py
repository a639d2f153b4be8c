"""One structure, start to finish: sample it, render its 16 leaves, compute their truth, write its files.

Everything here depends on (arguments, planned structure) alone, so any process (a pool worker, a Slurm task)
gives the same bytes for the same structure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_gen import visibility, writer
from data_gen.config import MAX_HEIGHT, GenConfig, GenerationError
from data_gen.plan import PlannedStructure
from spatialiq_train.core import splits
from spatialiq_train.core.views import LEAF_VIEWS, sample_relpath, view_relpath

_RENDER_STREAM = 0x52454E44  # extra entropy word: render draws never collide with structure draws


def render_params(seed: int, index: int, num_environments: int) -> tuple[int, int]:
    """(environment index, render seed) of a structure, derived from (seed, index) alone."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(index), _RENDER_STREAM]))
    return int(rng.integers(num_environments)), int(rng.integers(2**31 - 1))


@dataclass(frozen=True)
class StructureOutput:
    """What one structure gave: its 16 parquet rows and ``{file: sha256}`` of the files it wrote."""

    rows: list[dict[str, Any]]
    files: dict[str, str]


def process_structure(cfg: GenConfig, entry: PlannedStructure, renderer: Any) -> StructureOutput:
    """Build one structure, write its per-view folders and return its 16 parquet rows and file checksums."""
    scene, gts, images = build_structure(cfg, entry, renderer)
    files = writer.write_sample(Path(cfg.out), cfg.split, scene, gts, images)
    parts = _partitions(cfg.split, entry.structure_id)
    rows = [
        writer.view_row(scene, gt, view=view_relpath(cfg.split, entry.sample_idx, leaf), split=cfg.split,
                        partitions=parts, image=None if images is None else images[leaf])
        for leaf, gt in gts.items()
    ]
    return StructureOutput(rows, files)


def build_structure(
    cfg: GenConfig, entry: PlannedStructure, renderer: Any
) -> tuple[dict[str, Any], dict[Any, dict[str, Any]], dict[Any, bytes] | None]:
    """(scene.json, {leaf: gt.json}, {leaf: PNG bytes} or None) of one planned structure."""
    from data_gen import truth

    where = sample_relpath(cfg.split, entry.sample_idx)
    try:
        hmap = entry.height_map(cfg.seed)
    except ValueError as exc:
        raise GenerationError(f"{where}: {exc}") from exc
    images, visible = _render_views(cfg, entry, hmap, renderer) if renderer is not None else (None, None)
    try:
        raw = truth.structure_truth(hmap, object_type=cfg.object_type, resolution=cfg.resolution, visible=visible,
                                    sample_idx=entry.sample_idx)
    except Exception as exc:
        raise GenerationError(f"{where} (structure {entry.structure_id}): {type(exc).__name__}: {exc}") from exc
    gts = {leaf: raw[leaf] for leaf in LEAF_VIEWS}  # truth.view_truth placed sample_idx (spec 4.2 order)
    scene = writer.scene_record(
        hmap, sample_idx=entry.sample_idx, structure_id=entry.structure_id, seed=cfg.seed, index=entry.index,
        object_type=cfg.object_type, visible_count=visibility.scene_visible_count(hmap))
    return scene, gts, images


def _render_views(
    cfg: GenConfig, entry: PlannedStructure, hmap: np.ndarray, renderer: Any
) -> tuple[dict, dict | None]:
    """Render the 16 leaves; for non-cube objects also the visible sets from the instance buffer."""
    from data_gen.camera import leaf_camera
    from data_gen.render import SceneSpec

    rows, cols = hmap.shape
    env, seed = render_params(cfg.seed, entry.index, _num_environments(renderer))
    hm = tuple(tuple(int(v) for v in row) for row in hmap.tolist())
    images: dict = {}
    visible: dict | None = None if cfg.object_type == "cube" else {}
    for leaf in LEAF_VIEWS:
        where = view_relpath(cfg.split, entry.sample_idx, leaf)
        try:
            camera = leaf_camera(rows, cols, int(hmap.max()), leaf, cfg.resolution)
            result = renderer.render(SceneSpec(hm, camera, cfg.object_type, env, seed))
            images[leaf] = writer.encode_png(result.rgb)
            if visible is not None:
                if result.instance_ids is None:
                    raise GenerationError(f"renderer {getattr(renderer, 'name', '?')} gives no instance ids, which "
                                          f"object_type {cfg.object_type!r} needs for visibility")
                visible[leaf] = visibility.visible_set(result.instance_ids, cols, MAX_HEIGHT)
        except Exception as exc:
            raise GenerationError(f"view {where}: {type(exc).__name__}: {exc}") from exc
    return images, visible


def _num_environments(renderer: Any) -> int:
    """The renderer's own ``num_environments``, else the shared presets of ``data_gen.render.materials``."""
    n = getattr(renderer, "num_environments", None)
    if n is None:
        from data_gen.render.materials import ENVIRONMENTS

        n = len(ENVIRONMENTS)
    return int(n)


def _partitions(split: str, sid: str) -> dict[str, str | None]:
    if split != "train":
        return {"trainval": None, "dapo": None}
    return {kind: splits.partition_of(sid, kind) for kind in splits.PARTITIONS}
