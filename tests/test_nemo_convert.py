"""NeMo-RL checkpoint -> Hugging Face checkpoint: the HF-safetensors path with the tiny model, loaded the way
`spatialiq eval sample` loads a model; layout detection; the DCP path needs NeMo-RL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from _train_support import one_thread, tiny_model_dir

from spatialiq_train.core.errors import UserError
from spatialiq_train.nemo.convert import ConvertError, convert, find_step, locate_weights
from spatialiq_train.nemo.runtime import nemo_available


def _step(root: Path, n: int = 3, consolidated: bool = True, processor: bool = True) -> Path:
    """A step folder laid out as NeMo-RL v0.7.0 (DTensor v2, safetensors, save_consolidated) writes it."""
    tiny = Path(tiny_model_dir())
    step = root / f"step_{n}"
    model = step / "policy" / "weights" / "model"
    model.mkdir(parents=True)
    (model / ".metadata").write_bytes(b"dcp-metadata")
    shutil.copy2(tiny / "model.safetensors", model / "shard-00001-model-00001-of-00001.safetensors")
    if consolidated:
        shutil.copytree(tiny, model / "consolidated",
                        ignore=shutil.ignore_patterns("*token*", "*processor*", "chat_template*"))
    if processor:
        shutil.copytree(tiny, step / "policy" / "tokenizer", ignore=shutil.ignore_patterns("*.safetensors*"))
    (step / "config.yaml").write_text(yaml.safe_dump({
        "policy": {"model_name": str(tiny), "tokenizer": {"name": str(tiny)}},
        "spatialiq": {"recipe": "tiny_cpu", "phase": "rl"}}), encoding="utf-8")
    (step / "training_info.json").write_text(json.dumps({"step": n}), encoding="utf-8")
    return step


def test_hf_safetensors_checkpoint_converts_and_loads_like_eval_sample(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForImageTextToText

    from eval.engines import TransformersEngine
    from spatialiq_train.core.processor import budget_of

    one_thread()
    ckpt = tmp_path / "ckpt"
    _step(ckpt, 2)
    step = _step(ckpt, 10)
    out = convert(ckpt, tmp_path / "hf", "tiny_cpu")  # the checkpoint_dir: its newest step is converted

    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "model.safetensors.index.json", "config.json", "preprocessor_config.json",
            "chat_template.jinja", "training_recipe.yaml"} <= names
    assert not (tmp_path / "hf.partial").exists()
    engine = TransformersEngine(out, device="cpu", dtype="float32")  # what `spatialiq eval sample` constructs
    assert budget_of(engine.processor) == (3136, 12544)  # the recipe's budget, not the saved 200,704
    assert engine.processor.chat_template
    reference = AutoModelForImageTextToText.from_pretrained(
        str(step / "policy" / "weights" / "model" / "consolidated"), dtype=torch.float32).state_dict()
    state = engine.model.state_dict()
    assert sorted(state) == sorted(reference) and len(state) > 10
    assert all(torch.equal(state[k], reference[k]) for k in state)


def test_layouts_are_told_apart(tmp_path: Path) -> None:
    step = _step(tmp_path / "a", consolidated=True)
    assert locate_weights(step) == ("hf", step / "policy" / "weights" / "model" / "consolidated")
    assert find_step(step) == step
    sharded = _step(tmp_path / "b", consolidated=False)
    with pytest.raises(ConvertError, match="save_consolidated: true"):
        locate_weights(sharded)
    dcp = tmp_path / "c" / "step_1" / "policy" / "weights" / "model"
    dcp.mkdir(parents=True)
    (dcp / "__0_0.distcp").write_bytes(b"x")
    assert locate_weights(dcp.parents[2]) == ("dcp", dcp.parent)
    with pytest.raises(ConvertError, match="neither a NeMo-RL step folder"):
        find_step(tmp_path / "empty")


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    step = _step(tmp_path / "ckpt")
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConvertError, match="already exists"):
        convert(step, tmp_path / "taken", "tiny_cpu")
    with pytest.raises(UserError, match="--recipe: recipe file nope does not exist"):
        convert(step, tmp_path / "out", "nope")
    if not nemo_available():
        dcp = tmp_path / "d" / "step_1"
        (dcp / "policy" / "weights" / "model").mkdir(parents=True)
        (dcp / "policy" / "weights" / "model" / "__0_0.distcp").write_bytes(b"x")
        shutil.copy2(step / "config.yaml", dcp / "config.yaml")
        with pytest.raises(ConvertError, match="inside nvcr.io/nvidia/nemo-rl:v0.7.0"):
            convert(dcp, tmp_path / "out", "tiny_cpu")
    assert not (tmp_path / "out").exists()


def test_a_converted_checkpoint_releases(tmp_path: Path) -> None:
    """`spatialiq release --run` takes a converted NeMo-RL checkpoint as it takes a TRL run folder."""
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    one_thread()
    out = convert(_step(tmp_path / "ckpt", 4), tmp_path / "hf", "tiny_cpu")
    res = CliRunner().invoke(app, ["release", "--run", str(out), "--out", str(tmp_path / "release")])
    assert res.exit_code == 0, res.output
    card = (tmp_path / "release" / "README.md").read_text()
    assert "tiny_cpu" in card and "Not evaluated" in card
    assert CliRunner().invoke(app, ["release", "--verify", str(tmp_path / "release")]).exit_code == 0


def test_convert_takes_the_recipe_the_run_saved(tmp_path: Path) -> None:
    """Without --recipe, the step's `spatialiq` section (recipe and overrides) decides the processor budget."""
    from spatialiq_train.core.processor import budget_of, load_processor

    one_thread()
    step = _step(tmp_path / "ckpt", 5)
    config = yaml.safe_load((step / "config.yaml").read_text())
    config["spatialiq"]["recipe_overrides"] = ["model.max_pixels=50176"]
    (step / "config.yaml").write_text(yaml.safe_dump(config))
    out = convert(step, tmp_path / "hf")
    assert budget_of(load_processor(out)) == (3136, 50176)
    assert "max_pixels: 50176" in (out / "training_recipe.yaml").read_text()
    del config["spatialiq"]
    (step / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConvertError, match="no spatialiq.recipe.*pass --recipe"):
        convert(step, tmp_path / "hf2")


