"""SFT-plain and SFT-CoT traces: chat-format JSONL records built from per-view ground truth.

Reads the per-view layout ``<data>/<split>/level_1/sample_NNNNN/view_VV/<leaf>/gt.json`` (with
``scene.json`` in the sample folder and ``view.png`` beside ``gt.json``), or the released
benchmark, which has no split folder and no ``structure_id``: there the group id is the path of
the nearest ``sample_\\d+`` ancestor (benchmark-spec 6.3). Records of the train split go to
``train``/``val`` (trainval partition) and ``warmup``/``rl`` (dapo partition), those of the
benchmark split to ``benchmark``, all decided by structure (``data_gen.splits``).

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

from data_gen.layout import IMAGE_FILE, SAMPLE_DIR_RE, SCENE_FILE, find_gt_files
from data_gen.splits import SPLITS, partition_of
from spatialiq_train.io import atomic_write_text, natural_key, read_json  # noqa: F401 - natural_key re-exported
from spatialiq_train.prompts import COT_SYSTEM_PROMPT
from spatialiq_train.tasks import COT_FIELDS, Dialect, build_prompt, fill_cot_template, get_task

logger = logging.getLogger(__name__)

Kind = Literal["plain", "cot"]
KINDS: tuple[Kind, ...] = ("plain", "cot")
TRAIN_FILES: tuple[str, ...] = ("train", "val", "warmup", "rl")
BENCHMARK_FILE = "benchmark"
TRACE_FILES: tuple[str, ...] = (*TRAIN_FILES, BENCHMARK_FILE)
"""Every trace file name (``<name>.jsonl``) ``write_traces`` writes, or removes when a run writes no such file."""
REWARD_FIELDS: tuple[str, ...] = (
    "task2", "task3", "task4", "task5", "task6", "task7", "task8", "task9", "num_hidden_blocks", "task_main",
)
"""Ground-truth fields copied onto every record for the rewards (stepwise needs task2..9 and the hidden count)."""
SKIPPED_PLAIN_TASKS: tuple[str, ...] = ("task10", "task11")
"""Two-image tasks: the single-image trace pipeline skips them, as the release does."""

_INT_FIELDS: tuple[str, ...] = (*REWARD_FIELDS, "task10", "task11")


@dataclass(frozen=True)
class ViewGT:
    """One leaf view: where it is, which structure it shows, and its ground truth."""

    view: str
    """Leaf folder relative to the data root (POSIX separators)."""
    structure_id: str
    split: str
    gt: dict[str, Any]
    has_image: bool

    @property
    def image(self) -> str:
        return f"{self.view}/{IMAGE_FILE}"


def validate_gt(gt: Any, path: Path) -> dict[str, Any]:
    """Check the fields traces and rewards read; an error names the file, the key and what is expected."""
    if not isinstance(gt, dict):
        raise ValueError(f"{path}: expected a JSON object of ground-truth fields, got {type(gt).__name__}")
    if gt.get("task_main") is None:
        raise ValueError(f"{path}: key 'task_main' is missing or null; every view needs its total")
    for key in _INT_FIELDS:
        value = gt.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{path}: key {key!r} must be an integer or null, got {value!r}")
    if gt.get("task1") is not None and not isinstance(gt["task1"], str):
        raise ValueError(f"{path}: key 'task1' must be a string or null, got {gt['task1']!r}")
    return gt


def structure_of(leaf_rel: Path, data_root: Path, cache: dict[str, str]) -> str:
    """The structure id of a leaf: ``scene.json``'s ``structure_id`` in the nearest ``sample_N`` folder,
    else that folder's path relative to the data root, else (no such folder) the leaf path itself."""
    parts = leaf_rel.parts
    for i in range(len(parts) - 1, -1, -1):
        if SAMPLE_DIR_RE.match(parts[i]):
            sample_rel = Path(*parts[: i + 1]).as_posix()
            if sample_rel not in cache:
                cache[sample_rel] = _sample_structure_id(data_root / sample_rel, sample_rel)
            return cache[sample_rel]
    return leaf_rel.as_posix()


