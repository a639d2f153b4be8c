"""The ``spatialiq`` command.

Each area of the project owns one module here with a ``register(app)`` function that adds its
commands; heavy libraries are imported inside the command bodies so ``spatialiq --help`` stays fast.
"""

from __future__ import annotations

import logging

import typer

from spatialiq_train.cli import demo as demo_cli
from spatialiq_train.cli import eval as eval_cli
from spatialiq_train.cli import gen as gen_cli
from spatialiq_train.cli import release as release_cli
from spatialiq_train.cli import reward as reward_cli
from spatialiq_train.cli import traces as traces_cli
from spatialiq_train.cli import train as train_cli

app = typer.Typer(
    name="spatialiq",
    help="Spatial-IQ training: generate cube scenes, build traces, score rewards, train and evaluate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for _module in (gen_cli, traces_cli, reward_cli, eval_cli, train_cli, release_cli, demo_cli):
    _module.register(app)


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG level.")) -> None:
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
    import sys

    try:
        app()
    except _user_errors() as exc:
        if "-v" in sys.argv[1:] or "--verbose" in sys.argv[1:]:
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        typer.echo(f"error: {message} (rerun with --verbose for the traceback)", err=True)
        raise SystemExit(1) from None
