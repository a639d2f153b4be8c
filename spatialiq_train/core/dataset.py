"""The dataset schema: file names, ground-truth fields, one validator, one view record, one reader.

A dataset root holds one or both of two forms of the same leaf views (benchmark-spec 6.1, 6.2):

```
<root>/gen_config.json                                  the arguments that decide the bytes (resume check)
<root>/manifest.json                                    written by the final merge
<root>/<split>/level_1/sample_NNNNN/scene.json          one per structure (5-digit, 1-based)
<root>/<split>/level_1/sample_NNNNN/view_VV/offsetO_fovF_distD/gt.json   (+ view.png when rendered)
<root>/data/<split>-SSSSS-of-KKKKK.parquet              one row per leaf view (``view`` = its folder)
<root>/shards/<split>-SSSSS-of-KKKKK.done.json          completion record of a shard (its sha256)
```

The released benchmark has the same leaf folders under another prefix and no split folder
(``eval_set/data_<ts>/level_1/sample_N/view_VV/...``). :func:`iter_views` reads either layout, or the
parquet shards when there are no leaf folders; traces, eval, check-splits and fidelity all read through it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spatialiq_train.core.io import natural_key, read_json, resolve_inside
from spatialiq_train.core.splits import SPLITS, Part, part_from_draws, part_of
from spatialiq_train.core.truth import (
    GT_INT_FIELDS as GT_INT_FIELDS,  # re-exported: the schema's names stay importable from here
)
from spatialiq_train.core.truth import (
    SHARDS_DIR,
    DatasetError,
    DatasetNotFoundError,
    GroundTruthError,
    check_constant_fields,
    recorded_mismatches,
    recorded_sha256,
    refuse_mismatches,
    validate_gt,
)
from spatialiq_train.core.views import SAMPLE_DIR_RE, LeafView, parse_leaf_path, parse_view_path, sample_of_view

log = logging.getLogger(__name__)

GEN_CONFIG_FILE = "gen_config.json"
MANIFEST_FILE = "manifest.json"
DATA_DIR = "data"
SCENE_FILE = "scene.json"
GT_FILE = "gt.json"
IMAGE_FILE = "view.png"

GT_FIELDS: tuple[str, ...] = (
    "object_type", "sample_idx", "view_idx", "offset", "fov", "dist", "task1",
    "task_main", "task2", "task3", "task4", "total_blocks", "num_hidden_blocks", "num_columns", "num_layers",
    "task5", "task6", "task7", "task8", "task9", "task10", "task11", "visible_blocks", "camera",
)
"""The keys of a leaf ``gt.json``, in the written order (benchmark-spec 4.2, then ``camera``)."""
REWARD_FIELDS: tuple[str, ...] = (
    "task2", "task3", "task4", "task5", "task6", "task7", "task8", "task9", "num_hidden_blocks", "task_main",
)
"""Fields copied onto every trace record for the rewards (stepwise needs task2..9 and the hidden count)."""
COT_FIELDS: tuple[str, ...] = ("task1", *REWARD_FIELDS)
"""Fields the CoT template reads (the reward fields and the object type answer ``task1``)."""
SCORED_FIELDS: tuple[str, ...] = ("task_main", *REWARD_FIELDS[:8])
"""Fields every evaluated view must have (task10/task11 are read when present)."""
_ROW_ONLY = frozenset({"view", "structure_id", "split", "trainval", "dapo", "seed", "index", "height_map", "image"})
"""Parquet columns that are not ground truth of the view (the rest, with ``camera`` decoded, is its gt.json)."""


def shard_stem(split: str, shard: int, num_shards: int) -> str:
    """``train-00003-of-00016``: the name shared by a shard's parquet file and its completion record."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is outside 0..{num_shards - 1}")
    return f"{split}-{shard:05d}-of-{num_shards:05d}"


def shard_parquet_relpath(split: str, shard: int, num_shards: int) -> str:
    return f"{DATA_DIR}/{shard_stem(split, shard, num_shards)}.parquet"


def shard_done_relpath(split: str, shard: int, num_shards: int) -> str:
    return f"{SHARDS_DIR}/{shard_stem(split, shard, num_shards)}.done.json"


def parquet_shards(root: str | Path, split: str | None = None) -> list[Path]:
    """``<root>/data/<split>-*.parquet`` (every ``*.parquet`` there when ``split`` is None), sorted."""
    return sorted((Path(root) / DATA_DIR).glob(f"{split}-*.parquet" if split else "*.parquet"))


ImageSink = Callable[[str, bytes], None]
"""Receives ``(view, PNG bytes)`` of a parquet row as :func:`iter_views` reads it."""


