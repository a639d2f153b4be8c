"""`spatialiq reward ...`: score one completion, list the registered rewards, analyse rewards on sampled completions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from spatialiq_train.core.errors import UserError

reward_app = typer.Typer(help="Score completions with the reward library; list reward names.", no_args_is_help=True)


def _parse_spec(text: str) -> Any:
    """A JSON weight mapping, a reward given with its factory parameters (``overlong:max_len=2048:cache=512``, as
    `reward analyze --rewards` takes them), or a name as it is."""
    from spatialiq_train.core.io import loads_json

    if text.lstrip().startswith("{"):
        return loads_json(text, "--reward (a JSON weight mapping)", one_line=True)
    if "=" in text:
        from reward import get_reward
        from spatialiq_train.lab.scoring import parse_reward_item

        name, params = parse_reward_item(text, "--reward")
        return get_reward(name, **params)
    return text


def _fmt(value: float) -> str:
    return f"{value:.6g}"


@reward_app.command("score")
def score(
    reward: str = typer.Option(
        "default", "--reward", "-r", help="A reward name, 'pkg.module:function', a factory with its parameters "
        "(overlong:max_len=2048:cache=512), or a JSON weight mapping."
    ),
    answer: int | None = typer.Option(None, "--answer", "-a", help="Ground truth (default: --gt task_main)."),
    completion: str = typer.Option(..., "--completion", "-c", help="The completion text; '-' reads stdin."),
    gt: Path | None = typer.Option(None, "--gt", help="A gt.json whose fields become reward columns (stepwise)."),
) -> None:
    """Print each component of the reward and, as the last line, the total alone."""
    from reward import components_of, error_counts, reset_errors, resolve_reward
    from spatialiq_train.core.io import read_json
    from spatialiq_train.core.truth import validate_gt

    text = sys.stdin.read() if completion == "-" else completion
    columns: dict[str, list[Any]] = {}
    if gt is not None:
        data = read_json(gt)
        if not isinstance(data, dict):
            raise UserError(f"--gt {gt}: expected a JSON object of ground-truth fields, got {type(data).__name__}")
        if answer is None and "task_main" not in data:
            raise UserError(f"--gt {gt}: no task_main field; give --answer N, or a gt.json with task_main")
        # checked where it enters: integer fields integers (not "x" or 12.7), relations holding
        validate_gt(data, f"--gt {gt}", required=("task_main",) if answer is None else ())
        columns = {k: [v] for k, v in data.items()}
        if answer is None:
            answer = data.get("task_main")
    if answer is None:
        raise UserError("--answer: give --answer N (or --gt with a task_main field)")
    if answer < 0:
        raise UserError(f"--answer {answer}: a ground-truth block count is a whole number >= 0")
    columns["answer"] = [answer]
    try:
        fn = resolve_reward(_parse_spec(reward))  # weights follow the recipes' rule (core.reward_weights)
    except UserError:
        raise
    except ValueError as exc:
        raise UserError(f"--reward {reward}: {exc}") from None
    reset_errors()
    comps, total = components_of(fn, [text], **columns)  # a missing ground-truth column: ValueError, exit 2
    weights = getattr(fn, "weights", None) or {}
    width = max(len(n) for n in comps)
    for name, values in comps.items():
        suffix = f"  x {weights[name]:g}" if name in weights else ""
        typer.echo(f"{name:<{width}}  {_fmt(values[0])}{suffix}")
    for name, count in error_counts().items():
        typer.echo(f"errors in {name}: {count}")
    typer.echo(_fmt(total[0]))


@reward_app.command("list")
def list_cmd() -> None:
    """List every registered reward name, its kind and a one-line description."""
    from reward import list_rewards

    infos = list_rewards()
    width = max(len(i.name) for i in infos)
    for info in infos:
        typer.echo(f"{info.name:<{width}}  {info.kind:<11}  {info.summary}")


@reward_app.command("analyze")
def analyze(
    completions: Path | None = typer.Option(None, "--completions", help="Completions JSONL from `spatialiq eval "
                                            "sample` (from-trace mode, k samples per view); or give --raw."),
    data: Path | None = typer.Option(None, "--data", help="Dataset root the completions were sampled from."),
    out: Path = typer.Option(..., "--out", help="Output folder: rewards.csv, summary.csv, report.md, PNG plots (with "
                             "--raw, one subfolder per responder)."),
    rewards: str = typer.Option("default,stepwise,consistency", "--rewards", help="Comma-separated reward names or "
                                "dotted paths 'pkg.module:function' (combinations add a column per term); a factory "
                                "takes parameters as NAME:KEY=VALUE:KEY=VALUE, e.g. overlong:max_len=2048:cache=512."),
    split: str = typer.Option("benchmark", "--split", help="Split of --data, as for `eval sample` (train, benchmark "
                              "or a train partition: val, warmup, rl)."),
    k: int | None = typer.Option(None, "--k", help="Samples per view (default: inferred as `eval score` does)."),
    parse: str = typer.Option("official", "--parse", help="How correctness is read: official or strict, as for "
                              "`eval score`."),
    raw: list[Path] = typer.Option([], "--raw", help="Instead of --completions/--data: predictions files in the "
                                   "released eval_raw layout (an optional model column holds several responders); "
                                   "repeatable. Each responder is analysed on <answer>N</answer> texts rebuilt from "
                                   "its recorded main_pred (k = 1), into OUT/<model>/."),
    files: list[Path] | None = typer.Argument(None, help="More predictions files for --raw, as a shell glob gives "
                                              "them: --raw runs/*.csv"),
) -> None:
    """Score sampled completions with each reward; AUC, variance, shortcut gap and the gaming probes."""
    from spatialiq_train.cli.options import raw_files
    from spatialiq_train.lab.scoring import parse_reward_list

    if parse not in ("official", "strict"):
        raise UserError(f"--parse must be official or strict, got {parse!r}")
    if k is not None and k < 1:
        raise UserError(f"--k must be at least 1 (or left out to infer it from the file), got {k}")
    raw = raw_files(raw, files)
    specs = parse_reward_list(rewards)
    if raw:
        if completions is not None or data is not None:
            raise UserError("--raw reads predictions files; leave out --completions/--data (or --raw)")
        _analyze_raw(raw, out, specs, rewards)
        return
    if completions is None or data is None:
        raise UserError("reward analyze needs --completions and --data (or --raw FILE for predictions files)")
    _analyze_completions(completions, data, out, specs, rewards, split, k, parse)


def _analyze_completions(completions: Path, data: Path, out: Path, specs: list, rewards: str, split: str,
                         k: int | None, parse: str) -> None:
    import time

    from eval.completions import load_for_scoring
    from eval.provenance import check_scored_data, dataset_record
    from eval.scenes import find_scenes
    from eval.score import resolve_k
    from spatialiq_train.lab.analyze import analyze as run_analysis
    from spatialiq_train.lab.analyze import write_analysis
    from spatialiq_train.lab.table import build_table

    records = load_for_scoring(completions)
    k = resolve_k(records, k, completions)
    try:
        scenes = find_scenes(data, split)
    except (ValueError, FileNotFoundError) as exc:
        raise UserError(f"--data {data} --split {split}: {exc}") from None
    check_scored_data(completions, dataset_record(data, split, scenes),
                      lambda text: typer.echo(f"warning: {text}", err=True))
    start = time.perf_counter()
    table = build_table(scenes, records, k, parse, completions)  # type: ignore[arg-type]
    result = run_analysis(table, specs)
    meta = {"completions file": completions, "data": data, "split": split, "rewards": rewards, "parse": parse}
    report = write_analysis(result, out, meta)
    typer.echo(f"{report}: {len(table.texts)} completions, {len(table.scenes)} views, {len(result.columns)} reward "
               f"columns in {time.perf_counter() - start:.1f}s")


def _analyze_raw(raw: list[Path], out: Path, specs: list, rewards: str) -> None:
    from eval.rawcsv import read_prediction_files
    from spatialiq_train.lab.analyze import analyze as run_analysis
    from spatialiq_train.lab.analyze import write_analysis
    from spatialiq_train.lab.table import PREDICTION_TEXT, table_from_predictions

    for model, responder in read_prediction_files(raw).items():
        table = table_from_predictions(responder)
        result = run_analysis(table, specs)
        meta = {"predictions file": responder.source, "responder": model, "rewards": rewards,
                "texts": PREDICTION_TEXT}
        report = write_analysis(result, out / model, meta)
        typer.echo(f"{report}: {model}: {len(table.texts)} views, {len(result.columns)} reward columns")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.add_typer(reward_app, name="reward")
