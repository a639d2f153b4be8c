"""Records in the MentalBlackboard release's schema: reading them, writing ours, and checking them against the
simulator (:mod:`spatialiq_train.core.folding`).

A record holds ``id``, ``foldingTypes`` (``foldType``, ``foldToFront``), ``initialHoles`` and ``resultHoles``
(``shape``, ``size``, ``direction``, ``location``), ``unfoldingTypes``, ``totalNumberofHoles`` and
``numberofFoldingSteps``; the release adds paths to its videos and frames, which nothing here reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spatialiq_train.core.folding import SHAPES, SIZES, Fold, FoldError, Hole, parse_fold
from spatialiq_train.core.folding_holes import Unfolded, direction_angle, direction_label, hole_key, simulate


def read_hole(raw: object, where: str) -> Hole:
    """One hole of a record; :class:`FoldError` names ``where`` and the key at fault."""
    if not isinstance(raw, Mapping):
        raise FoldError(f"{where}: a hole is an object with shape, size, direction, location; got {raw!r}")
    missing = [k for k in ("shape", "size", "direction", "location") if k not in raw]
    if missing:
        raise FoldError(f"{where}: hole lacks {', '.join(missing)}")
    shape, size, loc = raw["shape"], raw["size"], raw["location"]
    if shape not in SHAPES:
        raise FoldError(f"{where}: shape {shape!r}; valid: {', '.join(SHAPES)}")
    if size not in SIZES:
        raise FoldError(f"{where}: size {size!r}; valid: {', '.join(SIZES)}")
    if not isinstance(loc, int) or isinstance(loc, bool) or not 1 <= loc <= 32:
        raise FoldError(f"{where}: location {loc!r}; valid: an integer 1-32")
    try:
        angle = direction_angle(shape, raw["direction"])
    except FoldError as e:
        raise FoldError(f"{where}: {e}") from None
    return Hole(shape, size, direction_label(shape, angle), loc)


def read_steps(record: Mapping[str, Any], where: str) -> list[Fold]:
    """A record's ``foldingTypes`` as folds and rotations."""
    raw = record.get("foldingTypes")
    if not isinstance(raw, list) or not raw:
        raise FoldError(f"{where}: foldingTypes must be a non-empty list of {{foldType, foldToFront}}")
    steps = []
    for n, item in enumerate(raw, 1):
        if not isinstance(item, Mapping) or not isinstance(item.get("foldType"), str):
            raise FoldError(f"{where}: foldingTypes[{n}] must be an object with a foldType string")
        try:
            steps.append(parse_fold(item["foldType"], bool(item.get("foldToFront", True))))
        except FoldError as e:
            raise FoldError(f"{where}: foldingTypes[{n}]: {e}") from None
    return steps


def read_holes(record: Mapping[str, Any], key: str, where: str) -> list[Hole]:
    raw = record.get(key)
    if not isinstance(raw, list):
        raise FoldError(f"{where}: {key} must be a list of holes")
    return [read_hole(h, f"{where}: {key}[{n}]") for n, h in enumerate(raw, 1)]


def record_id(record: object, row: int) -> str:
    """The record's ``id``, or ``row <n>`` when it has none."""
    rid = record.get("id") if isinstance(record, Mapping) else None
    return str(rid) if rid is not None else f"row {row}"


@dataclass(frozen=True)
class RecordCheck:
    """One record simulated and compared with what it states."""

    id: str
    simulated: Unfolded | None
    """``None`` when the record cannot be simulated (``error`` says why)."""
    holes_agree: bool
    count_agree: bool
    unfolding_agree: bool
    error: str = ""

    @property
    def agrees(self) -> bool:
        return self.holes_agree and self.count_agree and self.unfolding_agree

    def as_line(self) -> dict[str, Any]:
        """The JSONL line ``spatialiq fold simulate`` writes for this record."""
        sim = self.simulated
        return {
            "id": self.id,
            "resultHoles": [h.as_record() for h in sim.holes] if sim else None,
            "totalNumberofHoles": len(sim.holes) if sim else None,
            "unfoldingTypes": list(sim.unfolding) if sim else None,
            "agree": {
                "resultHoles": self.holes_agree,
                "totalNumberofHoles": self.count_agree,
                "unfoldingTypes": self.unfolding_agree,
            },
            "error": self.error,
        }


def check_record(record: Mapping[str, Any], row: int) -> RecordCheck:
    """Simulate a record from its ``foldingTypes`` and ``initialHoles`` and compare with its result."""
    rid = record_id(record, row)
    where = f"record {rid}"
    try:
        sim = simulate(read_steps(record, where), read_holes(record, "initialHoles", where))
    except FoldError as e:
        return RecordCheck(rid, None, False, False, False, str(e))
    try:
        stated = read_holes(record, "resultHoles", where)
    except FoldError as e:
        return RecordCheck(rid, sim, False, False, False, str(e))
    holes_agree = sorted(set(stated), key=hole_key) == list(sim.holes) and len(stated) == len(set(stated))
    count_agree = record.get("totalNumberofHoles") == len(sim.holes)
    unfolding_agree = list(record.get("unfoldingTypes") or []) == list(sim.unfolding)
    return RecordCheck(rid, sim, holes_agree, count_agree, unfolding_agree)


def check_records(records: Sequence[object]) -> list[RecordCheck]:
    """:func:`check_record` for each record of a file (a non-object row is a failed check naming its row)."""
    out = []
    for row, rec in enumerate(records, 1):
        if not isinstance(rec, Mapping):
            out.append(RecordCheck(f"row {row}", None, False, False, False, f"row {row}: a record is a JSON object"))
        else:
            out.append(check_record(rec, row))
    return out


def make_record(rid: str, steps: Sequence[Fold], punches: Sequence[Hole]) -> dict[str, Any]:
    """A record in the release's schema for our own task, its result from the simulator."""
    sim = simulate(steps, punches)
    return {
        "id": rid,
        "taskType": "Prediction",
        "numberofFoldingSteps": len(steps),
        "foldingTypes": [s.as_record() for s in steps],
        "unfoldingTypes": list(sim.unfolding),
        "initialHoles": [h.as_record() for h in punches],
        "resultHoles": [h.as_record() for h in sim.holes],
        "totalNumberofHoles": len(sim.holes),
    }
