"""Where the work runs: the executor holds the run and carries it from the plan to the written shards.

:class:`Executor` holds the parent's :class:`~data_gen.generation_run.GenerationRun` (opened and closed with the
executor) and does the run's work: the plan (``plan.json``), the shards still missing, the repair of damaged ones.
Structures are computed in this process with one worker, or in ``--workers`` spawned worker processes; either way
this process collects their rows in plan order and writes the shards (``data_gen.shards``), so the bytes never
depend on ``--workers``.

Each worker process opens a run of its own (with its own renderer) in :func:`_serve`, the worker's main function,
and hands it to every task it runs, closing it when told to stop. That state is per process because a renderer
cannot travel between processes; keeping it a local of :func:`_serve` (rather than a module global filled by a pool
initializer) lets the worker close its renderer in one ``with`` block, and a worker that fails to open its run
reports the error instead of being restarted.
"""

from __future__ import annotations

import logging
import pickle
import queue
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from typing import Any

from data_gen import plan, shards, verify
from data_gen.config import GenConfig, GenerationError
from data_gen.generation_run import GenerationRun
from data_gen.pipeline import StructureOutput
from data_gen.plan import PlannedStructure
from data_gen.verify import Damage
from spatialiq_train.core.interrupts import raise_on_sigint

log = logging.getLogger(__name__)

_POLL_S = 1.0
"""How often the parent, waiting for a result, checks that every worker process is still alive."""

Task = Callable[[GenerationRun, Any], Any]
"""What a worker runs: a module-level function of the worker's run and one item."""


def _process(run: GenerationRun, entry: PlannedStructure) -> StructureOutput:
    return run.process(entry)


def _call(run: GenerationRun, call: tuple[Callable[[Any], Any], Any]) -> Any:
    fn, item = call
    return fn(item)


def _serve(cfg_json: str, render: bool, tasks: Any, results: Any) -> None:
    """A worker process: open its run, run ``(seq, task, item)`` messages until ``None``, close the run.

    Every answer is pickled here, so one that cannot be pickled is reported as an error rather than lost.
    """
    raise_on_sigint()  # a SIGINT to the process group stops the worker too, even when its parent ignored it
    with ExitStack() as opened:
        try:
            run = opened.enter_context(GenerationRun.worker(GenConfig.model_validate_json(cfg_json), render))
        except Exception as exc:  # noqa: BLE001 - a worker that cannot render reports why, then stops
            results.put(_answer(None, False, exc))
            return
        for seq, task, item in iter(tasks.get, None):
            try:
                answer = _answer(seq, True, task(run, item))
            except KeyboardInterrupt as exc:  # interrupted (a render cut short included): nothing of it is kept
                results.put(_answer(seq, False, KeyboardInterrupt(str(exc))))
                return
            except Exception as exc:  # noqa: BLE001 - the parent raises it, naming the view
                answer = _answer(seq, False, exc)
            results.put(answer)


def _answer(seq: int | None, ok: bool, value: Any) -> bytes:
    try:
        return pickle.dumps((seq, ok, value))
    except Exception as exc:  # noqa: BLE001 - e.g. an exception whose arguments do not pickle
        error = value if not ok else exc
        return pickle.dumps((seq, False, GenerationError(f"{type(error).__name__}: {error}")))


class _Workers:
    """``n`` spawned worker processes, each with its own run; :meth:`imap` gives results in submission order."""

    def __init__(self, run: GenerationRun) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        args = (run.cfg.model_dump_json(), run.render, self.tasks, self.results)
        self.procs = [ctx.Process(target=_serve, args=args, daemon=True) for _ in range(run.cfg.workers)]
        for proc in self.procs:
            proc.start()
        self.window = 4 * len(self.procs)
        """Items in flight (sent but not yet yielded): every worker stays busy while memory stays bounded."""
        self.sent = 0
        """Tasks sent so far, over every :meth:`imap`: a task's number is unique, so an answer left over from an
        iteration that stopped early (an error) is never taken for one of a later iteration."""

    def imap(self, task: Task, items: Iterable[Any]) -> Iterator[Any]:
        todo, done = iter(items), {}
        first = nxt = self.sent

        def send_one() -> None:
            for item in todo:
                self.tasks.put((self.sent, task, item))
                self.sent += 1
                return

        for _ in range(self.window):
            send_one()
        while nxt < self.sent:
            seq, ok, value = self._result()
            if seq is not None and seq < first:
                continue  # an answer to an earlier iteration, which stopped before reading it
            if not ok:
                raise value
            done[seq] = value
            while nxt in done:
                yield done.pop(nxt)
                nxt += 1
                send_one()  # one more in flight for each one yielded

    def _result(self) -> tuple[int | None, bool, Any]:
        while True:
            try:
                return pickle.loads(self.results.get(timeout=_POLL_S))
            except queue.Empty:
                dead = [p for p in self.procs if p.exitcode is not None]
                if dead:
                    proc = dead[0]
                    raise GenerationError(f"worker process {proc.pid} exited with code {proc.exitcode} before its "
                                          "work was done (killed, or out of memory?); rerun gen to resume") from None

    def close(self, ok: bool) -> None:
        """Stop the workers: asked to (their runs close their renderers) after success, terminated after an error."""
        if ok:
            for _ in self.procs:
                self.tasks.put(None)
            while any(proc.is_alive() for proc in self.procs):  # a worker exits once its answers are read
                try:
                    self.results.get(timeout=0.1)  # answers of an iteration that stopped early: nobody needs them
                except queue.Empty:
                    pass
        for proc in self.procs:
            if not ok:
                proc.terminate()
            proc.join()
        for q in (self.tasks, self.results):
            q.close()
            q.join_thread()


