"""`spatialiq release` (a trained checkpoint) and `spatialiq release-data` (a generated dataset)."""

from __future__ import annotations

from pathlib import Path

import typer

from spatialiq_train.core.errors import UserError


def release(
    run: Path | None = typer.Option(None, "--run", help="A `run dapo-tight` / `train sft|rl` output folder, or a "
                                    "converted Hugging Face checkpoint."),
    out: Path | None = typer.Option(None, "--out", help="Release folder to write (built aside, renamed when done)."),
    metrics: Path | None = typer.Option(None, "--metrics", help="metrics_<name>.json of `spatialiq eval score` "
                                        "(the card says 'not evaluated' without it)."),
    data: Path | None = typer.Option(None, "--data", help="Training dataset root (manifest.json); default: the "
                                     "recipe's data.data_root."),
    license: str = typer.Option("apache-2.0", "--license", help="License id for the card's front matter."),
    dataset: list[str] = typer.Option([], "--dataset", help="Hub dataset id(s) to list in the card."),
    name: str | None = typer.Option(None, "--name", help="Model name in the card (default: the --out folder name)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out."),
    allow_other_weights: bool = typer.Option(
        False, "--allow-other-weights", help="Release --metrics that were not scored on this checkpoint's weights "
        "(their model_digest differs or is absent); the card says so above the numbers."),
    verify: Path | None = typer.Option(None, "--verify", help="Re-check a release folder (and, with --push, upload "
                                       "it) without rebuilding."),
    push: str | None = typer.Option(None, "--push", help="Upload to this Hub model repo (OWNER/NAME)."),
    public: bool = typer.Option(False, "--public", help="With --push: make the repo public (default private)."),
) -> None:
    """Release a trained checkpoint: safetensors shards, processor, chat template, model card, SHA256SUMS."""
    from spatialiq_train.release.release import release as do_release
    from spatialiq_train.release.release import revision_tag, verify_release

    if push:
        from spatialiq_train.release.hub import check_push

        check_push(push)  # before anything is built: a missing token costs no release
    if verify is not None:
        if not verify.is_dir():
            raise UserError(f"--verify {verify}: no such folder; give a folder written by `spatialiq release`")
        notes: list[str] = []
        _report(verify, verify_release(verify, notes), notes)
        folder = verify
    else:
        if run is None or out is None:
            raise UserError("spatialiq release needs --run RUN and --out DIR (or --verify DIR)")
        from spatialiq_train.core.lock import output_lock

        with output_lock(out, "--out"):  # one writer per release folder (docs/trust.md)
            folder = do_release(run, out, metrics=metrics, data_root=data, license=license,
                                datasets=tuple(dataset), name=name, overwrite=overwrite,
                                allow_other_weights=allow_other_weights)
        notes = []
        _report(folder, verify_release(folder, notes), notes)
    if push:
        _push(folder, push, public, revision_tag(folder))


def _push(folder: Path, repo: str, public: bool, tag: str) -> None:
    from spatialiq_train.release.hub import push_folder

    try:
        url = push_folder(folder, repo, private=not public, revision_tag=tag)
    except UserError:
        raise
    except Exception as exc:  # network or hub errors: the release is built and verified, say how to retry
        raise UserError(f"--push {repo}: upload failed ({exc}); {folder} is built and verified: retry with "
                        f"`spatialiq release --verify {folder} --push {repo}`", exit_code=1) from None
    typer.echo(f"pushed to {url} (tag {tag})")


def _report(folder: Path, problems: list[str], notes: list[str]) -> None:
    for note in notes:
        typer.echo(f"NOTE {note}", err=True)
    if problems:
        for problem in problems:
            typer.echo(f"PROBLEM {problem}", err=True)
        raise UserError(f"{folder}: {len(problems)} problem(s) found in the release", exit_code=1)
    from spatialiq_train.release.checkpoint import STOCK_NOT_CHECKED

    stock = not any(note.startswith(STOCK_NOT_CHECKED) for note in notes)
    processor = "processor with stock AutoProcessor" if stock else "processor files (stock AutoProcessor NOT checked)"
    typer.echo(f"{folder}: release verified (checksums, config, {processor}, model card)")


def release_data(
    root: Path = typer.Argument(..., help="A dataset folder written by `spatialiq gen`."),
    push: str | None = typer.Option(None, "--push", help="Upload to this Hub dataset repo (OWNER/NAME)."),
    license: str = typer.Option("cc-by-4.0", "--license"),
    public: bool = typer.Option(False, "--public", help="With --push: make the repo public (default private)."),
) -> None:
    """(Re)write a generated dataset's card, and push the dataset to the Hub with --push."""
    from data_gen.dataset_card import write_dataset_card

    card = write_dataset_card(root, license=license)
    typer.echo(f"dataset card written: {card}")
    if push:
        from spatialiq_train.release.hub import push_folder

        typer.echo(f"pushed to {push_folder(root, push, repo_type='dataset', private=not public)}")


def register(app: typer.Typer) -> None:
    app.command("release")(release)
    app.command("release-data")(release_data)
