"""What a run folder records beyond its recipe, read by training and by ``spatialiq release`` (docs/trust.md): the
data each phase trained on, the check that a resume continues the same data, and that a finished phase trained at
least one step.

``<phase dir>/data.json`` records, when the phase starts training, the digests of what it reads: the sha256 of each
trace file (the training split, and the validation split when it validates), and for the images the dataset's
``manifest.json`` (its sha256, generator version, seed and counts) or, for a dataset root without one, the sha256
over every image the split references; with replay (``data.sources``), each other source's images the same way
(``sources``: its key, folder names, and its root's manifest or the images its training split references). A resume
compares the data it would read now with that record before anything is written (:func:`check_same_data`) and
refuses a change in one line naming what changed (a replay source by its ``data.sources[i]`` key): a resume
continues the data its checkpoints were trained on, or it is a new run. ``spatialiq release`` names every dataset
the record lists (:func:`read_data_records`).

A phase that ended without an optimizer step is never recorded complete nor exported (:func:`check_trained`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from spatialiq_train.core.errors import JobFailure, UserError
from spatialiq_train.core.io import atomic_write_json, sha256_file
from spatialiq_train.core.plan import PhasePlan, PlanData

DATA_RECORD = "data.json"
"""The data record's file name in a phase folder."""


class DataChangedError(UserError):
    """A resume would train on other data than the run's checkpoints; the message names what changed."""


def _images_record(data_root: str, traces_dir: str, split: str, mode: str, limit: int | None) -> dict[str, Any]:
    """The images of a split: its dataset's manifest (digest and facts), else the digest of every image it uses."""
    root = Path(data_root)
    manifest = root / "manifest.json"
    if manifest.is_file():
        try:
            facts = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            facts = {}
        facts = facts if isinstance(facts, dict) else {}
        args, counts = facts.get("arguments") or {}, facts.get("counts") or {}
        return {"manifest_sha256": sha256_file(manifest), "generator_version": facts.get("version"),
                "seed": args.get("seed"), "structures": counts.get("structures"), "views": counts.get("views")}
    from spatialiq_train.core.traces import load_examples

    examples = load_examples(traces_dir, split, root, mode, limit)  # type: ignore[arg-type]
    images = sorted({str(im) for ex in examples for im in ex.get("images") or ()})
    digest = hashlib.sha256()
    for image in images:
        rel = Path(image).resolve().relative_to(root.resolve()).as_posix()
        digest.update(f"{rel}\t{sha256_file(image)}\n".encode())
    return {"images_sha256": digest.hexdigest(), "images": len(images)}


def _source_records(d: PlanData, mode: str) -> list[dict[str, Any]]:
    """Each replay source other than ``data.traces_dir``: its key, folder names and the images its training split
    uses, recorded as the main data's (:func:`_images_record`, under its own ``data_root`` or ``data.data_root``)."""
    found = []
    for i, src in enumerate(d.sources):
        if src["traces_dir"] == d.traces_dir:
            continue
        root = str(src.get("data_root") or d.data_root)
        found.append({"source": f"data.sources[{i}]", "traces_dir": Path(str(src["traces_dir"])).name,
                      "data_root": Path(root).name,
                      **_images_record(root, str(src["traces_dir"]), d.train_split, mode, d.max_examples)})
    return found


def data_record(plan: PhasePlan) -> dict[str, Any]:
    """The digests of what the phase of ``plan`` trains on (pure but for reading the files): its trace files (the
    training split, the validation split when it validates, and each replay source's training split), its images
    and, with replay, each other source's images (``sources``)."""
    from spatialiq_train.core.traces import split_file

    d = plan.data
    folders = [(d.traces_dir, s) for s in dict.fromkeys([d.train_split, *([d.eval_split] if d.eval_split else [])])]
    folders += [(str(src["traces_dir"]), d.train_split) for src in d.sources if src["traces_dir"] != d.traces_dir]
    traces = {}
    for folder, split in folders:
        name = f"{split}.jsonl" if folder == d.traces_dir else f"{Path(folder).name}/{split}.jsonl"
        if split_file(folder, split).is_file():
            traces[name] = sha256_file(split_file(folder, split))
    record = {"phase": plan.phase, "traces_dir": Path(d.traces_dir).name, "traces": traces,
              "data_root": Path(d.data_root).name,
              **_images_record(d.data_root, d.traces_dir, d.train_split, plan.phase, d.max_examples)}
    return {**record, "sources": _source_records(d, plan.phase)} if d.sources else record


