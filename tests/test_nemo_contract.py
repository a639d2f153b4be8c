"""The Slurm job's two commands are the CLI's: the generator step, fed to the CLI as it stands, writes the config the
driver step names. That the driver runs what the generator writes, for every shipped recipe phase, is proven
against the real NeMo-RL v0.7.0 in tests/engines/nemo/test_setup.py (the engine-contract stage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _train_support import one_thread, tiny_model_dir, write_traces
from test_slurm_scripts import SLURM, TRAINING, fake_slurm, plan, run  # noqa: F401 - fake_slurm is a fixture
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.recipes import SHIPPED_RECIPES
from spatialiq_train.nemo import driver

RECIPES = sorted(p.stem for p in SHIPPED_RECIPES.glob("*.yaml") if p.stem.startswith(("dapo_", "sft_")))
CASES = [(name, "rl") for name in RECIPES if name.startswith("dapo_")] + [(name, "sft") for name in RECIPES]
ROWS = 3


@pytest.fixture(autouse=True)
def _threads() -> None:
    one_thread()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Traces of every split (answers 0, 1, 2) with their images under one root."""
    root = tmp_path_factory.mktemp("siq")
    rng = np.random.default_rng(0)
    for split in ("train", "val", "warmup", "rl"):
        write_traces(root, split, ROWS, rng, answer=lambda i: i)
    return root


def _invoke(args: list[str]) -> Any:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("script", ["dapo_7b.sh", "sft_cot_32b.sh"])
def test_slurm_jobs_generator_and_driver_commands_are_the_clis(fake_slurm: Path, data_root: Path, script: str,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's two srun steps, fed to the CLI as they stand, write a config and run it."""
    recipe, phase, _ = TRAINING[script]
    proc, _ = run(script, fake_slurm, 2, in_job=True, DRY_RUN="1", INIT_FROM="none",
                  TRACES_DIR=str(data_root / "traces"), DATASET=str(data_root),
                  EXTRA_SETS=f"model.name_or_path={tiny_model_dir()}")
    assert proc.returncode == 0, proc.stderr
    cmds = plan(proc.stdout)
    (gen,) = [c for c in cmds if "nemo-rl" in c]
    (drv,) = [c for c in cmds if c[-4:-2] == ["nemo", phase]]
    for cmd in (gen, drv):
        assert cmd[cmd.index("-m") - 1:cmd.index("-m") + 2] == ["python", "-m", "spatialiq_train.cli"]
    _invoke(gen[gen.index("spatialiq_train.cli") + 1:])
    config = Path(drv[-1])
    assert config == Path(gen[gen.index("--out") + 1])
    written = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert written["spatialiq"]["recipe"] == recipe and written["spatialiq"]["phase"] == phase
    assert written["spatialiq"]["recipe_overrides"] == [gen[i + 1] for i, a in enumerate(gen) if a == "--set"]
    assert drv[drv.index("spatialiq_train.cli") + 1:] == ["nemo", phase, "--config", str(config)]


def test_slurm_knows_the_drivers_dynamic_sampling_exit_status() -> None:
    text = (SLURM / "nemo_common.sh").read_text(encoding="utf-8")
    assert f"SIQ_EXIT_DYNAMIC_SAMPLING_CAP={driver.EXIT_DYNAMIC_SAMPLING_CAP} " in text
    assert driver.DynamicSamplingCapError("x").exit_code == driver.EXIT_DYNAMIC_SAMPLING_CAP == 3
