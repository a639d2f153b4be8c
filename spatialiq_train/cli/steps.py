"""Running ``spatialiq`` commands in-process, one after another (the demo and reward sweeps).

A step runs on the command group of the command that runs it (``ctx.find_root().command``), so this module imports
nothing of the CLI package that imports it.
"""

from __future__ import annotations

import typer

VERBOSE_KEY = "spatialiq.verbose"
"""``ctx.meta`` key the root callback sets from ``--verbose`` (the context's meta is shared by subcommands)."""
DEFAULT_INTERRUPT = ("nothing half-written was left: each output is written aside and moved into place, or kept "
                     "as far as it was complete; rerun the same command to do the rest")
_interrupt_note: list[str] = []


def on_interrupt(text: str) -> None:
    """Say what an interrupted run of the current command keeps and how to resume (printed on SIGINT, exit 130)."""
    _interrupt_note[:] = [text]


def interrupt_note() -> str:
    """What the running command said it keeps (:func:`on_interrupt`), else :data:`DEFAULT_INTERRUPT`."""
    return _interrupt_note[0] if _interrupt_note else DEFAULT_INTERRUPT


def run_step(ctx: typer.Context, args: list[str], verbose: bool = False) -> int:
    """Run one ``spatialiq`` command line in this process, on the command group ``ctx`` belongs to; its exit status
    (the command group printed its error)."""
    group = ctx.find_root().command
    try:
        rc = group.main([*(["--verbose"] if verbose else []), *args], standalone_mode=False)
    except typer.TyperException as exc:  # a usage error (click's ClickException) of the step's arguments
        exc.show()  # type: ignore[attr-defined]
        return int(exc.exit_code)  # type: ignore[attr-defined]
    return int(rc or 0)
