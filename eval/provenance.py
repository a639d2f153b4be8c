"""What wrote a completions file: ``<file>.provenance.json`` beside it, checked before a resume appends to it.

The record holds the model (its path as given and, for a local checkpoint, ``spatialiq_train.core.weights
.checkpoint_digest`` over its weights and configs) and every sampling setting that changes the completions
(:data:`SAMPLING_KEYS`). ``eval sample`` writes it with the first completions and, when the file already holds
completions, refuses to append unless the recorded values equal this run's, naming each difference: otherwise a
resumed file could mix two models (two checkpoints both named ``hf``) or two decoding settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eval.sample import SamplingConfig
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import atomic_write_json

SAMPLING_KEYS: tuple[str, ...] = ("mode", "k", "temperature", "top_p", "max_new_tokens", "dialect",
                                  "cot_system_prompt", "tasks", "seed")
"""The :class:`SamplingConfig` fields recorded and compared (``batch_size`` changes no completion)."""
SUFFIX = ".provenance.json"


class ProvenanceError(UserError):
    """A completions file written by another model or with other sampling settings; the message names them."""


def provenance_path(completions: str | Path) -> Path:
    """``<completions>.provenance.json`` beside the completions file."""
    path = Path(completions)
    return path.with_name(path.name + SUFFIX)


def sampling_record(model: str, config: SamplingConfig) -> dict[str, Any]:
    """The provenance of a sampling run: model path, weights-and-config digest (local folders), sampling settings."""
    from spatialiq_train.core.weights import checkpoint_digest

    local = Path(model).is_dir()
    settings = config.model_dump()
    return {"model": str(Path(model).resolve()) if local else model,
            "model_digest": checkpoint_digest(model) if local else None,
            "sampling": {key: settings[key] for key in SAMPLING_KEYS}}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: recorded -> now`` for each differing model key and sampling setting (pure)."""
    out = [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in ("model", "model_digest")
           if old.get(key) != new.get(key)]
    before, now = old.get("sampling") or {}, new.get("sampling") or {}
    out += [f"{key}: {before.get(key)!r} -> {now.get(key)!r}" for key in SAMPLING_KEYS
            if before.get(key) != now.get(key)]
    return out


def check_or_record(completions: str | Path, record: dict[str, Any], has_completions: bool) -> None:
    """Refuse to resume ``completions`` written with anything else; record ``record`` for a new file.

    A file holding completions but no provenance (written before records existed) is refused too: nothing says
    what wrote it."""
    path = Path(completions)
    side = provenance_path(path)
    if side.is_file():
        try:
            old = json.loads(side.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ProvenanceError(f"{side}: unreadable provenance record ({exc}); sample into a new --out") from None
        diff = differences(old if isinstance(old, dict) else {}, record)
        if diff:
            raise ProvenanceError(f"--out {path} was written by another model or with other settings "
                                  f"({'; '.join(diff)}); resuming would mix them: sample into a new --out, or rerun "
                                  "with the recorded model and settings")
        return
    if has_completions:
        raise ProvenanceError(f"--out {path} holds completions but no provenance record ({side.name}), so nothing "
                              "says which model and settings wrote them; sample into a new --out")
    atomic_write_json(side, record)
