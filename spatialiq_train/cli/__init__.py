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

for _module in (gen_cli, traces_cli, reward_cli, eval_cli, train_cli, demo_cli):
    _module.register(app)


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG level.")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def main() -> None:
    app()
