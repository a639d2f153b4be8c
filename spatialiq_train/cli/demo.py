"""`spatialiq demo`: the whole pipeline end to end on the CPU, small enough for a laptop.

Generate rendered cube scenes (train and benchmark splits), write traces, run the two-phase
DAPO-tight recipe (SFT warm-up, then GRPO/DAPO) on the offline tiny Qwen2.5-VL, run the RL phase's control (the
same rollouts and rewards at the unchanged SFT weights), sample the trained checkpoint on the benchmark split, score
it and write the report with the learning curve. Every step is one of the ordinary ``spatialiq`` commands, run
in-process in order; each of them resumes, so rerunning the demo after an interruption continues where it stopped.
Each step's wall and CPU seconds are printed in step order (a step's line waits for those of the background steps
before it) and the total at the end. An interrupted step (Ctrl-C, SIGTERM) stops the demo with exit 130 (143),
saying which step was interrupted, what was kept and that the same command continues.
"""

from __future__ import annotations

import logging
import shlex
import time
from pathlib import Path
from typing import Any

import typer

log = logging.getLogger(__name__)

DEMO_TRAINING = ("sft.optimizer.max_steps=120", "rl.optimizer.max_steps=16", "logging.save_steps=40")
"""Budgets on top of recipes/tiny_cpu.yaml: enough SFT steps for the tiny model to learn the answer format, the
first third of the shipped RL budget, and a checkpoint every 40 steps (not every 2: saving was a tenth of the
training time)."""

DEMO_PARTS = "warmup=2,rl=4"
"""The train structures the demo renders (``gen --parts``): the first 2 of the warm-up part (32 views) and the first 4
of the RL part (64 views, the recipe's ``data.max_examples``, which is as many RL prompts as are read). Rendering 40
structures, as the demo did before (seed 0), gave these same 6 (the traces keep candidate order) plus 34 that nothing
read."""

CONTROL = "control"
"""The control's folder beside the run folder (not inside it: the run's writer owns what is inside it): the RL
phase's rollouts and rewards at the unchanged SFT weights."""

TINY_NOTE = ("The demo trains a tiny randomly initialised Qwen2.5-VL (about 0.25 M parameters) for minutes on a CPU; "
             "its accuracy means nothing about spatial reasoning. The demo shows the pipeline, not a model.")
"""Said in the demo's metrics, report, model card and last console lines."""

KIND_NOTES = {
    "plain": ("It trained on plain traces (--kind plain: the target is <answer>N</answer> alone). A plain completion "
              "states no sub-task lines, so the sub-task columns read n/a, and the shortcut rate (among correct "
              "answers, the share without correct sub-task lines and a matching visible + hidden total) is 1.000 by "
              "definition: it says nothing about a plain-trace model. --kind cot trains on the benchmark's template."),
    "cot": "It trained on CoT traces (--kind cot: the benchmark's template with its sub-task lines).",
}
"""Which trace kind the demo trained on, and how to read the report's columns for it (added to the metrics' note)."""


def recorded_variant(*datasets: Path) -> str | None:
    """The Mitsuba variant an earlier run rendered these dataset folders with (their gen_config.json), if any."""
    import json

    from spatialiq_train.core.dataset import GEN_CONFIG_FILE

    for folder in datasets:
        path = folder / GEN_CONFIG_FILE
        if path.is_file():
            try:
                variant = ((json.loads(path.read_text(encoding="utf-8")) or {}).get("render_backend") or {}).get(
                    "variant")
            except (OSError, ValueError, AttributeError):
                continue  # gen reads it again and names what is wrong
            if variant:
                return str(variant)
    return None


