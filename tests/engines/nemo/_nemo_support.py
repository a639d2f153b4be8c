"""Shared helpers of the NeMo-RL stage: traces on disk, configs written by the CLI, the driver run by the CLI."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from _train_support import tiny_model_dir, write_traces
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.recipes import SHIPPED_RECIPES

VENDOR_NAME = "nemo-rl-v0.7.0"
SHARED_DIR = Path(__file__).resolve().parents[4] / "shared"


def vendored_tree() -> Path | None:
    """The unmodified NeMo-RL v0.7.0 source beside the project (``../shared/vendor``), when present."""
    tree = SHARED_DIR / "vendor" / VENDOR_NAME
    return tree if tree.is_dir() else None


class PlacementReached(Exception):  # noqa: N818 - a signal, not an error
    """Raised where NeMo-RL would place workers on GPUs."""


@dataclass
class Placement:
    """Stands in for ``RayVirtualCluster``: keeps the caller's local variables (the set-up's state), then stops."""

    state: dict[str, Any] = field(default_factory=dict)
    calls: int = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        self.state = dict(sys._getframe(1).f_locals)
        self.state["_cluster_kwargs"] = kwargs
        raise PlacementReached("RayVirtualCluster")



@contextmanager
def local_ray_head(temp: Path) -> Iterator[str]:
    """A local Ray head tagged as NeMo-RL's ``init_ray`` looks for, so each driver run attaches to it
    (``RAY_ADDRESS``) instead of starting a cluster of its own; stopped on exit."""
    import os
    import signal
    import socket
    import subprocess
    import time

    import ray

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_bin = Path(sys.executable).with_name("ray")
    # 16 logical CPUs: each environment actor asks for one, and several driver runs' actors share the head
    proc = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=16", "--include-dashboard=false",
         "--disable-usage-stats", '--resources={"nrl_tag_ALL": 1}', f"--temp-dir={temp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    os.environ["RAY_ADDRESS"] = address
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                ray.init(address=address, log_to_driver=False)
                break
            except (ConnectionError, RuntimeError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(1)
        ray.shutdown()
        yield address
    finally:
        # a throwaway cluster: its processes (all in the head's process group) are killed outright. SIGTERM alone
        # took 33 s: `ray start --block` shuts its children down gracefully, one timeout after another. Never
        # `ray stop`, which would stop every Ray cluster of the machine's user (CI runs the main suite's beside this).
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def tiny_model() -> Path:
    """The offline tiny Qwen2.5-VL (with its processor), saved once per process (the main suite's helper)."""
    return Path(tiny_model_dir())


RECIPES = sorted(p.stem for p in SHIPPED_RECIPES.glob("*.yaml") if p.stem.startswith(("dapo_", "sft_")))
CASES = [(name, "rl") for name in RECIPES if name.startswith("dapo_")] + [(name, "sft") for name in RECIPES]
"""Every shipped recipe phase: DAPO-tight RL and its SFT warm-up, and every SFT recipe."""
ROWS = 16
ANSWERS = [11, 3, 7, 0, 5, 12, 2, 9]


def write_all_traces(root: Path, rows: int = ROWS) -> Path:
    """Trace files of every split (``rows`` rows, answers cycling through the above) and their images."""
    rng = np.random.default_rng(0)
    for split in ("train", "val", "warmup", "rl"):
        write_traces(root, split, rows, rng, answer=lambda i: ANSWERS[i % len(ANSWERS)])
    return root


def recipe_sets(data_root: Path, out: Path, *extra: str) -> list[str]:
    return [f"data.traces_dir={data_root / 'traces'}", f"data.data_root={data_root}",
            f"model.name_or_path={tiny_model()}", "model.tiny=false", f"run.output_dir={out}", *extra]


def write_config(name: str, phase: str, data_root: Path, out: Path, nodes: int = 1, gpus: int = 4,
                 extra: tuple[str, ...] = ()) -> tuple[Path, dict[str, Any]]:
    """``spatialiq recipes nemo-rl`` as a user runs it; returns the file and what it holds."""
    cfg = out / f"{Path(name).stem}-{phase}.yaml"
    args = ["recipes", "nemo-rl", name, "--out", str(cfg), "--phase", phase, "--nodes", str(nodes),
            "--gpus-per-node", str(gpus)]
    for item in recipe_sets(data_root, out / "run", *extra):
        args += ["--set", item]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return cfg, yaml.safe_load(cfg.read_text(encoding="utf-8"))


def run_driver(phase: str, cfg: Path, *overrides: str) -> Any:
    """``spatialiq nemo rl|sft --config CFG`` in this process; returns the click result (exception included)."""
    return CliRunner().invoke(app, ["nemo", phase, "--config", str(cfg), *overrides])