@dataclass(frozen=True)
class View:
    """One leaf view: where it is, its lens, its ground truth, its structure and split, and its image."""

    view: str
    """Leaf folder relative to the root (POSIX): the ``view`` column of shards and of the released eval_raw files."""
    leaf: LeafView
    gt: dict[str, Any] = field(repr=False)
    root: Path = field(repr=False)
    structure_id: str = ""
    """``scene.json``'s ``structure_id`` (the parquet column), else the sample folder path, else the view path."""
    split: str | None = None
    """The forced split, else the recorded one (split folder or parquet column); None in the released layout."""
    has_image: bool = False
    image_bytes: bytes | None = field(default=None, repr=False, compare=False)
    """PNG bytes when the view came from a parquet shard with an image column."""
    recorded_part: Part | None = None
    """The part recorded by a parquet row's ``trainval`` and ``dapo`` columns; None where none is recorded."""

    @property
    def part(self) -> Part | None:
        """Its part of the train split: as recorded, else drawn from its structure id; None for a benchmark view."""
        return None if self.split == "benchmark" else self.recorded_part or part_of(self.structure_id)

    @property
    def path(self) -> Path:
        """The leaf folder."""
        return self.root / self.view

    @property
    def image(self) -> str:
        """``<view>/view.png``, relative to the dataset root (what trace records carry)."""
        return f"{self.view}/{IMAGE_FILE}"

    @property
    def image_path(self) -> Path:
        return self.path / IMAGE_FILE

    @property
    def image_source(self) -> Path | bytes:
        """What an engine opens: the embedded PNG bytes when present, else the view.png path."""
        return self.image_bytes if self.image_bytes is not None else self.image_path

    @property
    def object_type(self) -> str:
        return str(self.gt.get("object_type", "cube"))

    @property
    def sample_idx(self) -> int | None:
        """N of the ``sample_N`` folder holding the view, or None."""
        sample = sample_of_view(self.view)
        return int(SAMPLE_DIR_RE.match(sample.rsplit("/", 1)[-1]).group(1)) if sample else None  # type: ignore[union-attr]

    def partner_view(self, step: int) -> str:
        """The same leaf under base view ``(v + step - 1) % 4 + 1`` (task10: step 1, task11: step 2)."""
        sample, _, leaf_dir = self.view.rsplit("/", 2)
        return f"{sample}/{self.leaf.partner(step).view_dir}/{leaf_dir}"

    def partner_image(self, step: int) -> Path:
        return resolve_inside(self.root, self.partner_view(step)) / IMAGE_FILE


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_gt(path: str | Path) -> dict[str, Any]:
    """Read a leaf ``gt.json`` (the file or its folder) as a JSON object, without further checks."""
    p = Path(path)
    if p.is_dir():
        p = p / GT_FILE
    gt = _read_json(p)
    if not isinstance(gt, dict):
        raise GroundTruthError(f"{p}: gt.json must hold a JSON object, got {type(gt).__name__}")
    return gt


def read_scene(path: str | Path) -> dict[str, Any]:
    """Read a ``scene.json`` and check the keys every reader relies on; errors name the file and key."""
    scene = _read_json(path)
    if not isinstance(scene, dict):
        raise DatasetError(f"{path}: scene.json must hold a JSON object")
    hmap = scene.get("height_map")
    if not (isinstance(hmap, list) and all(isinstance(r, list) and all(_is_int(v) for v in r) for r in hmap)):
        raise DatasetError(f"{path}: key 'height_map' must be a list of rows of integers")
    return scene


def _read_json(path: str | Path) -> Any:
    try:
        return read_json(path)
    except ValueError as exc:
        raise DatasetError(str(exc)) from None
    except OSError as exc:
        raise DatasetNotFoundError(f"{path}: cannot read: {exc.strerror or exc}") from None


def iter_scene_files(root: str | Path) -> Iterator[Path]:
    """Every ``scene.json`` of a ``sample_N`` folder under ``root``, in natural order of the path relative to root."""
    root = Path(root)
    found = [p for p in root.rglob(SCENE_FILE) if SAMPLE_DIR_RE.match(p.parent.name)]
    yield from sorted(found, key=lambda p: natural_key(p.relative_to(root).as_posix()))


