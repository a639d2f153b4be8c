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
    (step.parent / "data.json").write_text("{", encoding="utf-8")  # the driver's data record, cut short
    with pytest.raises(UserError, match=r"ckpt/data.json: unreadable data record \(.*\); it says what the "):
        convert(step, tmp_path / "out", "tiny_cpu")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


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
    assert "- Trained on: not recorded with the run (no `data.json`" in card  # converted with no record beside it
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


def _nemo_phase(tmp: Path, phase: str, sets: list[str]) -> Path:
    """The ``checkpointing.checkpoint_dir`` of a NeMo-RL phase as the driver leaves it: the config `spatialiq recipes
    nemo-rl` generates, the data record the driver writes there when training starts (the functions it calls:
    `plan_for` on the config's plan, then `check_same_data` and `write_data_record`), and a step folder holding that
    config."""
    from spatialiq_train.core.run_folder import check_same_data, write_data_record
    from spatialiq_train.nemo.driver import plan_for
    from spatialiq_train.nemo.export import build
    from spatialiq_train.nemo.settings import read_settings

    config = build("tiny_cpu", phase, 1, 1, overrides=sets).config  # type: ignore[arg-type]
    phase_plan, _ = plan_for(read_settings(config, tmp / f"nemo_{phase}.yaml"), phase, tmp / f"nemo_{phase}.yaml")
    ckpt = Path(config["checkpointing"]["checkpoint_dir"])
    ckpt.mkdir(parents=True)
    write_data_record(ckpt, check_same_data(ckpt, phase_plan, resuming=False))
    step = _step(ckpt, 4)
    (step / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")  # NeMo-RL saves the whole config
    return ckpt


def test_a_converted_nemo_run_releases_with_every_dataset_it_trained_on(tmp_path: Path) -> None:
    """Issue 44, case 2 on NeMo-RL: `nemo convert` carries the data record the driver wrote beside the checkpoints
    (``data.json``) into the converted folder, so `release` of the DAPO-tight RL checkpoint names the RL phase's data
    and, through ``rl.init_from`` (the converted SFT warm-up), the SFT phase's, as a TRL `run dapo-tight` card does;
    the card's phases come from the records (a converted checkpoint keeps no metrics)."""
    import numpy as np
    from _train_support import write_traces
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    one_thread()
    rng = np.random.default_rng(0)
    for split in ("rl", "val", "warmup"):
        write_traces(tmp_path, split, 4, rng, answer=lambda i: i % 5)
    sets = [f"data.traces_dir={tmp_path / 'traces'}", f"data.data_root={tmp_path}", "data.eval_split=val",
            "rl.validation.every_steps=5", "sft.validation.every_steps=2", f"model.name_or_path={tiny_model_dir()}",
            "model.tiny=false", f"run.output_dir={tmp_path / 'out'}"]
    sft_hf = convert(_nemo_phase(tmp_path, "sft", sets), tmp_path / "out" / "nemo_rl" / "sft" / "hf")
    rl_ckpt = _nemo_phase(tmp_path, "rl", [*sets, f"rl.init_from={sft_hf}"])
    rl_hf = convert(rl_ckpt, tmp_path / "out" / "nemo_rl" / "rl" / "hf")
    sft, rl = (json.loads((f / "data.json").read_text()) for f in (sft_hf, rl_ckpt))
    assert json.loads((rl_hf / "data.json").read_text()) == rl and (sft["phase"], rl["phase"]) == ("sft", "rl")

    res = CliRunner().invoke(app, ["release", "--run", str(rl_ckpt), "--out", str(tmp_path / "release")])
    assert res.exit_code == 2 and "a NeMo-RL checkpoint, not a Hugging Face one: convert it first" in res.output
    res = CliRunner().invoke(app, ["release", "--run", str(rl_hf), "--out", str(tmp_path / "release")])
    assert res.exit_code == 0, res.output
    card = (tmp_path / "release" / "README.md").read_text()
    assert (f"- Trained on (RL phase): traces `traces` (`rl.jsonl` sha256 `{rl['traces']['rl.jsonl']}`, `val.jsonl` "
            f"sha256 `{rl['traces']['val.jsonl']}`); images `{tmp_path.name}` ({rl['images']} images, sha256 over "
            f"their names and sha256s `{rl['images_sha256']}`).") in card
    assert (f"- Trained on (SFT phase, of the `rl.init_from` checkpoint): traces `traces` (`val.jsonl` sha256 "
            f"`{sft['traces']['val.jsonl']}`, `warmup.jsonl` sha256 `{sft['traces']['warmup.jsonl']}`)") in card
    assert "The RL phase started from `hf` (`rl.init_from`)" in card and "not recorded with the run" not in card
    assert not any(str(tmp_path) in p.read_text(errors="ignore") for p in (tmp_path / "release").rglob("*.md"))