def demo_steps(
    out: Path, parts: str, benchmark_structures: int, renderer: str, resolution: int, seed: int, k: int,
    max_new_tokens: int, recipe: Path | str, kind: str = "plain", render_variant: str = "auto",
) -> list[list[str]]:
    """The demo's commands, as argument lists for the ``spatialiq`` app, in the order they start (pure; tested).

    The benchmark render and the control run in the background (:func:`demo_background`) beside the DAPO-tight run,
    and finish before check-splits, which needs both datasets."""
    train, bench = out / "data-train", out / "data-benchmark"
    traces, run, evals = out / "traces", out / "run", out / "eval"
    data_keys = [f"data.traces_dir={traces}", f"data.data_root={train}"]
    common = ["--seed", str(seed), "--renderer", renderer, "--resolution", str(resolution),
              "--render-variant", render_variant]
    return [
        ["gen", "--out", str(train), "--parts", parts, "--split", "train", *common],
        ["traces", "--data", str(train), "--out", str(traces), "--kind", kind],
        ["gen", "--out", str(bench), "--structures", str(benchmark_structures), "--split", "benchmark", *common],
        ["train", "rl", "--recipe", str(recipe), "--out", str(out / CONTROL), "--control",
         f"rl.init_from={run / 'sft' / 'final'}", *data_keys, *DEMO_TRAINING],
        ["run", "dapo-tight", "--recipe", str(recipe), "--out", str(run), *data_keys, *DEMO_TRAINING],
        ["check-splits", str(train), str(bench)],
        ["eval", "sample", "--model", str(run / "final"), "--data", str(bench),
         "--out", str(evals / "completions.jsonl"), "--k", str(k), "--max-new-tokens", str(max_new_tokens),
         "--engine", "transformers"],
        ["eval", "score", "--completions", str(evals / "completions.jsonl"), "--data", str(bench), "--out", str(evals),
         "--name", "demo-tiny", "--note", f"{TINY_NOTE} {KIND_NOTES[kind]}"],
        ["eval", "report", "--metrics", str(evals / "metrics_demo-tiny.json"), "--out", str(evals / "report")],
        ["release", "--run", str(run), "--out", str(out / "release"),
         "--metrics", str(evals / "metrics_demo-tiny.json"), "--name", "spatialiq-demo-tiny", "--overwrite"],
    ]


def demo_background(out: Path) -> dict[int, Path | None]:
    """Step index (in :func:`demo_steps`) -> the file it waits for, for the steps that run in a background process
    (pure; tested). Training runs on one core: the benchmark render (needed first by sampling) takes the other at
    once, and the control (RL's rollouts at the SFT weights) takes it when the SFT phase's completion record appears,
    so it runs beside RL. Every background step has finished before :data:`JOIN_BEFORE` starts."""
    return {2: None, 3: out / "run" / "sft" / MARKER}


JOIN_BEFORE = "check-splits"
"""The first step that needs the background steps' output (the benchmark dataset; the control before the report)."""
MARKER = "complete.json"
"""A finished phase's completion record (``spatialiq_train.train.completion.MARKER``; not imported: it pulls in the
training stack)."""


def demo(
    ctx: typer.Context,
    out: Path = typer.Option(Path("demo"), "--out", help="Folder for everything the demo writes."),
    parts: str = typer.Option(
        DEMO_PARTS, "--parts",
        help="Train structures to render per part (16 views each), as for gen --parts; the default is what the "
             "training reads."),
    benchmark_structures: int = typer.Option(4, "--benchmark-structures", help="Benchmark structures."),
    renderer: str = typer.Option("mitsuba", "--renderer", help="mitsuba (CPU default) or isaacsim."),
    resolution: int = typer.Option(
        112, "--resolution", help="Image side: the tiny model's 112 px (the benchmark uses 512)."),
    seed: int = typer.Option(0, "--seed"),
    k: int = typer.Option(4, "--k", help="Completions per benchmark view."),
    max_new_tokens: int = typer.Option(48, "--max-new-tokens"),
    recipe: str = typer.Option("tiny_cpu", "--recipe", help="Training recipe: a YAML path or a shipped recipe name."),
    kind: str = typer.Option(
        "plain", "--kind", help="Trace kind: plain (<answer>N</answer>) or cot (the benchmark template)."),
    render_variant: str = typer.Option(
        "auto", "--render-variant",
        help="Mitsuba variant, as for gen; auto reuses the variant OUT's datasets were rendered with (a rerun "
             "continues them after another variant became available), else resolves per machine."),
) -> None:
    """Run the whole pipeline on the CPU: generate, traces, DAPO-tight on a tiny model, evaluate, report.

    The default trains on plain targets: a 0.25 M-parameter model learns the answer format in a
    hundred SFT steps, so the gated reward varies and RL has groups to learn from. With ``--kind
    cot`` every step runs the same way, but the tiny model does not learn the 400-token CoT
    template in a CPU budget, so RL sees reward 0 and dynamic sampling drops every group.
    """
    from spatialiq_train.cli.train import load_checked
    from spatialiq_train.core.errors import UserError

    if renderer == "none":
        raise UserError("--renderer none has no images to train on; use mitsuba")
    if kind not in ("plain", "cot"):
        raise UserError(f"--kind must be plain or cot, got {kind!r}")
    # a missing or invalid recipe (or a directory, or an unknown reward) stops the demo before any work
    rec = load_checked(recipe, list(DEMO_TRAINING))
    if render_variant == "auto" and (recorded := recorded_variant(out / "data-train", out / "data-benchmark")):
        typer.echo(f"note: {out} was rendered with {recorded}; rendering the rest with it too", err=True)
        render_variant = recorded
    import torch

    # one intra-op thread, as bench/bench_learning.py trains: the tiny model's ops are too small to split, and two
    # threads spent several times the CPU per step (more so when another job holds a core)
    torch.set_num_threads(1)
    steps = demo_steps(out, parts, benchmark_structures, renderer, resolution, seed, k, max_new_tokens, recipe,
                       kind, render_variant)
    run_steps(ctx, steps, demo_background(out), out / "logs")
    report_learning(out, rec)
    typer.secho(f"Done. Report: {out / 'eval' / 'report' / 'report.md'}; release: {out / 'release'}", bold=True)
    typer.secho(f"Note: {TINY_NOTE}", bold=True)