def find_gt_files(root: str | Path) -> list[Path]:
    """Every ``gt.json`` under ``root`` (hidden folders skipped), in natural order of the path relative to root."""
    root = Path(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if GT_FILE in filenames:
            found.append(Path(dirpath) / GT_FILE)
    return sorted(found, key=lambda p: natural_key(p.relative_to(root).as_posix()))


def iter_leaf_dirs(sample_dir: str | Path) -> Iterator[View]:
    """The leaf views of one sample folder, sorted by view then leaf name; ``gt`` is the file as read (unchecked)
    and ``root`` the folder above the sample folder."""
    sample_dir = Path(sample_dir)
    for gt_path in sorted(sample_dir.glob(f"view_*/*/{GT_FILE}")):
        _, leaf = parse_view_path(gt_path.parent)
        rel = gt_path.parent.relative_to(sample_dir.parent).as_posix()
        yield View(rel, leaf, read_gt(gt_path), sample_dir.parent, has_image=(gt_path.parent / IMAGE_FILE).is_file())


def iter_views(
    root: str | Path, split: str | None = None, *, required: Iterable[str] = ("task_main",), images: bool = True,
    on_image: ImageSink | None = None,
) -> Iterator[View]:
    """Every leaf view of a dataset, checked by the one integrity rule (``spatialiq_train.core.truth``), in natural
    order of its ``view`` path.

    Each view's truth passes :func:`validate_gt` (types, required fields, the relations of benchmark-spec 4.3) and
    :data:`~spatialiq_train.core.truth.CONSTANT_FIELDS` agree across a structure's views. Where ``spatialiq gen``
    recorded sha256s (``shards/*.done.json``), the bytes read must be the recorded ones: every recorded ``gt.json``
    below the folder read (one that is gone counts) and each leaf's recorded ``view.png``, or every parquet shard
    read when the dataset holds only the shards; a mismatch is a GroundTruthError naming the file.

    ``split=None`` reads the whole root, each view labelled with its split folder (None in the released layout).
    A ``split`` reads ``root/split``, or ``root`` itself when it holds no split folder at all (the released
    layout), and labels every view with it. Leaf folders (``view_VV/offsetO_fovF_distD/gt.json``; hidden
    folders skipped) are read when there are any, else the parquet shards ``root/data/<split>-*.parquet``.
    ``images=False`` drops the PNG bytes of parquet rows (``has_image`` still tells whether there was one);
    ``on_image`` is called with ``(view, PNG bytes)`` of every parquet row that embeds one, as its shard is read,
    so a caller can write the images out without holding them or reading the shards a second time.
    A leaf or a parquet ``view`` that resolves outside ``root`` is refused; finding no view at all is a
    :class:`DatasetNotFoundError` naming where it looked.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetNotFoundError(f"data root {root} does not exist or is not a folder")
    required = tuple(required)
    recorded = recorded_sha256(root)
    base = _folder_base(root, split)
    leaves = _leaf_gt_files(root, base) if base is not None else []
    if leaves and base is not None:  # the records first: an edited file is named as such before it is judged
        # truth and picture: each leaf's gt.json and view.png (the images are checked before any work starts)
        read = (p.relative_to(root).as_posix() for leaf in leaves for p in (leaf, leaf.parent / IMAGE_FILE))
        refuse_mismatches(root, recorded_mismatches(root, read, recorded, base.relative_to(root).as_posix()))
        views = _folder_views(root, leaves, split, required)
    else:
        shards = parquet_shards(root, split)
        refuse_mismatches(root, recorded_mismatches(root, (p.relative_to(root).as_posix() for p in shards), recorded))
        views = [v for path in shards for v in _parquet_views(root, path, split, required, images, on_image)]
    if not views:
        raise DatasetNotFoundError(_nothing_found(root, base, split))
    check_constant_fields(((v.split, v.structure_id), v.view, v.gt) for v in views)  # a leak is the traces' error
    views.sort(key=lambda v: natural_key(v.view))
    yield from views


def _folder_base(root: Path, split: str | None) -> Path | None:
    """``root/split`` when it exists; ``root`` when no split is asked or it holds no split folder; else None."""
    if not split:
        return root
    if (root / split).is_dir():
        return root / split
    return None if any((root / name).is_dir() for name in SPLITS) else root


def _nothing_found(root: Path, base: Path | None, split: str | None) -> str:
    shards = f"{root / DATA_DIR}/{split or '*'}-*.parquet"
    if base is None:
        present = ", ".join(name for name in SPLITS if (root / name).is_dir())
        return (f"no {split} views found: split folder {root / split} does not exist and there is no {shards}; "
                f"{root} holds split folder(s) {present} (pass --split with one of them, or a data root without "
                "split folders)")
    return (f"no {split + ' ' if split else ''}views found below {base}: no view_VV/offsetO_fovF_distD/{GT_FILE} "
            f"and no {shards}")


def _split_label(view: str, forced: str | None) -> str | None:
    if forced:
        return forced
    head = view.split("/", 1)[0]
    return head if head in SPLITS else None


def _leaf_gt_files(root: Path, base: Path) -> list[Path]:
    """The ``gt.json`` files below ``base`` in ``view_VV/offsetO_fovF_distD`` leaf folders (others are skipped)."""
    leaves = []
    for gt_path in find_gt_files(base):
        if parse_leaf_path(gt_path.parent.relative_to(root).as_posix()) is None:
            log.debug("skipping %s: not a view_VV/offsetO_fovF_distD leaf folder", gt_path.parent)
        else:
            leaves.append(gt_path)
    return leaves


def _folder_views(root: Path, leaves: list[Path], split: str | None, required: tuple[str, ...]) -> list[View]:
    ids: dict[str, str] = {}
    views = []
    for gt_path in leaves:
        rel = gt_path.parent.relative_to(root).as_posix()
        leaf = parse_leaf_path(rel)
        assert leaf is not None  # _leaf_gt_files kept leaf folders only
        try:
            resolve_inside(root, f"{rel}/{GT_FILE}")
        except ValueError as exc:
            raise DatasetError(f"{gt_path}: {exc}") from None
        gt = validate_gt(_read_json(gt_path), gt_path, required)
        sid = _structure_id(root, rel, ids)
        views.append(View(rel, leaf, gt, root, sid, _split_label(rel, split), (gt_path.parent / IMAGE_FILE).is_file()))
    return views


def _structure_id(root: Path, view: str, cache: dict[str, str]) -> str:
    """``scene.json``'s ``structure_id`` in the view's sample folder, else that folder's path, else the view path."""
    sample = sample_of_view(view)
    if sample is None:
        return view
    if sample not in cache:
        scene_path = root / sample / SCENE_FILE
        scene = _read_json(scene_path) if scene_path.is_file() else None
        sid = scene.get("structure_id") if isinstance(scene, dict) else None
        if sid is not None and not (isinstance(sid, str) and sid):
            raise DatasetError(f"{scene_path}: key 'structure_id' must be a non-empty string, got {sid!r}")
        cache[sample] = sid or sample
    return cache[sample]


def iter_shard_rows(path: str | Path, required: Iterable[str] = (), columns: Iterable[str] | None = None
                    ) -> Iterator[dict[str, Any]]:
    """The rows of one parquet shard as dicts, batch by batch (only ``columns`` when given); a shard that cannot
    be read or lacks a ``required`` column is a DatasetError naming it."""
    import pyarrow.parquet as pq

    cols = list(columns) if columns is not None else None
    try:
        shard = pq.ParquetFile(path)
        missing = [c for c in (*required, *(cols or ())) if c not in shard.schema_arrow.names]
        if missing:
            raise DatasetError(f"{path}: parquet shard lacks column(s) {', '.join(map(repr, dict.fromkeys(missing)))}")
        for batch in shard.iter_batches(batch_size=256, columns=cols):
            yield from batch.to_pylist()
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types; name the file
        raise DatasetError(f"{path}: cannot read the parquet shard: {exc}") from exc


def _parquet_views(root: Path, path: Path, split: str | None, required: tuple[str, ...], images: bool,
                   on_image: ImageSink | None) -> list[View]:
    views = []
    for i, row in enumerate(iter_shard_rows(path, ("view", "view_idx", "offset", "fov", "dist", *required))):
        views.append(_row_view(root, path, i, row, split, required, images))
        data = _image_bytes(row)
        if on_image is not None and data:
            on_image(views[-1].view, data)
    return views


def _image_bytes(row: dict[str, Any]) -> bytes | None:
    """The PNG bytes of a parquet row's ``image`` (a ``{"bytes", "path"}`` struct), None when it has none."""
    image = row.get("image")
    return image.get("bytes") if isinstance(image, dict) else None


def _row_view(
    root: Path, path: Path, i: int, row: dict[str, Any], split: str | None, required: tuple[str, ...], images: bool
) -> View:
    view = row["view"]
    if not isinstance(view, str) or not view:
        raise DatasetError(f"{path}: column 'view' must be a leaf folder path, got {view!r} (row {i})")
    try:
        resolve_inside(root, view)
        leaf = LeafView(int(row["view_idx"]), float(row["offset"]), float(row["fov"]), float(row["dist"]))
        part = part_from_draws(row["trainval"], row["dapo"]) if row.get("trainval") or row.get("dapo") else None
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{path}: {exc} (row {i})") from None
    gt = {k: v for k, v in row.items() if k not in _ROW_ONLY}
    if isinstance(gt.get("camera"), str):
        gt["camera"] = json.loads(gt["camera"])
    validate_gt(gt, path, required, row=i)
    data = _image_bytes(row)
    sid = row.get("structure_id") or sample_of_view(view) or view
    recorded = row.get("split") if row.get("split") in SPLITS else None
    return View(view, leaf, gt, root, sid, split or recorded or _split_label(view, None), data is not None,
                data if images else None, part)
