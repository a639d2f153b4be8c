"""`spatialiq eval ...`: sample, score, report, compare, and reproduce the published tables."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

log = logging.getLogger(__name__)

eval_app = typer.Typer(name="eval", help="Sample checkpoints, score them, write reports, reproduce paper tables.",
                       no_args_is_help=True)


@eval_app.command("paper-tables")
def paper_tables(
    raw: Path = typer.Option(..., "--raw", help="Folder with eval_raw_<model>_text.csv files (released layout)."),
    out: Path = typer.Option(..., "--out", help="Output folder: tables/*.csv, figures/*.png, summary.csv, ..."),
    convention: str | None = typer.Option(
        None, "--convention",
        help="Force prerequisite_given_dependent or dependent_given_prerequisite for every model in summary.csv "
             "(default: per model, as the published tables do; tables/ always follows the official rule)."),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="Draw figures/<name>.png for figure tables."),
    group: list[str] = typer.Option([], "--group", help="NAME=GROUP (repeatable): a responder's group, text, "
                                    "trained_text or both (default: --raw's responder_groups.json, which "
                                    "`eval score --group` writes)."),
    published_groups: bool = typer.Option(False, "--published-groups", help="Give the seventeen published "
                                          "responders their published groups (by exact name)."),
) -> None:
    """The official analysis's 24 text-side tables and their figures, plus summary files, from raw files."""
    from eval.groups import parse_group_options
    from eval.hierarchy import check_convention
    from eval.paper_tables import write_paper_tables

    if convention is not None:
        check_convention(convention, "--convention")  # before the raw files are read
    groups = parse_group_options(group)
    for path in write_paper_tables(raw, out, convention, figures=figures, groups=groups,
                                   published=published_groups):
        typer.echo(str(path))


