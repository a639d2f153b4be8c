"""NeMo-RL config generation and the key check (CPU only; NeMo-RL itself is not needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spatialiq_train.nemo import keys as nkeys

ROOT = Path(__file__).resolve().parents[1]
NEMO_RL_GIT = Path(os.environ.get("NEMO_RL_GIT_DIR", "/work/.mirror/NVIDIA-NeMo+RL/repo"))


# --- the key file and the check -------------------------------------------------------------------------------


def test_key_file_records_release_and_core_keys():
    doc = json.loads(nkeys.KEYS_FILE.read_text())
    assert doc["nemo_rl"]["tag"] == "v0.7.0"
    assert doc["nemo_rl"]["commit"].startswith("81aa43d")
    grpo = nkeys.load_key_set("grpo")
    for key in ("grpo.adv_estimator.normalize_rewards", "grpo.adv_estimator.use_leave_one_out_baseline",
                "grpo.batch_multiplier", "grpo.dynamic_sampling_max_gen_batches", "loss_fn.ratio_clip_max",
                "policy.generation.vllm_cfg.skip_tokenizer_init", "policy.scheduler[].milestones",
                "policy.dtensor_cfg.automodel_kwargs.freeze_config.freeze_vision_tower"):
        assert grpo.allows(key), key
    # the documented traps are not keys
    for key in ("grpo.ratio_clip_max", "grpo.early_stop_patience", "grpo.use_dynamic_samplng"):
        assert not grpo.allows(key), key
    assert grpo.allows("env.anything.at_all")  # env blocks are ours: open
    sft = nkeys.load_key_set("sft")
    assert sft.allows("sft.val_period") and not sft.allows("grpo.val_period")


def test_unknown_key_is_refused_with_nearest():
    cfg = {"grpo": {"use_dynamic_samplng": True, "num_prompts_per_step": 8}}
    with pytest.raises(nkeys.NemoConfigError) as exc:
        nkeys.check_config(cfg, "grpo", source="x.yaml")
    msg = str(exc.value)
    assert "x.yaml" in msg and "'grpo.use_dynamic_samplng'" in msg and "grpo.use_dynamic_sampling" in msg
    assert "num_prompts_per_step'" not in msg.split("missing")[0]  # a valid key is not called unknown


def test_list_items_and_missing_required_keys():
    ks = nkeys.load_key_set("grpo")
    cfg = {"policy": {"scheduler": [{"name": "x", "kwargs": {"free": 1}}, {"milestnes": [5]}]}}
    assert nkeys.unknown_keys(cfg, ks) == ["policy.scheduler[].milestnes"]
    missing = nkeys.missing_keys({"cluster": {"num_nodes": 1}}, ks)
    assert "cluster.gpus_per_node" in missing and "grpo" in missing
    assert not any(m.startswith("policy.") for m in missing)  # policy absent: its children are not demanded


def test_project_dataset_keys_only_on_dataset_entries():
    ks = nkeys.load_key_set("grpo")
    assert ks.allows("data.train.data_root") and ks.allows("data.default.max_pixels")
    assert not ks.allows("data.data_root") and not ks.allows("policy.max_pixels")


# --- the regeneration tool ------------------------------------------------------------------------------------


def _tiny_checkout(tmp_path: Path) -> Path:
    files = {
        "nemo_rl/algorithms/grpo.py": """
            from typing import Any, NotRequired, TypedDict
            from pydantic import BaseModel
            from nemo_rl.models.policy import PolicyConfig
            Sched = dict[str, list[int]]
            class GRPOConfig(TypedDict):
                num_prompts_per_step: int
                batch_multiplier: NotRequired[float]
            class MasterConfig(BaseModel, extra="allow"):
                policy: PolicyConfig
                grpo: GRPOConfig
                env: dict[str, Any]
                extra: int = 3
            """,
        "nemo_rl/algorithms/sft.py": """
            from pydantic import BaseModel
            class SFTConfig(BaseModel):
                val_period: int = 10
            class MasterConfig(BaseModel):
                sft: SFTConfig
            """,
        "nemo_rl/models/policy/__init__.py": """
            from typing import Any, Literal, NotRequired, TypedDict
            class Gen(TypedDict):
                backend: str
            class VllmGen(Gen):
                vllm_cfg: "Vllm"
            class Vllm(TypedDict):
                gpu_memory_utilization: float
            class On(TypedDict):
                enabled: Literal[True]
                size: int
            class Off(TypedDict):
                enabled: Literal[False]
            class Sched(TypedDict):
                name: str
                kwargs: dict[str, Any]
            class PolicyConfig(TypedDict):
                model_name: str
                generation: NotRequired[Gen]
                dtensor_cfg: On | Off
                scheduler: NotRequired[list[Sched] | None]
            """,
        "examples/configs/grpo_x.yaml": "defaults: base.yaml\ngrpo:\n  yaml_only_key: 1\n",
    }
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path


def test_tool_extracts_types_and_yaml(tmp_path):
    src = _tiny_checkout(tmp_path / "rl")
    out = tmp_path / "keys.json"
    subprocess.run([sys.executable, str(ROOT / "tools" / "nemo_rl_keys.py"), str(src), "--out", str(out)],
                   check=True, capture_output=True)
    grpo = json.loads(out.read_text())["algorithms"]["grpo"]
    keys = set(grpo["keys"])
    assert {"policy.generation.vllm_cfg.gpu_memory_utilization", "policy.dtensor_cfg.size",
            "policy.scheduler[].name", "grpo.batch_multiplier", "grpo.yaml_only_key", "extra"} <= keys
    assert "defaults" not in keys
    assert set(grpo["open"]) == {"env", "policy.scheduler[].kwargs"}
    req = set(grpo["required"])
    assert {"policy", "grpo", "policy.dtensor_cfg.enabled", "grpo.num_prompts_per_step"} <= req
    assert not {"extra", "grpo.batch_multiplier", "policy.dtensor_cfg.size"} & req  # default / NotRequired / union


@pytest.mark.skipif(not (NEMO_RL_GIT / "HEAD").exists(), reason=f"no NeMo-RL git mirror at {NEMO_RL_GIT}")
def test_shipped_key_file_regenerates_from_v0_7_0(tmp_path):
    out = tmp_path / "keys.json"
    subprocess.run([sys.executable, str(ROOT / "tools" / "nemo_rl_keys.py"), str(NEMO_RL_GIT), "--ref", "v0.7.0",
                    "--out", str(out)], check=True, capture_output=True)
    assert json.loads(out.read_text()) == json.loads(nkeys.KEYS_FILE.read_text())
