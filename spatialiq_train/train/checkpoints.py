"""Complete or absent, for training checkpoints (docs/trust.md): which ``checkpoint-N`` folders a resume may use,
and a full disk during a save as one line that says where the rerun resumes.

The trainer writes a checkpoint's files one after the other and ``trainer_state.json`` last (transformers
``Trainer._save_checkpoint``), so a save cut off by SIGKILL, a time limit or a full disk leaves a folder without it,
or with safetensors cut short. Such a folder is incomplete: a resume skips it, names it, moves it aside to
``checkpoint-N.incomplete`` (so later saves and checkpoint rotation never meet it) and resumes from the newest
complete one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from spatialiq_train.core.errors import JobFailure
from spatialiq_train.core.weights import safetensors_problem

log = logging.getLogger(__name__)

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
STATE = "trainer_state.json"
"""Written last by the trainer: its presence (as complete JSON) marks a finished save."""


def checkpoint_problem(ckpt: str | Path) -> str | None:
    """Why ``ckpt`` is not a complete checkpoint (None when it is): trainer_state.json missing or cut short, a
    safetensors file cut short, a shard its weight index lists missing."""
    ckpt = Path(ckpt)
    state = ckpt / STATE
    if not state.is_file():
        return f"no {STATE} (the trainer writes it last: the save was cut off)"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f"{STATE} is cut short"
    for weights in sorted(ckpt.glob("*.safetensors")):
        problem = safetensors_problem(weights)
        if problem is not None:
            return f"{weights.name}: {problem}"
    for index in ckpt.glob("*.safetensors.index.json"):
        try:
            shards = set((json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}).values())
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            return f"{index.name} is cut short"
        missing = sorted(s for s in shards if not (ckpt / s).is_file())
        if missing:
            return f"{index.name} lists {missing[0]}, which is missing"
    return None


def checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint-N`` folder under ``output_dir`` as (N, path), oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := CHECKPOINT.match(p.name)) and p.is_dir()]
    return sorted(found)


def last_complete_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(the newest complete checkpoint or None, [(incomplete checkpoint newer than it, why)], newest first)."""
    skipped: list[tuple[Path, str]] = []
    for _, path in reversed(checkpoints(output_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


def set_aside(skipped: list[tuple[Path, str]], resume: Path | None) -> None:
    """Move each incomplete checkpoint to ``checkpoint-N.incomplete`` (a free name), saying so and why."""
    for path, problem in skipped:
        target = path.with_name(path.name + ".incomplete")
        n = 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.name}.incomplete{n}")
        path.rename(target)
        log.warning("%s is incomplete (%s): moved aside to %s; resuming from %s (delete %s once you no longer need "
                    "it)", path, problem, target.name, resume.name if resume else "the start of the phase",
                    target.name)


_FULL = (errno.ENOSPC, errno.EDQUOT)


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in _FULL:
        return True
    # torch.save reports a failed write as RuntimeError ("PytorchStreamWriter failed writing file ...")
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("file write failed" in text or "No space left" in text)


@contextlib.contextmanager
def disk_full_as_one_line(output_dir: str | Path) -> Iterator[None]:
    """Within the block, a full disk or quota (OSError ENOSPC/EDQUOT, or torch's write failure) becomes one
    :class:`JobFailure` line naming the run folder and the checkpoint a rerun resumes from."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        if not _disk_full(exc):
            raise
        last, _ = last_complete_checkpoint(output_dir)
        where = f"the rerun resumes from {last}" if last else "no checkpoint is complete yet: the rerun starts over"
        raise JobFailure(f"no space left on the device while writing {getattr(exc, 'filename', None) or output_dir} "
                         f"(the save was cut off and is set aside at the next run); free space and rerun the same "
                         f"command: {where}") from None
