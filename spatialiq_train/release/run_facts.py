"""What a release says about the run behind its checkpoint, read from the run folder: where the run starts when
``--run`` names an intermediate checkpoint (``RUN/rl/checkpoint-2``), the phases that ran up to it and its step,
every dataset the phases recorded (``data.json``, `spatialiq_train.core.run_folder`), and the refusal of a run that
trained no step (docs/trust.md)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spatialiq_train.core.run_folder import read_data_records
from spatialiq_train.release.checkpoint import ReleaseError

PHASE_DIRS = ("sft", "rl")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


@dataclass(frozen=True)
class Position:
    """Where ``--run`` sits in its run: the run folder, and for an intermediate checkpoint its phase and step."""

    root: Path
    """The run folder (``run dapo-tight --out``, or a ``train sft|rl --out`` phase folder)."""
    phase: str | None = None
    """The phase the intermediate checkpoint belongs to (None: the run's final policy)."""
    step: int | None = None
    max_steps: int | None = None

    def sentence(self, phases: tuple[str, ...] | None) -> str | None:
        """The card's line for an intermediate checkpoint; None for a final policy."""
        if self.step is None:
            return None
        of = f" of {self.max_steps}" if self.max_steps else ""
        ran = f"; the phases run up to it: {', '.join(phases)}" if phases else ""
        return (f"- Checkpoint: an intermediate checkpoint of the run, step {self.step}{of} of its "
                f"{(self.phase or '?').upper()} phase{ran}.")


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def position(run: Path) -> Position:
    """The run folder and step of ``--run``: a ``checkpoint-N`` folder belongs to the phase folder holding it, and
    that to the run folder above it when that folder recorded the run (its ``recipe.yaml``)."""
    if not _CHECKPOINT.match(run.name):
        return Position(run)
    phase_dir = run.parent
    root = phase_dir.parent if phase_dir.name in PHASE_DIRS and (phase_dir.parent / "recipe.yaml").is_file() \
        else phase_dir
    state = _read(run / "trainer_state.json") or {}
    step = state.get("global_step") if isinstance(state, dict) else None
    step = int(step) if isinstance(step, int) else int(_CHECKPOINT.match(run.name).group(1))  # type: ignore[union-attr]
    max_steps = state.get("max_steps") if isinstance(state, dict) else None
    phase = phase_dir.name if phase_dir.name in PHASE_DIRS else None
    if phase is None:  # a `train sft|rl --out` folder: its metrics say which phase
        rows = (phase_dir / "metrics.jsonl").read_text(encoding="utf-8", errors="replace").splitlines()[:1] \
            if (phase_dir / "metrics.jsonl").is_file() else []
        phase = next((str(r.get("phase")) for r in map(_json_row, rows) if r.get("phase")), None)
    return Position(root, phase, step, int(max_steps) if isinstance(max_steps, int) and max_steps > 0 else None)


def _json_row(line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except ValueError:
        return {}
    return row if isinstance(row, dict) else {}


def phases_up_to(phases: tuple[str, ...] | None, where: Position) -> tuple[str, ...] | None:
    """The phases that shaped an intermediate checkpoint's weights: those before its own, and its own."""
    if phases is None or where.phase not in phases:
        return phases
    return phases[: phases.index(where.phase) + 1]


def phase_folders(root: Path) -> list[Path]:
    """The folders of a run that may hold a phase's records: the run folder and its ``sft`` and ``rl``."""
    return [root, *(root / name for name in PHASE_DIRS)]


def refuse_stepless(root: Path) -> None:
    """A ReleaseError when a phase of the run is recorded complete without an optimizer step (``complete.json``
    with ``global_step`` 0: its final weights are the ones it started from)."""
    for folder in phase_folders(root):
        marker = _read(folder / "complete.json")
        if isinstance(marker, dict) and isinstance(marker.get("global_step"), int) and marker["global_step"] <= 0:
            raise ReleaseError(f"{folder / 'complete.json'}: the {str(marker.get('phase', '?')).upper()} phase "
                               "trained no optimizer step (global_step 0), so its weights are the ones it started "
                               "from: nothing to release; train with more rows than one batch and release that run")


def _images_words(record: dict[str, Any]) -> str:
    """The images a data record (or one of its replay sources) holds, as the card says them."""
    if record.get("manifest_sha256"):
        facts = [f"{label} {record[key]}" for label, key in (("generator version", "generator_version"),
                                                             ("seed", "seed"), ("structures", "structures"),
                                                             ("views", "views")) if record.get(key) is not None]
        return f"manifest.json sha256 `{record['manifest_sha256']}`" + (f" ({', '.join(facts)})" if facts else "")
    return f"{record.get('images')} images, sha256 over their names and sha256s `{record.get('images_sha256')}`"


def _dataset_line(record: dict[str, Any], via: str = "") -> str:
    traces = ", ".join(f"`{name}` sha256 `{digest}`" for name, digest in sorted((record.get("traces") or {}).items()))
    others = "".join(f"; images of `{s.get('traces_dir')}` (`{s.get('source')}`): `{s.get('data_root')}` "
                     f"({_images_words(s)})" for s in record.get("sources") or () if isinstance(s, dict))
    return (f"- Trained on ({str(record.get('phase', '?')).upper()} phase{via}): traces `{record.get('traces_dir')}` "
            f"({traces or 'no trace file recorded'}); images `{record.get('data_root')}` ({_images_words(record)})"
            f"{others}.")


NOT_RECORDED = ("- Trained on: not recorded with the run (no `data.json` in its phase folders, or beside a "
                "converted NeMo-RL checkpoint: a run made, or a checkpoint converted, before data records); the "
                "sources above name what the recipe's paths hold now.")
"""The card's line when no phase of the run recorded its data."""


def recorded_phases(root: Path) -> tuple[str, ...] | None:
    """The phases the run's data records name, in training order (a converted NeMo-RL checkpoint keeps no metrics,
    only the record ``nemo convert`` carried); None without a record."""
    named = {str(r.get("phase")) for r in read_data_records(phase_folders(root))}
    return tuple(p for p in ("sft", "rl") if p in named) or None


def _init_root(folder: Path) -> Path:
    """The run folder of a checkpoint ``rl.init_from`` names: a ``final/`` or ``checkpoint-N``'s run, else the folder
    (a converted checkpoint holds its own record)."""
    return folder.parent if folder.name == "final" else position(folder).root


def trained_on(root: Path, phases: tuple[str, ...] | None, init_from: Path | None = None) -> tuple[str, ...]:
    """One card line per dataset a phase of the run recorded (of the phases in ``phases`` when known), then those
    the run of its RL phase's starting checkpoint (``init_from``) recorded (an SFT warm-up converted from NeMo-RL,
    a `train sft` run); :data:`NOT_RECORDED` when there are none."""
    own = [r for r in read_data_records(phase_folders(root)) if phases is None or r.get("phase") in phases]
    lines = [_dataset_line(r) for r in own]
    if init_from is not None and init_from.is_dir():
        records = read_data_records(phase_folders(_init_root(init_from)))
        lines += [_dataset_line(r, ", of the `rl.init_from` checkpoint") for r in records if r not in own]
    return tuple(lines) or (NOT_RECORDED,)


def refuse_out_inside(out: Path, root: Path) -> None:
    """``--out`` may not be the run folder, hold it, or lie inside it (its ``final/``, a phase folder): a release
    replaces ``--out`` whole and the run's files are the run's."""
    full, run = out.resolve(), root.resolve()
    if full == run or full in run.parents or run in full.parents:
        where = f"inside the run folder {root}" if run in full.parents else f"the run folder {root} or holds it"
        raise ReleaseError(f"--out {out} is {where}; a release is written aside and replaces --out whole, and the "
                           f"run's files are the run's: pick a folder outside the run, e.g. --out release/{root.name}")


def recorded_recipe(path: Path | None, root: Path) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The recipe the run recorded, as a dict in today's keys, and the card's lines on how a record of an earlier
    version was read (`core.recorded_recipe`: its batch as it trained); (None, ()) when the run kept none."""
    if path is None:
        return None, ()
    import yaml

    from spatialiq_train.core.io import read_text
    from spatialiq_train.core.recipes import load_recipe
    from spatialiq_train.core.recorded_recipe import is_earlier, processes_of, read_recorded

    data = yaml.safe_load(read_text(path, "recipe"))
    if not is_earlier(data):
        return load_recipe(path).model_dump(mode="json"), ()
    read = read_recorded(data, processes_of(root))
    said = "; ".join(read.notes)
    if read.problem is None:
        return read.recipe, (f"- Recorded by an earlier spatialiq with per-device batch keys; read as it trained: "
                             f"{said}.",)
    return read.recipe, ("- Recorded by an earlier spatialiq with per-device batch keys, shown as recorded: "
                         f"{read.problem}" + (f" ({said})" if said else "") + ".",)
