"""`spatialiq sweep plan|run|list|report`: recipe variants trained, evaluated and compared (lab/sweep.py)."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

import typer

log = logging.getLogger(__name__)

sweep_app = typer.Typer(help="Plan, run and compare recipe variants (reward weights, learning rates, ...).",
                        no_args_is_help=True)
SWEEP_ARG = typer.Argument(..., help="Sweep folder (written by `spatialiq sweep plan --out`).")


@sweep_app.command("plan")
def plan(
    recipe: str = typer.Option(..., "--recipe", "-r", help="Base recipe: a YAML path or a shipped recipe name."),
    vary: list[str] = typer.Option(..., "--vary", help="KEY.PATH=YAML-LIST, e.g. reward.weights='[{format: 0.1, "
                                   "integer_distance: 0.9}, {default: 1.0, stepwise: 0.5}]' (repeat: the product)."),
    out: Path = typer.Option(..., "--out", "-o", help="Sweep folder to write (sweep.yaml, variants/)."),
    overrides: list[str] | None = typer.Option(None, "--set", help="Base-recipe override KEY.PATH=VALUE "
                                               "(repeatable), applied before the varied keys."),
    eval_data: str | None = typer.Option(None, "--eval-data", help="Dataset root every variant is evaluated on "
                                         "(default: the recipe's data.data_root)."),
    eval_split: str | None = typer.Option(None, "--eval-split", help="Its split or train partition (default: the "
                                          "recipe's data.eval_split, else benchmark)."),
    engine: str = typer.Option("auto", "--engine", help="Sampling engine for the evaluation: auto, vllm, "
                               "transformers."),
    limit: int | None = typer.Option(None, "--eval-limit", help="Evaluate on the first N views only (smoke runs)."),
    min_coverage: float = typer.Option(0.9, "--min-coverage", help="Passed to `eval score`."),
) -> None:
    """Write one resolved recipe per variant and the sweep.yaml index."""
    from spatialiq_train.lab.sweep import EvalSettings, parse_vary, plan_sweep

    varies = [parse_vary(v) for v in vary]
    settings = EvalSettings(eval_data, eval_split, engine, limit, min_coverage)
    sweep = plan_sweep(recipe, list(overrides or []), varies, out, settings)
    for v in sweep.variants:
        typer.echo(f"{v.name}  {out / v.recipe_file}")
    typer.echo(f"{out / 'sweep.yaml'}: {len(sweep.variants)} variants")


@sweep_app.command("list")
def list_cmd(sweep_dir: Path = SWEEP_ARG) -> None:
    """Print the variant names, one a line, in plan order (slurm/sweep.sh reads them)."""
    from spatialiq_train.lab.sweep import load_sweep

    for v in load_sweep(sweep_dir).variants:
        typer.echo(v.name)


@sweep_app.command("run")
def run(
    ctx: typer.Context,
    sweep_dir: Path = SWEEP_ARG,
    only: str | None = typer.Option(None, "--only", help="Run this variant alone (one Slurm array task)."),
) -> None:
    """Train, sample and score every variant in turn on this machine; finished variants are skipped, an
    interrupted one resumes (each step resumes)."""
    from spatialiq_train.cli.steps import run_step
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.lab.sweep import check_eval_inputs, load_sweep, mark_done, variant_steps

    sweep = load_sweep(sweep_dir)
    variants = [sweep.variant(only)] if only else sweep.variants
    views = check_eval_inputs(sweep)  # before anything trains
    typer.echo(f"{sweep_dir}: every variant is evaluated on {views} view(s) of {sweep.eval.data} "
               f"(split {sweep.eval.split})")
    for i, variant in enumerate(variants, 1):
        if sweep.is_done(variant):
            typer.echo(f"[{i}/{len(variants)}] {variant.name}: finished, skipped")
            continue
        steps = variant_steps(sweep, variant)
        for args in steps:
            typer.secho(f"[{i}/{len(variants)}] {variant.name}: spatialiq {shlex.join(args)}", bold=True)
            rc = run_step(ctx, args)
            if rc:
                raise UserError(f"variant {variant.name} failed (exit {rc}, its error is above) at: spatialiq "
                                f"{shlex.join(args)}; rerun `spatialiq sweep run` to resume it", exit_code=rc)
        mark_done(sweep, variant, steps)
    typer.echo(f"{sweep_dir}: {sum(sweep.is_done(v) for v in sweep.variants)}/{len(sweep.variants)} variants finished")


@sweep_app.command("report")
def report(
    sweep_dir: Path = SWEEP_ARG,
    out: Path = typer.Option(..., "--out", "-o", help="Output folder: sweep.csv, report.md, curves.png."),
) -> None:
    """One table (a row per variant, McNemar against the first, BH-adjusted) and the learning curves."""
    from spatialiq_train.lab.sweep import load_sweep
    from spatialiq_train.lab.sweep_report import write_sweep_report

    path = write_sweep_report(load_sweep(sweep_dir), out)
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.add_typer(sweep_app, name="sweep")
