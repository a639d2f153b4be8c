"""Shards: their sample ranges, completion records, stale temp files, and the merge into ``manifest.json``.

``num_shards`` (default ``ceil(N / 64)``) contiguous, balanced ranges of ``sample_idx``. A shard is complete once
its completion record ``shards/<stem>.done.json`` (written after the parquet, holding its sha256) exists; a rerun
skips complete shards and redoes the others from scratch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_gen import writer
from data_gen.config import VIEWS_PER_STRUCTURE, GenConfig, GenerationError
from data_gen.identity import check_backend
from spatialiq_train.core import splits
from spatialiq_train.core.dataset import GEN_CONFIG_FILE, MANIFEST_FILE, shard_done_relpath, shard_parquet_relpath
from spatialiq_train.core.io import atomic_write_bytes, atomic_write_json, read_json, sha256_file
from spatialiq_train.core.versions import PROJECT_VERSION
from spatialiq_train.core.views import sample_relpath

log = logging.getLogger(__name__)


def shard_range(shard: int, num_shards: int, structures: int) -> tuple[int, int]:
    """(first, last) sample_idx of a shard, 1-based inclusive; balanced contiguous ranges."""
    return shard * structures // num_shards + 1, (shard + 1) * structures // num_shards


def shard_complete(out: Path, split: str, shard: int, num_shards: int) -> bool:
    """True when the shard's completion record exists and its parquet still has the recorded sha256."""
    done = out / shard_done_relpath(split, shard, num_shards)
    parquet = out / shard_parquet_relpath(split, shard, num_shards)
    if not (done.exists() and parquet.exists()):
        return False
    return read_record(done).get("sha256") == sha256_file(parquet)


def read_record(done: Path) -> dict[str, Any]:
    """A shard's completion record; anything but a JSON object is a GenerationError naming the file."""
    record = read_json(done)
    if not isinstance(record, dict):
        raise GenerationError(f"{done}: a completion record must be a JSON object, got {type(record).__name__}; "
                              "the file is not one written by spatialiq gen (delete it and rerun gen for its shard)")
    return record


def remove_stale_temp_files(cfg: GenConfig, shard: int, first: int, last: int) -> None:
    """Delete temp files a killed writer left in this shard's own folders (never another shard's)."""
    out, k = Path(cfg.out), cfg.shard_count
    stale = [p for rel in (shard_parquet_relpath(cfg.split, shard, k),
                           shard_done_relpath(cfg.split, shard, k))
             for p in (out / rel).parent.glob(f".{Path(rel).name}.*.tmp")]
    for idx in range(first, last + 1):
        sample = out / sample_relpath(cfg.split, idx)
        if sample.is_dir():
            stale.extend(sample.rglob(".*.tmp"))
    for path in stale:
        log.info("removing %s, left by an interrupted write", path)
        path.unlink(missing_ok=True)


def finish_shard(cfg: GenConfig, shard: int, rows: list[dict[str, Any]], backend: dict[str, Any] | None = None,
                 files: dict[str, str] | None = None) -> None:
    """Write the shard's parquet, then its completion record (the order makes the record trustworthy).

    The record holds the parquet's sha256, ``backend`` and ``files``, the sha256 of every per-view file of the
    shard's structures (``data_gen.verify`` checks them).
    """
    out, k = Path(cfg.out), cfg.shard_count
    rel = shard_parquet_relpath(cfg.split, shard, k)
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
    if files is not None:
        record["files"] = files
    atomic_write_json(out / shard_done_relpath(cfg.split, shard, k), record)
    log.debug("shard %s complete (%d rows)", rel, len(rows))


def merge(out: Path, log_fn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Verify every shard against its completion record and write ``manifest.json`` and the dataset card; returns
    the manifest."""
    out = Path(out)
    args, split, k = read_gen_config(out)
    backend = args.get("render_backend")
    missing = [s for s in range(k) if not (out / shard_done_relpath(split, s, k)).exists()]
    if missing:
        raise GenerationError(f"{len(missing)} of {k} shard(s) are not complete (shard(s) {missing[:10]}); "
                              "rerun spatialiq gen with the same arguments for them")
    shards, counts = [], _empty_counts()
    for s in range(k):
        record, digest = _checked_shard(out, split, s, k, backend)
        shards.append({"path": record["parquet"], "sha256": digest, "rows": record["views"],
                       "structures": record["structures"]})
        _add_counts(counts, record, split)
    manifest = {"generator": "spatialiq-train", "version": PROJECT_VERSION, "arguments": args, "counts": counts,
                "shards": shards}
    atomic_write_json(out / MANIFEST_FILE, manifest)
    from data_gen.dataset_card import write_dataset_card

    write_dataset_card(out)  # beside the manifest: a finished dataset is loadable and pushable as it is
    if log_fn:
        log_fn(f"manifest: {counts['structures']} structures, {counts['views']} views in {k} shard(s)")
    return manifest


def read_gen_config(out: Path) -> tuple[dict[str, Any], str, int]:
    """(recorded arguments, split, number of shards) of a directory written by ``spatialiq gen``."""
    cfg_path = out / GEN_CONFIG_FILE
    if not cfg_path.exists():
        raise GenerationError(f"{out} has no {GEN_CONFIG_FILE}; it is not a directory written by spatialiq gen")
    args = read_json(cfg_path)
    return args, record_key(args, "split", cfg_path), int(record_key(args, "num_shards", cfg_path))


def _checked_shard(out: Path, split: str, s: int, k: int,
                   backend: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """(completion record with ``parquet`` set, parquet sha256) of shard ``s``, checked against each other."""
    done = out / shard_done_relpath(split, s, k)
    record = read_record(done)
    rel = shard_parquet_relpath(split, s, k)
    if not (out / rel).exists():
        raise GenerationError(f"shard {rel} is missing although its completion record exists; rerun gen")
    digest, recorded = sha256_file(out / rel), record_key(record, "sha256", done)
    if digest != recorded:
        raise GenerationError(f"shard {rel}: sha256 {digest} differs from the recorded {recorded}; "
                              "the file was modified: delete it and its .done.json, then rerun gen")
    if backend is not None:
        _check_shard_backend(done, record, backend)
    for key in ("views", "structures", "partitions"):
        record_key(record, key, done)
    return {**record, "parquet": rel}, digest


def record_key(data: dict[str, Any], key: str, path: Path) -> Any:
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
