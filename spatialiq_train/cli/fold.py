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


@fold_app.command("gen")
def gen(
    out: Path = typer.Option(..., "--out", help="Dataset folder: OUT/<split>/<id>/record.json and sheet.png."),
    split: str = typer.Option("train", "--split", help="train or benchmark (no configuration is in both)."),
    count: int = typer.Option(..., "--count", help="Tasks 0..count-1 of the split (present ones are kept)."),
    seed: int = typer.Option(0, "--seed", help="Run seed: task i is a function of (seed, split, i)."),
    groups: str = typer.Option("", "--groups", help="Comma-separated structure groups (default: all nine, in turn)."),
) -> None:
    """Generate paper-folding tasks in the release's record schema, each with its text prompt and sheet image;
    an interrupted run resumes, a rerun changes no byte."""
    from data_gen.folding_gen import check_groups, generate
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.lock import output_lock

    if count < 1:
        raise UserError(f"--count {count}: give at least 1")
    names = check_groups([g.strip() for g in groups.split(",")])
    with output_lock(out, "--out"):
        written, kept = generate(out, split, count, seed, names)
    typer.echo(f"{split}: {written} task(s) written, {kept} already there, under {out / split}")


@fold_app.command("traces")
def traces(
    data: Path = typer.Option(..., "--data", help="A dataset written by `spatialiq fold gen`."),
    out: Path = typer.Option(..., "--out", help="Folder for train/val/warmup/rl.jsonl and benchmark.jsonl."),
    kind: str = typer.Option(..., "--kind", help="plain (the answer) or cot (the unfolding steps, then the answer)."),
) -> None:
    """Write chat-format trace JSONL for the folding tasks (image paths relative to --data: train with
    data.data_root set to it)."""
    from data_gen.folding_traces import write_fold_traces
    from spatialiq_train.core.lock import output_lock

    with output_lock(out, "--out"):
        counts = write_fold_traces(data, out, kind)
    typer.echo(", ".join(f"{name}.jsonl {n}" for name, n in counts.items()) + f" under {out}")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.add_typer(fold_app, name="fold")
