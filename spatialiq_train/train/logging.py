"""Training metrics under the namespaced names of `spatialiq_train.core.metrics`: `metrics.jsonl`, TensorBoard, wandb.

TRL logs flat names (`loss`, `reward`, `rewards/format/mean`, `completions/mean_length`, `eval_loss` ...). Each
log event is renamed once (`namespaced`) and the same row goes to every sink, so the file, TensorBoard and wandb
show the same names: `train/...`, `rollout/...`, `reward/<name>/{mean,std,errors}`, `dynamic_sampling/...`,
`eval/...`. A TRL number with no entry in the table is kept as `trl/<its TRL name>`. transformers' own
TensorBoard/wandb callbacks are switched off (they would prefix every name with `train/` again).
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from spatialiq_train.core import metrics as m
from spatialiq_train.core.io import atomic_write_text
from spatialiq_train.core.learning import total_reward
from spatialiq_train.core.metrics import read_metrics

log = logging.getLogger(__name__)

ACCURACY_REWARD = m.ACCURACY_REWARD
"""Name of the weight-0 reward function whose mean is the exact-match accuracy."""

SHAPED_TOTAL = "shaped_total"
"""TRL's own weighted sum of every reward function, the overlong shaping included; ``reward/total/mean`` is the
unshaped total both engines log (`core.learning.total_reward`)."""
TRL_NAMES: dict[str, str] = {
    "loss": m.TRAIN_LOSS,
    "learning_rate": m.TRAIN_LEARNING_RATE,
    "grad_norm": m.TRAIN_GRAD_NORM,
    "epoch": m.TRAIN_EPOCH,
    "kl": m.TRAIN_KL,
    "entropy": m.TRAIN_ENTROPY,
    "clip_ratio/region_mean": m.TRAIN_CLIP_FRACTION,
    "mean_token_accuracy": m.TRAIN_TOKEN_ACCURACY,
    "num_tokens": m.TRAIN_NUM_TOKENS,
    "completions/mean_length": m.ROLLOUT_LENGTH_MEAN,
    "completions/min_length": m.ROLLOUT_LENGTH_MIN,
    "completions/max_length": m.ROLLOUT_LENGTH_MAX,
    "completions/clipped_ratio": m.ROLLOUT_CLIPPED_SHARE,
    "reward": m.reward_metric(SHAPED_TOTAL, "mean"),
    "reward_std": m.reward_metric(SHAPED_TOTAL, "std"),
}
"""TRL's log name -> the table's name."""

EVAL_NAMES: dict[str, str] = {
    "eval_loss": m.EVAL_LOSS,
    f"eval_rewards/{ACCURACY_REWARD}/mean": m.EVAL_EXACT_MATCH,
}


def metric_name(key: str) -> str:
    """The namespaced name of one TRL log key (see the module docstring)."""
    if key in TRL_NAMES:
        return TRL_NAMES[key]
    if key in EVAL_NAMES:
        return EVAL_NAMES[key]
    if key.startswith("eval_"):
        inner = metric_name(key[len("eval_"):])
        return "eval/" + (inner[len("trl/"):] if inner.startswith("trl/") else inner)
    parts = key.split("/")
    if len(parts) == 3 and parts[0] == "rewards" and parts[2] in m.REWARD_STATS:
        return m.reward_metric(parts[1], parts[2])
    if key.startswith(("reward/", "dynamic_sampling/", "train/", "rollout/", "perf/")):
        return key  # already namespaced (reward errors and components, dynamic sampling counts, perf/*)
    return f"trl/{key}"


def namespaced(logs: dict[str, Any]) -> dict[str, float]:
    """TRL log dict -> {namespaced name: value}; non-numeric and non-finite values are dropped."""
    out: dict[str, float] = {}
    for key, val in logs.items():
        if isinstance(val, bool) or not isinstance(val, int | float) or not math.isfinite(float(val)):
            continue
        out[metric_name(key)] = float(val)
    return out


class _Sinks:
    """TensorBoard and wandb writers, opened on the first row (main process only)."""

    def __init__(self, integrations: list[str], log_dir: Path, phase: str, wandb_project: str) -> None:
        self.integrations, self.log_dir, self.phase, self.project = integrations, log_dir, phase, wandb_project
        self._tb: Any = None
        self._wandb: Any = None

    def write(self, row: dict[str, float], step: int) -> None:
        if "tensorboard" in self.integrations:
            if self._tb is None:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.log_dir))
            for key, val in row.items():
                self._tb.add_scalar(key, val, step)
            self._tb.flush()
        if "wandb" in self.integrations:
            if self._wandb is None:
                import wandb

                self._wandb = wandb.init(project=self.project, name=f"{self.log_dir.parent.name}-{self.phase}",
                                         dir=str(self.log_dir.parent), group=self.phase, resume="allow")
            self._wandb.log(row, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _callback_base() -> type:
    from transformers import TrainerCallback

    return TrainerCallback


def make_metrics_callback(path: str | Path, phase: str, integrations: list[str] | None = None,
                          wandb_project: str = "spatialiq", weights: dict[str, float] | None = None) -> Any:
    """A `TrainerCallback` appending one namespaced JSON row per log event to `path`, and sending the same row to
    the installed `integrations` (tensorboard under `path`'s folder /runs, wandb). With the RL phase's reward
    ``weights`` it adds ``reward/total/mean`` (and ``eval/reward/total/mean``): `core.learning.total_reward`."""

    class MetricsJsonlCallback(_callback_base()):  # type: ignore[misc]
        def __init__(self) -> None:
            self.path = Path(path)
            self.phase = phase
            self.sinks = _Sinks(list(integrations or []), self.path.parent / "runs", phase, wandb_project)
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
            values = namespaced(logs)
            for prefix in ("", "eval/"):
                total = total_reward(values, weights, prefix) if weights else None
                if total is not None:
                    values[prefix + m.REWARD_TOTAL_MEAN] = total
            now = time.perf_counter()
            tokens = values.get(m.TRAIN_NUM_TOKENS)
            if tokens is not None and self._tokens is not None and now > self._t:
                values[m.TRAIN_TOKENS_PER_S] = (tokens - self._tokens) / (now - self._t)
            if tokens is not None:
                self._t, self._tokens = now, tokens
            self.sinks.write(values, state.global_step)
            row: dict[str, Any] = {"step": state.global_step, "phase": self.phase, **values}
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

        def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
            self.sinks.close()

    return MetricsJsonlCallback()


def report_to(wanted: list[str]) -> list[str]:
    """The wanted integrations that are importable (so a missing wandb never stops a run)."""
    import importlib.util

    modules = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",)}
    out = []
    for name in wanted:
        if any(importlib.util.find_spec(m_) is not None for m_ in modules.get(name, (name,))):
            out.append(name)
        else:
            log.info("%s is not installed; not reporting to it", name)
    return out
