"""`spatialiq` commands for the gen area: gen, gen-merge, check-splits, fidelity."""

from __future__ import annotations

from pathlib import Path

import typer


def gen(
    out: Path = typer.Option(..., "--out", help="Dataset directory (a rerun with the same arguments resumes)."),
    structures: int | None = typer.Option(None, "--structures",
                                          help="Number of structures; each gives 16 leaf views (not with --verify)."),
    seed: int | None = typer.Option(None, "--seed",
                                    help="Master seed (>= 0); structure i comes from (seed, candidate i)."),
    split: str | None = typer.Option(None, "--split", help="train or benchmark (decided per structure by its hash)."),
    parts: str | None = typer.Option(
        None, "--parts", help="Train split only: structures per part, e.g. warmup=2,rl=4 (the first ones of each part "
                              "in candidate order; parts val, warmup, rl); --structures defaults to their sum."),
    workers: int = typer.Option(1, "--workers", help="Worker processes."),
    renderer: str = typer.Option("none", "--renderer", help="none (ground truth only), mitsuba or isaacsim."),
    object_type: str = typer.Option("cube", "--object-type", help="cube, or can (needs a renderer)."),
    shard: int | None = typer.Option(None, "--shard", help="Generate only this shard (0-based; Slurm array task)."),
    num_shards: int | None = typer.Option(None, "--num-shards", help="Shards of the run (default ceil(N/64))."),
    resolution: int = typer.Option(512, "--resolution", help="Image side in pixels (the benchmark uses 512)."),
    render_variant: str = typer.Option(
        "auto", "--render-variant",
        help="Mitsuba variant: auto (cuda > llvm > scalar, per machine), scalar_rgb, llvm_ad_rgb or cuda_ad_rgb. "
             "The resolved one is recorded; a resume or shard on a machine resolving another is refused."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    plan_only: bool = typer.Option(False, "--plan-only", help="Only write OUT/plan.json (before a Slurm array)."),
    verify: bool = typer.Option(False, "--verify", help="Only check OUT: every file against its recorded sha256 and "
                                "--rerender structures per shard against a fresh render; exit 1 on any mismatch."),
    rerender: int = typer.Option(1, "--rerender", help="With --verify: structures per shard rendered again (0: none)."),
) -> None:
    """Generate cube scenes with exact ground truth: the per-view layout and parquet shards under OUT."""
    from pydantic import ValidationError

    from data_gen.config import GenConfig
    from data_gen.generate import run
    from spatialiq_train.cli.options import option_errors
    from spatialiq_train.core.errors import UserError

    if verify:
        _verify(out, rerender)
        return
    part_counts = _parts(parts) if parts is not None else None
    if structures is None and part_counts is not None:
        structures = sum(part_counts.values())
    missing = [flag for flag, value in (("--structures", structures), ("--seed", seed), ("--split", split))
               if value is None]
    if missing:
        raise UserError(f"missing option(s) {', '.join(missing)} (every run needs --out, --structures, --seed and "
                        "--split; only --verify needs --out alone)")
    try:
        cfg = GenConfig(out=out, structures=structures, seed=seed, split=split, workers=workers, renderer=renderer,
                        object_type=object_type, shard=shard, num_shards=num_shards, resolution=resolution,
                        render_variant=render_variant, parts=part_counts)
    except ValidationError as exc:
        raise UserError(option_errors(exc)) from None
    with _gen_locks(cfg, plan_only):  # one writer per shard (docs/trust.md); SIGINT stops it, even in a background job
        manifest = run(cfg, progress=not quiet, plan_only=plan_only)
    if plan_only:
        typer.echo(f"plan written: {out / 'plan.json'}")
    elif manifest is not None:
        c = manifest["counts"]
        typer.echo(f"{c['structures']} structures, {c['views']} views, {len(manifest['shards'])} shard(s) in {out}")
    else:
        typer.echo(f"shard {shard} of {cfg.shard_count} complete; once all are, run: spatialiq gen-merge --out {out}")


def _gen_locks(cfg, plan_only: bool):  # noqa: ANN001, ANN202
    """The locks of what this `gen` writes: the plan, its one shard (a Slurm array task), or every shard (a whole
    run); a second writer of any of them is refused naming the first. SIGINT raises KeyboardInterrupt inside (exit
    130), even in a background job, which inherits SIGINT as ignored (`spatialiq_train.core.interrupts`)."""
    import contextlib

    from spatialiq_train.cli.steps import on_interrupt
    from spatialiq_train.core.interrupts import interruptible
    from spatialiq_train.core.lock import output_lock

    out = Path(cfg.out)
    stack = contextlib.ExitStack()
    stack.enter_context(interruptible())
    if plan_only:
        stack.enter_context(output_lock(out / "plan.json", "--out"))
        return stack
    on_interrupt(f"every finished structure and shard under {out} is kept (each file written aside and renamed); "
                 "rerun the same command to resume")
    for shard in ([cfg.shard] if cfg.shard is not None else range(cfg.shard_count)):
        stack.enter_context(output_lock(out / f"shard-{shard:05d}", f"--out {out} shard {shard}:"))
    return stack


def gen_merge(out: Path = typer.Option(..., "--out", help="Dataset directory of a sharded (Slurm array) run.")) -> None:
    """Verify every shard's recorded sha256 and write OUT/manifest.json."""
    from data_gen.shards import merge
    from spatialiq_train.core.lock import output_lock

    with output_lock(out / "manifest.json", "--out"):
        manifest = merge(out)
    typer.echo(f"manifest written: {manifest['counts']['structures']} structures, {len(manifest['shards'])} shard(s)")


def _parts(text: str) -> dict[str, int]:
    """``--parts warmup=2,rl=4`` as {"warmup": 2, "rl": 4}; a malformed item is a UserError naming it."""
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.splits import PARTS

    out: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        name, _, count = item.partition("=")
        if name not in PARTS or not count.strip().isdigit() or name in out:
            raise UserError(f"--parts: {item!r} is not PART=COUNT with a part named once of {', '.join(PARTS)} "
                            "(e.g. --parts warmup=2,rl=4)")
        out[name] = int(count)
    if not out:
        raise UserError("--parts: no PART=COUNT given (e.g. --parts warmup=2,rl=4)")
    return out


def _verify(out: Path, per_shard: int) -> None:
    """``gen --verify``: one line per mismatch (file, expected, found), a summary, exit 1 when any."""
    from data_gen.rerender import rerender
    from data_gen.verify import verify
    from spatialiq_train.core.errors import EXIT_FAILURE, UserError

    if per_shard < 0:
        raise UserError(f"--rerender must be 0 or more (structures per shard to render again), got {per_shard}")
    report = verify(out)
    fresh = rerender(out, per_shard)
    report.mismatches += fresh.mismatches
    report.notes += fresh.notes
    also = (f" and {fresh.images} image(s) of {fresh.structures} structure(s) against a fresh render"
            if fresh.structures else "")
    for mismatch in report.mismatches:
        typer.echo(f"MISMATCH {mismatch.line()}", err=True)
    for rel in report.incomplete:
        typer.echo(f"INCOMPLETE {rel}: no completion record (rerun spatialiq gen with the same arguments)", err=True)
    for note in report.notes:
        typer.echo(f"note: {note}")
    typer.echo(report.summary(also))
    if fresh.mismatches:
        raise UserError(f"{len(fresh.mismatches)} image(s) differ from a fresh render of their record (listed above): "
                        "they were not written by a finished render; delete their shard's completion record "
                        "(shards/*.done.json) and rerun spatialiq gen with the same arguments to render it again",
                        exit_code=EXIT_FAILURE)
    if not report.ok:
        raise UserError(f"{len(report.mismatches)} file(s) differ from their recorded sha256 and "
                        f"{len(report.incomplete)} shard(s) are incomplete (listed above); rerun spatialiq gen with "
                        "the same arguments to repair", exit_code=EXIT_FAILURE)




def check_splits(dirs: list[Path] = typer.Argument(..., help="Generated dataset directories.")) -> None:
    """Exit non-zero if any structure leaks across train/benchmark, train/val or warmup/rl, or if a scene.json
    records a structure_id that is not the id of its height_map."""
    from data_gen.split_check import check_splits as run_check
    from spatialiq_train.core.errors import EXIT_FAILURE, UserError

    report = run_check(dirs)
    typer.echo(report.summary())
    if report.records == 0:
        raise UserError(f"no generated dataset found in {', '.join(map(str, dirs))} (expected scene.json files under "
                    "<dir>/train or <dir>/benchmark, or parquet shards under <dir>/data)")
    for leak in report.leaks:
        typer.echo(f"LEAK {leak}", err=True)
    for problem in report.problems:
        typer.echo(f"PROBLEM {problem}", err=True)
    if report.leaks or report.problems:
        raise UserError(f"{len(report.leaks)} leak(s) and {len(report.problems)} problem(s) found (listed above)",
                        exit_code=EXIT_FAILURE)


def fidelity(
    dataset: Path = typer.Argument(..., help="Generated dataset directory holding a benchmark split."),
    reference: Path | None = typer.Option(
        None, "--reference",
        help="Released per-view evaluation CSV (its *_gt and structure columns are used); default: "
             "../shared/fixtures/paper_outputs/raw/eval_raw_qwen_text.csv beside this checkout's root."),
    split: str = typer.Option("benchmark", "--split", help="Which generated split to compare."),
) -> None:
    """Compare generated per-view distributions with the released evaluation set."""
    from data_gen.fidelity import compare, default_reference, format_report, load_generated, load_reference
    from spatialiq_train.core.errors import UserError

    if reference is None:
        reference = default_reference()
        if not reference.is_file():
            raise UserError(f"no --reference given and the default {reference} does not exist (../shared beside the "
                            "repository root is absent); pass --reference PATH/TO/eval_raw_qwen_text.csv")
    ref = load_reference(reference)
    gen_views = load_generated(dataset, split)
    typer.echo(format_report(compare(gen_views, ref), gen_views, ref))


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.command("gen")(gen)
    app.command("gen-merge")(gen_merge)
    app.command("check-splits")(check_splits)
    app.command("fidelity")(fidelity)