def run_steps(ctx: typer.Context, steps: list[list[str]], background: dict[int, Path | None] | None = None,
              logs: Path | None = None) -> None:
    """Each step timed, in this process, or (the indices in ``background``) in a child process started once the
    given file exists, its output in ``logs``; background steps finish before the step named :data:`JOIN_BEFORE`.
    Step lines come out in step order (a step's timing line waits for those of the background steps before it) and
    a total ends the run. The first failure stops the demo with its exit status (background children are stopped);
    an interrupted step (exit 130, or 143 for SIGTERM) stops it saying what was kept and how to continue."""
    from spatialiq_train.cli.steps import VERBOSE_KEY, on_interrupt, run_step
    from spatialiq_train.core.errors import UserError

    verbose = bool(ctx.meta.get(VERBOSE_KEY))
    children: dict[int, _Child] = {}
    lines = _InOrder()
    start, cpu0 = time.perf_counter(), time.process_time()
    try:
        for n, args in enumerate(steps, 1):
            label = f"[{n}/{len(steps)}]"
            on_interrupt(_kept(n))
            if background and n - 1 in background:
                assert logs is not None
                child = _Child(label, args, background[n - 1], logs / f"{n:02d}-{_name(args).replace(' ', '-')}.log",
                               verbose)
                children[n] = child
                typer.secho(f"{label} spatialiq {shlex.join(args)} (in the background; output in {child.log})",
                            bold=True)
                continue
            if args[0] == JOIN_BEFORE:
                _join(children, lines)
            typer.secho(f"{label} spatialiq {shlex.join(args)}", bold=True)
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                rc = run_step(ctx, args, verbose)
            except SystemExit as exc:  # SIGTERM in a step holding an output lock unwinds it as an exit (143)
                if exc.code not in INTERRUPTED:
                    raise
                rc = int(exc.code)  # type: ignore[arg-type]
            if rc in INTERRUPTED:
                typer.echo(f"interrupted: the demo stopped at step {label} ({_name(args)}); {_kept(n)}",
                           err=True)
                raise typer.Exit(code=rc)
            if rc:
                raise UserError(f"demo step {n} failed (exit {rc}, its error is above): spatialiq {shlex.join(args)}",
                                exit_code=rc)
            lines.add(n, f"{label} {_name(args)}: {time.perf_counter() - wall:.1f} s wall, "
                         f"{time.process_time() - cpu:.1f} s CPU")
        _join(children, lines)
        typer.secho(f"[total] {len(steps)} steps: {time.perf_counter() - start:.1f} s wall, "
                    f"{time.process_time() - cpu0 + sum(c.cpu for c in children.values()):.1f} s CPU", bold=True)
    finally:
        lines.flush()
        for child in children.values():
            child.stop()


INTERRUPTED = (130, 143)
"""Exit statuses of an interrupted step: SIGINT (Ctrl-C) and SIGTERM, as a shell reports them."""


