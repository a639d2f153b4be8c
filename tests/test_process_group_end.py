"""A train command's ranks end their torch.distributed group when the command succeeds (a gloo group left alive can
abort the process during interpreter shutdown, after the run finished: the launcher then reports a failed job), and
leave it alone when the command fails (another rank may still wait in a collective)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import json, os, sys
import torch.distributed as dist
from spatialiq_train.cli.train import _writing

rank, out, fail = sys.argv[1], sys.argv[2], sys.argv[3] == "fail"
os.environ["RANK"] = rank
dist.init_process_group("gloo", init_method="file://" + out + "/store", rank=0, world_size=1)
try:
    with _writing(out + "/run"):
        if fail:
            raise RuntimeError("training failed")
except RuntimeError:
    pass
print(json.dumps({"alive": dist.is_initialized()}))
"""


def _alive_after(tmp_path: Path, rank: str, outcome: str) -> bool:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, rank, str(tmp_path), outcome], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["alive"]


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_successful_command_ends_the_group_on_every_rank(tmp_path: Path, rank: str) -> None:
    assert _alive_after(tmp_path, rank, "ok") is False


def test_a_failed_command_leaves_the_group_to_the_exit(tmp_path: Path) -> None:
    assert _alive_after(tmp_path, "0", "fail") is True
