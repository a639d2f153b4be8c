"""Where the work runs: in this process for one worker, in a spawn pool for several, and the shard loop over it.

The bytes never depend on ``--workers``: workers only compute structures (``pipeline.process_structure``, which
writes each structure's own files), and this process collects their rows in plan order and writes the shards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from data_gen import identity, plan, shards
from data_gen.config import GenConfig, GenerationError
from data_gen.pipeline import StructureOutput, process_structure
from data_gen.plan import PlannedStructure
from data_gen.verify import Damage

log = logging.getLogger(__name__)

_STATE: dict[str, Any] = {}
"""A pool worker's config and renderer, set once by :func:`_init_worker`."""


def _init_worker(cfg_json: str, render: bool) -> None:
    """Pool initializer; planning-only workers (``render`` False) build no renderer."""
    from multiprocessing import util

    cfg = GenConfig.model_validate_json(cfg_json)
    _STATE["cfg"], _STATE["renderer"] = cfg, identity.make_renderer(cfg) if render else None
    if _STATE["renderer"] is not None:  # released when the worker exits normally (pool closed, not terminated)
        util.Finalize(None, identity.close_renderer, args=(_STATE["renderer"],), exitpriority=10)


def _work(entry: PlannedStructure) -> StructureOutput:
    return process_structure(_STATE["cfg"], entry, _STATE["renderer"])


class Executor:
    """In-process work for one worker; a spawn pool for several (with ``render``, a renderer per process)."""

    def __init__(self, cfg: GenConfig, renderer: Any, render: bool = True) -> None:
        self.cfg, self.renderer, self.render, self.pool = cfg, renderer, render, None

    def __enter__(self) -> Executor:
        if self.cfg.workers > 1:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            args = (self.cfg.model_dump_json(), self.render)
            self.pool = ctx.Pool(self.cfg.workers, initializer=_init_worker, initargs=args)
        return self

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        return self.pool.imap(fn, items) if self.pool is not None else map(fn, items)

    def structures(self, entries: list[PlannedStructure]) -> Iterator[StructureOutput]:
        if self.pool is None:
            return (process_structure(self.cfg, e, self.renderer) for e in entries)
        return self.pool.imap(_work, entries, chunksize=1)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self.pool is not None:
            if exc_type is None:  # let the workers exit normally, so their renderers are closed
                self.pool.close()
            else:
                self.pool.terminate()
            self.pool.join()


def make_plan(cfg: GenConfig, ex: Executor | None = None, progress: bool = False) -> list[PlannedStructure]:
    """The run's plan (``<out>/plan.json``), scanning candidates in the executor's processes when absent."""
    from tqdm import tqdm

    out = Path(cfg.out)
    map_fn = ex.map if ex is not None else map
    fresh = not (out / plan.PLAN_FILE).exists()
    with tqdm(total=cfg.structures, unit="structure", desc="plan", disable=not (progress and fresh)) as bar:
        try:
            return plan.load_or_make(out, cfg.seed, cfg.split, cfg.structures, map_fn, bar.update,
                                     width=2 * cfg.workers if cfg.workers > 1 else 1)
        except ValueError as exc:
            raise GenerationError(str(exc)) from exc


def write_plan(cfg: GenConfig, progress: bool = True) -> list[PlannedStructure]:
    """The plan alone (``--plan-only``), scanned by planning workers that build no renderer."""
    with Executor(cfg, None, render=False) as ex:
        return make_plan(cfg, ex, progress)


@contextmanager
def renderer_here(cfg: GenConfig, renderer: Any) -> Iterator[Any]:
    """``renderer``, or one built (and closed afterwards) when none is given and this process renders alone
    (``--workers 1``); the one place a run builds and closes its in-process renderer."""
    built = identity.make_renderer(cfg) if renderer is None and cfg.workers == 1 else None
    try:
        yield renderer if built is None else built
    finally:
        identity.close_renderer(built)


def generate_shards(cfg: GenConfig, todo: list[int], renderer: Any = None, progress: bool = True,
                    backend: dict[str, Any] | None = None) -> None:
    """Generate the listed shards; structures run in ``cfg.workers`` spawned processes, shards are written here.

    The parent renders (and builds ``renderer`` when none is given) only with one worker. ``backend`` is
    recorded in every shard's completion record.
    """
    k, n = cfg.shard_count, cfg.structures
    ranges = {s: shards.shard_range(s, k, n) for s in todo}
    with renderer_here(cfg, renderer) as here:
        _generate(cfg, ranges, here, progress, backend)


def _generate(cfg: GenConfig, ranges: dict[int, tuple[int, int]], renderer: Any, progress: bool,
              backend: dict[str, Any] | None) -> None:
    from tqdm import tqdm

    shard_of = {i: s for s, (a, b) in ranges.items() for i in range(a, b + 1)}
    for s, (a, b) in ranges.items():
        shards.remove_stale_temp_files(cfg, s, a, b)
    with Executor(cfg, renderer, render=True) as ex:
        entries = [e for e in make_plan(cfg, ex, progress) if e.sample_idx in shard_of]
        rows: dict[int, list[dict[str, Any]]] = {s: [] for s in ranges}
        files: dict[int, dict[str, str]] = {s: {} for s in ranges}
        left = {s: b - a + 1 for s, (a, b) in ranges.items()}
        bar = tqdm(total=len(entries), unit="structure", desc=f"gen {cfg.split}", disable=not progress,
                   smoothing=0.1)
        with bar:
            for entry, result in zip(entries, ex.structures(entries), strict=True):
                s = shard_of[entry.sample_idx]
                rows[s].extend(result.rows)
                files[s].update(result.files)
                left[s] -= 1
                bar.update(1)
                if left[s] == 0:
                    shards.finish_shard(cfg, s, rows.pop(s), backend, files.pop(s))


def repair(cfg: GenConfig, damages: list[Damage], renderer: Any = None, progress: bool = True) -> None:
    """Regenerate the structures owning files that fail verification in complete shards (their parquet is intact)
    and check that every file they write has its recorded sha256 again."""
    from tqdm import tqdm

    samples = {i for d in damages for i in d.samples}
    expected = {rel: digest for d in damages for rel, digest in d.expected.items()}
    for d in damages:
        shards.remove_stale_temp_files(cfg, d.shard, d.samples[0], d.samples[-1])
    with renderer_here(cfg, renderer) as here, Executor(cfg, here, render=True) as ex:
        entries = [e for e in make_plan(cfg, ex) if e.sample_idx in samples]
        with tqdm(total=len(entries), unit="structure", desc="repair", disable=not progress) as bar:
            for result in ex.structures(entries):
                bar.update(1)
                differ = [rel for rel, digest in result.files.items() if expected.get(rel) != digest]
                if differ:
                    rel = differ[0]
                    raise GenerationError(
                        f"{rel}: regenerated with sha256 {result.files[rel]}, but its shard records "
                        f"{expected.get(rel)}; this machine does not reproduce the dataset (compare render_backend "
                        "in gen_config.json with this machine's), so it cannot repair it: use a matching machine")