def _kept(n: int) -> str:
    """What an interruption at step ``n`` keeps, and how to go on."""
    before = "step 1" if n == 2 else f"steps 1-{n - 1}"
    done = "no step had finished" if n == 1 else f"what {before} wrote is kept (a background step still running " \
        "is stopped and keeps what it had finished)"
    return (f"{done}; the interrupted step kept what it had finished (each output written aside and moved into "
            "place); rerun the same demo command to continue: finished steps are found done, the rest resume")


class _InOrder:
    """Step timing lines printed in step order: a line waits until the lines of every step before it are out."""

    def __init__(self) -> None:
        self.waiting: dict[int, str] = {}
        self.done = 0

    def add(self, n: int, line: str) -> None:
        self.waiting[n] = line
        while self.done + 1 in self.waiting:
            self.done += 1
            typer.echo(self.waiting.pop(self.done))

    def flush(self) -> None:
        """Whatever still waits (a step before it never reported), in step order."""
        for n in sorted(self.waiting):
            typer.echo(self.waiting.pop(n))


def _join(children: dict[int, _Child], lines: _InOrder) -> None:
    """Wait for every background step started so far and put its timing line in order."""
    for n in sorted(children):
        line = children[n].join()
        if line is not None:
            lines.add(n, line)


def _name(args: list[str]) -> str:
    return args[0] if args[1].startswith("-") or "/" in args[1] else f"{args[0]} {args[1]}"


class _Child:
    """One step in a child process (``python -m spatialiq_train.cli``, one torch thread), started by a thread once
    ``after`` exists; :meth:`join` prints its wall and CPU seconds, or its log's tail and the failure."""

    def __init__(self, label: str, args: list[str], after: Path | None, log: Path, verbose: bool) -> None:
        import threading

        self.label, self.args, self.after, self.log, self.verbose = label, args, after, log, verbose
        self.proc: Any = None
        self.rc: int | None = None
        self.wall = self.cpu = 0.0
        self.error: BaseException | None = None
        self.cancel = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"demo {label}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import os
        import subprocess
        import sys

        try:
            while self.after is not None and not self.after.is_file():
                if self.cancel.wait(0.5):
                    return
            self.log.parent.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-m", "spatialiq_train.cli", *(["--verbose"] if self.verbose else []), *self.args]
            with self.log.open("w", encoding="utf-8") as sink:
                wall = time.perf_counter()
                if self.cancel.is_set():
                    return
                self.proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env={**os.environ, "OMP_NUM_THREADS": "1"})
                _, status, usage = os.wait4(self.proc.pid, 0)
                self.proc.returncode = self.rc = os.waitstatus_to_exitcode(status)
                self.wall, self.cpu = time.perf_counter() - wall, usage.ru_utime + usage.ru_stime
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def join(self) -> str | None:
        """Wait for the step; its timing line (None once reported, or when it never ran), or its failure raised."""
        from spatialiq_train.core.errors import UserError

        self.thread.join()
        if self.error is not None:
            raise UserError(f"demo step {self.label} could not run in the background ({self.error}): "
                            f"spatialiq {shlex.join(self.args)}")
        if self.rc:
            tail = self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
            typer.echo("\n".join(tail), err=True)
            raise UserError(f"demo step {self.label} failed (exit {self.rc}; the end of {self.log} is above): "
                            f"spatialiq {shlex.join(self.args)}", exit_code=self.rc)
        if self.rc is None:
            return None
        self.rc = None  # reported once
        return f"{self.label} {_name(self.args)} (background): {self.wall:.1f} s wall, {self.cpu:.1f} s CPU"

    def stop(self) -> None:
        """Stop the child if it still runs (after another step failed)."""
        self.cancel.set()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
        self.thread.join(timeout=30)


def report_learning(out: Path, rec: Any) -> None:
    """The report's learning-curve section (RL beside its control) and its one-line summary."""
    from spatialiq_train.cli.demo_learning import write_learning_section

    summary = write_learning_section(out / "run" / "rl", out / CONTROL, out / "eval" / "report",
                                     rec.reward.weights, rec.run.seed)
    s = summary.seeds[0]
    typer.secho(f"RL vs its control over the last third of the RL steps: {s.rl_mean:.2f} vs {s.control_mean:.2f} "
                f"(lift {s.lift:+.2f}); curve in {out / 'eval' / 'report' / 'learning_curve.png'}", bold=True)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the root app."""
    app.command("demo")(demo)
