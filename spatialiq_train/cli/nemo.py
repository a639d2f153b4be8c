"""`spatialiq nemo sft|rl|convert`: training and checkpoint conversion through NeMo-RL v0.7.0.

`sft` and `rl` run inside the container nvcr.io/nvidia/nemo-rl:v0.7.0 (docs/cluster.md) on a config written by
`spatialiq recipes nemo-rl`; trailing KEY.PATH=VALUE arguments are NeMo-RL's Hydra overrides (strict: the key must
exist in the config, `+KEY=VALUE` adds one), e.g. `spatialiq nemo rl --config runs/dapo32b/nemo.yaml
grpo.max_num_steps=20`. Exit status: 2 bad input or NeMo-RL missing, 3 dynamic sampling hit its cap (the run
stopped; rerun to resume), 1 other failures. `convert` also runs outside the container for checkpoints saved with
`checkpointing.save_consolidated: true`.
"""

from __future__ import annotations

from pathlib import Path

import typer

CONFIG = typer.Option(..., "--config", "-c", help="NeMo-RL YAML (from `spatialiq recipes nemo-rl`).")
OVERRIDES = typer.Argument(None, help="NeMo-RL overrides KEY.PATH=VALUE (the key must exist; +KEY=VALUE adds one).")


def sft_cmd(config: Path = CONFIG, overrides: list[str] | None = OVERRIDES) -> None:
    """SFT (SFT-plain, SFT-CoT, the DAPO-tight warm-up) with NeMo-RL on our traces; rerun to resume."""
    from spatialiq_train.nemo.driver import run

    run("sft", config, list(overrides or []))
    typer.echo("NeMo-RL SFT finished")


def rl_cmd(config: Path = CONFIG, overrides: list[str] | None = OVERRIDES) -> None:
    """GRPO/DAPO with NeMo-RL on our traces and reward environments; rerun to resume."""
    from spatialiq_train.nemo.driver import run

    cause = run("rl", config, list(overrides or []))
    typer.echo("NeMo-RL GRPO finished")
    if cause:
        typer.secho(f"WARNING: {cause}", err=True, bold=True)


def convert_cmd(
    checkpoint: Path = typer.Option(..., "--checkpoint", help="A NeMo-RL step_N folder, or the checkpoint_dir "
                                    "(its newest step_N is converted)."),
    out: Path = typer.Option(..., "--out", help="New Hugging Face checkpoint folder."),
    recipe: Path | None = typer.Option(None, "--recipe", "-r", help="The run's recipe (pixel budget of the "
                                       "processor); default: the one saved in the checkpoint's spatialiq section."),
) -> None:
    """A NeMo-RL checkpoint -> a Hugging Face checkpoint with processor and chat template (eval, release)."""
    from spatialiq_train.nemo.convert import convert

    typer.echo(str(convert(checkpoint, out, recipe)))


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    nemo_app = typer.Typer(help="Train with NeMo-RL (multi-node, inside its container) and convert its "
                                "checkpoints.", no_args_is_help=True)
    nemo_app.command("sft")(sft_cmd)
    nemo_app.command("rl")(rl_cmd)
    nemo_app.command("convert")(convert_cmd)
    app.add_typer(nemo_app, name="nemo")
