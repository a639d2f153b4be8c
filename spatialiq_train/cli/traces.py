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
    from data_gen.traces import check_options
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.lock import output_lock
    from spatialiq_train.core.tasks import DIALECTS

    if dialect not in DIALECTS:
        raise UserError(f"--dialect: unknown dialect {dialect!r}; valid: {', '.join(DIALECTS)}")
    task_ids = [t.strip() for t in tasks.split(",") if t.strip()]
    check_options(kind, task_ids, mask_final_answer)  # option mistakes first, before reading the dataset
    _check_out_kind(out, kind)
    with output_lock(out, "--out"):  # one writer per trace folder (docs/trust.md)
        _traces_locked(data, out, kind, mask_final_answer, task_ids, split, dialect, require_images)


def _traces_locked(data: Path, out: Path, kind: str, mask_final_answer: str | None, task_ids: list[str],
                   split: str | None, dialect: str, require_images: bool) -> None:
    from data_gen.traces import ImageExtractor, build_traces, load_views, write_traces
    from spatialiq_train.core.errors import UserError

    # Parquet-only datasets: the embedded PNGs go to OUT/images (the image root the traces need for training),
    # written as the shards are read for the views, so the shards are read once.
    images = ImageExtractor(data, out / "images")
    views = load_views(data, split, on_image=images)
    files = build_traces(views, kind, task_ids, mask_final_answer, dialect, require_images)  # type: ignore[arg-type]
    if not files:
        raise UserError(f"--data: no usable views under {data} (gt.json beside view.png, or parquet rows with an "
                        "image; --no-require-images takes views without images)")
    counts = write_traces(out, files)
    for name, count in counts.items():
        typer.echo(f"{out / (name + '.jsonl')}: {count} records")
    if images.needed:
        typer.echo(f"{images.images_root}: {images.written} image(s) written from the parquet shards; train with "
                   f"data.data_root={images.images_root} (the dataset holds no per-view view.png)")


def _check_out_kind(out: Path, kind: str) -> None:
    """Refuse to write ``kind`` traces over a folder that holds traces of the other kind."""
    from data_gen.trace_kind import folder_kind
    from spatialiq_train.core.errors import UserError

    found = folder_kind(out)
    if found is not None and found[0] != kind:
        raise UserError(f"--out {out}: {found[1].name} holds {found[0]} traces and this run writes --kind {kind}; "
                        f"writing here would mix or replace them: pick another --out (e.g. data/traces/{kind}) or "
                        f"delete the {found[0]} trace files first")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.command("traces")(traces)
