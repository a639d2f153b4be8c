"""`spatialiq fold ...`: the paper-folding task family (MentalBlackboard): check records against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import typer

fold_app = typer.Typer(help="Paper folding and hole punching: simulate records, generate tasks.", no_args_is_help=True)


@fold_app.command("simulate")
def simulate(
    records: Path = typer.Argument(..., help="A JSON list of records in the MentalBlackboard release's schema."),
    out: Path = typer.Option(..., "--out", help="JSONL: per record the simulated result and whether each part agrees."),
) -> None:
    """Simulate each record from its folds and initial holes; compare with its resultHoles, totalNumberofHoles and
    unfoldingTypes; print how many agree."""
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.folding_records import check_records
    from spatialiq_train.core.io import atomic_write_text, read_json

    data = read_json(records)
    if not isinstance(data, list):
        raise UserError(f"{records}: expected a JSON list of records, got {type(data).__name__}")
    checks = check_records(data)
    atomic_write_text(out, "".join(json.dumps(c.as_line(), ensure_ascii=False) + "\n" for c in checks))
    for c in checks:
        if c.error:
            typer.echo(f"{c.id}: {c.error}", err=True)
    typer.echo(f"{sum(c.agrees for c in checks)} of {len(checks)} agree")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.add_typer(fold_app, name="fold")
