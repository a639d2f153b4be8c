"""DeepSpeed ZeRO-3 for real, on the CPU: two processes (`accelerate launch` with recipes/accelerate/zero3_2cpu.yaml,
DS_ACCELERATOR=cpu, gloo) run `spatialiq train sft` on the tiny model for three steps, once fully fine-tuned and
once with LoRA, and export. Each export loads with stock transformers, has every tensor whole and finite, and:

- full: equals the weights DeepSpeed's own `zero_to_fp32` rebuilds from the two ranks' shards of the last
  checkpoint, and every tensor moved from the initial weights by more than one optimizer step can move it;
- LoRA: differs from the base model by exactly the merged adapter delta (scaling * B @ A) on the LoRA targets and
  nowhere else, and that delta is larger than the noise.

Run (about 2 minutes on 2 cores): SIQ_ENGINE_STAGE=engines DS_ACCELERATOR=cpu python -m pytest tests/engines/deepspeed
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

try:  # the stage's engine: its absence is an error of the environment, never a skip
    import deepspeed  # noqa: F401
except ImportError as exc:
    raise ImportError(f"DeepSpeed is not importable ({exc}): the engines stage installs it "
                      "(bash tests/engines/run.sh engines; tests/engines/lock-engines.txt)") from exc

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))
from _train_support import write_traces  # noqa: E402

CONFIG = REPO / "recipes" / "accelerate" / "zero3_2cpu.yaml"
RECIPE = REPO / "recipes" / "tiny_cpu.yaml"
STEPS = 3
LR = 1.0e-3
# Measured (tiny model, 3 steps, lr 1e-3, 2 ranks, 8 rows, batch 2 per rank):
# - full fine-tuning: every one of the 57 tensors moved; per-tensor max |delta| 2.6e-3 .. 3.0e-3 (Adam moves an
#   element by at most about lr per step). Threshold: one step's worth, lr.
# - LoRA r=4, alpha=32: the 8 target tensors moved by max |delta| 8.6e-3 .. 1.0e-2, the other 49 not at all.
#   Threshold: 2e-3 (a quarter of the smallest measured move, far above float32 rounding of the merge).
FULL_MOVE = LR
LORA_MOVE = 2.0e-3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(root: Path, name: str, base: Path, *overrides: str, config: Path = CONFIG) -> subprocess.CompletedProcess:
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = root / name
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--main_process_port",
           str(_free_port()), "-m", "spatialiq_train.cli", "train", "sft", "--recipe", str(RECIPE), "--out", str(out),
           "model.tiny=false", f"model.name_or_path={base}", f"data.traces_dir={root / 'traces'}",
           f"data.data_root={root}", f"sft.optimizer.max_steps={STEPS}", f"sft.optimizer.learning_rate={LR}",
           "sft.optimizer.global_batch_size=4", "sft.optimizer.micro_batch_size=2", "logging.save_steps=100",
           "run.device=cpu", *overrides]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=REPO)


def _sft(root: Path, name: str, base: Path, *overrides: str) -> tuple[Path, float]:
    t0 = time.perf_counter()
    proc = _launch(root, name, base, *overrides)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    print(f"ZeRO-3 SFT {name}: {wall:.1f} s")
    return root / name, wall


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from spatialiq_train.tiny import save_tiny

    root = tmp_path_factory.mktemp("zero3")
    write_traces(root, "warmup", 8, np.random.default_rng(0), answer=lambda i: i % 10)
    base = save_tiny(root / "base", seed=0)
    full, t_full = _sft(root, "full", base)
    lora, t_lora = _sft(root, "lora", base, "model.lora.enabled=true", "model.lora.r=4")
    print(f"ZeRO-3 SFT wall time: full {t_full:.0f} s, LoRA {t_lora:.0f} s")
    return {"root": root, "base": Path(base), "full": full, "lora": lora}


def _params(folder: Path) -> dict:
    import torch
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _check_whole(got: dict, base: dict) -> None:
    import torch

    assert {n: t.shape for n, t in got.items()} == {n: t.shape for n, t in base.items()}
    empty = [n for n, t in got.items() if t.numel() == 0]
    bad = [n for n, t in got.items() if not torch.isfinite(t).all()]
    assert not empty and not bad, (empty[:3], bad[:3])


def _ranks_held_shards(run: Path, n_elements: int) -> None:
    """The run's last checkpoint is a ZeRO-3 one whose two ranks each held a part of the trainable weights."""
    import torch

    states = sorted((run / f"checkpoint-{STEPS}" / f"global_step{STEPS}").glob("zero_pp_rank_*_optim_states.pt"))
    assert len(states) == 2, states
    sizes = []
    for path in states:
        saved = torch.load(path, map_location="cpu", weights_only=False)
        assert saved["ds_config"]["zero_optimization"]["stage"] == 3
        sizes.append(sum(t.numel() for t in saved["optimizer_state_dict"]["fp32_flat_groups"]))
    assert all(0 < s < n_elements for s in sizes) and sum(sizes) >= n_elements, (sizes, n_elements)


