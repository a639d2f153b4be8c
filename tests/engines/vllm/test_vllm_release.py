"""A released tiny checkpoint, as a user meets it: stock transformers ``AutoProcessor`` loads a processor that yields
``pixel_values``, and ``spatialiq eval sample --engine vllm`` (its own process, as on a GPU node, so the real engine
is built from the CLI's arguments) samples it on vLLM's CPU backend, then ``eval score`` scores it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from eval.completions import load_completions
from spatialiq_train.cli import app

REPO = Path(__file__).resolve().parents[3]


def _release(tiny: Path, tmp_path: Path) -> tuple[Path, str]:
    from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe, recipe_to_yaml

    run = tmp_path / "run"
    shutil.copytree(tiny, run / "final")
    (run / "recipe.yaml").write_text(recipe_to_yaml(load_recipe(SHIPPED_RECIPES / "tiny_cpu.yaml", [])))
    res = CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(tmp_path / "release")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return tmp_path / "release", res.output


def test_release_loads_with_stock_autoprocessor_and_samples_through_the_cli(tiny: Path, bench_data: Path,
                                                                            tmp_path: Path) -> None:
    from PIL import Image
    from transformers import AutoProcessor, Qwen2_5_VLProcessor

    release, output = _release(tiny, tmp_path)
    assert "release verified (checksums, config, processor with stock AutoProcessor, model card)" in output
    processor = AutoProcessor.from_pretrained(str(release))
    assert type(processor) is Qwen2_5_VLProcessor and processor.video_processor is not None
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many blocks?"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    batch = processor(text=[text], images=[Image.new("RGB", (512, 512))], return_tensors="pt")
    assert batch["image_grid_thw"].tolist() == [[1, 8, 8]]  # tiny_cpu's 12,544-pixel budget: 112x112, 16 tokens
    assert batch["pixel_values"].shape[0] == 64

    out = tmp_path / "c.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "spatialiq_train.cli", "eval", "sample", "--model", str(release), "--data",
           str(bench_data), "--out", str(out), "--engine", "vllm", "--k", "4", "--temperature", "1",
           "--max-new-tokens", "16", "--limit", "2"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    print(f"eval sample --engine vllm (2 views x k=4, engine start included): {time.perf_counter() - t0:.0f} s")
    records = load_completions(out)
    assert len(records) == 8 and len({(view, task) for view, task, _ in records}) == 2
    res = CliRunner().invoke(app, ["eval", "score", "--completions", str(out), "--data", str(bench_data), "--out",
                                   str(tmp_path / "s"), "--name", "release", "--min-coverage", "0"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "s" / "metrics_release.json").read_text())["counts"]["scenes_covered"] == 2
