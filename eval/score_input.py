"""What ``eval score`` scores, decided before any number: the mode, the lines it sets aside, the sample numbering
and k, so that a score never silently changes meaning (docs/trust.md, "Scores and images").

* **Mode.** The provenance record's ``sampling.mode`` when the file has one; ``--mode`` must then agree with it (a
  disagreement is refused naming both). Without a record: ``--mode``, else from-trace when every line asks
  ``task_main`` and independent when none does; a file mixing both with nothing to say which it is, is refused.
* **Stray lines** (a task the mode does not score: anything but ``task_main`` in from-trace mode, a task outside the
  recorded ``sampling.tasks`` in independent mode) are set aside with a warning naming them; a file whose every line
  is stray is refused (it was not sampled in that mode).
* **Sample numbering.** Samples are numbered 0..k-1 per view and task. A file whose lowest index is above 0 (e.g.
  1..3) is renumbered from 0 with a warning naming the offset, so its first sample is acc@1's and ``--k`` counts
  the samples it holds.
* **k.** :func:`eval.score.resolve_k`; then every view holding fewer than k samples of a scored task is counted
  and named in a warning (maj@k and pass@k count its missing samples as absent).

Everything here is pure: warnings are returned as text, refusals are UserErrors naming the file.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from eval.completions import Completion, Key
from eval.sample import Mode
from eval.score import resolve_k
from spatialiq_train.core.errors import UserError
from spatialiq_train.core.tasks import INTEGER_TASKS, TASKS

MODES: tuple[str, ...] = ("from-trace", "independent")
SHOWN = 3
"""Stray lines named one by one in a message (the rest are counted)."""


@dataclass
class ScoringInput:
    """The completions to score (stray lines set aside, samples numbered from 0), their mode and k, and the
    warnings to print; ``counts`` adds ``stray_lines``, ``sample_offset`` and ``views_short_of_k`` to the metrics."""

    records: dict[Key, Completion]
    mode: Mode
    k: int
    notes: list[str] = field(default_factory=list)
    """The warnings to print, one line each."""
    counts: dict[str, int] = field(default_factory=dict)


def recorded_sampling(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``sampling`` settings of a provenance record ({} when there is none or it records none)."""
    sampling = (record or {}).get("sampling")
    return sampling if isinstance(sampling, dict) else {}


def _where(c: Completion) -> str:
    return f"line {c.line} ({c.task})" if c.line else f"view {c.view!r} ({c.task})"


def _named(lines: list[Completion]) -> str:
    shown = ", ".join(_where(c) for c in lines[:SHOWN])
    return shown + (f" and {len(lines) - SHOWN} more" if len(lines) > SHOWN else "")


def resolve_mode(completions: Mapping[Key, Completion], option: str | None, record: Mapping[str, Any] | None,
                 source: object) -> tuple[Mode, str]:
    """The mode to score in and where it comes from (``provenance``, ``--mode`` or ``the file``)."""
    recorded = recorded_sampling(record).get("mode")
    if recorded in MODES:
        if option is not None and option != recorded:
            raise UserError(f"--mode {option}: {source} was sampled in mode {recorded} (its provenance record says "
                            f"so), and scoring it as {option} would read every answer another way; leave --mode out "
                            f"or pass --mode {recorded}")
        return recorded, "provenance"  # type: ignore[return-value]
    if option is not None:
        return option, "--mode"  # type: ignore[return-value]
    tasks = Counter(c.task for c in completions.values())
    if set(tasks) <= {"task_main"}:
        return "from-trace", "the file"
    if "task_main" not in tasks:
        return "independent", "the file"
    others = sorted((c for c in completions.values() if c.task != "task_main"), key=lambda c: c.line)
    raise UserError(f"{source} mixes {tasks['task_main']} task_main line(s) with {len(others)} of other tasks "
                    f"({_named(others)}) and has no provenance record saying how it was sampled: pass --mode "
                    "from-trace (task_main traces; the other lines are set aside) or --mode independent (every task "
                    "scored on its own answer)")


def scored_tasks(mode: Mode, record: Mapping[str, Any] | None) -> set[str] | None:
    """The tasks a mode scores: task_main from a trace; in independent mode the recorded ``sampling.tasks`` (None:
    any integer task)."""
    if mode == "from-trace":
        return {"task_main"}
    tasks = recorded_sampling(record).get("tasks")
    return set(tasks) if isinstance(tasks, list) and tasks else None


