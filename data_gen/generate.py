"""The generation run: config, structure plan, sharding, workers, resume and the final merge.

Which structures a run holds, and in which order, is the run's plan (``data_gen.plan``): the first
N candidates of (seed, index) whose structure belongs to the split, duplicates skipped.

Shards: ``num_shards`` (default ``ceil(N / 64)``) contiguous, balanced ranges of ``sample_idx``.
The bytes of every file depend only on the arguments in ``GenConfig.identity()``, never on
``--workers`` or on which process (or Slurm array task) wrote a shard. A shard is complete once
its completion record ``shards/<stem>.done.json`` (written after the parquet, holding its sha256)
exists; a rerun skips complete shards and redoes the others from scratch.

Image bytes also depend on the render backend a machine resolves (Mitsuba's ``auto`` picks cuda, llvm or
scalar by node). The first rendering run records it (renderer, resolved variant, version) as
``render_backend`` in ``gen_config.json``, every shard's completion record repeats it, and a resume, another
shard or the merge refuses a different one, naming what differs.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_gen import layout, plan, splits, structure, writer
from data_gen.camera import LEAF_VIEWS
from data_gen.plan import PlannedStructure
from spatialiq_train.errors import JobFailure
from spatialiq_train.io import atomic_write_bytes, atomic_write_json, read_json

log = logging.getLogger(__name__)

STRUCTURES_PER_SHARD = 64
"""Default shard size when ``--num-shards`` is not given."""
MAX_HEIGHT = 4
"""Stack limit of the 4x4x4 grid (block ids are ``(i*cols+j)*MAX_HEIGHT+k``)."""
_RENDER_STREAM = 0x52454E44  # extra entropy word: render draws never collide with structure draws
VIEWS_PER_STRUCTURE = len(LEAF_VIEWS)
_RENDER_MODULES = {"mitsuba": ("mitsuba", "render"), "isaacsim": ("isaacsim", "isaacsim")}
"""Importable module and pip extra of each rendering backend."""


class GenerationError(JobFailure, RuntimeError):
    """Generation failed; the message names the argument, view or shard (exit 1 unless raised with exit_code=2)."""


class GenConfig(BaseModel):
    """Arguments of ``spatialiq gen``."""

    model_config = ConfigDict(extra="forbid")

    out: Path
    structures: int = Field(gt=0, description="number of structures (16 views each)")
    seed: int = Field(ge=0, description="master seed")
    split: Literal["train", "benchmark"]
    workers: int = Field(1, ge=1)
    renderer: Literal["none", "mitsuba", "isaacsim"] = "none"
    object_type: Literal["cube", "can"] = "cube"
    shard: int | None = Field(None, ge=0, description="only this shard (a Slurm array task)")
    num_shards: int | None = Field(None, ge=1)
    resolution: int = Field(512, ge=8, le=4096, description="image side; 512 is the benchmark's")
    render_variant: Literal["auto", "scalar_rgb", "llvm_ad_rgb", "cuda_ad_rgb"] = "auto"

    @model_validator(mode="after")
    def _consistent(self) -> GenConfig:
        if self.num_shards is not None and self.num_shards > self.structures:
            raise ValueError(f"num_shards ({self.num_shards}) must be at most structures ({self.structures})")
        if self.shard is not None:
            if self.num_shards is None:
                raise ValueError("shard needs num_shards (the total number of shards of the run)")
            if self.shard >= self.num_shards:
                raise ValueError(f"shard must be in 0..{self.num_shards - 1} (num_shards={self.num_shards}), "
                                 f"got {self.shard}")
        if self.object_type != "cube" and self.renderer == "none":
            raise ValueError(f"object_type {self.object_type!r} takes its visibility from the renderer's instance "
                             "buffer; choose renderer mitsuba or isaacsim (renderer none works for cube only)")
        if self.render_variant != "auto" and self.renderer != "mitsuba":
            raise ValueError(f"render_variant (--render-variant) {self.render_variant!r} is a Mitsuba variant; "
                             f"it needs renderer mitsuba (got renderer {self.renderer!r})")
        return self

    @property
    def shard_count(self) -> int:
        return self.num_shards or math.ceil(self.structures / STRUCTURES_PER_SHARD)

    def identity(self, render_backend: dict[str, Any] | None = None) -> dict[str, Any]:
        """The arguments that decide the output bytes (recorded in gen_config.json and the manifest).

        ``render_backend`` (from :func:`render_backend`) is added when given: the resolved backend decides the
        image bytes too, while ``render_variant`` is only a request (``auto`` resolves per machine).
        """
        ident: dict[str, Any] = {
            "structures": self.structures, "seed": self.seed, "split": self.split, "renderer": self.renderer,
            "object_type": self.object_type, "num_shards": self.shard_count, "resolution": self.resolution,
        }
        if render_backend is not None:
            ident["render_backend"] = render_backend
        return ident


def shard_range(shard: int, num_shards: int, structures: int) -> tuple[int, int]:
    """(first, last) sample_idx of a shard, 1-based inclusive; balanced contiguous ranges."""
    return shard * structures // num_shards + 1, (shard + 1) * structures // num_shards


def render_params(seed: int, index: int, num_environments: int) -> tuple[int, int]:
    """(environment index, render seed) of a structure, derived from (seed, index) alone."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(index), _RENDER_STREAM]))
    return int(rng.integers(num_environments)), int(rng.integers(2**31 - 1))


