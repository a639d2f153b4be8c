"""Every shipped recipe rehearsed on the CPU: the trainers built exactly as a GPU run builds them (the `spatialiq`
CLI and its phase runner), with only the model made tiny, two optimizer steps of each phase with validation, early
stopping, saving and resuming as the recipe sets them.

One test id per recipe and phase (`test_rehearse_sft_phase[dapo_tight_7b]`, `test_rehearse_rl_phase[...]`); the
recipes are found on disk, so a new recipe is rehearsed without editing this file.

What the rehearsal changes, and why it does not change which code runs (each is a recipe override, `SHORTENED`):
- `model.tiny=true`: the offline tiny Qwen2.5-VL (same architecture, config and processor classes) instead of the
  7B/32B weights, which this machine cannot hold.
- the data: one small generated dataset (`spatialiq gen --renderer none --parts val=1,warmup=2,rl=3`, a 56x56
  random image per view instead of a render) turned into real traces by `spatialiq traces --kind cot|plain`, so
  every split a recipe names exists and the prompts are the benchmark's; a paper-folding recipe (its reward names
  a folding reward) gets 40 `spatialiq fold gen` tasks and their `spatialiq fold traces` instead.
- step counts: `*.optimizer.max_steps` 1, then 2 with `--extend` (the resume from checkpoint-1).
- periods: `*.validation.every_steps=1` where the recipe validates (never where it does not), `logging.save_steps=1`.
- sizes: `*.validation.max_samples=2` validation rows, `generation.max_completion_length=16` tokens; where the
  overlong penalty's window ends at that budget (`rl.overlong.max_response_length` unset), its
  `rl.overlong.buffer_length` keeps the same share of it (256 of 1024 -> 4 of 16), so the penalty still fires.
- the global batch per step (`BATCH`), where the recipe schema names one: 2 SFT sequences, 1 prompt's group of
  rollouts.
- `*.optimizer.gradient_checkpointing=true` where the recipe leaves it unset: unset means "on for GPU runs", so
  true is what a GPU run runs (a recipe that sets it keeps its value).

What the CPU cannot run, named here and not silently dropped (`NOT_ON_CPU`): bf16 (`model.dtype: auto` resolves to
float32 without CUDA), colocated vLLM rollouts (`vllm.*`: generation falls back to transformers' `generate`, as
`train.rl.vllm_usable` decides), the DeepSpeed ZeRO-3 launcher (`recipes/accelerate/zero3_8gpu.yaml`: one process
here; the engine stage tests ZeRO-3 on two CPU ranks) and W&B logging (`logging.report_to: wandb`: not installed
here, so `train.logging.report_to` leaves it out; TensorBoard runs). No shipped recipe enables LoRA
(`model.lora.enabled`), so none is rehearsed with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _train_support import one_thread
from typer.testing import CliRunner

from spatialiq_train.core.metrics import read_metrics
from spatialiq_train.core.recipes import load_recipe

one_thread()

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted([*(REPO / "recipes").glob("*.yaml"), *(REPO / "recipes" / "experiments").glob("*.yaml")])
NOT_ON_CPU = ("bf16 (model.dtype auto -> float32 on CPU)", "vllm colocate (transformers generate on CPU)",
              "DeepSpeed ZeRO-3 launcher (one process)", "wandb (not installed)")
"""The recipe settings a CPU rehearsal cannot run (the module docstring says how each falls back)."""


def _has_rl_phase(path: Path) -> bool:
    """A recipe trains RL when it has an `rl` section (SFT-only recipes have none)."""
    return "rl" in yaml.safe_load(path.read_text(encoding="utf-8"))


RL_RECIPES = [p for p in RECIPES if _has_rl_phase(p)]
COMPLETION = 16
"""Rollout length of the rehearsal (generation.max_completion_length)."""


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def _invoke(*args: str) -> None:
    from spatialiq_train.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, f"spatialiq {' '.join(map(str, args))}\n{res.output[-4000:]}\n{res.exception!r}"


@pytest.fixture(scope="session")
def rehearsal_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One small dataset with every split a recipe names (train = warmup + rl, val), and its CoT and plain traces,
    made by the real `gen` and `traces` commands; a 56x56 random image stands in for each render."""
    from PIL import Image

    root = tmp_path_factory.mktemp("rehearsal")
    data = root / "data"
    _invoke("gen", "--out", data, "--parts", "val=1,warmup=2,rl=3", "--seed", "0", "--split", "train",
            "--renderer", "none", "--quiet")
    rng = np.random.default_rng(0)
    for gt in sorted(data.rglob("gt.json")):
        Image.fromarray((rng.random((56, 56, 3)) * 255).astype("uint8")).save(gt.parent / "view.png")
    out = {"data": data}
    for kind in ("cot", "plain"):
        _invoke("traces", "--data", data, "--out", root / "traces" / kind, "--kind", kind)
        out[kind] = root / "traces" / kind
        for split in ("train", "val", "warmup", "rl"):
            assert (out[kind] / f"{split}.jsonl").stat().st_size > 0, (kind, split)
    # the paper-folding family's recipes rehearse on folding tasks (`fold gen`, `fold traces`; docs/folding.md)
    folding = root / "folding"
    _invoke("fold", "gen", "--out", folding, "--count", "40", "--groups", "one_step,two_step", "--seed", "0")
    out["folding"] = folding
    for kind in ("cot", "plain"):
        _invoke("fold", "traces", "--data", folding, "--out", root / "folding-traces" / kind, "--kind", kind)
        out[f"folding-{kind}"] = root / "folding-traces" / kind
    return out


