"""The generation run, top to bottom: the run opened (renderer, backend), its arguments recorded, its shards
completed by the executor, the merge.

Which structures a run holds, and in which order, is the run's plan (``data_gen.plan``): the first
N candidates of (seed, index) whose structure belongs to the split, duplicates skipped. The bytes of every
file depend only on the arguments in ``GenConfig.identity()`` and the recorded render backend
(``data_gen.identity``), never on ``--workers`` or on which process (or Slurm array task) wrote a shard.

The arguments travel one way: ``generate`` -> ``executor`` (which holds the run) -> ``shards`` (the files) and the
renderer. The parts live in modules named for what they hold, and callers import them from there: ``config``
(arguments), ``generation_run`` (one run in one process: its arguments, render backend and renderer),
``identity`` (the records of arguments and backend, compared), ``executor`` (where the work runs: plan, missing
shards, repair), ``pipeline`` (one structure), ``shards`` (ranges, completion records, merge) and ``verify``
(recorded checksums against the files).
"""

from __future__ import annotations

import logging
from typing import Any

from data_gen import shards
from data_gen.config import GenConfig
from data_gen.executor import Executor
from data_gen.generation_run import GenerationRun

log = logging.getLogger(__name__)


def run(cfg: GenConfig, renderer: Any = None, progress: bool = True, plan_only: bool = False) -> dict[str, Any] | None:
    """Generate (the missing shards of) a run; returns the manifest once every shard is complete.

    ``renderer`` overrides ``cfg.renderer`` with a ready object (tests inject fakes this way); it is used
    in-process only: with ``workers > 1`` every worker process builds its own from ``cfg.renderer`` (with the
    Mitsuba variant resolved here), and the parent builds none. ``plan_only`` writes the plan alone, with no
    renderer anywhere and no backend recorded.
    """
    # Opening the run builds the renderer and resolves the backend first: a missing dependency fails before
    # anything is written.
    with Executor(GenerationRun(cfg, renderer, render=not plan_only)) as ex:
        ex.run.record()
        if plan_only:
            ex.plan(progress)
            return None
        ex.complete(progress)
    if cfg.shard is not None:
        log.info("shard %d done; run `spatialiq gen-merge --out %s` once every shard is done", cfg.shard, cfg.out)
        return None
    return shards.merge(cfg.out)
