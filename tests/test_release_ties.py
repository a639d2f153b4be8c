"""Issue 28, part A: a release ties its metrics to the checkpoint's weights, its card names only files it wrote and
says what the run started from, and the card is the same whatever directory `release` runs from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app

METRICS = {"name": "tiny", "mode": "from-trace", "k": 1, "scenes": 4, "convention": "official",
           "object_counting": {"acc@1": 0.25, "acc@1_n": 4, "n": {"acc@1": 4}, "correct": {"acc@1": 1}}}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder as training leaves it: data/train (manifest), data/traces/plain, runs/x (final, recipe)."""
    pytest.importorskip("torch")
    from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe, recipe_to_yaml
    from spatialiq_train.tiny import save_tiny

    root = tmp_path_factory.mktemp("proj")
    (root / "data" / "train").mkdir(parents=True)
    (root / "data" / "train" / "manifest.json").write_text(json.dumps(
        {"version": "9.9.9", "arguments": {"seed": 77}, "counts": {"structures": 3, "views": 48}}))
    traces = root / "data" / "traces" / "plain"
    traces.mkdir(parents=True)
    user = {"role": "user", "content": [{"type": "text", "text": "How many?"}]}
    (traces / "train.jsonl").write_text(json.dumps({"messages": [user], "structure_id": "s1"}) + "\n")
    run = root / "runs" / "x"
    save_tiny(run / "final", seed=2)
    recipe = load_recipe(SHIPPED_RECIPES / "tiny_cpu.yaml", ["data.traces_dir=data/traces/plain",
                                                              "data.data_root=data/train", "data.sft_split=train"])
    (run / "recipe.yaml").write_text(recipe_to_yaml(recipe))
    (run / "metrics.jsonl").write_text('{"step": 1, "phase": "sft"}\n')
    return root


def _metrics(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "metrics_tiny.json"
    path.write_text(json.dumps({**METRICS, **extra}))
    return path


def _release(run: Path, out: Path, *extra: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(out), *extra])


def test_release_refuses_metrics_of_other_or_unknown_weights_unless_told(project: Path, tmp_path: Path) -> None:
    from spatialiq_train.core.weights import checkpoint_digest

    run = project / "runs" / "x"
    digest = checkpoint_digest(run / "final")
    res = _release(run, tmp_path / "r1", "--metrics", str(_metrics(tmp_path)))
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and "does not say which weights" in flat and "--allow-other-weights" in flat, flat
    other = _metrics(tmp_path, model="elsewhere/final", model_digest="ab" * 32)
    res = _release(run, tmp_path / "r1", "--metrics", str(other))
    flat = " ".join(res.output.split())
    assert res.exit_code == 2 and "ab" * 32 in flat and digest in flat and "elsewhere/final" in flat, flat
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r1.partial").exists()
    res = _release(run, tmp_path / "r1", "--metrics", str(other), "--allow-other-weights")
    assert res.exit_code == 0, res.output
    assert f"> **Caveat:** These numbers were scored on other weights (digest `{'ab' * 32}`)" in \
        (tmp_path / "r1" / "README.md").read_text()
    res = _release(run, tmp_path / "r2", "--metrics", str(_metrics(tmp_path, model_digest=digest)))
    assert res.exit_code == 0, res.output
    assert "Caveat" not in (tmp_path / "r2" / "README.md").read_text()


def test_the_card_is_the_same_from_any_directory(project: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    run = project / "runs" / "x"
    cards = []
    for i, cwd in enumerate((project, tmp_path, run / "final")):
        monkeypatch.chdir(cwd)
        out = tmp_path / str(i) / "mine"
        assert (res := _release(run, out)).exit_code == 0, res.output
        cards.append((out / "README.md").read_text())
    assert cards[0] == cards[1] == cards[2]
    card = cards[0]
    assert "Data generator seed: 77" in card and "Data generator version: 9.9.9" in card
    assert "Split `train`: structure-id sha256" in card
    assert "plain traces: no system prompt" in card and "SYSTEM_PROMPT" not in card


def test_a_card_names_no_file_it_did_not_write_and_says_what_the_run_started_from(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from spatialiq_train.tiny import save_tiny

    run = tmp_path / "converted"
    save_tiny(run, seed=3)  # a checkpoint with no recipe beside it
    assert (res := _release(run, tmp_path / "a")).exit_code == 0, res.output
    card = (tmp_path / "a" / "README.md").read_text()
    assert not (tmp_path / "a" / "training_recipe.yaml").exists() and "training_recipe.yaml" not in card
    assert "Recipe: not recorded with the run" in card and "`unknown`" not in card
    assert "base_model" not in card.split("---")[1] and "Base model: not recorded with the run" in card
    assert "SYSTEM_PROMPT" not in card  # trace kind unknown: no system turn in the snippet
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "_name_or_path": "Qwen/Qwen2.5-VL-7B-Instruct"}))
    assert (res := _release(run, tmp_path / "b")).exit_code == 0, res.output
    card = (tmp_path / "b" / "README.md").read_text()
    assert "base_model: Qwen/Qwen2.5-VL-7B-Instruct" in card and "Base model: `Qwen/Qwen2.5-VL-7B-Instruct`" in card


def test_a_train_sft_run_releases_with_its_recipe_and_base_model(tmp_path: Path) -> None:
    """The issue's case: a `train sft` run's card said "Recipe: `?`", "Base model: `unknown`" and named a
    training_recipe.yaml it did not write."""
    pytest.importorskip("torch")
    import numpy as np
    from _train_support import one_thread, tiny_recipe, write_traces

    from spatialiq_train.train.phase import run_phase
    from spatialiq_train.train.sft import sft_phase

    one_thread()
    traces = write_traces(tmp_path / "data", "warmup", 4, np.random.default_rng(0), answer=lambda i: i)
    recipe = tiny_recipe([f"data.traces_dir={traces}", f"data.data_root={tmp_path / 'data'}",
                          "data.sft_split=warmup", "sft.optimizer.max_steps=1", "logging.save_steps=100"])
    run_phase(sft_phase(), recipe, tmp_path / "sft")
    assert (res := _release(tmp_path / "sft", tmp_path / "rel")).exit_code == 0, res.output
    card = (tmp_path / "rel" / "README.md").read_text()
    assert (tmp_path / "rel" / "training_recipe.yaml").is_file()
    assert f"Recipe: `{recipe.name}` (the full recipe as run is `training_recipe.yaml`" in card
    assert "Base model: `spatialiq-tiny" in card and "`unknown`" not in card and "`?`" not in card
    assert "supervised fine-tuning (SFT) on chain-of-thought traces" in card