def _is_folding(raw: dict[str, Any]) -> bool:
    """A recipe of the paper-folding family: its reward names a folding reward."""
    return bool({"hole_partial", "hole_exact", "folding"} & set((raw.get("reward") or {}).get("weights") or {}))


def _recipe_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def shortened(path: Path, data: dict[str, Path], phases: tuple[str, ...]) -> list[str]:
    """The rehearsal's overrides of recipe `path` (module docstring): the tiny model, the rehearsal data, short
    periods and lengths; step budgets are added by the caller."""
    raw = _recipe_yaml(path)
    kind = "plain" if Path(raw.get("data", {}).get("traces_dir", "cot")).name == "plain" else "cot"
    family = "folding-" if _is_folding(raw) else ""
    root = data["folding"] if family else data["data"]
    out = ["model.tiny=true", f"data.traces_dir={data[family + kind]}", f"data.data_root={root}",
           "logging.save_steps=1"]
    recipe = load_recipe(path)
    if _has_rl_phase(path):  # rollouts: 16 tokens, the overlong window scaled with them where it lies inside
        out.append(f"generation.max_completion_length={COMPLETION}")
        over = recipe.rl.overlong
        if over.max_response_length is None:  # the window ends at the budget: keep its share of it
            share = over.buffer_length / recipe.generation.max_completion_length
            out.append(f"rl.overlong.buffer_length={max(1, round(share * COMPLETION))}")
    for phase in phases:
        section = getattr(recipe, phase)
        if section.validation.every_steps is not None:
            out += [f"{phase}.validation.every_steps=1", f"{phase}.validation.max_samples=2"]
        if section.optimizer.gradient_checkpointing is None:
            out.append(f"{phase}.optimizer.gradient_checkpointing=true")
    for phase in phases:
        out += _batch_shortening(path, out, phase)
    return out


BATCH = {"sft": ("optimizer.global_batch_size", 2), "rl": ("prompts_per_step", 1)}
"""The global batch per optimizer step, shortened (released: 16 SFT sequences; 8 prompts x rl.num_generations
completions), where the recipe schema has these keys: the per-device batch and accumulation are still derived from
it by the same code, on fewer rows."""


def _batch_shortening(path: Path, overrides: list[str], phase: str) -> list[str]:
    """`[PHASE.KEY=VALUE]` from BATCH when the recipe names a larger global batch and the shortened recipe still
    validates and builds its TRL config; else [] (the recipe's own batch runs, only slower)."""
    import tempfile

    from spatialiq_train.core.recipes import RecipeError

    key, value = BATCH[phase]
    current: Any = getattr(load_recipe(path, overrides), phase)
    for part in key.split("."):
        current = getattr(current, part, None)
    if not isinstance(current, int) or current <= value:
        return []
    candidate = [f"{phase}.{key}={value}"]
    try:
        recipe = load_recipe(path, [*overrides, *candidate])
        with tempfile.TemporaryDirectory() as tmp:
            if phase == "sft":
                from spatialiq_train.train.sft import sft_config

                sft_config(recipe, tmp)
            else:
                from spatialiq_train.train.rl import grpo_config

                grpo_config(recipe, tmp, [1.0])
    except (RecipeError, ValueError):
        return []
    return candidate


def _train_rows(folder: Path) -> list[dict[str, Any]]:
    return [r for r in read_metrics(folder / "metrics.jsonl") if "train/loss" in r]


