"""A NeMo-RL v0.7.0 checkpoint -> a Hugging Face checkpoint ``spatialiq eval sample`` and ``spatialiq release`` load.

NeMo-RL writes ``<checkpoint_dir>/step_N/`` with ``config.yaml`` (the run's whole config), ``training_info.json``,
``policy/weights/``, ``policy/optimizer/`` and ``policy/tokenizer/`` (for a VLM, the processor). Under DTensor v2
(AutoModel) the weights are, by ``checkpointing.model_save_format``:

* ``safetensors`` (default): shards under ``policy/weights/model/`` that only AutoModel reads, plus, with
  ``checkpointing.save_consolidated: true``, a Hugging Face copy under ``policy/weights/model/consolidated/``;
* ``torch_save``: a torch DCP checkpoint (``*.distcp`` and ``.metadata``), converted here with NeMo-RL's own
  ``nemo_rl.utils.native_checkpoint.convert_dcp_to_hf`` (imported only then, inside the container), whose
  ``pytorch_model.bin`` is rewritten as safetensors.

Either way the output gets the processor with the recipe's pixel budget and the chat template
(:func:`spatialiq_train.hf_export.write_processor`; NeMo-RL's converter writes a tokenizer only), the
recipe as ``training_recipe.yaml``, the data record the driver wrote beside the checkpoints (``data.json``,
`spatialiq_train.core.run_folder`: what ``spatialiq release`` names as trained on), and is checked before it is
renamed into place: each weight file's size and sha256 against its source, every tensor of the index present in the
file it names, the processor's budget.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any, Literal

from spatialiq_train.core.errors import UserError
from spatialiq_train.nemo.checkpoints import latest_step, read_step_config

log = logging.getLogger(__name__)

WeightsKind = Literal["hf", "dcp"]
RECIPE_FILE = "training_recipe.yaml"
_HF_MARKERS = ("model.safetensors", "model.safetensors.index.json")


class ConvertError(UserError):
    """A checkpoint that cannot be converted, or an output that fails its checks; the message names the file."""


def pixel_budget(step_config: dict[str, Any], recipe: Any) -> tuple[int, int]:
    """The pixel budget the run trained with: its plan's (the config's ``spatialiq.plan``), else the model the
    recipe resolves to (a config written before plans travelled in it)."""
    plan = (step_config.get("spatialiq") or {}).get("plan")
    if plan:
        from spatialiq_train.core.plan import from_record

        model = from_record(plan).model
    else:
        from spatialiq_train.core.resolve import plan_model

        model = plan_model(recipe, "sft")
    return model.min_pixels, model.max_pixels


def find_step(checkpoint: Path) -> Path:
    """``checkpoint`` itself when it is a ``step_N`` folder, else the newest ``step_N`` inside it."""
    if (checkpoint / "policy" / "weights").is_dir():
        return checkpoint
    step = latest_step(checkpoint)
    if step is None or not (step / "policy" / "weights").is_dir():
        raise ConvertError(f"--checkpoint {checkpoint}: neither a NeMo-RL step folder (step_N/policy/weights) nor "
                           "a checkpoint_dir holding one")
    log.info("converting the newest checkpoint, %s", step)
    return step


def _is_hf_dir(folder: Path) -> bool:
    return folder.is_dir() and any((folder / name).is_file() for name in _HF_MARKERS)


def locate_weights(step: Path) -> tuple[WeightsKind, Path]:
    """Where the step's policy weights are and in which form: a Hugging Face folder, or torch DCP."""
    weights = step / "policy" / "weights"
    for candidate in (weights / "model" / "consolidated", weights / "consolidated", weights / "model", weights):
        if _is_hf_dir(candidate):
            return "hf", candidate
    if any(weights.rglob("*.distcp")):
        return "dcp", weights
    if any(weights.rglob("*.safetensors")):
        raise ConvertError(f"{weights}: only AutoModel's sharded safetensors, no Hugging Face copy; train with "
                           "checkpointing.save_consolidated: true (or model_save_format: torch_save to convert "
                           "from DCP)")
    raise ConvertError(f"{weights}: no weights found (no *.safetensors, no *.distcp)")


def read_run_config(step: Path) -> dict[str, Any]:
    """The step's saved run config, which must have the ``policy`` section the conversion reads."""
    data = read_step_config(step)
    if "policy" not in data:
        raise ConvertError(f"{step / 'config.yaml'}: not a NeMo-RL run config (no 'policy' section)")
    return data


def verify_weights(src: Path, dst: Path) -> int:
    """Each copied weight file equal to its source (skipped when ``src`` is ``dst``: weights written here); the
    index naming exactly the tensors the files hold."""
    from safetensors import safe_open

    from spatialiq_train.core.io import sha256_file

    index = json.loads((dst / "model.safetensors.index.json").read_text(encoding="utf-8"))
    weight_map: dict[str, str] = index["weight_map"]
    held: dict[str, set[str]] = {}
    for name in sorted(set(weight_map.values())):
        out = dst / name
        if not out.is_file():
            raise ConvertError(f"{out}: named by the index but missing")
        if src != dst and (src / name).is_file() and (out.stat().st_size != (src / name).stat().st_size
                                                      or sha256_file(out) != sha256_file(src / name)):
            raise ConvertError(f"{out}: differs from its source {src / name}")
        with safe_open(str(out), framework="np") as fh:
            held[name] = set(fh.keys())
    missing = [t for t, f in weight_map.items() if t not in held[f]]
    if missing:
        raise ConvertError(f"{dst}: {len(missing)} tensors of the index are not in their files (e.g. {missing[0]})")
    return len(weight_map)


