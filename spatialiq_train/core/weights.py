"""A checkpoint's safetensors weights: finiteness and a content digest.

:func:`check_finite_weights` refuses a checkpoint holding a NaN or infinity (a diverged run) naming the file and
tensor, after :func:`check_complete_weights` has refused a cut-short safetensors file naming it; ``spatialiq
release``, ``eval sample`` and ``train rl`` (``rl.init_from``) call it before using a checkpoint.
:func:`checkpoint_digest` is the sha256 over a checkpoint's weight and config files (names and bytes), which
completions files record.
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


class IncompleteWeightsError(UserError):
    """A safetensors file that is cut short or damaged (an interrupted save, a full disk, a partial copy)."""


def safetensors_problem(path: str | Path) -> str | None:
    """Why ``path`` is not a complete safetensors file (None when it is), from its header alone: the 8-byte header
    length, a JSON header, and tensor data that ends exactly at the end of the file. Reads the header only, so it
    costs the same for 1 MB and 60 GB."""
    import json
    import struct

    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes, shorter than a safetensors header"
    with path.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        if length > size - 8:
            return f"the header says {length} bytes of header, but the file has {size - 8} after its length"
        try:
            header = json.loads(fh.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return "the header is not JSON (not a safetensors file, or damaged)"
    if not isinstance(header, dict):
        return "the header is not a JSON object"
    ends = [t.get("data_offsets", [0, 0])[1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    want = 8 + length + max(ends, default=0)
    if size != want:
        return f"{size} bytes where its header describes {want} (cut short: an interrupted save or copy?)" \
            if size < want else f"{size} bytes where its header describes {want} (trailing bytes)"
    return None


def check_complete_weights(model_dir: str | Path, what: str = "checkpoint") -> None:
    """Raise :class:`IncompleteWeightsError` (one line naming the file) when a safetensors file of a local
    checkpoint is cut short or damaged, or a shard its ``model.safetensors.index.json`` lists is missing."""
    import json

    root = Path(model_dir)
    for path in weight_files(root):
        problem = safetensors_problem(path)
        if problem is not None:
            raise IncompleteWeightsError(
                f"{what} {root}: {path.name} is not a complete safetensors file ({problem}); the save was cut "
                "off: use the run's last complete checkpoint, or copy the file again")
    index = root / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set((json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}).values())
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            raise IncompleteWeightsError(
                f"{what} {root}: {index.name} is not a JSON weight index (cut short?)") from None
        missing = sorted(s for s in shards if not (root / s).is_file())
        if missing:
            raise IncompleteWeightsError(f"{what} {root}: {index.name} lists {missing[0]}, which is missing"
                                         f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}")


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
    checks name what is missing). A cut-short or damaged safetensors file is refused first
    (:func:`check_complete_weights`)."""
    check_complete_weights(model_dir, what)
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
