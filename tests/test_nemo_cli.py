"""The NeMo-RL commands where NeMo-RL is not importable (the main suite's environment): clear refusals, exit 2.
Everything that runs NeMo-RL itself is in tests/engines/nemo (the engine-contract stage)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.errors import describe_error
from spatialiq_train.nemo import driver
from spatialiq_train.nemo.runtime import nemo_available


@pytest.mark.skipif(nemo_available(), reason="NeMo-RL is importable here")
@pytest.mark.parametrize("phase", ["rl", "sft"])
def test_cli_without_nemo_rl_is_exit_2_naming_the_container(tmp_path: Path, phase: str) -> None:
    result = CliRunner().invoke(app, ["nemo", phase, "--config", str(tmp_path / "any.yaml")])
    assert result.exit_code == 2, result.output
    assert "error: NeMo-RL is not importable" in result.output
    assert "nvcr.io/nvidia/nemo-rl:v0.7.0" in result.output and "docs/cluster.md" in result.output


def test_the_dynamic_sampling_cap_error_renders_as_exit_3() -> None:
    described = describe_error(driver.DynamicSamplingCapError("dynamic sampling reached ..."))
    assert described is not None and described[1] == driver.EXIT_DYNAMIC_SAMPLING_CAP == 3


def test_cli_convert_refuses_a_non_checkpoint_with_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["nemo", "convert", "--checkpoint", str(tmp_path), "--out",
                                      str(tmp_path / "hf"), "--recipe", "tiny_cpu"])
    assert result.exit_code == 2 and "neither a NeMo-RL step folder" in result.output
