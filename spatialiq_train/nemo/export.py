"""`spatialiq recipes nemo-rl`: a recipe -> the complete NeMo-RL YAML, key-checked, written atomically."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from spatialiq_train.core.io import atomic_write_text
from spatialiq_train.core.resolve import device_not_chosen, plan_model
from spatialiq_train.nemo.config import Built, data_parallel, grpo_config, parallelism, sft_config
from spatialiq_train.nemo.contract import check_held_out_plan, plan_data
from spatialiq_train.nemo.keys import NemoConfigError, check_config, load_key_set
from spatialiq_train.nemo.paper import deviations
from spatialiq_train.nemo.recipe_values import nemo_hardware, nemo_plan
from spatialiq_train.nemo.settings import DriverSettings, Phase, load_recipe_checked, recipe_reference


def build(recipe: str | Path, phase: Phase, nodes: int, gpus_per_node: int, *, overrides: Sequence[str] = (),
          run_dir: str | None = None) -> Built:
    """The checked config for one phase of `recipe` (a shipped name or a file) with dotted `overrides`.

    The phase's plan is resolved once for this cluster (`recipe_values.nemo_plan`: ``nodes`` x ``gpus_per_node``
    GPUs over the policy's tensor-parallel size share the global batch) and mapped to the config; the config's
    `spatialiq` section holds the plan (what `spatialiq nemo rl|sft` trains with) and names the recipe and its
    overrides (what the resume guard compares). Bad input raises a UserError naming the recipe and what to change.
    """
    if phase not in ("rl", "sft"):
        raise NemoConfigError(f"--phase {phase!r}: expected rl or sft")
    if nodes < 1 or gpus_per_node < 1:
        raise NemoConfigError(f"--nodes {nodes} --gpus-per-node {gpus_per_node}: both must be at least 1")
    source = str(recipe)
    settings = DriverSettings(recipe=recipe_reference(recipe), recipe_overrides=list(overrides), phase=phase)
    rec = load_recipe_checked(recipe, settings.recipe_overrides, what="recipe")
    par = parallelism(plan_model(rec, phase).name_or_path, gpus_per_node)  # the cluster's layout, from the model
    dp = data_parallel(nodes, gpus_per_node, par.policy_tp)
    try:
        plan = nemo_plan(rec, phase, dp, par.activation_checkpointing)
    except ValueError as exc:
        raise NemoConfigError(f"{source}: --nodes {nodes} x --gpus-per-node {gpus_per_node} gives {dp} "
                              f"data-parallel policy ranks (tensor parallel {par.policy_tp}): {exc}") from None
    try:
        built = (grpo_config if phase == "rl" else sft_config)(plan, settings, nodes, gpus_per_node, run_dir)
    except ValueError as exc:
        raise NemoConfigError(f"{source}: {exc}") from None
    check_config(built.config, built.algorithm, source=f"NeMo-RL config generated from {source}")
    if unused := device_not_chosen(rec, nemo_hardware(dp, par.activation_checkpointing), "NeMo-RL"):
        built.notes.append(unused)
    note = check_held_out_plan(plan_data(plan, settings.recipe), files_required=False)  # as the driver
    if note:
        built.notes.append(note)
    if phase == "rl":
        built.notes.extend(f"differs from the paper's released config: {key} = {got!r} (paper {paper!r})"
                           for key, got, paper in deviations(built.config))
    return built


def to_yaml(built: Built, source: str) -> str:
    ks = load_key_set(built.algorithm)
    head = [f"# NeMo-RL {ks.tag} ({(ks.commit or '?')[:12]}) {built.algorithm} config generated from {source}",
            "# by `spatialiq recipes nemo-rl`; checked against spatialiq_train/nemo/nemo_rl_keys.json.",
            "# Regenerate rather than edit: NeMo-RL ignores misspelled keys in YAML silently."]
    head += [f"# note: {n}" for n in built.notes]
    return "\n".join(head) + "\n" + yaml.safe_dump(built.config, sort_keys=False, default_flow_style=False)


def write_nemo_config(recipe: str | Path, out: Path, *, phase: Phase, nodes: int, gpus_per_node: int,
                      overrides: Sequence[str] = (), run_dir: str | None = None) -> Built:
    """Build, check and write `out` (temporary name, then rename)."""
    if out.is_dir():
        raise NemoConfigError(f"--out {out}: a directory; give the YAML file to write (e.g. {out / 'config.yaml'})")
    built = build(recipe, phase, nodes, gpus_per_node, overrides=overrides, run_dir=run_dir)
    atomic_write_text(out, to_yaml(built, str(recipe)))
    return built
