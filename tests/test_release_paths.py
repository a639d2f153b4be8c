"""Issue 40: a release (model card, training_recipe.yaml, configs, processor files, SHA256SUMS) and a dataset card hold
no path of the machine that made them; the data is named by folder name and digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.release.paths import folder_name, names_a_place, paths_found, public_recipe

SECRET = "home-of-alice-7f3a"
"""A folder name that stands for a user's home on a cluster: no released file may name it."""


def _texts(folder: Path) -> dict[str, str]:
    """Every file of ``folder`` that reads as UTF-8 text, by relative path."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            try:
                out[path.relative_to(folder).as_posix()] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return out


def _leaks(folder: Path, base: Path) -> list[str]:
    """Files of ``folder`` holding any part of ``base``'s path: the path itself (as given or resolved), the secret
    folder's name, or pytest's temporary folder names."""
    parts = {str(base), str(base.resolve()), SECRET, *(p for p in base.resolve().parts if p.startswith("pytest"))}
    return [f"{rel}: {part}" for rel, text in _texts(folder).items() for part in parts if part in text]


def _invoke(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, list(args))


def test_path_values_become_folder_names() -> None:
    assert names_a_place("/home/alice/data/train") and names_a_place("~/data") and names_a_place("../../x/train")
    assert not names_a_place("data/train") and not names_a_place("Qwen/Qwen2.5-VL-7B-Instruct")
    assert not names_a_place(None) and not names_a_place("")
    assert folder_name("/home/alice/data/train/") == "train" and folder_name("~/ckpt") == "ckpt"
    recipe = {"model": {"name_or_path": "Qwen/Qwen2.5-VL-7B-Instruct"}, "rl": {"init_from": "/scratch/a/sft/final"},
              "data": {"data_root": "/home/alice/data/train", "traces_dir": "data/traces/cot"},
              "run": {"output_dir": "~/runs/x"}, "description": "kept"}
    assert public_recipe(recipe) == {
        "model": {"name_or_path": "Qwen/Qwen2.5-VL-7B-Instruct"}, "rl": {"init_from": "final"},
        "data": {"data_root": "train", "traces_dir": "data/traces/cot"}, "run": {"output_dir": "x"},
        "description": "kept"}
    assert recipe["data"]["data_root"] == "/home/alice/data/train"  # the run's recipe itself is left as it was


def test_the_last_check_finds_whole_paths_in_text_files_only(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("trained on /data/alice/run/final; see /data/alice/run2")
    (tmp_path / "model.safetensors").write_bytes(b"/data/alice/x")
    assert paths_found(tmp_path, ["/data/alice/run", "/data/alice/run2", "/data/alice/x", "/data"]) == [
        ("sub/a.md", "/data/alice/run2"), ("sub/a.md", "/data/alice/run")]
    assert paths_found(tmp_path, ["/data/alice/ru"]) == []


@pytest.mark.slow
def test_a_release_from_a_run_with_absolute_paths_holds_no_part_of_them(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from _train_support import one_thread, tiny_recipe, write_traces

    from spatialiq_train.core.recipes import load_recipe
    from spatialiq_train.core.weights import checkpoint_digest
    from spatialiq_train.tiny import save_tiny
    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.sft import sft_phase

    one_thread()
    home = tmp_path / SECRET
    data = home / "data" / "train"
    res = _invoke("gen", "--out", str(data), "--structures", "2", "--seed", "3", "--split", "train",
                  "--renderer", "none", "--quiet")
    assert res.exit_code == 0, res.output
    assert [leak for leak in _leaks(data, tmp_path) if leak.startswith("README.md")] == []  # gen's dataset card
    res = _invoke("release-data", str(data))
    assert res.exit_code == 0, res.output
    card = (data / "README.md").read_text(encoding="utf-8")
    assert str(tmp_path) not in card and SECRET not in card and "pytest" not in card, card

    traces = write_traces(data, "warmup", 4, np.random.default_rng(0), answer=lambda i: i)
    save_tiny(home / "ckpt" / "sft-final", seed=4)
    run = home / "runs" / "x"
    recipe = tiny_recipe([f"data.traces_dir={traces}", f"data.data_root={data}", "data.sft_split=warmup",
                          f"rl.init_from={home / 'ckpt' / 'sft-final'}", f"run.output_dir={run}",
                          f"model.name_or_path={home / 'models' / 'Qwen2.5-VL-7B-Instruct'}",
                          "sft.optimizer.max_steps=1", "logging.save_steps=100"])
    run_phase(sft_phase(), recipe, run)
    metrics = home / "eval" / "metrics_mine.json"
    metrics.parent.mkdir()
    metrics.write_text(json.dumps({"name": "mine", "mode": "from-trace", "k": 1, "scenes": 4,
                                   "model": str(run / "final"), "model_digest": checkpoint_digest(run / "final"),
                                   "object_counting": {"acc@1": 0.25, "acc@1_n": 4}}))
    out = home / "releases" / "mine"
    res = _invoke("release", "--run", str(run), "--out", str(out), "--metrics", str(metrics), "--data", str(data))
    assert res.exit_code == 0, res.output
    texts = _texts(out)
    assert {"README.md", "training_recipe.yaml", "config.json", "SHA256SUMS"} <= texts.keys()
    assert _leaks(out, tmp_path) == []

    manifest_sha = hashlib.sha256((data / "manifest.json").read_bytes()).hexdigest()
    card = texts["README.md"]
    assert f"- `data.data_root`: folder `train`, sha256 of its manifest.json `{manifest_sha}`" in card
    assert "- `data.traces_dir`: folder `traces`, sha256 over its trace files' names and sha256s `" in card
    released = load_recipe(out / "training_recipe.yaml")  # still a recipe the project loads
    assert (released.data.data_root, released.data.traces_dir) == ("train", "traces")
    assert (released.rl.init_from, released.run.output_dir) == ("sft-final", "x")
    assert released.model.name_or_path == "Qwen2.5-VL-7B-Instruct"
    head = texts["training_recipe.yaml"].split("\nname:")[0]
    assert f"#   data.data_root: train (sha256 of its manifest.json {manifest_sha})" in head
    assert yaml.safe_load(texts["training_recipe.yaml"])["data"]["data_root"] == "train"
    assert (res := _invoke("release", "--verify", str(out))).exit_code == 0, res.output

    # a path of this machine written into the recipe's free text: refused, nothing left behind
    (run / "recipe.yaml").write_text(yaml.safe_dump({**yaml.safe_load((run / "recipe.yaml").read_text()),
                                                     "description": f"trained on {data}"}, sort_keys=False))
    res = _invoke("release", "--run", str(run), "--out", str(home / "releases" / "two"))
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and "training_recipe.yaml would hold" in flat and "folder name and digest" in flat, flat
    assert not (home / "releases" / "two").exists() and not (home / "releases" / "two.partial").exists()