def _sample_structure_id(sample_dir: Path, sample_rel: str) -> str:
    scene_path = sample_dir / SCENE_FILE
    if not scene_path.is_file():
        return sample_rel
    scene = read_json(scene_path)
    sid = scene.get("structure_id") if isinstance(scene, dict) else None
    if sid is None:
        return sample_rel
    if not isinstance(sid, str) or not sid:
        raise ValueError(f"{scene_path}: key 'structure_id' must be a non-empty string, got {sid!r}")
    return sid


def split_of_view(leaf_rel: Path, forced: str | None) -> str:
    """The split folder a leaf sits in (its first path component), or ``forced``."""
    if forced is not None:
        return forced
    head = leaf_rel.parts[0] if len(leaf_rel.parts) > 1 else ""
    if head not in SPLITS:
        raise ValueError(
            f"{leaf_rel.as_posix()}: the data root should hold split folders {', '.join(SPLITS)}; "
            "for other layouts (e.g. the released benchmark) pass --split train|benchmark"
        )
    return head


def load_views(data_root: Path, split: str | None = None) -> list[ViewGT]:
    """Every leaf view under ``data_root`` with its ground truth, in natural path order."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if not data_root.is_dir():
        raise ValueError(f"data root {data_root} is not a folder")
    cache: dict[str, str] = {}
    views = []
    for gt_path in find_gt_files(data_root):
        leaf_rel = gt_path.parent.relative_to(data_root)
        gt = validate_gt(read_json(gt_path), gt_path)
        views.append(
            ViewGT(
                view=leaf_rel.as_posix(),
                structure_id=structure_of(leaf_rel, data_root, cache),
                split=split_of_view(leaf_rel, split),
                gt=gt,
                has_image=(gt_path.parent / IMAGE_FILE).is_file(),
            )
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


def _record(view: ViewGT, task_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
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
    view: ViewGT,
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


def output_file(view: ViewGT) -> tuple[str, ...]:
    """The JSONL files (without suffix) a view's records go to."""
    if view.split == "benchmark":
        return (BENCHMARK_FILE,)
    return (partition_of(view.structure_id, "trainval"), partition_of(view.structure_id, "dapo"))


def check_options(kind: str, tasks: Sequence[str], mask_final_answer: str | None) -> list[str]:
    """Validate the trace options; returns the task ids to build (canonical names)."""
    if kind not in KINDS:
        raise ValueError(f"--kind: unknown trace kind {kind!r}; valid: {', '.join(KINDS)}")
    try:
        task_ids = [get_task(t).id for t in tasks]
    except KeyError as exc:
        raise ValueError(f"--tasks: {exc.args[0]}") from None
    if not task_ids:
        raise ValueError("--tasks needs at least one task id")
    if kind == "cot" and task_ids != ["task_main"]:
        raise ValueError("--tasks applies to --kind plain only; a CoT record is always one task_main trace per view")
    if mask_final_answer is not None and kind != "cot":
        raise ValueError("--mask-final-answer applies to --kind cot only")
    return task_ids


def build_traces(
    views: Iterable[ViewGT],
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


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line (UTF-8, not ASCII-escaped) atomically; returns the line count."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def write_traces(out_dir: Path, files: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Write each file as ``<out_dir>/<name>.jsonl``; returns the line count per file name.

    A trace file of the known names (``TRACE_FILES``) that this run does not write, left by an earlier
    run in ``out_dir``, is removed, so ``out_dir`` holds exactly this run's traces. Other files are kept.
    """
    names: list[str] = list(TRAIN_FILES) if files.keys() & set(TRAIN_FILES) else []
    if BENCHMARK_FILE in files:
        names.append(BENCHMARK_FILE)
    counts = {name: write_jsonl(out_dir / f"{name}.jsonl", files.get(name, [])) for name in names}
    for name in TRACE_FILES:
        stale = out_dir / f"{name}.jsonl"
        if name not in counts and stale.is_file():
            logger.info("removing %s, left by an earlier run", stale)
            stale.unlink()
    return counts


def check_disjoint(views: Sequence[ViewGT]) -> None:
    """Refuse data where one structure sits in both split folders (a train/benchmark leak)."""
    seen: dict[str, str] = {}
    leaks = set()
    for view in views:
        if seen.setdefault(view.structure_id, view.split) != view.split:
            leaks.add(view.structure_id)
    if leaks:
        shown = ", ".join(sorted(leaks)[:5])
        raise ValueError(f"{len(leaks)} structures appear in both the train and benchmark folders: {shown}")
