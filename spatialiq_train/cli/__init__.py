"""The ``spatialiq`` command.

Each area of the project owns one module here with a ``register(app)`` function that adds its
commands; heavy libraries are imported inside the command bodies so ``spatialiq --help`` stays fast.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click
import typer
from typer.core import TyperGroup

from spatialiq_train.cli import demo as demo_cli
from spatialiq_train.cli import eval as eval_cli
from spatialiq_train.cli import gen as gen_cli
from spatialiq_train.cli import release as release_cli
from spatialiq_train.cli import reward as reward_cli
from spatialiq_train.cli import sweep as sweep_cli
from spatialiq_train.cli import traces as traces_cli
from spatialiq_train.cli import train as train_cli
from spatialiq_train.errors import UserError


class _Commands(TyperGroup):
    """Renders a :class:`UserError` raised by any command as one ``error: ...`` line with its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            if ctx.meta.get("spatialiq.verbose") or "-v" in sys.argv[1:] or "--verbose" in sys.argv[1:]:
                raise
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=_Commands,
    name="spatialiq",
    help="Spatial-IQ training: generate cube scenes, build traces, score rewards, train and evaluate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for _module in (gen_cli, traces_cli, reward_cli, eval_cli, train_cli, release_cli, demo_cli, sweep_cli):
    _module.register(app)


@app.callback()
def _root(ctx: typer.Context,
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG; tracebacks on errors.")) -> None:
    ctx.meta["spatialiq.verbose"] = verbose
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


USER_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError)
"""Errors from bad input (missing or malformed files, bad values) that reach the top of a command: shown as one
``error: ...`` line and exit status 1, with the traceback only under ``--verbose``. Our own error types
(RecipeError, TraceError, GroundTruthError) are ValueErrors; RenderError and GenerationError are added by name."""


def _user_errors() -> tuple[type[BaseException], ...]:
    from data_gen.generate import GenerationError
    from data_gen.render.base import RenderError

    return (*USER_ERRORS, GenerationError, RenderError)


def main() -> None:
    """Console entry point: clean one-line errors for bad input, tracebacks only with --verbose."""
    try:
        app()
    except _user_errors() as exc:
        if "-v" in sys.argv[1:] or "--verbose" in sys.argv[1:]:
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        typer.echo(f"error: {message} (rerun with --verbose for the traceback)", err=True)
        raise SystemExit(1) from None