def check_gen_config(out: Path, cfg: GenConfig, backend: dict[str, Any] | None = None) -> None:
    """Record the run's arguments, or refuse when ``out`` was generated with different ones.

    ``backend`` is this machine's render backend (None when nothing renders here, e.g. ``--plan-only``); the
    first rendering run adds it to a ``gen_config.json`` that has none, later ones must match it.
    """
    path = out / layout.GEN_CONFIG_FILE
    if path.exists():
        old = read_json(path)
        for key, value in cfg.identity().items():
            if old.get(key) != value:
                flag = "--" + key.replace("_", "-")
                raise GenerationError(
                    f"{out} was generated with {flag} {old.get(key)!r}, this run asks for {value!r}; "
                    f"rerun with {flag} {old.get(key)!r} to resume, or use a new --out directory")
        if backend is not None:
            recorded = old.get("render_backend")
            if recorded is None:
                atomic_write_json(path, {**old, "render_backend": backend})
            else:
                check_backend(recorded, backend, str(out))
        return
    atomic_write_json(path, cfg.identity(backend))


def check_backend(recorded: dict[str, Any], current: dict[str, Any], where: str) -> None:
    """Refuse a render backend that differs from the recorded one; the message names what differs."""
    if recorded == current:
        return
    was, now = recorded.get("renderer"), current.get("renderer")
    if was != now:
        raise GenerationError(f"{where} was rendered with renderer {was!r}; this run renders with {now!r}; "
                              "use the same renderer or another --out")
    if recorded.get("variant") != current.get("variant"):
        raise GenerationError(
            f"{where}: this dataset was rendered with {recorded.get('variant')}; this machine resolves "
            f"{current.get('variant')}; pass --render-variant {recorded.get('variant')} or use another --out")
    raise GenerationError(
        f"{where}: this dataset was rendered with {was} {recorded.get('version')}; this machine has {was} "
        f"{current.get('version')}; install {was}=={recorded.get('version')} or use another --out")


def render_backend(cfg: GenConfig, renderer: Any = None) -> dict[str, Any] | None:
    """This machine's render backend: renderer name, resolved Mitsuba variant and version (None for ``none``).

    From ``renderer`` when one was built (or injected); otherwise resolved without building one, which
    still fails fast (before anything is written) when the backend's package is missing.
    """
    if cfg.renderer == "none":
        return None
    if renderer is not None:
        name, variant = str(getattr(renderer, "name", cfg.renderer)), getattr(renderer, "variant", None)
    else:
        name, variant = cfg.renderer, _resolve_variant(cfg)
    return {"renderer": name, "variant": variant, "version": _backend_version(name)}


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _missing(cfg: GenConfig, reason: str) -> GenerationError:
    extra = _RENDER_MODULES[cfg.renderer][1]
    hint = "" if "pip install" in reason else f"; install it with: pip install -e '.[{extra}]'"
    return GenerationError(f"--renderer {cfg.renderer} is unavailable ({reason}){hint}")


