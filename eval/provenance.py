"""What wrote a completions file: ``<file>.provenance.json`` beside it, checked before a resume appends to it and
before ``eval score`` scores it.

The record holds the model (:func:`model_record`: a local checkpoint's resolved path and
``spatialiq_train.core.weights.checkpoint_digest`` over its weights and configs; a hub id as given, with the
revision and digest of its snapshot when the local Hugging Face cache holds one), the dataset
(:func:`dataset_record`: path, split, view count and ``spatialiq_train.core.truth.truth_digest`` of the split's
views) and every sampling setting that changes the completions (:data:`SAMPLING_KEYS`).

``eval sample`` checks the record before anything is written (:func:`check_provenance`) and writes it once the
engine has loaded (:func:`write_provenance`); when the file already holds completions it refuses to append unless
the recorded values equal this run's, naming each difference: otherwise a resumed file could mix two models (two
checkpoints both named ``hf``), two datasets whose views share keys, or two decoding settings. ``eval score``
refuses a file whose recorded dataset is not the one given (:func:`check_scored_data`) and carries the model's
digest into the metrics file, which ``release`` compares with the checkpoint it releases.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.sample import SamplingConfig
from spatialiq_train.core.dataset import View
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import atomic_write_json
from spatialiq_train.core.truth import truth_digest

SAMPLING_KEYS: tuple[str, ...] = ("mode", "k", "temperature", "top_p", "max_new_tokens", "dialect",
                                  "cot_system_prompt", "tasks", "seed")
"""The :class:`SamplingConfig` fields recorded and compared (``batch_size`` changes no completion)."""
MODEL_KEYS: tuple[str, ...] = ("model", "model_digest", "model_revision")
"""The model fields of a record; each is compared on a resume."""
SUFFIX = ".provenance.json"


class ProvenanceError(UserError):
    """A completions file written by another model, on other data or with other settings; the message names them."""


def provenance_path(completions: str | Path) -> Path:
    """``<completions>.provenance.json`` beside the completions file."""
    path = Path(completions)
    return path.with_name(path.name + SUFFIX)


def _cached_snapshot(repo_id: str) -> Path | None:
    """The snapshot folder of ``repo_id`` in the local Hugging Face cache (its ``config.json``), None if uncached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except (ValueError, OSError):  # not a valid repo id for the cache
        return None
    return Path(found).parent if isinstance(found, str) else None


def model_record(model: str | Path) -> dict[str, Any]:
    """``model``, ``model_digest`` and ``model_revision`` of a checkpoint folder or a hub id (strings or None).

    A folder: its resolved path and digest, no revision. A hub id: the id as given and, when the local cache holds
    a snapshot of it (nothing is downloaded), that snapshot's commit as the revision and its digest."""
    from spatialiq_train.core.weights import checkpoint_digest

    text = str(model)
    if Path(text).is_dir():
        return {"model": str(Path(text).resolve()), "model_digest": checkpoint_digest(text), "model_revision": None}
    snapshot = _cached_snapshot(text)
    if snapshot is None:
        return {"model": text, "model_digest": None, "model_revision": None}
    return {"model": text, "model_digest": checkpoint_digest(snapshot), "model_revision": snapshot.name}


def dataset_record(data: str | Path, split: str | None, scenes: Sequence[View]) -> dict[str, Any]:
    """The identity of the views sampled from: path and split as given, view count, truth digest of every view."""
    return {"path": str(Path(data).resolve()), "split": split, "views": len(scenes),
            "truth_digest": truth_digest((s.view, s.gt) for s in scenes)}


def sampling_record(model: str | Path, config: SamplingConfig, data: dict[str, Any]) -> dict[str, Any]:
    """The provenance of a sampling run: the model (:func:`model_record`), the dataset (:func:`dataset_record`)
    and the sampling settings."""
    settings = config.model_dump()
    return {**model_record(model), "data": data, "sampling": {key: settings[key] for key in SAMPLING_KEYS}}


def _data_text(data: Any) -> str:
    if not isinstance(data, dict):
        return "no dataset recorded"
    return f"{data.get('path')} (split {data.get('split')}, truth digest {data.get('truth_digest')})"


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: recorded -> now`` for each differing model key, the dataset and each sampling setting (pure)."""
    out = [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in MODEL_KEYS if old.get(key) != new.get(key)]
    if (old.get("data") or {}).get("truth_digest") != (new.get("data") or {}).get("truth_digest"):
        out.append(f"dataset: {_data_text(old.get('data'))} -> {_data_text(new.get('data'))}")
    before, now = old.get("sampling") or {}, new.get("sampling") or {}
    out += [f"{key}: {before.get(key)!r} -> {now.get(key)!r}" for key in SAMPLING_KEYS
            if before.get(key) != now.get(key)]
    return out


def read_provenance(completions: str | Path) -> dict[str, Any] | None:
    """The record beside ``completions``, None when there is none; an unreadable one is a ProvenanceError."""
    side = provenance_path(completions)
    if not side.is_file():
        return None
    try:
        old = json.loads(side.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProvenanceError(f"{side}: unreadable provenance record ({exc}); sample into a new --out") from None
    if not isinstance(old, dict):
        raise ProvenanceError(f"{side}: a provenance record must be a JSON object; sample into a new --out")
    return old


def check_provenance(completions: str | Path, record: dict[str, Any], has_completions: bool) -> None:
    """Refuse to resume ``completions`` written with anything else (writes nothing).

    A file holding no completions may be sampled into with any settings (its record is replaced); a file holding
    completions but no provenance (written before records existed) is refused: nothing says what wrote it."""
    path = Path(completions)
    if not has_completions:
        return
    old = read_provenance(path)
    if old is None:
        raise ProvenanceError(f"--out {path} holds completions but no provenance record "
                              f"({provenance_path(path).name}), so nothing says which model, data and settings "
                              "wrote them; sample into a new --out")
    diff = differences(old, record)
    if diff:
        raise ProvenanceError(f"--out {path} was written by another model, on other data or with other settings "
                              f"({'; '.join(diff)}); resuming would mix them: sample into a new --out, or rerun "
                              "with the recorded model, data and settings")


def write_provenance(completions: str | Path, record: dict[str, Any]) -> None:
    """Write ``record`` beside ``completions`` (after :func:`check_provenance` passed and the engine loaded)."""
    atomic_write_json(provenance_path(completions), record)


def check_scored_data(completions: str | Path, data: dict[str, Any],
                      warn: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The completions' record, after checking that it was sampled from the dataset ``data`` describes; a
    ProvenanceError names both datasets. A file without a record, or with one written before records named the
    dataset, cannot be checked: ``warn`` is told so and the record (or None) is returned."""
    old = read_provenance(completions)
    recorded = (old or {}).get("data")
    if not isinstance(recorded, dict) or not recorded.get("truth_digest"):
        if warn is not None:
            what = "no provenance record" if old is None else "a provenance record that names no dataset"
            warn(f"--completions {completions} has {what}: nothing says which dataset (or weights) it was sampled "
                 f"from, so --data {data['path']} is taken on trust")
        return old
    if recorded["truth_digest"] != data["truth_digest"]:
        raise ProvenanceError(f"--completions {completions} was sampled from {_data_text(recorded)}, but --data "
                              f"gives {_data_text(data)}: scoring them would grade the answers against another "
                              "dataset's truth; pass the --data and --split the completions were sampled from")
    return old
