"""A checkpoint's safetensors weights: finiteness and a content digest.

:func:`check_finite_weights` refuses a checkpoint holding a NaN or infinity (a diverged run) naming the file and
tensor; ``spatialiq release`` and ``eval sample`` call it before using a checkpoint. :func:`checkpoint_digest` is
the sha256 over a checkpoint's weight and config files (names and bytes), which completions files record.
Tensors are read one at a time (``safetensors.safe_open``), so a large checkpoint is never held in memory.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.io import hash_file

DIGEST_FILES: tuple[str, ...] = ("*.safetensors", "config.json", "generation_config.json", "adapter_config.json")
"""The files :func:`checkpoint_digest` covers: every weight file and the configs that change what the model does."""


class BrokenCheckpointError(UserError):
    """A checkpoint whose weights hold NaN or infinities; the message names the folder, file and tensor."""


def weight_files(model_dir: str | Path) -> list[Path]:
    """The ``*.safetensors`` files of a checkpoint folder, sorted by name."""
    return sorted(Path(model_dir).glob("*.safetensors"))


def non_finite_tensors(model_dir: str | Path, first_only: bool = True) -> list[tuple[str, str]]:
    """(file name, tensor name) of each tensor holding a NaN or infinity; stops at the first with ``first_only``."""
    import torch
    from safetensors import safe_open

    found: list[tuple[str, str]] = []
    for path in weight_files(model_dir):
        with safe_open(str(path), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open is not a mapping
                tensor = fh.get_tensor(name)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    found.append((path.name, name))
                    if first_only:
                        return found
    return found


def check_finite_weights(model_dir: str | Path, what: str = "checkpoint") -> None:
    """Raise :class:`BrokenCheckpointError` when a local checkpoint's weights hold NaN or infinities.

    ``what`` says where the folder came from (``--model``, ``--run``); a folder without safetensors passes (other
    checks name what is missing)."""
    bad = non_finite_tensors(model_dir)
    if bad:
        file, tensor = bad[0]
        raise BrokenCheckpointError(
            f"{what} {model_dir} is broken: tensor {tensor!r} in {file} holds NaN or infinite values (the training "
            "run diverged); retrain with a lower learning rate, or use an earlier checkpoint of the run")


def checkpoint_digest(model_dir: str | Path) -> str:
    """sha256 (hex) over the names and bytes of a checkpoint's weight and config files (:data:`DIGEST_FILES`)."""
    root = Path(model_dir)
    files = sorted({p for pattern in DIGEST_FILES for p in root.glob(pattern) if p.is_file()})
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        hash_file(digest, path).update(b"\0")
    return digest.hexdigest()