@eval_app.command("sample")
def sample(
    model: Path = typer.Option(..., "--model", help="Checkpoint folder (HF format, safetensors)."),
    data: Path = typer.Option(..., "--data", help="Dataset root (our layout or the released benchmark layout)."),
    out: Path = typer.Option(..., "--out", help="Completions JSONL (appended to; a rerun resumes)."),
    split: str = typer.Option("benchmark", "--split", help="Split folder of --data (train or benchmark), or a train "
                              "partition (val, warmup, rl); --data itself is read only when it has no split folder "
                              "(the released layout)."),
    mode: str = typer.Option("from-trace", "--mode", help="from-trace or independent."),
    k: int = typer.Option(10, "--k", help="Completions per scene and task."),
    temperature: float = typer.Option(1.0, "--temperature"),
    top_p: float = typer.Option(1.0, "--top-p"),
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens"),
    engine: str = typer.Option("auto", "--engine", help="auto (vLLM when installed), vllm or transformers."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", help="vLLM GPUs per model (4+ for 32B)."),
    max_model_len: int | None = typer.Option(
        None, "--max-model-len", help="vLLM context length (default: 1024 prompt tokens + --max-new-tokens)."),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="vLLM without compilation: starts sooner."),
    device: str = typer.Option("cpu", "--device", help="transformers engine device."),
    dialect: str | None = typer.Option(None, "--dialect", help="training or type1 (default by mode)."),
    cot_system_prompt: bool = typer.Option(True, "--cot-system-prompt/--no-cot-system-prompt"),
    tasks: str | None = typer.Option(None, "--tasks", help="independent mode: comma-separated task ids."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N scenes (smoke runs)."),
    seed: int = typer.Option(0, "--seed"),
    batch_size: int | None = typer.Option(
        None, "--batch-size", help="Requests per engine call and per append (default 256 with vLLM, 4 otherwise)."),
) -> None:
    """Draw k completions per benchmark scene; an interrupted run continues where it stopped."""
    from pydantic import ValidationError

    from eval.engines import check_device
    from eval.sample import SamplingConfig
    from eval.scenes import find_scenes
    from spatialiq_train.cli.options import option_errors
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.io import check_model_source
    from spatialiq_train.core.lock import output_lock

    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1 (sample the first N scenes), got {limit}; leave it out for all")
    if tasks is not None and mode != "independent":
        raise UserError(f"--tasks {tasks!r}: only --mode independent asks sub-tasks one by one; --mode {mode} asks "
                        "task_main and parses the sub-task answers from the chain of thought (leave --tasks out)")
    check_device(device, engine)  # before a model loads
    try:
        config = SamplingConfig(mode=mode, k=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                dialect=dialect, cot_system_prompt=cot_system_prompt, seed=seed,
                                tasks=tasks.split(",") if tasks else None,
                                **({} if batch_size is None else {"batch_size": batch_size}))
    except ValidationError as exc:
        raise UserError(option_errors(exc)) from None
    config.task_prompts()  # every prompt up front: a task the dialect lacks fails here, not mid-run
    scenes = (every := find_scenes(data, split))[:limit]
    check_model_source(model, "--model")
    with output_lock(out, "--out"):  # one writer per completions file (docs/trust.md)
        _sample_locked(model, data, split, out, config, every, scenes, engine, tensor_parallel_size, device,
                       max_model_len, max_new_tokens, enforce_eager, batch_size)


def _sample_locked(model: Path, data: Path, split: str, out: Path, config, every: list, scenes: list,  # noqa: ANN001
                   engine: str, tensor_parallel_size: int, device: str, max_model_len: int | None,
                   max_new_tokens: int, enforce_eager: bool, batch_size: int | None) -> None:
    """`eval sample` once it holds the lock of --out: the checks against the file, the engine, the sampling."""
    from eval.engines import VLLMEngine, default_max_model_len, make_engine
    from eval.provenance import dataset_record, write_provenance
    from eval.sample import PARTNER_STEP, run_sampling
    from spatialiq_train.cli.steps import on_interrupt

    record = _check_model_data_and_out(model, config, out, dataset_record(data, split, every), scenes)
    max_images = 2 if set(config.task_list()) & PARTNER_STEP.keys() else 1
    gen_engine = make_engine(engine, model, tensor_parallel_size=tensor_parallel_size, device=device,
                             max_model_len=max_model_len or default_max_model_len(max_new_tokens),
                             max_images=max_images, enforce_eager=enforce_eager)
    write_provenance(out, record)  # every check passed and the engine loaded: only now is anything written
    on_interrupt(f"every completion of a finished batch is kept in {out} (a cut last line is set aside); rerun "
                 "the same command to draw the rest: the texts equal those of an uninterrupted run")
    if batch_size is None:
        config = config.model_copy(update={"batch_size": 256 if isinstance(gen_engine, VLLMEngine) else 4})
    report = run_sampling(scenes, gen_engine, config, out,
                          progress=lambda done, total: log.info("%d/%d completions", done, total))
    typer.echo(f"{out}: {report.already_done} already on file, {report.written} written")


def _check_model_data_and_out(model: Path, config: object, out: Path, data: dict, scenes: list) -> dict:
    """Everything `eval sample` can check before writing: a local checkpoint's finite weights, every scene's image,
    and a completions file written by this model, on this data and with these settings (`eval.provenance`);
    returns the provenance record to write once the engine has loaded."""
    from eval.completions import load_completions
    from eval.provenance import check_provenance, sampling_record
    from spatialiq_train.core.errors import UserError
    from spatialiq_train.core.weights import check_finite_weights

    if Path(model).is_dir():
        check_finite_weights(model, "--model")
    missing = [s.view for s in scenes if not s.has_image]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UserError(f"--data: view {missing[0]} has no image (view.png, or an image in its parquet row){more}; "
                        "the model would be asked about a picture it cannot see: render the dataset (`spatialiq gen "
                        "--renderer mitsuba`) or pass a dataset with images")
    record = sampling_record(model, config, data)  # type: ignore[arg-type]
    check_provenance(out, record, bool(load_completions(out)))
    return record


def _score_line(metrics: dict) -> str:
    """The console summary of a metrics file: every accuracy with its n, coverage, counts, parse rule."""
    oc, k, counts = metrics["object_counting"], metrics["k"], metrics["counts"]
    shown = "  ".join(f"{key} {oc[key]:.4f} (n={oc['n'][key]})" for key in ("acc@1", f"maj@{k}", f"pass@{k}")
                      if key in oc)
    if "coverage@1" in oc:
        shown += f"  coverage@1 {oc['coverage@1']:.4f}  acc@1_answered {oc['acc@1_answered']:.4f} " \
                 f"(n={oc['n']['acc@1_answered']})"
    return (f"{shown}  scenes {counts['scenes_covered']}/{metrics['scenes']}  unparseable {counts['unparseable']}  "
            f"absent {counts['absent']}  unknown {counts['unknown_view_or_task']}  parse {metrics['parse']}")


def _check_score_options(mode: str | None, parse: str, k: int | None, min_coverage: float, name: str,
                         limit: int | None = None) -> None:
    """The option mistakes `eval score` can see before reading any file, as a UserError naming the option."""
    from spatialiq_train.core.errors import UserError

    if mode not in (None, "from-trace", "independent"):
        raise UserError(f"--mode must be from-trace or independent, got {mode!r}")
    if parse not in ("official", "strict"):
        raise UserError(f"--parse must be official or strict, got {parse!r}")
    if k is not None and k < 1:
        raise UserError(f"--k must be at least 1 (or left out to infer it from the file), got {k}")
    if not 0.0 <= min_coverage <= 1.0:
        raise UserError(f"--min-coverage must be a share between 0 and 1, got {min_coverage}")
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1 (score the first N scenes), got {limit}; leave it out for all")
    from eval.score import run_name_problem

    if (problem := run_name_problem(name)) is not None:
        raise UserError(f"--name {name!r}: {problem}")


@eval_app.command("score")
def score(
    completions: Path | None = typer.Option(None, "--completions", help="Completions JSONL from `spatialiq eval "
                                            "sample` (or give --raw)."),
    data: Path | None = typer.Option(None, "--data", help="Dataset root the completions were sampled from."),
    out: Path = typer.Option(..., "--out", help="Output folder."),
    name: str | None = typer.Option(None, "--name", help="Responder name (used in file names and tables); with --raw, "
                                    "the name of a one-responder file without a model column."),
    split: str = typer.Option("benchmark", "--split", help="Split folder of --data, as for `eval sample`."),
    mode: str | None = typer.Option(None, "--mode", help="from-trace or independent (default: from the file)."),
    k: int | None = typer.Option(None, "--k", help="Samples per scene (default: the most common number of completions "
                                 "per view and task in the file)."),
    convention: str | None = typer.Option(None, "--convention", help="Conditional convention of the summary columns "
                                          "(default: the --group's, as the published tables; both are also reported)."),
    parse: str = typer.Option("official", "--parse", help="official (as the released evaluators read answers) or "
                              "strict (spatialiq_train.core.parsing.parse_trace); recorded in the metrics file."),
    min_coverage: float = typer.Option(0.9, "--min-coverage", help="Fail when fewer than this share of the scenes "
                                       "have a completion (lower it to score a subset on purpose)."),
    note: str | None = typer.Option(None, "--note", help="A caveat stored in the metrics file and shown at the top "
                                    "of reports and model cards built from it."),
    group: str = typer.Option("trained_text", "--group", help="Responder group for the paper tables: trained_text "
                              "(a trained checkpoint or its base model, Table 4), text (zero-shot, Table 1) or both; "
                              "recorded in the metrics file and in OUT/responder_groups.json."),
    limit: int | None = typer.Option(None, "--limit", help="Score the first N scenes only, as `eval sample --limit "
                                     "N` sampled them: every metric over the same N (coverage too)."),
    raw: list[Path] = typer.Option([], "--raw", help="Instead of --completions/--data: predictions files in the "
                                   "released eval_raw layout (per task X, X_pred, X_gt; an optional model column "
                                   "holds several responders); repeatable. One metrics file per responder."),
    files: list[Path] | None = typer.Argument(None, help="More predictions files for --raw, as a shell glob gives "
                                              "them: --raw runs/*.csv"),
) -> None:
    """Metrics JSON plus an eval_raw_<name>_text.csv export in the released layout."""
    from eval import score as scoring
    from eval.groups import check_group
    from eval.hierarchy import check_convention
    from eval.paper.accuracy import convention_for
    from eval.provenance import MODEL_KEYS
    from eval.score_input import prepare
    from spatialiq_train.cli.options import raw_files
    from spatialiq_train.core.errors import UserError

    check_group(group, "--group")
    conv = check_convention(convention, "--convention") if convention else convention_for(group)
    raw = raw_files(raw, files)
    if raw:
        _score_raw(raw, out, name, conv, group, note, completions or data)
        return
    if completions is None or data is None or name is None:
        raise UserError("eval score needs --completions, --data and --name (or --raw FILE for predictions files)")
    _check_score_options(mode, parse, k, min_coverage, name, limit)
    scenes, records, sampled = _read_sampled(completions, data, split, limit)
    scored = prepare(records, mode, k, sampled, completions)  # mode from provenance, stray lines, numbering, k
    preds = scoring.collect_predictions(scenes, scored.records, scored.mode, scored.k, parse)  # type: ignore[arg-type]
    preds.counts.update(scored.counts)
    scoring.require_matches(preds, scored.records, data)
    for text in [*scored.notes, scoring.check_coverage(preds, min_coverage, completions)]:
        if text:
            typer.echo(f"warning: {text}", err=True)
    metrics = scoring.score_predictions(preds, name, conv)
    metrics.update({key: (sampled or {}).get(key) for key in MODEL_KEYS})  # the weights `release` ties them to
    _write_scored(out, name, metrics, scoring.first_sample_table(preds, name), group, note)


def _read_sampled(completions: Path, data: Path, split: str, limit: int | None) -> tuple[list, dict, dict | None]:
    """The scenes to score (the first ``limit``), the completions, and their provenance record after checking that
    they were sampled from this dataset (the whole split's truth digest; a mismatch is refused naming both)."""
    from eval.completions import load_for_scoring
    from eval.provenance import check_scored_data, dataset_record
    from eval.scenes import find_scenes

    every = find_scenes(data, split)
    records = load_for_scoring(completions)
    sampled = check_scored_data(completions, dataset_record(data, split, every),
                                lambda text: typer.echo(f"warning: {text}", err=True))
    return every[:limit], records, sampled


def _write_scored(out: Path, name: str, metrics: dict, table: object, group: str, note: str | None) -> None:
    """metrics_<name>.json (with the note and group), the eval_raw export, the group record; one console line."""
    from eval import score as scoring
    from eval.groups import record_group
    from eval.rawcsv import write_raw_csv
    from spatialiq_train.core.io import atomic_write_json

    if note:
        metrics["note"] = note
    metrics["group"] = group
    metrics_path = out / f"metrics_{name}.json"
    atomic_write_json(metrics_path, scoring.jsonable(metrics))
    write_raw_csv(out / f"eval_raw_{name}_text.csv", table)  # type: ignore[arg-type]
    record_group(out, name, group)
    typer.echo(f"{metrics_path}: {_score_line(metrics)}")


def _score_raw(raw: list[Path], out: Path, name: str | None, conv: str, group: str, note: str | None,
               sampled: Path | None) -> None:
    """`eval score --raw`: every responder of the predictions files, scored from its recorded predictions."""
    from eval import score as scoring
    from eval.rawcsv import read_prediction_files
    from spatialiq_train.core.errors import UserError

    if sampled is not None:
        raise UserError(f"--raw reads predictions files; {sampled} (--completions/--data) belongs to the other input: "
                        "give one or the other")
    tables = read_prediction_files(raw, name)
    if name is not None and len(tables) > 1:
        raise UserError(f"--name {name!r} names one responder, but --raw holds {len(tables)} ({', '.join(tables)})")
    for model, table in tables.items():
        _check_score_options(None, "official", None, 0.0, model)
        _write_scored(out, model, scoring.score_table(table, conv), table, group, note)  # type: ignore[arg-type]


@eval_app.command("report")
def report(
    metrics: list[Path] = typer.Option(..., "--metrics", help="metrics_<name>.json files (repeat the option)."),
    out: Path = typer.Option(..., "--out", help="Output folder for report.md, report.json and PNG plots."),
) -> None:
    """Markdown report with plots (2x2 heatmaps, difficulty bins, object types) and a JSON with every number."""
    from eval.report import write_report

    path = write_report(metrics, out)
    typer.echo(str(path))


@eval_app.command("compare")
def compare(
    raw: list[Path] = typer.Option(None, "--raw", help="eval_raw_* files or folders holding them (repeatable)."),
    out: Path = typer.Option(..., "--out", help="Output folder (mcnemar.csv; with --base/--trained transfer.*)."),
    task: str = typer.Option("main", "--task", help="Task column to compare (default Object Counting)."),
    base: list[Path] = typer.Option(None, "--base", help="Transfer table: the base checkpoint's results on one "
                                    "benchmark, an `eval external` folder or an eval_raw file (repeatable)."),
    trained: list[Path] = typer.Option(None, "--trained", help="The trained checkpoint's results, one per benchmark "
                                       "given to --base (repeatable)."),
    base_completions: Path = typer.Option(None, "--base-completions", help="Completions the base's Spatial-IQ "
                                          "results were scored from (opener share, chain length)."),
    trained_completions: Path = typer.Option(None, "--trained-completions", help="The same for the trained side."),
    seed: int = typer.Option(0, "--seed", help="Seed of the paired bootstrap."),
) -> None:
    """Paired exact McNemar tests between every pair of responders, Benjamini-Hochberg adjusted (--raw); or the
    transfer table of a base and a trained checkpoint across benchmarks (--base/--trained: docs/transfer.md)."""
    from spatialiq_train.core.errors import UserError

    if bool(raw) == bool(base or trained):
        raise UserError("give --raw (responders on one benchmark) or --base and --trained (a transfer table across "
                        "benchmarks), not both and not neither")
    if raw:
        from eval.compare import write_comparison

        typer.echo(str(write_comparison(raw, out, task)))
        return
    if not base or not trained:
        raise UserError(f"the transfer table needs --base and --trained (got {len(base or [])} and "
                        f"{len(trained or [])}): one results path per benchmark on each side")
    from eval.transfer_io import write_transfer

    typer.echo(write_transfer(base, trained, out, task, seed, base_completions, trained_completions), nl=False)
    typer.echo(str(out / "transfer.md"))


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    from spatialiq_train.cli import external

    external.register(eval_app)  # `eval external`: docs/transfer.md
    app.add_typer(eval_app, name="eval")
