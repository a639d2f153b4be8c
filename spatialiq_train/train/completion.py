"""Idempotent phases: a finished phase is complete, and rerunning it changes nothing.

When a phase has exported its policy, :func:`write_marker` records ``<phase dir>/complete.json``: the step budget
it ran under (``max_steps``, ``num_train_epochs``), the step it reached and the final folder. A rerun reads it
first (:func:`decide`, pure): the same budget is complete (nothing is loaded, trained or written, so every byte of
``final/`` stays); a larger budget trains on from the newest checkpoint only with ``--extend`` (else a
:class:`RunFinishedError` says so); a smaller one is refused (a new run). A phase finished before markers existed
is recognised by its final folder and a last checkpoint at the recipe's ``max_steps``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import atomic_write_json

log = logging.getLogger(__name__)

MARKER = "complete.json"
Decision = Literal["train", "complete"]


class RunFinishedError(UserError):
    """A finished phase asked to train to another step budget; the message says how to extend or start anew."""


def budget_of(optimizer: Any) -> dict[str, float]:
    """The step budget of a phase's optimizer section: ``max_steps`` (-1: by epochs) and ``num_train_epochs``."""
    return {"max_steps": int(optimizer.max_steps), "num_train_epochs": float(optimizer.num_train_epochs)}


def _larger(new: dict[str, float], old: dict[str, float]) -> bool | None:
    """True when ``new`` trains further than ``old``, False when it trains less, None when they are equal."""
    if new == old:
        return None
    if new["max_steps"] > 0 and old["max_steps"] > 0:
        return new["max_steps"] > old["max_steps"] if new["max_steps"] != old["max_steps"] else None
    if new["max_steps"] == old["max_steps"] == -1:
        return new["num_train_epochs"] > old["num_train_epochs"]
    return True  # steps <-> epochs: not comparable, treated as a new budget that --extend may ask for


def decide(marker: dict[str, Any] | None, budget: dict[str, float], final_ready: bool, extend: bool,
           where: str) -> Decision:
    """``complete`` for a finished phase with the same budget, ``train`` otherwise (pure).

    A different budget: ``train`` with ``extend`` when it is larger, else a :class:`RunFinishedError` naming
    ``where``, the recorded and the new budget."""
    if marker is None or not final_ready or marker.get("global_step") == 0:  # a step-less "finish" is not one
        return "train"
    old = {"max_steps": int(marker["max_steps"]), "num_train_epochs": float(marker["num_train_epochs"])}
    larger = _larger(budget, old)
    if larger is None:
        return "complete"
    said = (f"{where} finished at step {marker.get('global_step', '?')} under max_steps {old['max_steps']}, "
            f"num_train_epochs {old['num_train_epochs']:g}; the recipe now asks for max_steps {budget['max_steps']}, "
            f"num_train_epochs {budget['num_train_epochs']:g}")
    if larger and extend:
        return "train"
    if larger:
        raise RunFinishedError(f"{said}. Pass --extend to train on from its newest checkpoint to the new budget "
                               "(final/ is then replaced), or give a new --out for a new run")
    raise RunFinishedError(f"{said}, which is less than it already trained; give a new --out for a new run, or "
                           "rerun with the budget it finished under")


def _legacy_marker(phase_dir: Path, budget: dict[str, float]) -> dict[str, Any] | None:
    """A marker for a phase finished before markers existed: its newest checkpoint reached the recipe's max_steps."""
    if budget["max_steps"] <= 0:
        return None
    steps = [int(p.name.split("-")[1]) for p in phase_dir.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
    if not steps or max(steps) < budget["max_steps"]:
        return None
    return {**budget, "global_step": max(steps)}


def read_marker(phase_dir: Path, budget: dict[str, float]) -> dict[str, Any] | None:
    """The phase's completion record (or the legacy one, see :func:`_legacy_marker`); None when unfinished."""
    path = phase_dir / MARKER
    if not path.is_file():
        return _legacy_marker(phase_dir, budget)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable completion record ({exc}); delete it to resume training") from None
    if not isinstance(data, dict) or not {"max_steps", "num_train_epochs"} <= data.keys():
        raise UserError(f"{path}: a completion record needs max_steps and num_train_epochs; delete it to resume")
    return data


def write_marker(phase_dir: Path, phase: str, budget: dict[str, float], global_step: int, final_dir: Path) -> None:
    """Record that ``phase`` finished at ``global_step`` under ``budget`` with its policy in ``final_dir``."""
    atomic_write_json(phase_dir / MARKER, {"phase": phase, **budget, "global_step": int(global_step),
                                           "final": final_dir.name})


def final_ready(final_dir: Path) -> bool:
    """True when ``final_dir`` holds an exported policy (config and safetensors weights)."""
    return (final_dir / "config.json").is_file() and any(final_dir.glob("*.safetensors"))