def _resolve_variant(cfg: GenConfig) -> str | None:
    """The Mitsuba variant ``cfg.render_variant`` resolves to here (None for Isaac Sim), without a renderer."""
    module = _RENDER_MODULES[cfg.renderer][0]
    if not _importable(module):
        raise _missing(cfg, f"No module named {module!r}")
    if cfg.renderer != "mitsuba":
        return None
    from data_gen.render.mitsuba_backend import resolve_variant

    try:
        return resolve_variant(cfg.render_variant)
    except ImportError as exc:
        raise _missing(cfg, str(exc)) from exc
    except RuntimeError as exc:
        raise GenerationError(f"--render-variant {cfg.render_variant}: {exc}") from exc


def _backend_version(name: str) -> str | None:
    """Version of the backend's package, None when it is not an installed distribution (e.g. a test fake)."""
    if name == "mitsuba":
        try:
            import mitsuba
        except ImportError:
            return None
        return str(mitsuba.__version__)
    if name == "isaacsim":
        from importlib import metadata

        try:
            return metadata.version("isaacsim")
        except metadata.PackageNotFoundError:
            return None
    return None


def shard_complete(out: Path, split: str, shard: int, num_shards: int) -> bool:
    """True when the shard's completion record exists and its parquet still has the recorded sha256."""
    done = out / layout.shard_done_relpath(split, shard, num_shards)
    parquet = out / layout.shard_parquet_relpath(split, shard, num_shards)
    if not (done.exists() and parquet.exists()):
        return False
    return read_json(done).get("sha256") == writer.sha256_file(parquet)


def run(cfg: GenConfig, renderer: Any = None, progress: bool = True, plan_only: bool = False) -> dict[str, Any] | None:
    """Generate (the missing shards of) a run; returns the manifest once every shard is complete.

    ``renderer`` overrides ``cfg.renderer`` with a ready object (tests inject fakes this way); it is used
    in-process only: with ``workers > 1`` every worker process builds its own from ``cfg.renderer`` (with the
    Mitsuba variant resolved here), and the parent builds none.
    """
    out = Path(cfg.out)
    backend, built = None, None
    if not plan_only and cfg.renderer != "none":
        if renderer is None and cfg.workers == 1:
            renderer = built = make_renderer(cfg)  # fail fast on a missing dependency, before writing anything
        backend = render_backend(cfg, renderer)  # workers > 1: resolved (and checked) without a renderer
        if cfg.renderer == "mitsuba" and backend["variant"] in ("scalar_rgb", "llvm_ad_rgb", "cuda_ad_rgb"):
            cfg = cfg.model_copy(update={"render_variant": backend["variant"]})  # workers render what is recorded
    try:
        return _run(cfg, out, renderer, backend, progress, plan_only)
    finally:
        close_renderer(built)


def close_renderer(renderer: Any) -> None:
    """Release what a renderer holds (e.g. Isaac Sim's texture folder), when it has a ``close()``."""
    close = getattr(renderer, "close", None)
    if callable(close):
        close()


def _run(cfg: GenConfig, out: Path, renderer: Any, backend: dict[str, Any] | None, progress: bool,
         plan_only: bool) -> dict[str, Any] | None:
    out.mkdir(parents=True, exist_ok=True)
    check_gen_config(out, cfg, backend)
    if plan_only:
        with _Executor(cfg, None, render=False) as ex:
            make_plan(cfg, ex, progress)
        return None
    k = cfg.shard_count
    wanted = [cfg.shard] if cfg.shard is not None else list(range(k))
    todo = [s for s in wanted if not shard_complete(out, cfg.split, s, k)]
    log.info("%d of %d shard(s) to generate in %s", len(todo), len(wanted), out)
    if todo:
        generate_shards(cfg, todo, renderer=renderer, progress=progress, backend=backend)
    if cfg.shard is not None:
        log.info("shard %d done; run `spatialiq gen-merge --out %s` once every shard is done", cfg.shard, out)
        return None
    return merge(out)


def make_renderer(cfg: GenConfig) -> Any:
    """The backend named by ``cfg.renderer`` (None for ``none``); a missing dependency names the pip extra."""
    if cfg.renderer == "none":
        return None
    from data_gen.render import get_renderer

    options: dict[str, Any] = {}
    if cfg.renderer == "mitsuba":
        options["variant"] = cfg.render_variant
        if cfg.workers > 1:  # several worker processes each get one render thread: no oversubscribed cores
            options["threads"] = 1
    try:
        return get_renderer(cfg.renderer, **options)
    except ImportError as exc:
        raise _missing(cfg, str(exc)) from exc
    except RuntimeError as exc:
        if cfg.renderer != "mitsuba":
            raise
        raise GenerationError(f"--render-variant {cfg.render_variant}: {exc}") from exc