def test_a_damaged_step_config_is_named_not_a_traceback(tmp_path: Path) -> None:
    step = _step(tmp_path / "ckpt")
    (step / "config.yaml").write_text("policy: [1,\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"step_3/config.yaml: not valid YAML \(while parsing"):
        convert(step, tmp_path / "out")
    (step / "config.yaml").write_text("- policy\n", encoding="utf-8")
    with pytest.raises(UserError, match="config.yaml: a NeMo-RL run config is a YAML mapping, got list"):
        convert(step, tmp_path / "out")
    (step / "config.yaml").unlink()
    with pytest.raises(UserError, match="config.yaml: missing"):
        convert(step, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_weight_checks_catch_a_changed_copy_and_a_tensor_missing_from_its_file(tmp_path: Path) -> None:
    from spatialiq_train.nemo.convert import verify_weights

    src = Path(tiny_model_dir())
    dst = tmp_path / "dst"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*token*", "*processor*", "chat_template*"))
    if not (dst / "model.safetensors.index.json").is_file():
        from spatialiq_train.hf_export import write_single_index

        write_single_index(dst / "model.safetensors")
    assert verify_weights(dst, dst) > 10  # weights written in place: the index against the files only
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    index["weight_map"]["no.such.tensor"] = "model.safetensors"
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConvertError, match=r"1 tensors of the index are not in their files \(e.g. no.such.tensor\)"):
        verify_weights(dst, dst)
    with (dst / "model.safetensors").open("r+b") as fh:  # same size, other bytes
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))
    with pytest.raises(ConvertError, match="model.safetensors: differs from its source"):
        verify_weights(src, dst)