@pytest.mark.slow
def test_full_export_is_the_gathered_zero3_weights_and_moved(runs: dict[str, Path]) -> None:
    import torch
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    base, got = _params(runs["base"]), _params(runs["full"] / "final")
    _check_whole(got, base)
    _ranks_held_shards(runs["full"], sum(t.numel() for t in base.values()))
    shards = get_fp32_state_dict_from_zero_checkpoint(str(runs["full"] / f"checkpoint-{STEPS}"))
    assert set(shards) == set(got)
    assert all(torch.equal(got[n], shards[n].float()) for n in got), "export differs from the gathered ZeRO-3 shards"
    moved = {n: float((got[n] - base[n]).abs().max()) for n in got}
    still = {n: m for n, m in moved.items() if m <= FULL_MOVE}
    assert not still, f"{len(still)} tensors moved by at most {FULL_MOVE}: {sorted(still.items())[:3]}"


@pytest.mark.slow
def test_lora_export_is_the_base_plus_the_merged_adapter_delta(runs: dict[str, Path]) -> None:
    import torch
    from safetensors.torch import load_file

    base, got = _params(runs["base"]), _params(runs["lora"] / "final")
    _check_whole(got, base)
    adapter = runs["lora"] / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    lora = load_file(str(adapter / "adapter_model.safetensors"))
    _ranks_held_shards(runs["lora"], sum(t.numel() for t in lora.values()))
    scaling = config["lora_alpha"] / config["r"]
    delta = {}
    for key, a in lora.items():
        if ".lora_A." in key:
            name = key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
            delta[name] = scaling * lora[key.replace(".lora_A.", ".lora_B.")].float() @ a.float()
    assert delta and set(delta) <= set(got), sorted(set(delta) - set(got))[:3]
    for name, t in got.items():
        expected = base[name] + delta[name] if name in delta else base[name]
        assert torch.allclose(t, expected, rtol=0, atol=1e-6), (name, float((t - expected).abs().max()))
    small = {n: float(d.abs().max()) for n, d in delta.items() if float(d.abs().max()) <= LORA_MOVE}
    assert not small, f"merged deltas at most {LORA_MOVE}: {small}"
    assert all(any(n.endswith(f"{m}.weight") for m in config["target_modules"]) for n in delta)


@pytest.mark.slow
def test_full_zero3_run_without_16bit_save_is_refused_before_training(runs: dict[str, Path], tmp_path: Path) -> None:
    import yaml

    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    config["deepspeed_config"]["zero3_save_16bit_model"] = False
    no_save = tmp_path / "zero3_no_16bit_save.yaml"
    no_save.write_text(yaml.safe_dump(config), encoding="utf-8")
    proc = _launch(runs["root"], "no_save", runs["base"], config=no_save)
    assert proc.returncode != 0
    assert "stage3_gather_16bit_weights_on_model_save" in proc.stderr and "zero3_save_16bit_model" in proc.stderr
    assert not list((runs["root"] / "no_save").glob("checkpoint-*"))  # refused before the first step


@pytest.mark.slow
def test_a_merge_failure_on_the_main_rank_is_raised_on_every_rank(runs: dict[str, Path], tmp_path: Path) -> None:
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIG), "--main_process_port",
           str(_free_port()), str(Path(__file__).with_name("_merge_failure_worker.py")), "--model", str(runs["base"]),
           "--data", str(runs["root"]), "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)  # a hang times out
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    outcomes = [(tmp_path / f"rank{r}.txt").read_text(encoding="utf-8") for r in range(2)]
    assert outcomes[0] == "RuntimeError: injected merge failure", outcomes
    assert outcomes[1].startswith("ExportError: merging the LoRA adapter"), outcomes
    assert "failed on the main process" in outcomes[1]
    assert not (tmp_path / "final").exists()


def test_outside_zero3_init_loads_whole_models_while_a_zero3_config_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the LoRA merge relies on: with a ZeRO-3 HfDeepSpeedConfig registered (as accelerate does for the
    trainer), `from_pretrained` builds partitioned, empty tensors; inside `outside_zero3_init` whole ones; after
    it the registration is back."""
    import deepspeed
    import torch.distributed as dist
    from transformers.integrations import HfDeepSpeedConfig, is_deepspeed_zero3_enabled

    from spatialiq_train.tiny import save_tiny
    from spatialiq_train.train.export import outside_zero3_init

    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0", "LOCAL_RANK": "0",
                       "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    deepspeed.init_distributed(dist_backend="gloo")
    try:
        model_dir = save_tiny(tmp_path / "m", seed=0)
        config = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1})
        assert is_deepspeed_zero3_enabled()
        partitioned = _params(model_dir)
        assert any(t.numel() == 0 for t in partitioned.values())  # what a merge inside zero.Init would see
        with outside_zero3_init():
            assert not is_deepspeed_zero3_enabled()
            whole = _params(model_dir)
        assert is_deepspeed_zero3_enabled() and config.is_zero3()  # the registration is back
        assert all(t.numel() > 0 for t in whole.values()) and whole.keys() == partitioned.keys()
    finally:
        dist.destroy_process_group()
