"""Does DAPO-tight RL learn on the CPU, and does it learn to count? RL runs against controls that cannot move.

One SFT warm-up (the recipe's own SFT phase: `recipes/tiny_cpu.yaml`, plain traces of the warm-up structures) is
shared by every run; each seed then runs the RL phase of the recipe twice from that checkpoint through the same code
(`train.phase.run_phase`): the RL run, and a control identical except `rl.optimizer.learning_rate=1e-12` (the recipe
refuses 0; at 1e-12 no weight moves by more than float32 rounding). The analysis (`spatialiq_train.core.learning`)
is engine-agnostic: the lift over the control, averaged over the last third of the RL steps, per seed with an
interval over the steps and across seeds with a Student-t interval, for the total reward (0-1) and for each reward
of `REWARD_CURVES` (format, integer distance, integer distance among well-formatted answers, exact match): the
total alone cannot tell writing the answer tag from counting. Then each final checkpoint (RL and control) is
sampled on the held-out views (`_heldout.py`: `spatialiq eval sample --engine transformers` on the `val` part, whose
structures no phase trains on, scored by `spatialiq eval score` and by the reward functions), and each held-out
number gets its lift with a Student-t interval across seeds. Writes `learning.json` (with the SFT checkpoint's
digest and every override applied) and `curves.png` (the total and one panel per reward) and prints the summary.

    python bench/bench_learning.py --work /tmp/learning --seeds 0 1 2
    python bench/bench_learning.py --work /tmp/learning --sft /tmp/learning/sft/final --seeds 0 1 2 3 4 -- \
        rl.optimizer.max_steps=12          # trailing recipe overrides apply to every RL run and control

Data: `--data DIR` (a `spatialiq gen` train folder) and `--traces DIR` (its plain traces), else both are built
under `--work`: `gen --parts warmup=8,rl=8,val=16` (`--parts`) at 112 px, Mitsuba, seed 0; the recipe reads the
128 warm-up and 128 RL views (`data.max_examples`), and the 256 `val` views are the held-out ones (`--heldout-data`
names another dataset's `val` part instead, e.g. one rendered with more val structures). Runs resume: a finished
RL phase is read as it is and sampling continues where it stopped, so seeds can run in separate processes on one
`--work` and a last run over all seeds writes the summary.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONTROL_LR = "1e-12"
PARTS = "warmup=8,rl=8,val=16"
"""The structures the benchmark renders: 8 warm-up (128 views), 8 RL (128 views) and 16 held-out (256 views)."""
RESOLUTION = 112
THRESHOLD = 0.10
"""Issue 26: every seed's lift must reach this."""

log = logging.getLogger("bench_learning")


def _cli(args: list[str]) -> None:
    from _heldout import cli

    cli(args)


def ensure_data(work: Path, data: Path | None, traces: Path | None, parts: str) -> tuple[Path, Path]:
    if data is not None and traces is not None:
        return data, traces
    data, traces = work / "data-train", work / "traces"
    _cli(["gen", "--out", str(data), "--parts", parts, "--split", "train", "--seed", "0",
          "--renderer", "mitsuba", "--resolution", str(RESOLUTION)])
    _cli(["traces", "--data", str(data), "--out", str(traces), "--kind", "plain"])
    return data, traces


def base_overrides(data: Path, traces: Path) -> list[str]:
    return [f"data.traces_dir={traces}", f"data.data_root={data}"]


def ensure_sft(work: Path, sft: Path | None, common: list[str], sft_steps: int | None = None) -> Path:
    """The recipe's SFT warm-up (or `sft_steps` of it), once."""
    if sft is not None:
        return sft
    from spatialiq_train.core.recipes import load_recipe
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.sft import sft_phase

    sft_keys = [f"sft.optimizer.max_steps={sft_steps}"] if sft_steps is not None else []
    recipe = load_recipe(REPO / "recipes" / "tiny_cpu.yaml", [*common, *sft_keys, "logging.save_steps=100000"])
    return run_phase(sft_phase(), recipe, work / "sft")


