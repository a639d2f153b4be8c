"""``gen --verify``'s second check: a sample of structures rendered afresh, each image compared with the file on disk.

The recorded sha256s (``data_gen.verify``) prove that the bytes on disk are the bytes that were written; they
cannot prove that what was written was a finished render. An image kept from a render cut short (Mitsuba winds a
render down on SIGINT and returns a partial image) has a recorded sha256 of its own. So ``gen --verify`` also
renders ``--rerender N`` structures of every complete shard again (N = 1: its first; for N >= 2 evenly spaced over
the shard, its first and last included; every structure when N is at least the shard's size; none with 0) and
compares each of their 16 ``view.png`` with the fresh render, byte for byte. It needs this machine to render what
the dataset records (renderer, variant, version and device: ``data_gen.identity``); elsewhere the re-render is
skipped with a note saying why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from data_gen import identity, plan, shards, writer
from data_gen.config import GenConfig, GenerationError
from data_gen.generation_run import GenerationRun
from data_gen.pipeline import build_structure
from spatialiq_train.core.dataset import IMAGE_FILE
from spatialiq_train.core.truth import Mismatch, found_sha256
from spatialiq_train.core.views import view_relpath

FRESH = "(a fresh render of its record)"
"""How a re-render mismatch names what it compared with."""


@dataclass
class Rerendered:
    """What the re-render found: the structures and images it compared, the images that differ, and notes."""

    structures: int = 0
    images: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def spread(first: int, last: int, n: int) -> list[int]:
    """``n`` sample indices evenly spaced over ``first..last`` (both ends included when ``n >= 2``; all when
    ``n`` reaches the range's size)."""
    size = last - first + 1
    if n <= 0 or size <= 0:
        return []
    if n >= size:
        return list(range(first, last + 1))
    if n == 1:
        return [first]
    return sorted({first + round(i * (size - 1) / (n - 1)) for i in range(n)})


def recorded_config(out: Path) -> GenConfig:
    """The arguments a dataset was generated with (``gen_config.json``), its recorded Mitsuba variant pinned."""
    args, split, k = shards.read_gen_config(out)
    backend = args.get("render_backend") or {}
    variant = backend.get("variant") if args.get("renderer") == "mitsuba" else None
    try:
        return GenConfig(out=out, structures=args["structures"], seed=args["seed"], split=split,
                         renderer=args["renderer"], object_type=args["object_type"], num_shards=k,
                         resolution=args["resolution"], parts=args.get("parts"),
                         render_variant=variant if variant in ("scalar_rgb", "llvm_ad_rgb", "cuda_ad_rgb") else "auto")
    except (KeyError, ValueError) as exc:
        raise GenerationError(f"{out}/gen_config.json does not hold the arguments of a gen run ({exc})") from None


def rerender(out: Path, per_shard: int) -> Rerendered:
    """Render ``per_shard`` structures of every complete shard of ``out`` again and compare their images (module
    doc); shards without a completion record are left to ``data_gen.verify``."""
    found = Rerendered()
    cfg = recorded_config(Path(out))
    if per_shard <= 0 or cfg.renderer == "none":
        return found
    with GenerationRun(cfg) as run:
        recorded = shards.read_gen_config(cfg.out)[0].get("render_backend")
        try:
            identity.check_backend(recorded or {}, run.backend or {}, str(cfg.out))
        except GenerationError as exc:
            found.notes.append(f"no image re-rendered: this machine does not render what the dataset records ({exc})")
            return found
        entries = {e.sample_idx: e for e in plan.load_or_make(cfg.out, cfg.seed, cfg.split, cfg.structures,
                                                              parts=cfg.parts)}
        for s in range(cfg.shard_count):
            if not shards.shard_complete(cfg.out, cfg.split, s, cfg.shard_count):
                continue
            for idx in spread(*shards.shard_range(s, cfg.shard_count, cfg.structures), per_shard):
                _, _, images = build_structure(cfg, entries[idx], run.renderer)
                found.structures += 1
                for leaf, png in (images or {}).items():
                    rel = f"{view_relpath(cfg.split, idx, leaf)}/{IMAGE_FILE}"
                    fresh, on_disk = writer.sha256_bytes(png), found_sha256(cfg.out / rel)
                    found.images += 1
                    if fresh != on_disk:
                        found.mismatches.append(Mismatch(f"{rel} {FRESH}", fresh, on_disk))
    return found
