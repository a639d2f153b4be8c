"""Running ``spatialiq`` commands in-process, one after another (the demo and reward sweeps)."""

from __future__ import annotations

import typer


def run_step(args: list[str], verbose: bool = False) -> int:
    """Run one ``spatialiq`` command line in this process; its exit status (the command group printed its error)."""
    from spatialiq_train.cli import app

    try:
        rc = app([*(["--verbose"] if verbose else []), *args], standalone_mode=False)
    except typer.TyperException as exc:  # a usage error (click's ClickException) of the step's arguments
        exc.show()  # type: ignore[attr-defined]
        return int(exc.exit_code)  # type: ignore[attr-defined]
    return int(rc or 0)