def _eval_steps(folder: Path) -> list[int]:
    return [r["step"] for r in read_metrics(folder / "metrics.jsonl") if "eval/loss" in r]


def _check_phase(folder: Path, final: Path, validates: bool) -> None:
    """Two steps, one row each (the resumed step 2 is not a repeat of step 1), a validation at each when the recipe
    validates, both checkpoints, the completion record and safetensors weights of the exported model."""
    rows = _train_rows(folder)
    assert [r["step"] for r in rows] == [1, 2], rows
    assert all(np.isfinite(r["train/loss"]) for r in rows), rows
    assert _eval_steps(folder) == ([1, 2] if validates else []), read_metrics(folder / "metrics.jsonl")
    for step in (1, 2):
        state = json.loads((folder / f"checkpoint-{step}" / "trainer_state.json").read_text())
        assert state["global_step"] == step
    assert json.loads((folder / "complete.json").read_text())["global_step"] == 2
    assert (final / "model.safetensors").is_file() and not list(final.glob("*.bin"))


_SFT_RUNS: dict[str, Path] = {}


def _sft_rehearsal(path: Path, data: dict[str, Path], tmp_root: Path) -> Path:
    """`spatialiq train sft` for one step, then `--extend` to two (resuming from checkpoint-1); returns the run
    folder (its sft/ is the phase's output, so `run dapo-tight --out` on it goes on to RL). Once per recipe."""
    if path.stem not in _SFT_RUNS:
        run = tmp_root / path.stem
        common = [*shortened(path, data, ("sft",))]
        _invoke("train", "sft", "--recipe", path, "--out", run / "sft", *common, "sft.optimizer.max_steps=1")
        _invoke("train", "sft", "--recipe", path, "--out", run / "sft", "--extend", *common,
                "sft.optimizer.max_steps=2")
        _SFT_RUNS[path.stem] = run
    return _SFT_RUNS[path.stem]


@pytest.fixture(scope="session")
def rehearsal_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rehearsal-runs")


@pytest.mark.slow
@pytest.mark.parametrize("path", RECIPES, ids=_ids(RECIPES))
def test_rehearse_sft_phase(path: Path, rehearsal_data: dict[str, Path], rehearsal_runs: Path) -> None:
    run = _sft_rehearsal(path, rehearsal_data, rehearsal_runs)
    recipe = load_recipe(path)
    _check_phase(run / "sft", run / "sft" / "final", recipe.sft.validation.every_steps is not None)
    # the recorded recipe is the shipped one with only the rehearsal's overrides: nothing else was changed
    recorded = yaml.safe_load((run / "sft" / "recipe.yaml").read_text())
    assert recorded["sft"]["optimizer"]["learning_rate"] == recipe.sft.optimizer.learning_rate
    assert recorded["model"]["tiny"] is True
    if recipe.sft.optimizer.gradient_checkpointing is None:
        assert recorded["sft"]["optimizer"]["gradient_checkpointing"] is True


@pytest.mark.slow
@pytest.mark.parametrize("path", RL_RECIPES, ids=_ids(RL_RECIPES))
def test_rehearse_rl_phase(path: Path, rehearsal_data: dict[str, Path], rehearsal_runs: Path) -> None:
    """`spatialiq run dapo-tight` on the run whose SFT phase the SFT rehearsal finished (the warm-up is skipped, as
    on a rerun), RL for one step, then `--extend` to two; the final model loads with transformers."""
    run = _sft_rehearsal(path, rehearsal_data, rehearsal_runs)
    common = [*shortened(path, rehearsal_data, ("sft", "rl")), "sft.optimizer.max_steps=2"]
    _invoke("run", "dapo-tight", "--recipe", path, "--out", run, *common, "rl.optimizer.max_steps=1")
    _invoke("run", "dapo-tight", "--recipe", path, "--out", run, "--extend", *common, "rl.optimizer.max_steps=2")
    recipe = load_recipe(path)
    _check_phase(run / "rl", run / "final", recipe.rl.validation.every_steps is not None)
    rows = _train_rows(run / "rl")
    assert all("reward/total/mean" in r and "dynamic_sampling/kept_groups" in r for r in rows), rows

    from transformers import AutoModelForImageTextToText

    from spatialiq_train.core.processor import load_processor

    model = AutoModelForImageTextToText.from_pretrained(run / "final")
    im_end = load_processor(run / "final").tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in _eos_ids(model.config)


def _eos_ids(config: Any) -> set[int]:
    from spatialiq_train.hf_export import eos_token_ids

    return set(eos_token_ids(config))