def build_structure(
    cfg: GenConfig, entry: PlannedStructure, renderer: Any
) -> tuple[dict[str, Any], dict[Any, dict[str, Any]], dict[Any, bytes] | None]:
    """(scene.json, {leaf: gt.json}, {leaf: PNG bytes} or None) of one planned structure."""
    from data_gen import truth
    from data_gen.camera import LEAF_VIEWS

    where = layout.sample_relpath(cfg.split, entry.sample_idx)
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
    gts = {leaf: writer.gt_record(raw[leaf], entry.sample_idx) for leaf in LEAF_VIEWS}
    scene = writer.scene_record(
        hmap, sample_idx=entry.sample_idx, structure_id=entry.structure_id, seed=cfg.seed, index=entry.index,
        object_type=cfg.object_type, visible_count=structure.scene_visible_count(hmap))
    return scene, gts, images


def _render_views(
    cfg: GenConfig, entry: PlannedStructure, hmap: np.ndarray, renderer: Any
) -> tuple[dict, dict | None]:
    """Render the 16 leaves; for non-cube objects also the visible sets from the instance buffer."""
    from data_gen.camera import LEAF_VIEWS, leaf_camera
    from data_gen.render import SceneSpec

    rows, cols = hmap.shape
    env, seed = render_params(cfg.seed, entry.index, _num_environments(renderer))
    hm = tuple(tuple(int(v) for v in row) for row in hmap.tolist())
    images: dict = {}
    visible: dict | None = None if cfg.object_type == "cube" else {}
    for leaf in LEAF_VIEWS:
        where = layout.view_relpath(cfg.split, entry.sample_idx, leaf)
        try:
            camera = leaf_camera(rows, cols, int(hmap.max()), leaf, cfg.resolution)
            result = renderer.render(SceneSpec(hm, camera, cfg.object_type, env, seed))
            images[leaf] = writer.encode_png(result.rgb)
            if visible is not None:
                if result.instance_ids is None:
                    raise GenerationError(f"renderer {getattr(renderer, 'name', '?')} gives no instance ids, which "
                                          f"object_type {cfg.object_type!r} needs for visibility")
                from data_gen import raycast

                visible[leaf] = raycast.visible_set(result.instance_ids, cols, MAX_HEIGHT)
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


def process_structure(cfg: GenConfig, entry: PlannedStructure, renderer: Any) -> list[dict[str, Any]]:
    """Build one structure, write its per-view folders and return its 16 parquet rows."""
    scene, gts, images = build_structure(cfg, entry, renderer)
    out = Path(cfg.out)
    writer.write_sample(out, cfg.split, scene, gts, images)
    parts = _partitions(cfg.split, entry.structure_id)
    return [
        writer.view_row(scene, gt, view=layout.view_relpath(cfg.split, entry.sample_idx, leaf), split=cfg.split,
                        partitions=parts, image=None if images is None else images[leaf])
        for leaf, gt in gts.items()
    ]


def _partitions(split: str, sid: str) -> dict[str, str | None]:
    if split != "train":
        return {"trainval": None, "dapo": None}
    return {kind: splits.partition_of(sid, kind) for kind in splits.PARTITIONS}


_STATE: dict[str, Any] = {}


def _init_worker(cfg_json: str, render: bool) -> None:
    """Pool initializer; planning-only workers (``render`` False) build no renderer."""
    from multiprocessing import util

    cfg = GenConfig.model_validate_json(cfg_json)
    _STATE["cfg"], _STATE["renderer"] = cfg, make_renderer(cfg) if render else None
    if _STATE["renderer"] is not None:  # released when the worker exits normally (pool closed, not terminated)
        util.Finalize(None, close_renderer, args=(_STATE["renderer"],), exitpriority=10)


def _work(entry: PlannedStructure) -> list[dict[str, Any]]:
    return process_structure(_STATE["cfg"], entry, _STATE["renderer"])


