"""SFT-plain and SFT-CoT traces: chat-format JSONL records built from per-view ground truth.

Views come from ``spatialiq_train.core.dataset.iter_views``: the per-view layout
``<data>/<split>/level_1/sample_NNNNN/view_VV/<leaf>/gt.json`` (``scene.json`` in the sample folder,
``view.png`` beside ``gt.json``), the parquet shards ``<data>/data/<split>-*.parquet`` of a dataset
without leaf folders (same records: the ``view`` column is the leaf folder path), or the released
benchmark, which has no split folder and no ``structure_id``: there the group id is the path of the
sample folder (benchmark-spec 6.3). Records of the train split go to one of the three disjoint parts ``val``,
``warmup`` and ``rl`` (``View.part``: the recorded ``trainval`` and ``dapo`` columns of a parquet row, else the
draws of ``spatialiq_train.core.splits.part_of`` on the structure id), and those of ``warmup`` and ``rl`` also to
``train``; those of the benchmark split go to ``benchmark``; all decided by structure.

Targets: SFT-plain is ``<answer>{value}</answer>`` (the released ``prepare_data.py`` wrote the
bare integer; the tags make the plain model scorable by the gated reward exactly like CoT models).
SFT-CoT is ``fill_cot_template(gt)`` exactly, under the CoT system prompt.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from spatialiq_train.core.dataset import (  # REWARD_FIELDS: also read from here
    IMAGE_FILE,
    REWARD_FIELDS,
    DatasetError,
    ImageSink,
    View,
    iter_views,
)
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.io import atomic_write_bytes, atomic_write_text, resolve_inside
from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT
from spatialiq_train.core.splits import SPLITS
from spatialiq_train.core.tasks import COT_FIELDS, Dialect, build_prompt, fill_cot_template, get_task

logger = logging.getLogger(__name__)

Kind = Literal["plain", "cot"]
KINDS: tuple[Kind, ...] = ("plain", "cot")
TRAIN_FILES: tuple[str, ...] = ("train", "val", "warmup", "rl")
BENCHMARK_FILE = "benchmark"
TRACE_FILES: tuple[str, ...] = (*TRAIN_FILES, BENCHMARK_FILE)
"""Every trace file name (``<name>.jsonl``) ``write_traces`` writes, or removes when a run writes no such file."""
SKIPPED_PLAIN_TASKS: tuple[str, ...] = ("task10", "task11")
"""Two-image tasks: the single-image trace pipeline skips them, as the release does."""


def load_views(data_root: Path, split: str | None = None, on_image: ImageSink | None = None) -> list[View]:
    """Every leaf view under ``data_root`` (leaf folders, else parquet shards) with its ground truth, in natural
    path order; ``split`` reads only that split folder, or labels every view of a root without split folders.
    ``on_image`` receives the PNG bytes embedded in parquet rows as they are read (e.g. :class:`ImageExtractor`)."""
    if split is not None and split not in SPLITS:
        raise DatasetError(f"--split: unknown split {split!r}; valid: {', '.join(SPLITS)}")
    views = list(iter_views(data_root, split, images=False, on_image=on_image))
    unlabelled = next((v for v in views if v.split not in SPLITS), None)
    if unlabelled is not None:
        raise DatasetError(
            f"{unlabelled.view}: the data root should hold split folders {', '.join(SPLITS)}; "
            "for other layouts (e.g. the released benchmark) pass --split train|benchmark"
        )
    return views


def plain_target(value: Any) -> str:
    """SFT-plain target: the value wrapped in answer tags, e.g. ``<answer>12</answer>``."""
    return f"<answer>{value}</answer>"


def build_messages(prompt: str, image: str, target: str, system: str | None = None) -> list[dict[str, Any]]:
    """Chat messages: optional system turn, user turn (image item, text item), assistant turn (target).

    Every ``content`` is a list of typed items, so the column has one Arrow type.
    """
    messages: list[dict[str, Any]] = []
    if system is not None:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append(
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": prompt}]}
    )
    messages.append({"role": "assistant", "content": [{"type": "text", "text": target}]})
    return messages


def _record(view: View, task_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    value = view.gt.get(task_id)
    return {
        "messages": messages,
        "view": view.view,
        "structure_id": view.structure_id,
        "answer": value if isinstance(value, int) else None,
        "task_id": task_id,
        **{f: view.gt.get(f) for f in REWARD_FIELDS},
    }


def view_records(
    view: View,
    kind: Kind,
    tasks: Sequence[str] = ("task_main",),
    mask_final_answer: str | None = None,
    dialect: Dialect = "training",
) -> list[dict[str, Any]]:
    """The trace records of one view: one per task (plain) or one CoT record; [] when its truth is incomplete."""
    if kind == "cot":
        if any(view.gt.get(f) is None for f in COT_FIELDS):
            return []
        target = fill_cot_template(view.gt, mask_final_answer=mask_final_answer)
        messages = build_messages(build_prompt("task_main", dialect), view.image, target, system=COT_SYSTEM_PROMPT)
        return [_record(view, "task_main", messages)]
    records = []
    for task_id in tasks:
        if task_id in SKIPPED_PLAIN_TASKS or view.gt.get(task_id) is None:
            continue
        messages = build_messages(build_prompt(task_id, dialect), view.image, plain_target(view.gt[task_id]))
        records.append(_record(view, task_id, messages))
    return records


def output_file(view: View) -> tuple[str, ...]:
    """The JSONL files (without suffix) a view's records go to."""
    if view.split == "benchmark":
        return (BENCHMARK_FILE,)
    return ("val",) if view.part == "val" else ("train", str(view.part))


