"""A checkpoint laid out by v0.7.0's own ``CheckpointManager`` (the one ``grpo.setup`` built from our config)
converts with ``spatialiq nemo convert`` into a folder ``spatialiq eval sample`` loads; a torch DCP checkpoint
converts through NeMo-RL's own converter. What only a GPU worker writes (the policy's weight shards) is written
here the way the DTensor-v2 worker writes them under ``save_consolidated`` (a Hugging Face copy)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _nemo_support import Placement, run_driver, tiny_model, write_all_traces, write_config
from PIL import Image
from typer.testing import CliRunner

from spatialiq_train.cli import app


def _invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def checkpointer(tmp_path: Path, placement: Placement, ray_driver: str) -> tuple[Any, Any]:
    data_root = write_all_traces(tmp_path / "data")
    cfg, _ = write_config("dapo_tight_7b", "rl", data_root, tmp_path)
    run_driver("rl", cfg)
    return placement.state["checkpointer"], placement.state["master_config"]


def _benchmark(root: Path) -> Path:
    _invoke("gen", "--out", str(root), "--structures", "1", "--seed", "0", "--split", "benchmark", "--renderer",
            "none", "--quiet")
    for gt in (root / "benchmark").rglob("gt.json"):
        Image.new("RGB", (512, 512), (120, 80, 40)).save(gt.parent / "view.png")
    return root


def test_a_checkpoint_manager_step_converts_and_samples(checkpointer: tuple[Any, Any], tmp_path: Path) -> None:
    manager, master = checkpointer
    tmp = Path(manager.init_tmp_checkpoint(3, {"step": 3, "val:accuracy": 0.25}, master))
    consolidated = tmp / "policy" / "weights" / "model" / "consolidated"
    shutil.copytree(tiny_model(), consolidated, ignore=shutil.ignore_patterns("*token*", "*processor*", "chat_*"))
    shutil.copytree(tiny_model(), tmp / "policy" / "tokenizer", ignore=shutil.ignore_patterns("*.safetensors*"))
    manager.finalize_checkpoint(tmp)
    ckpt_dir = Path(master.checkpointing["checkpoint_dir"])
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["data.json", "step_3"]  # the driver's data record too
    assert json.loads((ckpt_dir / "step_3" / "training_info.json").read_text())["step"] == 3

    out = tmp_path / "hf"
    _invoke("nemo", "convert", "--checkpoint", str(ckpt_dir), "--out", str(out))
    assert (out / "training_recipe.yaml").is_file() and (out / "preprocessor_config.json").is_file()
    assert (out / "data.json").read_bytes() == (ckpt_dir / "data.json").read_bytes()  # what `release` names
    data = _benchmark(tmp_path / "bench")
    completions = tmp_path / "c.jsonl"
    _invoke("eval", "sample", "--model", str(out), "--data", str(data), "--out", str(completions), "--k", "1",
            "--limit", "2", "--engine", "transformers", "--max-new-tokens", "4")
    rows = [json.loads(line) for line in completions.read_text().splitlines()]
    assert len(rows) == 2 and all(r["task"] == "task_main" and isinstance(r["text"], str) for r in rows)


def test_a_dcp_checkpoint_converts_through_nemo_rls_converter(tmp_path: Path) -> None:
    """``checkpointing.model_save_format: torch_save``: weights as torch DCP, converted by v0.7.0's converter."""
    import torch.distributed.checkpoint as dcp
    import yaml
    from safetensors.torch import load_file

    from spatialiq_train.nemo.convert import convert

    step = tmp_path / "ckpt" / "step_2"
    weights = step / "policy" / "weights" / "model"
    state = load_file(str(tiny_model() / "model.safetensors"))
    dcp.save(state, checkpoint_id=str(weights))
    shutil.copytree(tiny_model(), step / "policy" / "tokenizer", ignore=shutil.ignore_patterns("*.safetensors*"))
    (step / "config.yaml").write_text(yaml.safe_dump({
        "policy": {"model_name": str(tiny_model()), "tokenizer": {"name": str(tiny_model())}},
        "spatialiq": {"recipe": "tiny_cpu", "phase": "rl"}}), encoding="utf-8")
    out = convert(step, tmp_path / "hf", "tiny_cpu")
    converted = {}
    for shard in out.glob("*.safetensors"):
        converted.update(load_file(str(shard)))
    assert set(converted) == set(state) and all((converted[k] == state[k]).all() for k in state)


def _save(manager: Any, step: int, finalize: bool = True) -> Path:
    """``step_N`` as v0.7.0's loops save it: training info and config, the policy (a Hugging Face copy, as under
    ``save_consolidated``), the data loader's state, then the rename."""
    import torch
    from pydantic import BaseModel

    class RunConfig(BaseModel):  # the loops pass their MasterConfig; the manager only dumps it to config.yaml
        spatialiq: dict[str, str] = {"recipe": "tiny_cpu", "phase": "rl"}

    tmp = Path(manager.init_tmp_checkpoint(step, {"step": step}, RunConfig()))
    shutil.copytree(tiny_model(), tmp / "policy" / "weights" / "model" / "consolidated",
                    ignore=shutil.ignore_patterns("*token*", "*processor*", "chat_*"))
    torch.save({"step": step}, tmp / "train_dataloader.pt")
    if finalize:
        manager.finalize_checkpoint(tmp)
    return tmp


def test_checkpoints_are_complete_or_set_aside_and_the_folder_has_one_writer(tmp_path: Path) -> None:
    """Issue 44: a step_N whose (asynchronous) weight save was cut off, and a tmp_step_N of a cut save, are set aside
    before the run; NeMo-RL's own manager then resumes from the newest complete step. A second driver on the same
    checkpoint folder, spelled through a link, is refused naming the first."""
    from nemo_rl.utils.checkpoint import CheckpointManager

    from spatialiq_train.core.lock import OutputLockedError
    from spatialiq_train.nemo.checkpoints import step_problem, writing

    ckpt = tmp_path / "checkpoints"
    manager = CheckpointManager({"checkpoint_dir": str(ckpt), "metric_name": None, "higher_is_better": True,
                                 "keep_top_k": None, "save_optimizer": True})
    _save(manager, 2)
    cut = _save(manager, 4).with_name("step_4") / "policy" / "weights" / "model" / "consolidated" / "model.safetensors"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])  # the async weight save killed after the rename
    _save(manager, 6, finalize=False)  # killed before the rename
    assert step_problem(ckpt / "step_2") is None and "model.safetensors" in str(step_problem(ckpt / "step_4"))
    assert manager.get_latest_checkpoint_path() == str(ckpt / "step_4")  # what NeMo-RL alone would resume from
    config = {"checkpointing": {"enabled": True, "checkpoint_dir": str(ckpt)}}
    (tmp_path / "link").symlink_to(ckpt, target_is_directory=True)
    with writing(config):
        assert sorted(p.name for p in ckpt.iterdir()) == ["step_2", "step_4.incomplete", "tmp_step_6.incomplete"]
        assert manager.get_latest_checkpoint_path() == str(ckpt / "step_2")
        with pytest.raises(OutputLockedError, match="is being written by pid"):
            with writing({"checkpointing": {"enabled": True, "checkpoint_dir": str(tmp_path / "link")}}):
                pass
        _save(manager, 4)  # the resumed run saves step 4 again, complete, beside the one set aside
    assert step_problem(ckpt / "step_4") is None