def set_aside_strays(completions: Mapping[Key, Completion], mode: Mode, origin: str,
                     record: Mapping[str, Any] | None, source: object) -> tuple[dict[Key, Completion], str | None]:
    """The completions the mode scores, and a warning naming the lines set aside (None when there are none)."""
    wanted = scored_tasks(mode, record)
    if wanted is None:
        wanted = set(INTEGER_TASKS)
    kept = {key: c for key, c in completions.items() if c.task in wanted}
    stray = sorted((c for c in completions.values() if c.task not in wanted), key=lambda c: c.line)
    said = f"mode {mode} (from {origin})"
    unknown = [c for c in stray if c.task not in TASKS]
    if not kept and unknown:
        raise UserError(f"{source}: {_named(unknown)}: {unknown[0].task!r} is not a task id (valid: "
                        f"{', '.join(TASKS)}); correct the task of these lines")
    if not kept:
        raise UserError(f"{source}: no line asks a task that {said} scores ({', '.join(sorted(wanted))}); e.g. "
                        f"{_named(stray)}: the file was sampled another way: pass the --mode it was sampled in")
    if not stray:
        return kept, None
    return kept, (f"{source}: {len(stray)} line(s) ask a task that {said} does not score and are set aside: "
                  f"{_named(stray)}; the {len(kept)} other line(s) are scored")


def renumber_samples(completions: Mapping[Key, Completion], source: object) -> tuple[dict[Key, Completion], int,
                                                                                        str | None]:
    """Samples numbered from 0: a file whose lowest sample index is ``b > 0`` has ``b`` taken off every index (with
    a warning); returns the completions, ``b`` and the warning (None when the file counts from 0)."""
    if not completions:
        return dict(completions), 0, None
    first = min(completions.values(), key=lambda c: (c.sample, c.line))
    offset = first.sample
    if offset == 0:
        return dict(completions), 0, None
    out = {}
    for c in completions.values():
        moved = replace(c, sample=c.sample - offset)
        out[moved.key] = moved
    top = max(c.sample for c in completions.values())
    return out, offset, (f"{source}: no completion has sample index 0; its samples are numbered {offset}..{top} "
                         f"(lowest at {_where(first)}), so they are scored as 0..{top - offset}: sample {offset} "
                         "is the first (acc@1) and --k counts from there")


def short_views(completions: Mapping[Key, Completion], k: int, source: object) -> tuple[int, str | None]:
    """How many (view, task) pairs hold fewer than ``k`` samples below ``k``, and a warning saying so."""
    held: dict[tuple[str, str], int] = defaultdict(int)
    for c in completions.values():
        if c.sample < k:
            held[(c.view, c.task)] += 1
    short = {key: n for key, n in held.items() if n < k}
    if not short:
        return 0, None
    views = {view for view, _ in short}
    all_views = {view for view, _ in held}
    (view, task), fewest = min(short.items(), key=lambda item: (item[1], item[0]))
    return len(views), (f"{source}: {len(views)} of {len(all_views)} view(s) hold fewer than the k = {k} samples "
                        f"scored (fewest: {fewest}, view {view!r} {task}); maj@{k} and pass@{k} count their "
                        f"missing samples as absent (not answered): score them against k = {k}, or pass a smaller "
                        "--k to score the samples every view holds")


def prepare(completions: Mapping[Key, Completion], option_mode: str | None, k: int | None,
            record: Mapping[str, Any] | None, source: object) -> ScoringInput:
    """Mode, stray lines, sample numbering, k and the uneven-samples warning of a completions file (module doc)."""
    mode, origin = resolve_mode(completions, option_mode, record, source)
    kept, stray_warning = set_aside_strays(completions, mode, origin, record, source)
    renumbered, offset, offset_warning = renumber_samples(kept, source)
    k = resolve_k(renumbered, k, source)
    short, short_warning = short_views(renumbered, k, source)
    warnings = [w for w in (stray_warning, offset_warning, short_warning) if w]
    counts = {"stray_lines": len(completions) - len(kept), "sample_offset": offset, "views_short_of_k": short}
    return ScoringInput(renumbered, mode, k, warnings, counts)