def check_options(kind: str, tasks: Sequence[str], mask_final_answer: str | None) -> list[str]:
    """Validate the trace options; returns the task ids to build (canonical names)."""
    if kind not in KINDS:
        raise InputError(f"--kind: unknown trace kind {kind!r}; valid: {', '.join(KINDS)}")
    try:
        task_ids = [get_task(t).id for t in tasks]
    except KeyError as exc:
        raise InputError(f"--tasks: {exc.args[0]}") from None
    if not task_ids:
        raise InputError("--tasks needs at least one task id")
    if kind == "cot" and task_ids != ["task_main"]:
        raise InputError("--tasks applies to --kind plain only; a CoT record is always one task_main trace per view")
    if mask_final_answer is not None and kind != "cot":
        raise InputError("--mask-final-answer applies to --kind cot only")
    return task_ids


def build_traces(
    views: Iterable[View],
    kind: Kind,
    tasks: Sequence[str] = ("task_main",),
    mask_final_answer: str | None = None,
    dialect: Dialect = "training",
    require_images: bool = True,
) -> dict[str, list[dict[str, Any]]]:
    """Records per output file (``train``, ``val``, ``warmup``, ``rl``, ``benchmark``), in view order."""
    task_ids = check_options(kind, tasks, mask_final_answer)
    skipped = [t for t in task_ids if t in SKIPPED_PLAIN_TASKS]
    if skipped:
        logger.warning("skipping %s: two-image tasks are not part of single-image traces", ", ".join(skipped))
    views = list(views)
    check_disjoint(views)
    files: dict[str, list[dict[str, Any]]] = {}
    no_image = incomplete = 0
    for view in views:
        if require_images and not view.has_image:
            no_image += 1
            continue
        records = view_records(view, kind, task_ids, mask_final_answer, dialect)
        incomplete += not records
        for name in output_file(view):
            files.setdefault(name, []).extend(records)
    if no_image:
        logger.warning("skipped %d views without view.png (render them, or pass --no-require-images)", no_image)
    if incomplete:
        logger.warning("skipped %d views whose ground truth lacks fields the %s target needs", incomplete, kind)
    return files


@dataclass
class ImageExtractor:
    """Writes the PNGs embedded in parquet rows to ``images_root/<view>/view.png`` as :func:`load_views` reads them
    (pass it as ``on_image``), for the views that have no view.png under ``data_root``; an existing file of the
    same bytes is kept, so a rerun writes nothing. Trace records name images ``<view>/view.png`` relative to an
    image root: train with ``data.data_root=<images_root>`` when the dataset itself holds no per-view images.
    """

    data_root: Path
    images_root: Path
    needed: int = 0
    """Views whose image lives only in the parquet shards."""
    written: int = 0

    def __call__(self, view: str, data: bytes) -> None:
        rel = f"{view}/{IMAGE_FILE}"
        if resolve_inside(self.data_root, rel).is_file():
            return
        self.needed += 1
        target = resolve_inside(self.images_root, rel)  # a view that escapes the root is refused
        if target.is_file() and target.read_bytes() == data:
            return
        atomic_write_bytes(target, data)
        self.written += 1


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line (UTF-8, not ASCII-escaped) atomically; returns the line count."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


STAGING_PREFIX = ".traces-staging-"
"""The folder inside ``--out`` where a run builds its trace files before swapping them in."""


def write_traces(out_dir: Path, files: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Write each file as ``<out_dir>/<name>.jsonl``; returns the line count per file name.

    Complete or absent (docs/trust.md): every file is first written in full to a staging folder inside ``out_dir``,
    then each is renamed into place (a rename needs no space), so a full disk or a kill while writing leaves the
    earlier traces as they were, never a mix of new and old files. A trace file of the known names
    (``TRACE_FILES``) that this run does not write, left by an earlier run in ``out_dir``, is removed, so
    ``out_dir`` holds exactly this run's traces. Other files are kept.
    """
    import shutil
    import tempfile

    names: list[str] = list(TRAIN_FILES) if files.keys() & set(TRAIN_FILES) else []
    if BENCHMARK_FILE in files:
        names.append(BENCHMARK_FILE)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob(f"{STAGING_PREFIX}*"):  # a staging folder a killed run left
        shutil.rmtree(old, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out_dir))
    try:
        counts = {name: write_jsonl(staging / f"{name}.jsonl", files.get(name, [])) for name in names}
        for name in names:  # every file is complete: swap them in
            (staging / f"{name}.jsonl").replace(out_dir / f"{name}.jsonl")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for name in TRACE_FILES:
        stale = out_dir / f"{name}.jsonl"
        if name not in counts and stale.is_file():
            logger.info("removing %s, left by an earlier run", stale)
            stale.unlink()
    return counts


def check_disjoint(views: Sequence[View]) -> None:
    """Refuse data where one structure sits in both split folders (a train/benchmark leak)."""
    seen: dict[str, str] = {}
    leaks = set()
    for view in views:
        if seen.setdefault(view.structure_id, view.split) != view.split:
            leaks.add(view.structure_id)
    if leaks:
        shown = ", ".join(sorted(leaks)[:5])
        raise InputError(f"{len(leaks)} structures appear in both the train and benchmark folders: {shown}")