def generate_shards(cfg: GenConfig, todo: list[int], renderer: Any = None, progress: bool = True,
                    backend: dict[str, Any] | None = None) -> None:
    """Generate the listed shards; structures run in ``cfg.workers`` spawned processes, shards are written here.

    The parent renders (and builds ``renderer`` when none is given) only with one worker. ``backend`` is
    recorded in every shard's completion record.
    """
    k, n = cfg.shard_count, cfg.structures
    ranges = {s: shard_range(s, k, n) for s in todo}
    shard_of = {i: s for s, (a, b) in ranges.items() for i in range(a, b + 1)}
    built = make_renderer(cfg) if renderer is None and cfg.workers == 1 else None
    try:
        _generate(cfg, ranges, shard_of, renderer if built is None else built, progress, backend)
    finally:
        close_renderer(built)


def _generate(cfg: GenConfig, ranges: dict[int, tuple[int, int]], shard_of: dict[int, int], renderer: Any,
              progress: bool, backend: dict[str, Any] | None) -> None:
    from tqdm import tqdm

    todo = list(ranges)
    for s, (a, b) in ranges.items():
        _remove_stale_temp_files(cfg, s, a, b)
    with _Executor(cfg, renderer, render=True) as ex:
        entries = [e for e in make_plan(cfg, ex, progress) if e.sample_idx in shard_of]
        pending: dict[int, list[dict[str, Any]]] = {s: [] for s in todo}
        left = {s: b - a + 1 for s, (a, b) in ranges.items()}
        bar = tqdm(total=len(entries), unit="structure", desc=f"gen {cfg.split}", disable=not progress,
                   smoothing=0.1)
        with bar:
            for entry, rows in zip(entries, ex.structures(entries), strict=True):
                s = shard_of[entry.sample_idx]
                pending[s].extend(rows)
                left[s] -= 1
                bar.update(1)
                if left[s] == 0:
                    _finish_shard(cfg, s, pending.pop(s), backend)


def make_plan(cfg: GenConfig, ex: _Executor | None = None, progress: bool = False) -> list[PlannedStructure]:
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


class _Executor:
    """In-process work for one worker; a spawn pool for several (with ``render``, a renderer per process)."""

    def __init__(self, cfg: GenConfig, renderer: Any, render: bool = True) -> None:
        self.cfg, self.renderer, self.render, self.pool = cfg, renderer, render, None

    def __enter__(self) -> _Executor:
        if self.cfg.workers > 1:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            args = (self.cfg.model_dump_json(), self.render)
            self.pool = ctx.Pool(self.cfg.workers, initializer=_init_worker, initargs=args)
        return self

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        return self.pool.imap(fn, items) if self.pool is not None else map(fn, items)

    def structures(self, entries: list[PlannedStructure]) -> Iterator[list[dict[str, Any]]]:
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


def _remove_stale_temp_files(cfg: GenConfig, shard: int, first: int, last: int) -> None:
    """Delete temp files a killed writer left in this shard's own folders (never another shard's)."""
    out, k = Path(cfg.out), cfg.shard_count
    stale = [p for rel in (layout.shard_parquet_relpath(cfg.split, shard, k),
                           layout.shard_done_relpath(cfg.split, shard, k))
             for p in (out / rel).parent.glob(f".{Path(rel).name}.*.tmp")]
    for idx in range(first, last + 1):
        sample = out / layout.sample_relpath(cfg.split, idx)
        if sample.is_dir():
            stale.extend(sample.rglob(".*.tmp"))
    for path in stale:
        log.info("removing %s, left by an interrupted write", path)
        path.unlink(missing_ok=True)


def _finish_shard(cfg: GenConfig, shard: int, rows: list[dict[str, Any]],
                  backend: dict[str, Any] | None = None) -> None:
    """Write the shard's parquet, then its completion record (the order makes the record trustworthy)."""
    out, k = Path(cfg.out), cfg.shard_count
    rel = layout.shard_parquet_relpath(cfg.split, shard, k)
    data = writer.parquet_bytes(rows, with_image=cfg.renderer != "none")
    atomic_write_bytes(out / rel, data)
    a, b = shard_range(shard, k, cfg.structures)
    partitions: dict[str, dict[str, int]] = {}
    for row in rows[::VIEWS_PER_STRUCTURE]:
        for kind in splits.PARTITIONS:
            if row[kind] is not None:
                partitions.setdefault(kind, {}).setdefault(row[kind], 0)
                partitions[kind][row[kind]] += 1
    record = {"shard": shard, "num_shards": k, "split": cfg.split, "first_sample": a, "last_sample": b,
              "structures": b - a + 1, "views": len(rows), "partitions": partitions, "parquet": rel,
              "sha256": writer.sha256_bytes(data)}
    if backend is not None:
        record["render_backend"] = backend
    atomic_write_json(out / layout.shard_done_relpath(cfg.split, shard, k), record)
    log.debug("shard %s complete (%d rows)", rel, len(rows))


