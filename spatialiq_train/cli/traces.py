"""`spatialiq traces`: SFT-plain / SFT-CoT JSONL from a generated (or the released) dataset."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

logger = logging.getLogger(__name__)


def traces(
    data: Path = typer.Option(
        ..., "--data", help="Dataset root (holding train/ and/or benchmark/, or only the data/*.parquet shards)."),
    out: Path = typer.Option(
        ..., "--out", help="Folder for train/val/warmup/rl.jsonl and benchmark.jsonl; files of these names an earlier "
                           "run left there and this run does not write are removed."),
    kind: str = typer.Option(..., "--kind", help="plain (answer-tagged integer) or cot (benchmark CoT template)."),
    mask_final_answer: str | None = typer.Option(
        None, "--mask-final-answer", help="CoT only: placeholder for task_main in the total line and answer tag."
    ),
    tasks: str = typer.Option("task_main", "--tasks", help="Plain only: comma-separated task ids."),
    split: str | None = typer.Option(
        None, "--split", help="Read only this split (train|benchmark); a root without split folders (the released "
                              "benchmark) is read whole, every view as this split."
    ),
    dialect: str = typer.Option("training", "--dialect", help="Prompt dialect: training (prepare_data) or type1."),
    require_images: bool = typer.Option(
        True, "--require-images/--no-require-images",
        help="Skip views without view.png (or, read from parquet, without an image; the release does)."
    ),
) -> None:
    """Write chat-format trace JSONL files, partitioned by structure."""
    from data_gen.traces import build_traces, check_options, load_views, write_traces
    from spatialiq_train.errors import UserError
    from spatialiq_train.tasks import DIALECTS

    if dialect not in DIALECTS:
        raise UserError(f"--dialect: unknown dialect {dialect!r}; valid: {', '.join(DIALECTS)}")
    task_ids = [t.strip() for t in tasks.split(",") if t.strip()]
    check_options(kind, task_ids, mask_final_answer)  # option mistakes first, before reading the dataset
    views = load_views(data, split)
    files = build_traces(views, kind, task_ids, mask_final_answer, dialect, require_images)  # type: ignore[arg-type]
    if not files:
        raise UserError(f"--data: no usable views under {data} (gt.json beside view.png, or parquet rows with an "
                        "image; --no-require-images takes views without images)")
    counts = write_traces(out, files)
    for name, count in counts.items():
        typer.echo(f"{out / (name + '.jsonl')}: {count} records")
    _extract_images(data, out, split, views)


def _extract_images(data: Path, out: Path, split: str | None, views: list) -> None:  # noqa: ANN001
    """Parquet-only datasets: the embedded PNGs go to OUT/images, the image root the traces need for training."""
    from data_gen.traces import extract_parquet_images

    if not any(v.has_image and not v.image_path.is_file() for v in views):
        return
    images = out / "images"
    written = extract_parquet_images(data, images, split)
    typer.echo(f"{images}: {written} image(s) written from the parquet shards; train with data.data_root={images} "
               "(the dataset holds no per-view view.png)")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.command("traces")(traces)
