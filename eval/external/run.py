"""`spatialiq eval external`'s pieces: the requests of a benchmark's items, the completions read back, and the
metrics, per-item and report files written (layout: docs/transfer.md)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from eval.completions import load_completions
from eval.external.base import Item, Scored
from eval.sample import Request, SamplingConfig, request_seed
from spatialiq_train.core.io import atomic_write_json, atomic_write_text, markdown_table

log = logging.getLogger(__name__)

COMPLETIONS = "completions.jsonl"
METRICS = "metrics.json"
PER_ITEM = "per_item.jsonl"
REPORT = "report.md"
JUDGE = "judge.jsonl"
SAMPLING_SHOWN: tuple[str, ...] = ("k", "temperature", "top_p", "max_new_tokens", "seed")
"""The decoding settings metrics.json repeats (the provenance record beside the completions holds them all)."""


def external_config(temperature: float, top_p: float, max_new_tokens: int, seed: int,
                    batch_size: int | None = None) -> SamplingConfig:
    """One completion per item, no Spatial-IQ system prompt (the adapter's own goes with each request)."""
    extra = {} if batch_size is None else {"batch_size": batch_size}
    return SamplingConfig(k=1, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed,
                          cot_system_prompt=False, **extra)


def plan_item_requests(items: list[Item], name: str, config: SamplingConfig, done: dict | set) -> list[Request]:
    """One request per item without a completion on file; the item id is the request's view, the benchmark its
    task, so the completions file and its resume are `eval sample`'s."""
    return [Request(item.id, name, item.prompt, item.system, item.images, (0,),
                    request_seed(config.seed, item.id, name)) for item in items if (item.id, name, 0) not in done]


def read_texts(path: Path, name: str, items: list[Item]) -> dict[str, str]:
    """The first completion of each item in ``path`` by item id; lines of other ids or benchmarks are ignored
    (logged), an item without one is scored as unanswered."""
    records = load_completions(path)
    ids = {item.id for item in items}
    texts = {view: rec.text for (view, task, sample), rec in records.items() if task == name and sample == 0
             and view in ids}
    stray = sum(1 for (view, task, _) in records if task != name or view not in ids)
    if stray:
        log.warning("%s: %d completion(s) of other items or benchmarks ignored", path, stray)
    missing = len(ids) - len(texts)
    if missing:
        log.warning("%s: %d item(s) have no completion and are scored as unanswered", path, missing)
    return texts


def write_results(out: Path, name: str, model: dict[str, Any], scored: Scored, provenance: dict[str, Any]) -> Path:
    """OUT/metrics.json, OUT/per_item.jsonl and OUT/report.md (each written whole, atomically); returns the first."""
    atomic_write_text(out / PER_ITEM, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in scored.rows))
    metrics = {"benchmark": name, **{k: model.get(k) for k in ("model", "model_digest", "model_revision")},
               "n": len(scored.rows), "primary": scored.primary, "metrics": scored.metrics,
               "signals": scored.signals, "breakdowns": scored.breakdowns, "per_item": PER_ITEM,
               "data": provenance.get("data"),
               "sampling": {k: (provenance.get("sampling") or {}).get(k) for k in SAMPLING_SHOWN}}
    atomic_write_json(out / METRICS, metrics)
    atomic_write_text(out / REPORT, report_text(metrics, scored.notes))
    return out / METRICS


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "n/a" if value is None else str(value)


def report_text(metrics: dict[str, Any], notes: dict[str, str]) -> str:
    """The markdown report: every metric with what it means, the specialisation signals, then one table per
    breakdown (a row per group)."""
    rows = [[key, _cell(value), notes.get(key, "")] for key, value in metrics["metrics"].items()]
    signals = [[key, _cell(value)] for key, value in metrics["signals"].items()]
    head = f"{metrics['n']} items; primary metric `{metrics['primary']}`; per-item scores in `{metrics['per_item']}`."
    lines = [f"# {metrics['benchmark']}: {metrics['model']}", "", head, "",
             markdown_table(["metric", "value", "meaning"], rows), "", "## Style signals", "",
             markdown_table(["signal", "value"], signals), ""]
    for name, groups in (metrics.get("breakdowns") or {}).items():
        columns = list(next(iter(groups.values()), {}))
        table = [[label, *(_cell(cell.get(c)) for c in columns)] for label, cell in groups.items()]
        lines += [f"## Accuracy by {name}", "", markdown_table([name, *columns], table), ""]
    return "\n".join(lines)
