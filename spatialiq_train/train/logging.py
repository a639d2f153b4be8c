"""Our own per-step metrics file (`metrics.jsonl`) next to TRL's tensorboard / wandb reporting.

One JSON object per logged step with at least `step`. TRL's names are kept and the ones the docs promise are
added under stable names: `reward_mean`, `reward/<fn>`, `accuracy` (exact match), `kl`, `clip_fraction`,
`entropy`, `response_length`, `dynamic_sampling/*` and `tokens_per_s`.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from spatialiq_train.io import atomic_write_text

log = logging.getLogger(__name__)

ACCURACY_REWARD = "exact_match"
"""Name of the weight-0 reward function whose mean is the exact-match accuracy."""

RENAMES: dict[str, str] = {
    "reward": "reward_mean",
    "completions/mean_length": "response_length",
    "clip_ratio/region_mean": "clip_fraction",
    "mean_token_accuracy": "token_accuracy",
}


def normalise_logs(logs: dict[str, Any]) -> dict[str, float]:
    """TRL log dict -> our metric names (TRL's names are kept too); non-numeric values are dropped."""
    out: dict[str, float] = {}
    for key, val in logs.items():
        if isinstance(val, bool) or not isinstance(val, int | float) or not math.isfinite(float(val)):
            continue
        out[key] = float(val)
        if key in RENAMES:
            out[RENAMES[key]] = float(val)
        if key.startswith("rewards/") and key.endswith("/mean"):
            name = key[len("rewards/") : -len("/mean")]
            out[f"reward/{name}"] = float(val)
            if name == ACCURACY_REWARD:
                out["accuracy"] = float(val)
    return out


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl file; a torn last line (interrupted write) is skipped."""
    p = Path(path)
    if not p.is_file():
        return []
    rows = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: skipping a torn line", p)
    return rows


def _callback_base() -> type:
    from transformers import TrainerCallback

    return TrainerCallback


def make_metrics_callback(path: str | Path, phase: str) -> Any:
    """A `TrainerCallback` appending one JSON line per log event to `path`."""

    class MetricsJsonlCallback(_callback_base()):  # type: ignore[misc]
        def __init__(self) -> None:
            self.path = Path(path)
            self.phase = phase
            self._t = time.perf_counter()
            self._tokens: float | None = None

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            # After a resume, drop rows logged after the restored checkpoint so steps are not duplicated.
            if state.is_world_process_zero:
                rows = [r for r in read_metrics(self.path) if r.get("step", 0) <= state.global_step]
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in rows))
            self._t = time.perf_counter()
            self._tokens = None

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
            if not state.is_world_process_zero or not logs or "train_runtime" in logs:
                return
            row: dict[str, Any] = {"step": state.global_step, "phase": self.phase, "epoch": state.epoch}
            row.update(normalise_logs(logs))
            now = time.perf_counter()
            tokens = row.get("num_tokens")
            if tokens is not None and self._tokens is not None and now > self._t:
                row["tokens_per_s"] = (tokens - self._tokens) / (now - self._t)
            self._t, self._tokens = now, tokens
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    return MetricsJsonlCallback()


def report_to(wanted: list[str]) -> list[str]:
    """The wanted integrations that are importable (so a missing wandb never stops a run)."""
    import importlib.util

    modules = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",)}
    out = []
    for name in wanted:
        if any(importlib.util.find_spec(m) is not None for m in modules.get(name, (name,))):
            out.append(name)
        else:
            log.info("%s is not installed; not reporting to it", name)
    return out