def merge(out: Path, log_fn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Verify every shard against its completion record and write ``manifest.json`` and the dataset card; returns
    the manifest."""
    from spatialiq_train import __version__

    out = Path(out)
    cfg_path = out / layout.GEN_CONFIG_FILE
    if not cfg_path.exists():
        raise GenerationError(f"{out} has no {layout.GEN_CONFIG_FILE}; it is not a directory written by spatialiq gen")
    args = read_json(cfg_path)
    split, k = _key(args, "split", cfg_path), int(_key(args, "num_shards", cfg_path))
    backend = args.get("render_backend")
    missing = [s for s in range(k) if not (out / layout.shard_done_relpath(split, s, k)).exists()]
    if missing:
        raise GenerationError(f"{len(missing)} of {k} shard(s) are not complete (shard(s) {missing[:10]}); "
                              "rerun spatialiq gen with the same arguments for them")
    shards, counts = [], _empty_counts()
    for s in range(k):
        done = out / layout.shard_done_relpath(split, s, k)
        record = read_json(done)
        rel = layout.shard_parquet_relpath(split, s, k)
        if not (out / rel).exists():
            raise GenerationError(f"shard {rel} is missing although its completion record exists; rerun gen")
        digest, recorded = writer.sha256_file(out / rel), _key(record, "sha256", done)
        if digest != recorded:
            raise GenerationError(f"shard {rel}: sha256 {digest} differs from the recorded {recorded}; "
                                  "the file was modified: delete it and its .done.json, then rerun gen")
        if backend is not None:
            _check_shard_backend(done, record, backend)
        for key in ("views", "structures", "partitions"):
            _key(record, key, done)
        shards.append({"path": rel, "sha256": digest, "rows": record["views"], "structures": record["structures"]})
        _add_counts(counts, record, split)
    manifest = {"generator": "spatialiq-train", "version": __version__, "arguments": args, "counts": counts,
                "shards": shards}
    atomic_write_json(out / layout.MANIFEST_FILE, manifest)
    from data_gen.dataset_card import write_dataset_card

    write_dataset_card(out)  # beside the manifest: a finished dataset is loadable and pushable as it is
    if log_fn:
        log_fn(f"manifest: {counts['structures']} structures, {counts['views']} views in {k} shard(s)")
    return manifest


def _key(data: dict[str, Any], key: str, path: Path) -> Any:
    """``data[key]``, or a GenerationError naming the file and the key."""
    if not isinstance(data, dict) or key not in data:
        raise GenerationError(f"{path}: key {key!r} missing; the file is not one written by spatialiq gen "
                              "(rerun gen for it)")
    return data[key]


def _check_shard_backend(done: Path, record: dict[str, Any], backend: dict[str, Any]) -> None:
    """A shard rendered with another backend than the recorded one (e.g. a Slurm task on another node)."""
    shard_backend = record.get("render_backend")
    if shard_backend is None:
        raise GenerationError(f"{done}: key 'render_backend' missing although the run records one; delete it and "
                              "its parquet, then rerun gen for that shard")
    try:
        check_backend(backend, shard_backend, str(done))
    except GenerationError as exc:
        raise GenerationError(f"{exc}; delete this shard's .done.json and parquet, then rerun gen for it") from None


def _empty_counts() -> dict[str, Any]:
    return {"structures": 0, "views": 0, "splits": {}, "partitions": {}}


def _add_counts(counts: dict[str, Any], record: dict[str, Any], split: str) -> None:
    counts["structures"] += record["structures"]
    counts["views"] += record["views"]
    per = counts["splits"].setdefault(split, {"structures": 0, "views": 0})
    per["structures"] += record["structures"]
    per["views"] += record["views"]
    for kind, sides in record["partitions"].items():
        dst = counts["partitions"].setdefault(kind, {})
        for name, n in sides.items():
            dst[name] = dst.get(name, 0) + n
