"""Paper-folding tasks of our own (``spatialiq fold gen``): seeded, in the release's structure groups, split by
configuration, resumable and byte-identical on rerun.

Task ``i`` of a run is a pure function of ``(seed, split, i)``: its group is the ``i``-th of the requested groups
in turn, and its draws come from a random generator seeded with ``(seed, group, i, attempt)``; the first attempt
whose configuration (:func:`configuration_id`: the folds and the punched holes) belongs to the split is kept. So
the splits share no configuration by construction (``spatialiq_train.core.splits.split_of`` on the id, as for cube
structures), and the train split's parts (val, warmup, rl) come from ``part_of`` on the same id.

Layout: ``OUT/<split>/<id>/record.json`` (the release's schema plus ``structure_id``, ``split``, ``part``,
``group`` and the text ``prompt``) beside ``OUT/<split>/<id>/sheet.png`` (the folded sheet and its holes). A task
whose ``record.json`` exists is complete (the image is written first, each file atomically) and is not written
again, so an interrupted run resumes and a rerun changes no byte.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_gen.folding_image import sheet_png
from spatialiq_train.core import splits
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.folding import ROTATIONS, SHAPES, SIDES, SIZES, Fold, FoldError, Hole
from spatialiq_train.core.folding_answers import task_prompt
from spatialiq_train.core.folding_holes import covered_locations, direction_label, fold_steps
from spatialiq_train.core.folding_records import make_record
from spatialiq_train.core.io import atomic_write_bytes, atomic_write_text, dumps_json, read_json

GROUPS: dict[str, tuple[int, int]] = {
    "one_step": (1, 0),
    "two_step": (2, 0),
    "three_step": (3, 0),
    "four_step": (4, 0),
    "two_step_with_rotation": (2, 1),
    "three_step_with_rotation": (3, 1),
    "four_step_with_rotation": (4, 1),
    "five_step_with_rotation": (5, 1),
    "six_step_with_rotation": (6, 1),
}
"""The release's structure groups: name -> (steps, 1 when rotations are among them). A rotation group has one to
three rotations, never first and never two in a row, and at most three folds."""
_ATTEMPTS = 1000
_KINDS = {"top": "horizontal", "bottom": "horizontal", "left": "vertical", "right": "vertical"}


@dataclass(frozen=True)
class FoldTask:
    """One generated task: its id, group, split, part, record and image bytes."""

    id: str
    group: str
    split: str
    record: dict[str, Any]
    image: bytes


def configuration_id(record: dict[str, Any]) -> str:
    """The id a split is decided by: a hash of the folds and the punched holes (16 hex digits)."""
    key = json.dumps([record["foldingTypes"], record["initialHoles"]], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _steps(rng: random.Random, group: str) -> list[Fold]:
    steps, rotating = GROUPS[group]
    if not rotating:
        kinds = [("fold", None)] * steps
    else:
        rotations = rng.choice([r for r in (1, 2, 3) if steps - r <= 3 and steps - r >= r and steps - r >= 1])
        while True:
            slots = sorted(rng.sample(range(1, steps), rotations))
            if all(b - a > 1 for a, b in zip(slots, slots[1:], strict=False)):
                break
        kinds = [("rotation", None) if i in slots else ("fold", None) for i in range(steps)]
    out = []
    for kind, _ in kinds:
        if kind == "rotation":
            out.append(Fold("rotation", degrees=rng.choice(ROTATIONS)))
        else:
            side = rng.choice(list(SIDES))
            out.append(Fold(_KINDS.get(side, "diagonal"), side=side))
    return out


def _punches(rng: random.Random, covered: Sequence[int]) -> list[Hole]:
    n = rng.choice((1, 2, 3) if len(covered) > 8 else (1, 2) if len(covered) > 4 else (1,))
    out = []
    for loc in rng.sample(list(covered), n):
        shape, size = rng.choice(SHAPES), rng.choice(SIZES)
        out.append(Hole(shape, size, direction_label(shape, rng.choice((0, 90, 180, 270))), loc))
    return out


def draw_task(seed: int, group: str, index: int, attempt: int) -> tuple[list[Fold], list[Hole]] | None:
    """One draw of folds and punches, or None when the folds cannot be carried out (the caller draws again)."""
    rng = random.Random(f"{seed}:{group}:{index}:{attempt}")
    steps = _steps(rng, group)
    try:
        sheet = fold_steps(steps)
    except FoldError:
        return None
    return steps, _punches(rng, sorted(covered_locations(sheet)))


def make_task(seed: int, split: str, index: int, groups: Sequence[str]) -> FoldTask:
    """Task ``index`` of a run: the first draw whose configuration belongs to ``split``."""
    group = groups[index % len(groups)]
    for attempt in range(_ATTEMPTS):
        drawn = draw_task(seed, group, index, attempt)
        if drawn is None:
            continue
        steps, punches = drawn
        rid = f"{split}_{index:06d}"
        record = make_record(rid, steps, punches)
        sid = configuration_id(record)
        if splits.split_of(sid) != split:
            continue
        sheet = fold_steps(steps)
        covered = covered_locations(sheet)
        part = splits.part_of(sid) if split == "train" else None
        record.update(
            structure_id=sid,
            split=split,
            part=part,
            group=group,
            image="sheet.png",
            prompt=task_prompt(steps, punches, covered),
        )
        return FoldTask(rid, group, split, record, sheet_png(covered, punches))
    raise InputError(f"group {group}: no task of split {split} in {_ATTEMPTS} draws (seed {seed}, index {index})")


def check_groups(names: Sequence[str]) -> list[str]:
    """The requested groups, checked (``--groups``); all of them when none is named."""
    wanted = [n for n in names if n] or list(GROUPS)
    bad = [n for n in wanted if n not in GROUPS]
    if bad:
        raise InputError(f"--groups: unknown group(s) {', '.join(bad)}; valid: {', '.join(GROUPS)}")
    return wanted


def generate(out: Path, split: str, count: int, seed: int, groups: Sequence[str]) -> tuple[int, int]:
    """Write the tasks ``0..count-1`` of a split that are not there yet; returns (written, kept)."""
    if split not in splits.SPLITS:
        raise InputError(f"--split {split!r}; valid: {', '.join(splits.SPLITS)}")
    check_run(out / split, {"seed": seed, "groups": list(groups)})
    written = kept = 0
    for index in range(count):
        folder = out / split / f"{split}_{index:06d}"
        if (folder / "record.json").is_file():
            kept += 1
            continue
        task = make_task(seed, split, index, groups)
        atomic_write_bytes(folder / "sheet.png", task.image)
        atomic_write_text(folder / "record.json", dumps_json(task.record))
        written += 1
    return written, kept


RUN_FILE = "fold_gen.json"
"""Per split folder: the arguments its tasks were drawn with (a rerun with others is refused)."""


def check_run(folder: Path, args: dict[str, Any]) -> None:
    """Record ``args`` in a new split folder, or refuse a rerun whose arguments differ from the recorded ones (its
    tasks would not be the ones already there); ``--count`` may change (a larger one extends the run)."""
    path = folder / RUN_FILE
    if path.is_file():
        recorded = read_json(path)
        if recorded != args:
            diff = ", ".join(
                f"{k} {recorded.get(k)!r} there, {v!r} now"
                for k, v in args.items()
                if isinstance(recorded, dict) and recorded.get(k) != v
            )
            raise InputError(
                f"{folder}: its tasks were drawn with other arguments ({diff or recorded}); "
                "rerun with the recorded ones, or write to another --out"
            )
        return
    if folder.is_dir() and any(folder.glob("*/record.json")):
        raise InputError(f"{folder}: holds tasks but no {RUN_FILE}; write to another --out")
    atomic_write_text(path, dumps_json(args))


def iter_tasks(root: Path, split: str | None = None) -> Iterator[tuple[Path, dict[str, Any]]]:
    """``(folder, record)`` of every generated task under ``root`` (a split folder's tasks in name order)."""
    for name in [split] if split else splits.SPLITS:
        base = root / name
        if not base.is_dir():
            continue
        for path in sorted(base.glob("*/record.json")):
            record = read_json(path)
            if not isinstance(record, dict):
                raise InputError(f"{path}: expected a JSON object (a task record)")
            yield path.parent, record


_DRAWS = {
    "val": (("trainval", "val"),),
    "warmup": (("trainval", "train"), ("dapo", "warmup")),
    "rl": (("trainval", "train"), ("dapo", "rl")),
}


def split_entries(root: Path, problems: list[str]) -> Iterator[tuple[str, str, str, tuple[tuple[str, str], ...]]]:
    """``(structure_id, split, where, draws)`` of the folding tasks under ``root`` for ``data_gen.split_check``: the
    id recomputed from each record's folds and holes (a recorded id that differs is a problem), the split from its
    folder, the recorded part as the hash draws it stands for."""
    for folder, record in iter_tasks(root):
        try:
            sid = configuration_id(record)
        except (KeyError, TypeError):
            problems.append(f"{folder / 'record.json'}: no foldingTypes/initialHoles to identify the task by")
            continue
        if record.get("structure_id") not in (None, sid):
            problems.append(
                f"{folder / 'record.json'}: recorded structure_id {record.get('structure_id')!r} differs "
                f"from {sid!r}, the id of its folds and holes (the file was edited or copied)"
            )
        draws = _DRAWS.get(str(record.get("part")), ()) if folder.parent.name == "train" else ()
        yield sid, folder.parent.name, str(folder), draws