def _image_change(where: str, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What differs between the images two records hold for one dataset root (``where`` names it), in words."""
    if old.get("manifest_sha256") != new.get("manifest_sha256"):
        def seed(r: dict[str, Any]) -> str:
            return f"seed {r.get('seed')}, " if r.get("seed") is not None else ""

        return (f"{where} manifest.json: recorded {seed(old)}sha256 {str(old.get('manifest_sha256'))[:12]}, now "
                f"{seed(new)}sha256 {str(new.get('manifest_sha256'))[:12]}")
    if old.get("images_sha256") != new.get("images_sha256"):
        return (f"{where} images of the split: recorded sha256 {str(old.get('images_sha256'))[:12]} "
                f"({old.get('images')} images), now {str(new.get('images_sha256'))[:12]} ({new.get('images')})")
    return None


def _changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two data records, in words. A record without ``sources`` (made before replay sources'
    images were recorded) is not compared on them."""
    said = []
    for name in sorted(old.get("traces", {}).keys() | new.get("traces", {}).keys()):
        a, b = old.get("traces", {}).get(name), new.get("traces", {}).get(name)
        if a != b:
            said.append(f"data.traces_dir {name}: recorded sha256 {str(a)[:12]}, now {str(b)[:12]}")
    said += filter(None, [_image_change("data.data_root", old, new)])
    if "sources" in old:
        olds = {s.get("source"): s for s in old.get("sources") or () if isinstance(s, dict)}
        news = {s["source"]: s for s in new.get("sources") or ()}
        for key in sorted(olds.keys() | news.keys(), key=str):
            a, b = olds.get(key, {}), news.get(key, {})
            said += filter(None, [_image_change(f"{key}.data_root ({b.get('data_root') or a.get('data_root')})",
                                                a, b)])
    return said


def check_same_data(out: Path, plan: PhasePlan, resuming: bool) -> dict[str, Any]:
    """The data record of this start; when ``resuming`` a phase that recorded one, a :class:`DataChangedError` if
    the data differ from it. Writes nothing."""
    record = data_record(plan)
    path = out / DATA_RECORD
    if not resuming or not path.is_file():
        return record
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable data record ({exc}); it says what the checkpoints of {out} were "
                        "trained on: restore it, or pick a new --out for a new run") from None
    changed = _changes(old, record) if isinstance(old, dict) else ["the record is not a JSON object"]
    if changed:
        raise DataChangedError(f"{out}: the data changed since this run started ({'; '.join(changed)}); a resume "
                               "continues the data its checkpoints were trained on: put that data back where "
                               "the recipe reads it (data.traces_dir, data.data_root, data.sources), or pick a new "
                               "--out for a new run")
    return record


def write_data_record(out: Path, record: dict[str, Any] | None) -> None:
    """Keep ``record`` as the phase's data record (written whole, then renamed); None (datasets given in code,
    not read from files) writes nothing."""
    if record is not None:
        atomic_write_json(out / DATA_RECORD, record)


def read_data_record(folder: Path) -> dict[str, Any] | None:
    """The data record ``folder`` holds (a phase folder, or NeMo-RL's ``checkpointing.checkpoint_dir``), None when
    it holds none; an unreadable one is a UserError naming it. ``nemo convert`` carries the record into the
    converted checkpoint (:func:`write_data_record`), where ``spatialiq release`` reads it."""
    path = folder / DATA_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        record, problem = None, str(exc)
    else:
        problem = "not a JSON object"
    if not isinstance(record, dict):
        raise UserError(f"{path}: unreadable data record ({problem}); it says what the checkpoints beside it were "
                        "trained on: restore it (the driver writes it when training starts)")
    return record


def check_trained(global_step: int, out: Path, phase: str) -> None:
    """A :class:`JobFailure` when the phase ended without an optimizer step: it is then neither recorded complete
    nor exported (its weights are those it started from)."""
    if int(global_step) > 0:
        return
    raise JobFailure(f"{out}: the {phase.upper()} phase trained no optimizer step (global step 0: the split gave "
                     "no full batch), so nothing was marked complete or exported; give the phase more rows than one "
                     "batch (data.max_examples, sft.optimizer.global_batch_size, rl.prompts_per_step)")


def read_data_records(folders: list[Path]) -> list[dict[str, Any]]:
    """The data records of the phase folders that hold one, in order."""
    found = []
    for folder in folders:
        path = folder / DATA_RECORD
        try:
            record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict):
            found.append(record)
    return found
