"""The two-phase DAPO-tight run: SFT-CoT warm-up on the `warmup` partition, then GRPO/DAPO on the disjoint `rl`
partition, under one run directory:

    DIR/base/        the tiny model when the recipe builds one (else the hub id / path in model.name_or_path)
    DIR/sft/         SFT checkpoints, metrics.jsonl, final/ (the SFT-CoT initialisation and KL reference)
    DIR/rl/          RL checkpoints, metrics.jsonl
    DIR/final/       the trained policy (safetensors), loadable with AutoModelForImageTextToText
    DIR/recipe.yaml  the recipe as run (overrides applied)

Rerunning the same command resumes: a finished SFT phase is skipped and each phase continues from its newest
checkpoint. With `rl.init_from` set, that checkpoint is the SFT-CoT initialisation and the warm-up is skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from spatialiq_train.io import atomic_write_text
from spatialiq_train.recipes import Recipe, RecipeError, recipe_to_yaml
from spatialiq_train.train import common

log = logging.getLogger(__name__)


def check_disjoint(traces_dir: str | Path, split_a: str, split_b: str) -> None:
    """Raise if any structure appears in both trace splits (the warm-up and RL data must not share one)."""
    from spatialiq_train.train.data import read_traces, split_file

    ids_a = {r.get("structure_id") for r in read_traces(split_file(traces_dir, split_a))} - {None}
    ids_b = {r.get("structure_id") for r in read_traces(split_file(traces_dir, split_b))} - {None}
    shared = sorted(ids_a & ids_b)
    if shared:
        raise ValueError(
            f"{traces_dir}: splits {split_a!r} and {split_b!r} share {len(shared)} structures (e.g. {shared[0]}); "
            "DAPO-tight needs disjoint partitions (data_gen.splits.partition_of)"
        )


def _write_run_recipe(recipe: Recipe, out: Path) -> None:
    """Keep the recipe beside the run; a rerun with different settings is refused rather than mixed in."""
    path = out / "recipe.yaml"
    text = recipe_to_yaml(recipe)
    if path.is_file() and path.read_text(encoding="utf-8") != text:
        raise RecipeError(f"{path} holds a different recipe; resume with the same recipe or pick a new --out")
    atomic_write_text(path, text)


def run_dapo_tight(
    recipe: Recipe,
    out_dir: str | Path,
    sft_dataset: Any = None,
    rl_dataset: Any = None,
    rl_rewards: Any = None,
    sft_callbacks: list[Any] | None = None,
    rl_callbacks: list[Any] | None = None,
) -> Path:
    """Run (or resume) both phases; returns DIR/final. Datasets default to the recipe's trace splits."""
    from spatialiq_train.train.rl import run_rl
    from spatialiq_train.train.sft import run_sft

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_run_recipe(recipe, out)
    d = recipe.data
    if sft_dataset is None and rl_dataset is None and d.sft_split != d.rl_split:
        check_disjoint(d.traces_dir, d.sft_split, d.rl_split)
    sft_final = out / "sft" / "final"
    if recipe.rl.init_from:
        log.info("rl.init_from is set (%s): using it as the SFT-CoT initialisation, no warm-up", recipe.rl.init_from)
    elif (sft_final / "config.json").is_file():
        log.info("SFT warm-up already finished (%s); skipping to RL", sft_final)
    else:
        base = common.ensure_base_model(recipe, out)
        run_sft(recipe, out / "sft", model_path=base, train_dataset=sft_dataset, callbacks=sft_callbacks)
    init = recipe.rl.init_from or str(sft_final)
    return run_rl(recipe, out / "rl", model_path=init, train_dataset=rl_dataset, final_dir=out / "final",
                  rewards=rl_rewards, callbacks=rl_callbacks)