class Executor:
    """Holds the run (``run``) and does its work, here for one worker or in worker processes for several (started
    when first needed, so a run with nothing to do starts none)."""

    def __init__(self, run: GenerationRun) -> None:
        self.run = run
        self._workers: _Workers | None = None

    def __enter__(self) -> Executor:
        self.run.__enter__()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            if self._workers is not None:
                self._workers.close(ok=exc_type is None)
        finally:
            self._workers = None
            self.run.__exit__(exc_type, *exc)

    @property
    def cfg(self) -> GenConfig:
        return self.run.cfg

    def _imap(self, task: Task, items: Iterable[Any]) -> Iterator[Any]:
        if self.cfg.workers == 1:
            return (task(self.run, item) for item in items)
        if self._workers is None:
            self._workers = _Workers(self.run)
        return self._workers.imap(task, items)

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """``fn`` over ``items`` in the run's processes, in order (``fn`` module-level, as for a pool)."""
        return self._imap(_call, ((fn, item) for item in items))

    def structures(self, entries: list[PlannedStructure]) -> Iterator[StructureOutput]:
        return self._imap(_process, entries)

    def plan(self, progress: bool = False) -> list[PlannedStructure]:
        """The run's plan (``<out>/plan.json``), scanning candidates in the run's processes when absent."""
        from tqdm import tqdm

        cfg = self.cfg
        fresh = not (self.run.out / plan.PLAN_FILE).exists()
        with tqdm(total=cfg.structures, unit="structure", desc="plan", disable=not (progress and fresh)) as bar:
            try:
                return plan.load_or_make(self.run.out, cfg.seed, cfg.split, cfg.structures, self.map, bar.update,
                                         width=2 * cfg.workers if cfg.workers > 1 else 1, parts=cfg.parts)
            except ValueError as exc:
                raise GenerationError(str(exc)) from exc

    def complete(self, progress: bool = True) -> None:
        """Bring the run's shards (``--shard``, or all) to complete and verified: repair the structures of complete
        shards whose files fail verification, then generate the shards that are missing or whose parquet fails."""
        cfg, out = self.cfg, self.run.out
        k = cfg.shard_count
        wanted = [cfg.shard] if cfg.shard is not None else list(range(k))
        todo = [s for s in wanted if not shards.shard_complete(out, cfg.split, s, k)]
        damages = verify.damaged(out, cfg.split, [s for s in wanted if s not in todo], k)  # complete, files fail
        log.info("%d of %d shard(s) to generate in %s", len(todo), len(wanted), out)
        if damages:
            first = damages[0].mismatches[0]
            log.warning("repairing %d structure(s) whose files fail verification (first: %s)",
                        sum(len(d.samples) for d in damages), first.line())
            self.repair(damages, progress)
        if todo:
            self.generate(todo, progress)

    def generate(self, todo: list[int], progress: bool = True) -> None:
        """Generate the listed shards from scratch; each shard's parquet and completion record (with the run's
        backend) are written here as soon as its last structure is in."""
        from tqdm import tqdm

        cfg = self.cfg
        ranges = {s: shards.shard_range(s, cfg.shard_count, cfg.structures) for s in todo}
        shard_of = {i: s for s, (a, b) in ranges.items() for i in range(a, b + 1)}
        for s, (a, b) in ranges.items():
            shards.remove_stale_temp_files(cfg, s, a, b)
        entries = [e for e in self.plan(progress) if e.sample_idx in shard_of]
        rows: dict[int, list[dict[str, Any]]] = {s: [] for s in ranges}
        files: dict[int, dict[str, str]] = {s: {} for s in ranges}
        left = {s: b - a + 1 for s, (a, b) in ranges.items()}
        bar = tqdm(total=len(entries), unit="structure", desc=f"gen {cfg.split}", disable=not progress,
                   smoothing=0.1)
        with bar:
            for entry, result in zip(entries, self.structures(entries), strict=True):
                s = shard_of[entry.sample_idx]
                rows[s].extend(result.rows)
                files[s].update(result.files)
                left[s] -= 1
                bar.update(1)
                if left[s] == 0:
                    shards.finish_shard(cfg, s, rows.pop(s), self.run.backend, files.pop(s))

    def repair(self, damages: list[Damage], progress: bool = True) -> None:
        """Regenerate the structures owning files that fail verification in complete shards (their parquet is
        intact) and check that every file they write has its recorded sha256 again."""
        from tqdm import tqdm

        samples = {i for d in damages for i in d.samples}
        expected = {rel: digest for d in damages for rel, digest in d.expected.items()}
        for d in damages:
            shards.remove_stale_temp_files(self.cfg, d.shard, d.samples[0], d.samples[-1])
        entries = [e for e in self.plan() if e.sample_idx in samples]
        with tqdm(total=len(entries), unit="structure", desc="repair", disable=not progress) as bar:
            for result in self.structures(entries):
                bar.update(1)
                differ = [rel for rel, digest in result.files.items() if expected.get(rel) != digest]
                if differ:
                    rel = differ[0]
                    raise GenerationError(
                        f"{rel}: regenerated with sha256 {result.files[rel]}, but its shard records "
                        f"{expected.get(rel)}; this machine does not reproduce the dataset (compare render_backend "
                        "in gen_config.json with this machine's), so it cannot repair it: use a matching machine")