def _copy_hf(src: Path, staging: Path, step_config: dict[str, Any]) -> None:
    from spatialiq_train.hf_export import copy_weights

    copy_weights(src, staging)
    n = verify_weights(src, staging)
    log.info("copied %d tensors from %s", n, src)
    for name in ("config.json", "generation_config.json"):
        if (src / name).is_file():
            shutil.copy2(src / name, staging / name)
    if not (staging / "config.json").is_file():
        _config_from_model_name(step_config, staging)


def _config_from_model_name(step_config: dict[str, Any], staging: Path) -> None:
    from transformers import AutoConfig

    name = step_config["policy"]["model_name"]
    AutoConfig.from_pretrained(name, **(step_config["policy"].get("hf_overrides") or {})).save_pretrained(staging)


def _convert_dcp(weights: Path, step: Path, step_config: dict[str, Any], staging: Path) -> None:
    """NeMo-RL's DCP converter into a scratch folder, then the model saved again as safetensors."""
    try:
        from nemo_rl.utils.native_checkpoint import convert_dcp_to_hf
    except ImportError as exc:
        from spatialiq_train.nemo.runtime import CONTAINER

        raise ConvertError(f"{weights}: a torch DCP checkpoint; converting it needs NeMo-RL ({exc}): run "
                           f"`spatialiq nemo convert` inside {CONTAINER}") from None
    from transformers import AutoModelForImageTextToText

    policy = step_config["policy"]
    tokenizer = step / "policy" / "tokenizer"
    scratch = staging.with_name(staging.name + ".dcp")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        convert_dcp_to_hf(dcp_ckpt_path=str(weights), hf_ckpt_path=str(scratch),
                          model_name_or_path=policy["model_name"],
                          tokenizer_name_or_path=str(tokenizer) if tokenizer.is_dir() else policy["tokenizer"]["name"],
                          hf_overrides=policy.get("hf_overrides") or {})
        model = AutoModelForImageTextToText.from_pretrained(str(scratch))
        model.save_pretrained(str(staging), safe_serialization=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not (staging / "model.safetensors.index.json").is_file():
        from spatialiq_train.hf_export import write_single_index

        write_single_index(staging / "model.safetensors")
    verify_weights(staging, staging)


def processor_source(step: Path, step_config: dict[str, Any]) -> str:
    """Where the processor comes from: the step's ``policy/tokenizer`` (NeMo-RL saves the processor there),
    else the run's ``policy.tokenizer.name``."""
    saved = step / "policy" / "tokenizer"
    if any((saved / f).is_file() for f in ("preprocessor_config.json", "processor_config.json")):
        return str(saved)
    return str((step_config["policy"].get("tokenizer") or {}).get("name") or step_config["policy"]["model_name"])


def step_recipe(step_config: dict[str, Any], step: Path) -> tuple[str, list[str]]:
    """(recipe, overrides) the run was generated from: the ``spatialiq`` section NeMo-RL saved with the step."""
    section = step_config.get("spatialiq")
    if not isinstance(section, dict) or not section.get("recipe"):
        raise ConvertError(f"{step / 'config.yaml'}: no spatialiq.recipe (a run not started by `spatialiq nemo`); "
                           "pass --recipe")
    overrides = section.get("recipe_overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConvertError(f"{step / 'config.yaml'}: spatialiq.recipe_overrides must be a list of KEY=VALUE strings")
    return str(section["recipe"]), overrides


def convert(checkpoint: str | Path, out: str | Path, recipe: str | Path | None = None) -> Path:
    """Convert, check and move into place; returns ``out``. An existing ``out`` is refused.

    ``recipe`` defaults to the one the run was generated from (the step's saved ``spatialiq`` section, with its
    overrides); a given ``recipe`` is taken as it is.
    """
    from spatialiq_train.core.io import atomic_write_text
    from spatialiq_train.core.processor import budget_of
    from spatialiq_train.core.recipes import recipe_to_yaml
    from spatialiq_train.core.run_folder import DATA_RECORD, read_data_record, write_data_record
    from spatialiq_train.hf_export import write_processor
    from spatialiq_train.nemo.settings import load_recipe_checked

    out = Path(out)
    if out.exists():
        raise ConvertError(f"--out {out}: already exists; choose a new folder")
    step = find_step(Path(checkpoint))
    step_config = read_run_config(step)
    if recipe is None:
        name, overrides = step_recipe(step_config, step)
        rec = load_recipe_checked(name, overrides, what=f"{step / 'config.yaml'}: spatialiq.recipe")
    else:
        rec = load_recipe_checked(recipe, what="--recipe")
    kind, weights = locate_weights(step)
    data = read_data_record(step.parent)  # the driver's data.json: what `release` names as trained on
    if data is None:
        log.warning("%s: no %s (a run started before the driver recorded its data): the release card of %s will "
                    "not name the data it trained on", step.parent, DATA_RECORD, out)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:  # a refused or failed conversion leaves no half-written folder
        if kind == "hf":
            _copy_hf(weights, staging, step_config)
        else:
            _convert_dcp(weights, step, step_config, staging)
        budget = pixel_budget(step_config, rec)
        processor = write_processor(Path(processor_source(step, step_config)), staging, *budget)
        if budget_of(processor) != budget:
            raise ConvertError(f"{staging}: the saved processor's budget {budget_of(processor)} is not the recipe's")
        atomic_write_text(staging / RECIPE_FILE, recipe_to_yaml(rec))
        write_data_record(staging, data)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    staging.rename(out)
    log.info("%s (%s, %s) -> %s", step, kind, weights, out)
    return out
