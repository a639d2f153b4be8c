"""The generation run, top to bottom: backend, recorded arguments, missing or damaged shards, workers, merge.

Which structures a run holds, and in which order, is the run's plan (``data_gen.plan``): the first
N candidates of (seed, index) whose structure belongs to the split, duplicates skipped. The bytes of every
file depend only on the arguments in ``GenConfig.identity()`` and the recorded render backend
(``data_gen.identity``), never on ``--workers`` or on which process (or Slurm array task) wrote a shard.

The parts live in modules named for what they hold, and callers import them from there: ``config``
(arguments), ``identity`` (render backend), ``pipeline`` (one structure), ``shards`` (ranges, completion records,
merge), ``verify`` (recorded checksums against the files) and ``executor`` (worker pool, shard loop, repair).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from data_gen import executor, identity, shards, verify
from data_gen.config import GenConfig

log = logging.getLogger(__name__)


def run(cfg: GenConfig, renderer: Any = None, progress: bool = True, plan_only: bool = False) -> dict[str, Any] | None:
    """Generate (the missing shards of) a run; returns the manifest once every shard is complete.

    ``renderer`` overrides ``cfg.renderer`` with a ready object (tests inject fakes this way); it is used
    in-process only: with ``workers > 1`` every worker process builds its own from ``cfg.renderer`` (with the
    Mitsuba variant resolved here), and the parent builds none.
    """
    out = Path(cfg.out)
    if plan_only:
        out.mkdir(parents=True, exist_ok=True)
        identity.check_gen_config(out, cfg)
        executor.write_plan(cfg, progress)
        return None
    # Build the renderer first: a missing dependency fails before anything is written.
    with executor.renderer_here(cfg, renderer) as renderer:
        backend = identity.render_backend(cfg, renderer)  # workers > 1: resolved (and checked) without a renderer
        cfg = identity.pin_variant(cfg, backend)  # workers render the variant that is recorded
        out.mkdir(parents=True, exist_ok=True)
        identity.check_gen_config(out, cfg, backend)
        k = cfg.shard_count
        wanted = [cfg.shard] if cfg.shard is not None else list(range(k))
        todo = [s for s in wanted if not shards.shard_complete(out, cfg.split, s, k)]
        damages = verify.damaged(out, cfg.split, [s for s in wanted if s not in todo], k)  # complete, files fail
        log.info("%d of %d shard(s) to generate in %s", len(todo), len(wanted), out)
        if damages:
            first = damages[0].mismatches[0]
            log.warning("repairing %d structure(s) whose files fail verification (first: %s)",
                        sum(len(d.samples) for d in damages), first.line())
            executor.repair(cfg, damages, renderer=renderer, progress=progress)
        if todo:
            executor.generate_shards(cfg, todo, renderer=renderer, progress=progress, backend=backend)
        if cfg.shard is not None:
            log.info("shard %d done; run `spatialiq gen-merge --out %s` once every shard is done", cfg.shard, out)
            return None
        return shards.merge(out)