def run_one(out: Path, sft: Path, overrides: list[str]) -> list[dict[str, Any]]:
    """One RL phase from `sft` (resumes; a finished run is read as it is); its metrics rows."""
    from spatialiq_train.core.metrics import read_metrics
    from spatialiq_train.core.recipes import load_recipe
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.rl import rl_phase

    recipe = load_recipe(REPO / "recipes" / "tiny_cpu.yaml", overrides)
    t0 = time.perf_counter()
    run_phase(rl_phase(), recipe, out, model_path=str(sft))
    log.info("%s: %.0f s", out, time.perf_counter() - t0)
    return read_metrics(out / "metrics.jsonl")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--data", type=Path)
    p.add_argument("--traces", type=Path)
    p.add_argument("--sft", type=Path, help="An SFT checkpoint to start from (default: the recipe's SFT warm-up).")
    p.add_argument("--parts", default=PARTS, help=f"Train structures to render per part (default {PARTS}).")
    p.add_argument("--sft-steps", type=int, help="SFT warm-up steps (default: the recipe's).")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--heldout-data", type=Path, help="Dataset whose --heldout-split views are scored (default: "
                   "--data): structures no phase trains on.")
    p.add_argument("--heldout-split", default="val")
    p.add_argument("--heldout-k", type=int, default=4, help="Completions per held-out view.")
    p.add_argument("--no-heldout", action="store_true", help="Skip sampling the final checkpoints on held-out views.")
    p.add_argument("overrides", nargs="*", help="Recipe overrides for every RL run and control.")
    return p


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(1)
    from _heldout import evaluate

    from spatialiq_train.core.learning import REWARD_CURVES, reward_series, total_reward_series, write_curves_plot
    from spatialiq_train.core.recipes import load_recipe

    t_start = time.perf_counter()
    a.work.mkdir(parents=True, exist_ok=True)
    data, traces = ensure_data(a.work, a.data, a.traces, a.parts)
    common = base_overrides(data, traces)
    sft = ensure_sft(a.work, a.sft, common, a.sft_steps)
    sft_recipe = _sft_settings(sft)
    t_sft = time.perf_counter() - t_start
    recipe = load_recipe(REPO / "recipes" / "tiny_cpu.yaml", [*common, *a.overrides])
    weights = dict(recipe.reward.weights)
    labels = {"rl": "RL", "control": "control (lr 1e-12)"}
    curves: dict[str, dict[int, list[float]]] = {labels[t]: {} for t in labels}
    per_reward: dict[str, dict[str, dict[int, list[float]]]] = {n: {labels[t]: {} for t in labels}
                                                                 for n in REWARD_CURVES}
    held: dict[str, dict[int, dict[str, Any]]] = {t: {} for t in labels}
    applied: dict[str, list[str]] = {}
    phase_s: dict[str, float] = {}
    for seed in a.seeds:
        for tag in labels:
            extra = [f"rl.optimizer.learning_rate={CONTROL_LR}"] if tag == "control" else []
            overrides = [*common, *a.overrides, f"run.seed={seed}", *extra]
            applied[f"{tag}-seed{seed}"] = overrides
            out = a.work / f"seed{seed}" / tag
            t0 = time.perf_counter()
            rows = run_one(out, sft, overrides)
            phase_s[f"{tag}-seed{seed}"] = time.perf_counter() - t0
            curves[labels[tag]][seed] = total_reward_series(rows, weights)
            for name in REWARD_CURVES:
                per_reward[name][labels[tag]][seed] = reward_series(rows, name)
            if not a.no_heldout:
                held[tag][seed] = evaluate(out / "final", a.heldout_data or data, a.heldout_split,
                                           a.work / "heldout" / f"seed{seed}", tag, k=a.heldout_k, seed=seed,
                                           temperature=recipe.generation.temperature,
                                           max_new_tokens=recipe.generation.max_completion_length)
    summary, reward_summaries, heldout_summary, lines = _summaries(a, curves, per_reward, held, labels, data)
    wall = time.perf_counter() - t_start
    lines.append(f"wall time {wall:.0f} s (SFT warm-up and data {t_sft:.0f} s), {len(a.seeds)} seeds x 2 RL phases")
    print("\n".join(lines))
    write_curves_plot(a.work / "curves.png", curves, f"tiny_cpu RL vs lr-1e-12 control, {len(a.seeds)} seeds",
                      panels=per_reward)
    record = _record(a, recipe, sft, sft_recipe, applied, timing={"wall_s": wall, "sft_s": t_sft, "phase_s": phase_s},
                     results={"curves": curves, "reward_curves": per_reward, "summary": _asdict(summary),
                              "reward_summaries": {n: _asdict(s) for n, s in reward_summaries.items()},
                              "heldout": held, "heldout_summary": heldout_summary})
    (a.work / "learning.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    return 0 if summary.learned(THRESHOLD) else 1


def _summaries(a: argparse.Namespace, curves: dict[str, Any], per_reward: dict[str, Any], held: dict[str, Any],
               labels: dict[str, str], data: Path) -> tuple[Any, dict[str, Any], dict[str, Any] | None, list[str]]:
    """The total-reward summary, one per reward, the held-out lifts, and the printed lines."""
    from _heldout import HELDOUT_KEYS

    from spatialiq_train.core.learning import REWARD_CURVES, learning_summary, paired_lift, summary_lines

    summary = learning_summary(curves[labels["rl"]], curves[labels["control"]])
    reward_summaries = {n: learning_summary(per_reward[n][labels["rl"]], per_reward[n][labels["control"]])
                        for n in REWARD_CURVES}
    lines = summary_lines(summary, THRESHOLD)
    for name, s in reward_summaries.items():
        per_seed = ", ".join(f"{x.lift:+.3f}" for x in s.seeds)
        lines.append(f"{name}: RL {_mean(s, 'rl_mean'):.3f}, control {_mean(s, 'control_mean'):.3f}, lift "
                     f"{s.lift:+.3f} [{s.low:+.3f}, {s.high:+.3f}] (seeds {per_seed})")
    heldout_summary = None
    if not a.no_heldout:
        heldout_summary = {key: paired_lift({s: held["rl"][s][key] for s in a.seeds},
                                            {s: held["control"][s][key] for s in a.seeds}) for key in HELDOUT_KEYS}
        lines.append(f"held-out views ({a.heldout_split} of {a.heldout_data or data}, {a.heldout_k} samples each):")
        lines += [f"  {key}: RL {v['rl']:.3f}, control {v['control']:.3f}, lift {v['lift']:+.3f} "
                  f"[{v['low']:+.3f}, {v['high']:+.3f}]" for key, v in heldout_summary.items()]
    return summary, reward_summaries, heldout_summary, lines


def _record(a: argparse.Namespace, recipe: Any, sft: Path, sft_recipe: dict[str, Any], applied: dict[str, list[str]],
            timing: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """The results file: what ran (the SFT checkpoint's digest, every applied override, the RL settings) and what
    it measured."""
    from spatialiq_train.core.weights import checkpoint_digest

    record = {
        "engine": "trl", "recipe": "recipes/tiny_cpu.yaml", "seeds": a.seeds, "threshold": THRESHOLD,
        "sft": {"checkpoint_digest": checkpoint_digest(sft), "given": a.sft is not None, **sft_recipe},
        "data": {"parts": None if a.data else a.parts, "resolution": RESOLUTION if not a.data else None,
                 "heldout_split": a.heldout_split, "heldout_k": a.heldout_k,
                 "heldout_data_is_train_data": a.heldout_data is None},
        "overrides": a.overrides, "applied_overrides": applied,
        "rl": {"steps": recipe.rl.optimizer.max_steps, "learning_rate": recipe.rl.optimizer.learning_rate,
               "control_learning_rate": float(CONTROL_LR), "num_generations": recipe.rl.num_generations,
               "max_examples": recipe.data.max_examples,
               "prompts_per_step": recipe.rl.prompts_per_step,
               "max_completion_length": recipe.generation.max_completion_length,
               "temperature": recipe.generation.temperature},
        **timing, **results,
    }
    return record


def _sft_settings(sft: Path) -> dict[str, Any]:
    """The SFT settings the checkpoint's run recorded (its run folder's recipe.yaml, read as YAML: a recipe written
    by an older version may hold keys this one retires); empty when there is none."""
    import yaml

    path = sft.parent / "recipe.yaml"
    if not path.is_file():
        return {}
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    opt = (raw.get("sft") or {}).get("optimizer") or {}
    keys = ("max_steps", "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps",
            "global_batch_size", "lr_scheduler_type")
    return {"recipe": str(path), **{k: opt[k] for k in keys if k in opt},
            "max_examples": (raw.get("data") or {}).get("max_examples")}


def _mean(summary: Any, field: str) -> float:
    import numpy as np

    return float(np.mean([getattr(s, field) for s in summary.seeds]))


def _asdict(obj: Any) -> Any:
    import dataclasses

    return dataclasses.asdict(obj)


if __name__ == "__main__":
    raise SystemExit(main())
