"""NeMo-RL's checkpoint folder layout, read by the driver (resume guard) and by `spatialiq nemo convert`.

``checkpointing.checkpoint_dir`` holds one ``step_N`` folder per saved step (``tmp_step_N`` while it is written,
``old_step_N`` while it is replaced); each finished one has the run's whole config as ``config.yaml``.

Complete or absent, as for the TRL engine's ``checkpoint-N`` (docs/trust.md): v0.7.0's loops write
``training_info.json`` and ``config.yaml``, then the policy (``policy/weights``, its optimizer and tokenizer), then the
data loader's state (``train_dataloader*.pt``), and rename ``tmp_step_N`` to ``step_N``; its DTensor worker saves the
weights asynchronously (``is_async``), so a kill can leave a ``step_N`` whose weights were never finished. Before a
run starts, :func:`set_aside_incomplete` moves every ``step_N`` that is not complete (:func:`step_problem`) and every
``tmp_step_N`` left by a cut save to ``<name>.incomplete`` (NeMo-RL then resumes from the newest complete one and never
writes into a stale temporary folder), and puts back an ``old_step_N`` whose replacement never arrived.
:func:`writing` holds the one-writer lock of the checkpoint folder (`core.lock`) for the run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import read_text
from spatialiq_train.core.weights import safetensors_problem

log = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"step_(\d+)")


def latest_step(checkpoint_dir: str | Path) -> Path | None:
    """The newest finished checkpoint (``step_N``, highest N) in ``checkpoint_dir``, as NeMo-RL resumes from it;
    ``tmp_step_N`` (unfinished) and ``old_step_N`` folders are not checkpoints."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.fullmatch(p.name))]
    return max(steps)[1] if steps else None


def read_step_config(step: Path) -> dict[str, Any]:
    """A step's ``config.yaml`` as a mapping; a missing, unreadable or malformed file is a UserError naming it."""
    path = step / "config.yaml"
    if not path.is_file():
        raise UserError(f"{path}: missing; NeMo-RL writes it into every finished step folder")
    try:
        data = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(exc).split())}); the step folder is damaged: "
                        "use an earlier step_N") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a NeMo-RL run config is a YAML mapping, got {type(data).__name__}")
    return data


def _weights_problem(weights: Path) -> str | None:
    """Why ``policy/weights`` is not a finished save: absent or empty, a safetensors file cut short, a shard an index
    lists missing, torch DCP shards without the ``.metadata`` their coordinator writes last."""
    files = [p for p in weights.rglob("*") if p.is_file()] if weights.is_dir() else []
    if not files:
        return "policy/weights is missing or empty (the save was cut off)"
    for path in files:
        rel = path.relative_to(weights.parent.parent).as_posix()
        if path.suffix == ".safetensors" and (problem := safetensors_problem(path)) is not None:
            return f"{rel}: {problem}"
        if path.name.endswith(".safetensors.index.json"):
            try:
                shards = set((json.loads(path.read_text(encoding="utf-8")).get("weight_map") or {}).values())
            except (UnicodeDecodeError, ValueError, AttributeError):
                return f"{rel} is cut short"
            if missing := sorted(s for s in shards if not (path.parent / s).is_file()):
                return f"{rel} lists {missing[0]}, which is missing"
    for folder in {p.parent for p in files if p.suffix == ".distcp"}:
        if not (folder / ".metadata").is_file():
            return f"{folder.relative_to(weights.parent.parent).as_posix()}: torch DCP shards without .metadata"
    return None


def step_problem(step: Path) -> str | None:
    """Why ``step`` (a ``step_N`` folder) is not a complete NeMo-RL checkpoint; None when it is."""
    info = step / "training_info.json"
    try:
        json.loads(info.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no training_info.json"
    except (UnicodeDecodeError, ValueError):
        return "training_info.json is cut short"
    if not (step / "config.yaml").is_file():
        return "no config.yaml"
    if not any(step.glob("train_dataloader*.pt")):
        return "no train_dataloader.pt (the loops save it after the policy: the save was cut off)"
    return _weights_problem(step / "policy" / "weights")


def _aside(path: Path, why: str) -> None:
    target, n = path.with_name(path.name + ".incomplete"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.incomplete{n}")
    path.rename(target)
    log.warning("%s is incomplete (%s): moved aside to %s (delete it once you no longer need it)", path, why,
                target.name)


def set_aside_incomplete(checkpoint_dir: str | Path) -> None:
    """Move incomplete ``step_N`` and leftover ``tmp_step_N`` / ``old_step_N`` folders of ``checkpoint_dir`` aside
    (``<name>.incomplete``); an ``old_step_N`` without its ``step_N`` (a replacement cut between its two renames) is
    put back as ``step_N`` when complete. Each move is logged with its reason."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        kind = re.fullmatch(r"(tmp_|old_)?step_(\d+)", path.name)
        if kind is None:
            continue
        prefix, step = kind.group(1), root / f"step_{kind.group(2)}"
        if prefix == "tmp_":
            _aside(path, "a save cut off before NeMo-RL renamed it to step_N")
        elif prefix == "old_" and not step.exists() and step_problem(path) is None:
            path.rename(step)
            log.warning("%s put back as %s (its replacement was cut off)", path, step.name)
        elif prefix == "old_":
            _aside(path, "a replaced checkpoint whose removal was cut off")
        elif (problem := step_problem(path)) is not None:
            _aside(path, problem)


@contextlib.contextmanager
def writing(config: dict[str, Any]) -> Iterator[None]:
    """For a run with checkpointing: the one-writer lock of ``checkpointing.checkpoint_dir`` while the block runs
    (a second run on the same folder, however it is spelled, is refused naming the first), and incomplete
    checkpoints set aside first (:func:`set_aside_incomplete`)."""
    ckpt = config.get("checkpointing") or {}
    if not ckpt.get("enabled", False) or not ckpt.get("checkpoint_dir"):
        yield
        return
    from spatialiq_train.core.lock import output_lock

    with output_lock(ckpt["checkpoint_dir"], "checkpointing.checkpoint_dir"):
        set_aside_incomplete(ckpt["checkpoint_dir"])
        yield
