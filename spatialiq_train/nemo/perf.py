"""NeMo-RL v0.7.0's own timing and token metrics mapped to the project's perf/* names (`core.throughput`), so a
NeMo-RL run logs the same throughput names as the TRL path.

What v0.7.0's loops give their ``Logger`` per step, and what it becomes:

- ``timing/train`` ``total_step_time`` -> ``perf/step_s``;
- ``timing/train`` ``generation`` (+ ``exposed_generation``, async GRPO) -> ``perf/generation_s``; the rest of the
  step -> ``perf/training_s``; their ratio -> ``perf/generation_share``;
- ``train`` ``total_num_tokens`` (GRPO: prompt + response tokens of every sample, the definition of the TRL path's
  ``num_tokens``) / ``total_step_time`` -> ``perf/tokens_per_s``, / the cluster's GPUs ->
  ``perf/tokens_per_s_per_gpu``;
- the same tokens/s x the FLOP factor (GRPO: 6 + 2, v0.7.0 always recomputes the previous log-probabilities, + 2
  with the KL penalty's reference forward; SFT 6) x the policy's parameters / the device's peak -> ``perf/mfu``
  (where the parameter count and the device are known).

v0.7.0's SFT loop logs no total token count (its ``global_valid_toks`` counts the loss tokens only), so an SFT step
gets ``perf/step_s`` alone; neither loop reports peak memory to its Logger. The rows go through the run's own
``Logger`` under the prefix ``perf`` (TensorBoard and W&B name them ``perf/...``) and, one JSON object per step,
to ``<log_dir>/perf_metrics.jsonl``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from spatialiq_train.core import throughput as tp

log = logging.getLogger(__name__)

PERF_FILE = "perf_metrics.jsonl"


def perf_from_nemo(train: Mapping[str, Any], timing: Mapping[str, Any], *, devices: int, factor: int,
                   parameters: int | None, peak: float | None) -> dict[str, float]:
    """One step's perf/* values from v0.7.0's ``train`` and ``timing/train`` metrics (pure)."""
    total = float(timing.get("total_step_time") or 0.0)
    if total <= 0:
        return {}
    gen = [float(timing[k]) for k in ("generation", "exposed_generation") if k in timing]
    tokens = train.get("total_num_tokens")
    if tokens is None:
        out = {tp.PERF_STEP_S: total}
        if gen:
            out.update({tp.PERF_GENERATION_S: sum(gen), tp.PERF_TRAINING_S: max(total - sum(gen), 0.0),
                        tp.PERF_GENERATION_SHARE: min(sum(gen) / total, 1.0)})
        return out
    return tp.perf_row(tokens=float(tokens), seconds=total, devices=devices, factor=factor,
                       parameters=parameters or 0, peak=peak if parameters else None,
                       generation_s=sum(gen) if gen else None)


def _section(master: Any, name: str) -> dict[str, Any]:
    """A section of v0.7.0's master config as a plain dict (sections are pydantic models, dicts or absent)."""
    section = master.get(name) if isinstance(master, Mapping) else getattr(master, name, None)
    if section is None:
        return {}
    if hasattr(section, "model_dump"):
        return dict(section.model_dump())
    return dict(section)


def _devices(master: Any) -> int:
    cluster = _section(master, "cluster")
    return int(cluster.get("num_nodes") or 1) * int(cluster.get("gpus_per_node") or 1)


def _factor(master: Any, phase: str) -> int:
    if phase == "sft":
        return tp.flops_factor("sft")
    kl = _section(master, "loss_fn").get("reference_policy_kl_penalty") or 0
    return tp.flops_factor("rl", reference=float(kl) != 0, old_logprobs=True)


def _parameters(master: Any) -> int | None:
    """The policy's parameter count from its config, on the meta device; None when it cannot be read."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForImageTextToText

        config = AutoConfig.from_pretrained(_section(master, "policy")["model_name"])
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(config)
        return int(sum(p.numel() for p in model.parameters()))
    except Exception as exc:  # noqa: BLE001 - MFU is optional; the rest of perf/* is logged without it
        log.info("perf/mfu off: the policy's parameter count could not be read (%s)", exc)
        return None


def _peak() -> float | None:
    try:
        import torch

        return tp.peak_tflops(torch.cuda.get_device_name()) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        return None


class NemoPerf:
    """Collects each step's ``train`` metrics; at the step's ``timing/train`` log, logs the perf/* row."""

    def __init__(self, phase: str, devices: int, factor: int, parameters: int | None, peak: float | None) -> None:
        self.phase, self.devices, self.factor, self.parameters, self.peak = phase, devices, factor, parameters, peak
        self._train: dict[int, dict[str, Any]] = {}
        self.rows: list[dict[str, Any]] = []

    def observe(self, metrics: Mapping[str, Any], step: int, prefix: str | None) -> dict[str, float] | None:
        """One ``log_metrics`` call; the perf row when it closes a step, else None."""
        if prefix == "train":
            self._train[int(step)] = dict(metrics)
            return None
        if prefix != "timing/train":
            return None
        row = perf_from_nemo(self._train.pop(int(step), {}), metrics, devices=self.devices, factor=self.factor,
                             parameters=self.parameters, peak=self.peak)
        if row:
            self.rows.append({"step": int(step), "phase": self.phase, **row})
        return row or None


@contextlib.contextmanager
def nemo_perf(phase: str, master: Any) -> Iterator[NemoPerf]:
    """For the block, every v0.7.0 ``Logger`` also logs the perf/* row of each step (prefix ``perf``) and appends
    it to ``<log_dir>/perf_metrics.jsonl``."""
    from nemo_rl.utils.logger import Logger

    perf = NemoPerf(phase, _devices(master), _factor(master, phase), _parameters(master), _peak())
    original = Logger.log_metrics

    def log_metrics(self: Any, metrics: dict[str, Any], step: int, prefix: str | None = "", *args: Any,
                    **kwargs: Any) -> Any:
        row = perf.observe(metrics, step, prefix)
        if row:  # before the step's last log (timing/train, step_finished): W&B commits the step with it
            original(self, row_names(row), step, "perf")
            log_dir = getattr(self, "base_log_dir", None) or getattr(self, "log_dir", None)
            if log_dir:
                with (Path(log_dir) / PERF_FILE).open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(perf.rows[-1]) + "\n")
        return original(self, metrics, step, prefix, *args, **kwargs)

    Logger.log_metrics = log_metrics
    try:
        yield perf
    finally:
        Logger.log_metrics = original


def row_names(row: Mapping[str, float]) -> dict[str, float]:
    """perf/* names without the ``perf/`` prefix, which the Logger's ``prefix`` adds back."""
    return {k.split("/", 1)[1]: v for k, v in row.items()}
