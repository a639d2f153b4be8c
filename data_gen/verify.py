"""Re-read a finished (or partial) dataset against its recorded checksums, and find what a rerun must repair.

Every shard's completion record holds the sha256 of its parquet and, under ``files``, of every file its
structures wrote (``scene.json``, ``gt.json``, ``view.png``), computed from the bytes as they were written;
``manifest.json`` repeats each parquet's sha256. ``spatialiq gen --verify --out D`` reports every file whose
bytes differ (or that is gone), and a ``gen`` rerun with the same arguments regenerates the structures that own
them, byte for byte (a shard whose parquet fails is regenerated whole). A recorded sha256 cannot tell a finished
render from one cut short; ``data_gen.rerender`` renders a sample of structures again for that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_gen import shards
from spatialiq_train.core.dataset import MANIFEST_FILE, shard_done_relpath, shard_parquet_relpath
from spatialiq_train.core.io import read_json
from spatialiq_train.core.truth import MISSING, Mismatch, file_mismatches
from spatialiq_train.core.views import LEVEL, SAMPLE_DIR_RE


@dataclass
class VerifyReport:
    """What ``spatialiq gen --verify`` found."""

    out: Path
    checked: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    """Shards (their parquet paths) with no completion record: not generated yet."""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.incomplete

    def summary(self, also: str = "") -> str:
        """One line: what was checked (``also`` names a further check, e.g. the re-render's) and the verdict."""
        state = "all match" if self.ok else (f"{len(self.mismatches)} mismatch(es), "
                                             f"{len(self.incomplete)} incomplete shard(s)")
        return f"verified {self.checked} file(s) in {self.out} against their recorded sha256{also}: {state}"


@dataclass(frozen=True)
class Damage:
    """A complete shard some of whose per-view files fail: the structures to regenerate and what they must give."""

    shard: int
    samples: tuple[int, ...]
    expected: dict[str, str]
    """The shard's recorded ``{file: sha256}``."""
    mismatches: tuple[Mismatch, ...]


def verify(out: Path) -> VerifyReport:
    """Every shard's parquet and per-view files against its completion record, and the manifest's shard sha256s."""
    out = Path(out)
    _, split, k = shards.read_gen_config(out)
    report = VerifyReport(out)
    manifest = _manifest_shards(out, report)
    for s in range(k):
        rel = shard_parquet_relpath(split, s, k)
        done = out / shard_done_relpath(split, s, k)
        if not done.exists():
            report.incomplete.append(rel)
            continue
        record = shards.read_record(done)
        files = _recorded_files(record, done, report)
        report.mismatches += file_mismatches(out, {rel: shards.record_key(record, "sha256", done), **files})
        report.checked += 1 + len(files)
        if manifest is not None and manifest.get(rel) != record["sha256"]:
            report.mismatches.append(
                Mismatch(f"{MANIFEST_FILE} (shard {rel})", record["sha256"], manifest.get(rel, MISSING)))
    return report


def damaged(out: Path, split: str, complete: list[int], num_shards: int) -> list[Damage]:
    """The complete shards (parquet intact) whose recorded per-view files fail, with the structures owning them."""
    found = []
    for s in complete:
        done = out / shard_done_relpath(split, s, num_shards)
        files = shards.read_record(done).get("files")
        if not isinstance(files, dict):
            continue  # recorded before per-file checksums: nothing to compare with
        bad = file_mismatches(out, files)
        if bad:
            samples = tuple(sorted({_sample_of(m.path) for m in bad}))
            found.append(Damage(s, samples, files, tuple(bad)))
    return found


def _sample_of(rel: str) -> int:
    """sample_idx of a file under ``<split>/level_1/sample_NNNNN/``."""
    m = SAMPLE_DIR_RE.match(rel.split("/")[2])
    if m is None:
        raise ValueError(f"{rel}: not a file under <split>/{LEVEL}/sample_NNNNN")
    return int(m.group(1))


def _recorded_files(record: dict[str, Any], done: Path, report: VerifyReport) -> dict[str, str]:
    files = record.get("files")
    if isinstance(files, dict):
        return files
    report.notes.append(f"{done.relative_to(report.out)}: no per-file sha256 recorded (written before they were); "
                        "only its parquet is verified")
    return {}


def _manifest_shards(out: Path, report: VerifyReport) -> dict[str, str] | None:
    """``{parquet path: sha256}`` of manifest.json, None (with a note) when there is none yet."""
    path = out / MANIFEST_FILE
    if not path.exists():
        report.notes.append(f"no {MANIFEST_FILE} yet (run spatialiq gen-merge once every shard is done)")
        return None
    try:
        return {str(e["path"]): str(e["sha256"]) for e in read_json(path)["shards"]}
    except (ValueError, KeyError, TypeError):
        report.mismatches.append(Mismatch(MANIFEST_FILE, "a manifest written by spatialiq gen",
                                          "unreadable JSON or no shards list"))
        return None
