"""`spatialiq fold ...`: the paper-folding task family (MentalBlackboard): check records against the simulator."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

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


def _truth(data: Path | None, records: Path | None, split: str | None) -> tuple[Any, list[Any]]:
    """(truth by id, the records) from a `fold gen` dataset or a JSON list of records (exactly one of them)."""
    from data_gen.folding_gen import iter_tasks
    from eval.folding import truth_of
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.io import read_json

    if (data is None) == (records is None):
        raise UserError("give either --data (a `spatialiq fold gen` dataset) or --records (a JSON list of records)")
    if records is not None:
        rows = read_json(records)
        if not isinstance(rows, list):
            raise UserError(f"--records {records}: expected a JSON list of records, got {type(rows).__name__}")
        return truth_of(rows), rows
    tasks = list(iter_tasks(data, split))  # type: ignore[arg-type]
    if not tasks:
        raise UserError(f"--data {data}: no tasks{f' in split {split}' if split else ''} (write them with fold gen)")
    return truth_of([r for _, r in tasks]), tasks


@fold_app.command("sample")
def sample(
    model: str = typer.Option(..., "--model", help="A checkpoint folder (e.g. a run's final/)."),
    out: Path = typer.Option(..., "--out", help="Completion JSONL: id, sample, completion per line."),
    data: Path | None = typer.Option(None, "--data", help="Tasks: a `spatialiq fold gen` dataset (prompt + image)."),
    records: Path | None = typer.Option(None, "--records", help="Tasks: a JSON list of records (our text of each)."),
    images: Path | None = typer.Option(None, "--images", help="With --records: a folder of <id>.png to show too."),
    split: str = typer.Option("benchmark", "--split", help="With --data: the split whose tasks are asked."),
    k: int = typer.Option(1, "--k", help="Completions per task."),
    temperature: float = typer.Option(1.0, "--temperature"),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens"),
    engine: str = typer.Option("auto", "--engine", help="auto (vLLM when installed), vllm or transformers."),
    device: str = typer.Option("cpu", "--device", help="transformers engine device."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N tasks (smoke runs)."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Draw k completions per folding task from a checkpoint: generated tasks (prompt and sheet image), or records
    in the release's schema (our text of each; with --images, the user's pictures too). Through `eval sample`'s
    loop: one writer of --out, its provenance checked, each batch appended as it returns, a rerun draws the rest."""
    from eval.engines import check_device, make_engine
    from eval.folding import record_requests, task_requests
    from eval.provenance import check_provenance, sampling_record, write_provenance
    from eval.sample import SamplingConfig, load_completions, run_requests
    from spatialiq_train.cli.steps import on_interrupt
    from spatialiq_train.core.lock import output_lock

    _, tasks = _truth(data, records, split if data is not None else None)
    config = SamplingConfig(k=k, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    asked = task_requests(tasks[:limit], k, seed) if data is not None else record_requests(tasks[:limit], k, seed,
                                                                                         images)
    source = {"kind": "folding", "tasks": str(data if data is not None else records), "split": split, "limit": limit}
    with output_lock(out, "--out"):
        record = sampling_record(model, config, source)
        check_provenance(out, record, bool(load_completions(out)))
        gen = make_engine(engine, model, device=check_device(device, engine))  # type: ignore[arg-type]
        write_provenance(out, record)  # every check passed and the engine loaded: only now is anything written
        on_interrupt(f"every finished batch is kept in {out}; rerun the same command to draw the rest")
        report = run_requests(lambda done: _still_to_draw(asked, done), gen, config, out)
    typer.echo(f"{out}: {report.already_done} completion(s) already on file, {report.written} written "
               f"({len(asked)} task(s))")


def _still_to_draw(asked: list, done: dict) -> list:  # noqa: ANN001
    """``asked`` less the samples already on file (keyed by task id, task and sample number)."""
    out = []
    for r in asked:
        samples = tuple(i for i in r.samples if (r.view, r.task, i) not in done)
        if samples:
            out.append(dataclasses.replace(r, samples=samples))
    return out


@fold_app.command("score")
def score(
    completions: Path = typer.Option(..., "--completions", help="Completion JSONL: id, sample, completion."),
    out: Path = typer.Option(..., "--out", help="Metrics JSON: the paper's table and the per-record counts."),
    data: Path | None = typer.Option(None, "--data", help="Truth: a `spatialiq fold gen` dataset."),
    records: Path | None = typer.Option(None, "--records", help="Truth: a JSON list of records (the release's)."),
    split: str | None = typer.Option(None, "--split", help="With --data: only this split's tasks."),
    direction: bool = typer.Option(
        True, "--direction/--no-direction", help="Match hole directions (the paper's text modality scores without)."
    ),
) -> None:
    """Score completions with the MentalBlackboard paper's metrics: exact match, partial accuracy, records with
    extra and missing holes, unfolding accuracy (exact and per step), per-field accuracy."""
    from dataclasses import asdict

    from eval.folding import read_completions, score_completions
    from spatialiq_train.core.io import atomic_write_json

    truth, _ = _truth(data, records, split)
    scores, table = score_completions(truth, read_completions(completions), use_direction=direction)
    atomic_write_json(out, {"metrics": table, "scores": [asdict(s) for s in scores]})
    typer.echo("  ".join(f"{k} {v:.4g}" for k, v in table.items()))


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.add_typer(fold_app, name="fold")
