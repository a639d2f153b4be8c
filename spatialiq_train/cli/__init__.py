"""The ``spatialiq`` command.

Each area of the project owns one module here with a ``register(app)`` function that adds its
commands; heavy libraries are imported inside the command bodies so ``spatialiq --help`` stays fast.
"""

from __future__ import annotations

import logging
from typing import Any

import typer
from typer.core import TyperGroup

from spatialiq_train.cli import demo as demo_cli
from spatialiq_train.cli import eval as eval_cli
from spatialiq_train.cli import fold as fold_cli
from spatialiq_train.cli import gen as gen_cli
from spatialiq_train.cli import nemo as nemo_cli
from spatialiq_train.cli import release as release_cli
from spatialiq_train.cli import reward as reward_cli
from spatialiq_train.cli import sweep as sweep_cli
from spatialiq_train.cli import traces as traces_cli
from spatialiq_train.cli import train as train_cli
from spatialiq_train.cli.steps import VERBOSE_KEY, interrupt_note
from spatialiq_train.core.errors import describe_error


class _Commands(TyperGroup):
    """Renders bad input and failed jobs from any command as one ``error: ...`` line with its exit code.

    What is rendered and with which code is decided by :func:`spatialiq_train.core.errors.describe_error`
    (UserError and subclasses, OSError as a sentence, other ValueError/KeyError); under ``--verbose``
    the exception propagates with its traceback. Anything else (a bug) always keeps its traceback. Ctrl-C prints what
    the command kept and how to resume (:func:`spatialiq_train.cli.steps.on_interrupt`) and exits 130.
    """

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # exit codes and click's own usage errors
            raise
        except KeyboardInterrupt:  # Ctrl-C: say what was kept and how to resume, exit 130 as a shell would
            typer.echo(f"interrupted: {interrupt_note()}", err=True)
            raise typer.Exit(code=130) from None
        except Exception as exc:
            described = describe_error(exc)
            if described is None or ctx.meta.get(VERBOSE_KEY):
                raise
            message, code = described
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(code) from None


app = typer.Typer(
    cls=_Commands,
    name="spatialiq",
    help="Spatial-IQ training: generate cube scenes, build traces, score rewards, train and evaluate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

_MODULES = (gen_cli, traces_cli, reward_cli, eval_cli, train_cli, nemo_cli, release_cli, demo_cli, sweep_cli, fold_cli)
for _module in _MODULES:
    _module.register(app)


def _version(shown: bool) -> None:
    """``spatialiq --version``: the project's version, then exit (before any command)."""
    if shown:
        from spatialiq_train.core.versions import PROJECT_VERSION

        typer.echo(f"spatialiq-train {PROJECT_VERSION}")
        raise typer.Exit(code=0)


@app.callback()
def _root(ctx: typer.Context,
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG; tracebacks on errors."),
          version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    ctx.meta[VERBOSE_KEY] = verbose
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def main() -> None:
    """Console entry point (``spatialiq``): errors are rendered by the command group, see :class:`_Commands`."""
    app()
