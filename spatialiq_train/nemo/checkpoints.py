"""NeMo-RL's checkpoint folder layout, read by the driver (resume guard) and by `spatialiq nemo convert`.

``checkpointing.checkpoint_dir`` holds one ``step_N`` folder per saved step (``tmp_step_N`` while it is written,
``old_step_N`` while it is replaced); each finished one has the run's whole config as ``config.yaml``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import read_text

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
