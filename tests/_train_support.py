"""Helpers for the training tests: synthetic trace JSONL with PIL images, recipe loading, one torch thread, weight
digests (ranks in step, a trained model changed) and the refill capacity of dynamic sampling."""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
TINY_RECIPE = REPO / "recipes" / "tiny_cpu.yaml"


def one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def trace_row(rel_image: str, answer: int, structure_id: str, system: str | None = "Answer in tags.") -> dict[str, Any]:
    """One trace row in the `spatialiq traces` format (data_gen/traces.py)."""
    messages: list[dict[str, Any]] = []
    if system is not None:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "user", "content": [{"type": "image", "image": rel_image},
                                                 {"type": "text", "text": "How many blocks are there?"}]})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": f"<answer>{answer}</answer>"}]})
    return {"messages": messages, "view": rel_image, "structure_id": structure_id, "answer": answer,
            "task_id": "task_main", "task_main": answer}


def write_traces(
    root: Path, split: str, n: int, rng: np.random.Generator, answer: Callable[[int], int], start: int = 0
) -> Path:
    """Write `n` random 56x56 images under root/img and `root/traces/<split>.jsonl`; returns the traces folder."""
    (root / "img").mkdir(parents=True, exist_ok=True)
    traces = root / "traces"
    traces.mkdir(exist_ok=True)
    lines = []
    for i in range(start, start + n):
        rel = f"img/{split}_{i}.png"
        Image.fromarray((rng.random((56, 56, 3)) * 255).astype("uint8")).save(root / rel)
        lines.append(json.dumps(trace_row(rel, answer(i), f"{split}-{i}")))
    (traces / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return traces


def tiny_recipe(overrides: list[str] | None = None) -> Any:
    from spatialiq_train.core.recipes import load_recipe

    return load_recipe(TINY_RECIPE, list(overrides or []))


@functools.cache
def tiny_model_dir() -> str:
    """The offline tiny Qwen2.5-VL, built and saved once per test process (session scope across modules)."""
    from spatialiq_train.tiny import save_tiny

    folder = tempfile.mkdtemp(prefix="tiny-qwen25vl-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return str(save_tiny(Path(folder) / "model", seed=0))


def disjoint_capacity(n_rows: int, n_groups: int, world: int) -> int:
    """How many refill rounds per generation stay free of repeated prompts across all ranks."""
    per_round = n_groups * world
    return n_rows // per_round if per_round else 0


def state_digest(state: dict[str, Any]) -> str:
    """SHA-256 over a state dict's names, shapes, dtypes and bytes (names sorted)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def model_digest(model: Any) -> str:
    """`state_digest` of an (unwrapped) model's parameters and buffers."""
    return state_digest(dict(model.state_dict()))


def free_port() -> int:
    """A free TCP port on the loopback address (for a launcher's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launcher_env() -> dict[str, str]:
    """The environment of a multi-process launch (`accelerate launch`): one OpenMP thread, offline, the project and
    tests/ on the path, and no WORLD_SIZE inherited from an outer launch."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    env.pop("WORLD_SIZE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    return env


class Interrupted(RuntimeError):
    """A simulated interruption of a training run (raised by :func:`interrupt_at`)."""


def interrupt_at(step: int) -> Any:
    """A trainer callback that raises :class:`Interrupted` when the run logs ``step``: a run cut off there."""
    from transformers import TrainerCallback

    class InterruptAt(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step == step:
                raise Interrupted(f"simulated interruption at step {step}")

    return InterruptAt()
