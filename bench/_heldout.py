"""Held-out accuracy of a learning benchmark's checkpoint, shared by both halves (bench_learning*.py).

A checkpoint is sampled with ``spatialiq eval sample --engine transformers`` on the views of structures no phase
trained on (the ``val`` part of a train dataset: ``spatialiq_train.core.splits``), in the prompt the RL phase trains
on (the training dialect without the CoT system prompt: plain traces) and at the recipe's decoding (temperature,
completion budget), then scored twice: by ``spatialiq eval score`` (``acc@1``: the first sample of each view, a
missing answer wrong; ``coverage@1``), and per completion by the recipe's own reward functions (every sample of
every view): ``format``, ``integer_distance``, ``integer_distance_formatted`` (the distance among well-formatted
completions) and ``exact_match``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HELDOUT_KEYS: tuple[str, ...] = ("format", "integer_distance", "integer_distance_formatted", "exact_match", "acc@1")
"""The held-out numbers of one checkpoint, in report order."""


def cli(args: list[str]) -> None:
    """``spatialiq ARGS`` in this process; a non-zero exit is a SystemExit naming the command."""
    import typer

    from spatialiq_train.cli import app

    rc = typer.main.get_command(app).main(args, standalone_mode=False)
    if rc:
        raise SystemExit(f"spatialiq {' '.join(args)} failed ({rc})")


def reward_scores(completions: Sequence[tuple[str, str]], truth: Mapping[str, int]) -> dict[str, float]:
    """Means over (view, text) completions of the reward functions against each view's count (pure)."""
    from reward.functions import exact_match_score, format_score, integer_distance_score
    from spatialiq_train.core.learning import formatted_distance

    if not completions:
        raise ValueError("no completions to score")
    n = len(completions)
    fmt = sum(format_score(text) for _, text in completions) / n
    dist = sum(integer_distance_score(text, truth[view]) for view, text in completions) / n
    exact = sum(exact_match_score(text, truth[view]) for view, text in completions) / n
    return {"format": fmt, "integer_distance": dist, "integer_distance_formatted": formatted_distance(dist, fmt),
            "exact_match": exact}


def evaluate(model: Path, data: Path, split: str, out: Path, name: str, *, k: int, seed: int, temperature: float,
             max_new_tokens: int) -> dict[str, Any]:
    """Sample `model` on `data`'s `split` views (resumes), score it; the :data:`HELDOUT_KEYS` numbers, the views and
    completions counted, and the commands run."""
    from eval.scenes import find_scenes

    out.mkdir(parents=True, exist_ok=True)
    completions = out / f"{name}.jsonl"
    sample = ["eval", "sample", "--model", str(model), "--data", str(data), "--split", split, "--out", str(completions),
              "--k", str(k), "--temperature", str(temperature), "--max-new-tokens", str(max_new_tokens),
              "--engine", "transformers", "--no-cot-system-prompt", "--seed", str(seed), "--batch-size", "16"]
    score = ["eval", "score", "--completions", str(completions), "--data", str(data), "--split", split,
             "--out", str(out), "--name", name]
    cli(sample)
    cli(score)
    metrics = json.loads((out / f"metrics_{name}.json").read_text(encoding="utf-8"))
    truth = {v.view: int(v.gt["task_main"]) for v in find_scenes(data, split)}
    rows = [json.loads(line) for line in completions.read_text(encoding="utf-8").splitlines() if line.strip()]
    scores = reward_scores([(r["view"], r["text"]) for r in rows], truth)
    oc = metrics["object_counting"]
    return {**scores, "acc@1": float(oc["acc@1"]), "coverage@1": float(oc.get("coverage@1", float("nan"))),
            "views": len(truth), "completions": len(rows), "commands": [sample, score]}
