"""NeMo-RL config generation and the key check (CPU only; NeMo-RL itself is not needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe
from spatialiq_train.nemo import config as ncfg
from spatialiq_train.nemo import keys as nkeys
from spatialiq_train.nemo.env import TRAIN_ENV, VAL_ENV
from spatialiq_train.nemo.export import build
from spatialiq_train.nemo.paper import PAPER_GRPO, deviations, get_path
from spatialiq_train.nemo.recipe_values import nemo_plan

ROOT = Path(__file__).resolve().parents[1]


NEMO_RL_GIT = Path(os.environ.get("NEMO_RL_GIT_DIR", "nemo-rl-git-dir-not-set"))
"""A NeMo-RL git dir (or checkout) to regenerate the key list from: set NEMO_RL_GIT_DIR to run that test."""


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
        # the code that reads the keys (a key no code reads is 'unread': here policy.model_name)
        "nemo_rl/algorithms/reader.py": """
            def read(master, cfg):
                cfg["gpu_memory_utilization"], cfg.get("size"), cfg["grpo"]["batch_multiplier"]
                if "yaml_only_key" in cfg and cfg["enabled"]:
                    return getattr(master, "extra"), master.policy, cfg["name"], cfg["backend"], cfg["val_period"]
                return cfg.pop("num_prompts_per_step"), cfg["sft"], cfg["dtensor_cfg"], cfg["generation"]
            def more(cfg):
                return cfg["vllm_cfg"], cfg["scheduler"], cfg["env"], cfg["kwargs"]
            """,
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
    assert grpo["unread"] == {"policy.model_name": "no code in nemo_rl/ reads this name"}
    assert "policy.model_name" not in keys
    assert set(grpo["open"]) == {"env", "policy.scheduler[].kwargs"}
    req = set(grpo["required"])
    assert {"policy", "grpo", "policy.dtensor_cfg.enabled", "grpo.num_prompts_per_step"} <= req
    assert not {"extra", "grpo.batch_multiplier", "policy.dtensor_cfg.size"} & req  # default / NotRequired / union


@pytest.mark.skipif(not (NEMO_RL_GIT / "HEAD").exists(),
                    reason="set NEMO_RL_GIT_DIR to a NeMo-RL git dir to regenerate the key list")
def test_shipped_key_file_regenerates_from_v0_7_0(tmp_path):
    out = tmp_path / "keys.json"
    subprocess.run([sys.executable, str(ROOT / "tools" / "nemo_rl_keys.py"), str(NEMO_RL_GIT), "--ref", "v0.7.0",
                    "--out", str(out)], check=True, capture_output=True)
    assert json.loads(out.read_text()) == json.loads(nkeys.KEYS_FILE.read_text())


# --- generated configs ----------------------------------------------------------------------------------------


SHIPPED = sorted(p.stem for p in SHIPPED_RECIPES.glob("*.yaml"))
DAPO = [n for n in SHIPPED if n.startswith("dapo_")]
PAPER_OVERRIDES = ["rl.num_generations=8", "rl.optimizer.weight_decay=0.01", "rl.optimizer.warmup_steps=50",
                   "rl.optimizer.max_steps=500", "rl.optimizer.learning_rate=5e-7",
                   "rl.optimizer.lr_scheduler_type=constant_with_warmup", "rl.beta=0.05",
                   "rl.epsilon=0.2", "rl.epsilon_high=0.28", "rl.loss_type=dapo", "rl.advantage.baseline=leave_one_out",
                   "rl.advantage.std=leave_one_out", "rl.prompts_per_step=8",
                   "rl.dynamic_sampling.enabled=true", "rl.dynamic_sampling.max_refill_rounds=10",
                   "generation.max_completion_length=1024", "generation.temperature=1.0", "generation.top_p=1.0",
                   "rl.dynamic_sampling.batch_multiplier=2"]


CLUSTER_SETS = {name: ["model.tiny=false", "model.name_or_path=/models/tiny"]
                for name in ("tiny_cpu", "tiny_cpu_folding")}
"""What a NeMo-RL run of a shipped recipe must say besides it: the tiny model is built by TRL runs only."""


@pytest.mark.parametrize("phase", ["rl", "sft"])
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_recipe_gives_a_checked_config(name, phase):
    built = build(name, phase, 1, 4, overrides=CLUSTER_SETS.get(name, []))
    ks = nkeys.load_key_set(built.algorithm)
    assert nkeys.unknown_keys(built.config, ks) == [] and nkeys.missing_keys(built.config, ks) == []
    assert built.config["cluster"] == {"gpus_per_node": 4, "num_nodes": 1}


@pytest.mark.parametrize("name", DAPO)
def test_paper_hyperparameters_with_the_papers_recipe_values(name):
    cfg = build(name, "rl", 8, 4, overrides=PAPER_OVERRIDES).config
    assert deviations(cfg) == []
    # spelled out for the reader (the table above is PAPER_GRPO):
    g, loss, pol = cfg["grpo"], cfg["loss_fn"], cfg["policy"]
    assert (g["num_prompts_per_step"], g["num_generations_per_prompt"], pol["train_global_batch_size"]) == (8, 8, 64)
    assert g["adv_estimator"] == {"name": "grpo", "normalize_rewards": True, "use_leave_one_out_baseline": True,
                                  "minus_baseline": True}
    assert (g["use_leave_one_out_baseline"], g["normalize_rewards"]) == (True, True)
    assert (g["batch_multiplier"], g["dynamic_sampling_max_gen_batches"], g["max_num_steps"]) == (2, 10, 500)
    assert (loss["reference_policy_kl_penalty"], loss["reference_policy_kl_type"]) == (0.05, "k3")
    assert (loss["ratio_clip_min"], loss["ratio_clip_max"], loss["token_level_loss"]) == (0.2, 0.28, True)
    assert pol["optimizer"]["kwargs"]["lr"] == 5e-7 and pol["optimizer"]["kwargs"]["weight_decay"] == 0.01
    assert pol["scheduler"][0]["kwargs"] == {"start_factor": 0.1, "end_factor": 1.0, "total_iters": 50}
    assert pol["scheduler"][1]["name"].endswith("ConstantLR") and pol["scheduler"][2] == {"milestones": [50]}
    assert g["val_period"] == 20 and cfg["data"]["validation"]["env_name"] == VAL_ENV
    gen = pol["generation"]
    assert (pol["max_total_sequence_length"], gen["max_new_tokens"], gen["temperature"], gen["top_p"]) == \
        (2048, 1024, 1.0, 1.0)
    assert gen["vllm_cfg"]["max_model_len"] == 2048 and gen["colocated"]["enabled"] is True


def _recipe_explained(name: str) -> dict:
    """What the shipped recipe itself sets for the paper keys it controls (its plan on 8 x 4 GPUs)."""
    p = nemo_plan(load_recipe(name), "rl", 32, False)
    o, a, g = p.optimizer, p.rl, p.generation
    budget = o.max_steps if o.max_steps > 0 else 1_000_000
    sched, _ = ncfg.lr_schedule(o.lr_scheduler_type, o.warmup_steps, budget, o.warmup_start_factor)
    return {"grpo.num_generations_per_prompt": a.num_generations,
            "policy.train_global_batch_size": 8 * a.num_generations,
            "policy.optimizer.kwargs.weight_decay": o.weight_decay, "policy.optimizer.kwargs.lr": o.learning_rate,
            "policy.scheduler": sched, "grpo.max_num_steps": budget, "grpo.val_period": p.validation.every_steps,
            "grpo.dynamic_sampling_max_gen_batches": a.max_refill_rounds, "grpo.batch_multiplier": a.batch_multiplier,
            "loss_fn.reference_policy_kl_penalty": a.beta,
            "loss_fn.ratio_clip_min": a.epsilon, "loss_fn.ratio_clip_max": a.epsilon_high,
            "policy.generation.max_new_tokens": g.max_completion_length, "policy.generation.temperature": g.temperature,
            "policy.generation.top_p": g.top_p}


@pytest.mark.parametrize("name", DAPO)
def test_shipped_dapo_recipes_depart_from_the_paper_only_where_the_recipe_says_so(name):
    built = build(name, "rl", 8, 4)
    explained = _recipe_explained(name)
    for key, got, _paper in deviations(built.config):
        assert key in explained, f"{key} departs from the paper without the recipe saying so"
        assert got == explained[key]
        assert any(key in note for note in built.notes)  # and the user is told
    for key in set(PAPER_GRPO) - set(explained):  # the released values the recipe has no field for
        assert get_path(built.config, key) == PAPER_GRPO[key], key


def test_parallelism_and_batch_divisibility():
    assert ncfg.model_size_b("Qwen/Qwen2.5-VL-32B-Instruct") == 32 and ncfg.model_size_b("tiny") is None
    assert ncfg.model_size_b("/ckpt/qwen2.5-vl-7b-sft") == 7
    assert ncfg.parallelism("Qwen/Qwen2.5-VL-32B-Instruct", 4) == ncfg.Parallelism(4, 2, True)
    assert ncfg.parallelism("Qwen/Qwen2.5-VL-32B-Instruct", 2) == ncfg.Parallelism(2, 2, True)
    assert ncfg.parallelism("Qwen/Qwen2.5-VL-7B-Instruct", 4) == ncfg.Parallelism(1, 1, False)
    cfg = build("dapo_tight_32b", "rl", 8, 4).config
    pol = cfg["policy"]
    assert pol["dtensor_cfg"]["tensor_parallel_size"] == 4 == pol["make_sequence_length_divisible_by"]
    assert cfg["policy"]["generation"]["vllm_cfg"]["tensor_parallel_size"] == 2
    with pytest.raises(nkeys.NemoConfigError, match="--nodes 8 x --gpus-per-node 4 gives 32 data-parallel"):
        build("sft_cot_7b", "sft", 8, 4)  # SFT global batch 16 over 32 ranks


def test_lr_schedules():
    assert ncfg.lr_schedule("constant", 0, 100, 0.1) == (None, None)
    sched, note = ncfg.lr_schedule("cosine", 0.1, 200, 0.1)
    assert note is None and sched[0]["kwargs"]["total_iters"] == 20 and sched[1]["kwargs"]["T_max"] == 180
    assert sched[2] == {"milestones": [20]}
    with pytest.raises(ValueError, match="cosine schedule with fractional warm-up 0.03 needs a step budget"):
        ncfg.lr_schedule("cosine", 0.03, None, 0.1)  # NeMo-RL would run another schedule: refused
    with pytest.raises(ValueError, match="lr_scheduler_type cosine needs a step budget"):
        ncfg.lr_schedule("cosine", 0, None, 0.1)
    warm = ncfg.lr_schedule("constant_with_warmup", 4, None, 0.0)[0][0]["kwargs"]  # from 0, as TRL's
    assert warm == {"start_factor": 1e-9, "end_factor": 1.0, "total_iters": 4}
    with pytest.raises(ValueError, match="polynomial"):
        ncfg.lr_schedule("polynomial", 0, 10, 0.1)


def test_recipe_values_nemo_cannot_express_are_refused():
    with pytest.raises(nkeys.NemoConfigError, match="rl.loss_type 'dr_grpo'"):
        build("dapo_tight_7b", "rl", 1, 4, overrides=["rl.loss_type=dr_grpo"])
    with pytest.raises(nkeys.NemoConfigError, match=r"model.tiny = True: .*set model.tiny=false"):
        build("tiny_cpu", "sft", 1, 4)
    with pytest.raises(nkeys.NemoConfigError, match=r"vllm.enable_sleep_mode = False: .*set vllm.enable_sleep_mode"):
        build("dapo_tight_7b", "rl", 1, 4, overrides=["vllm.enable_sleep_mode=false"])
    with pytest.raises(nkeys.NemoConfigError, match=r"sft.optimizer.num_train_epochs = 1.5: .*whole epochs"):
        build("sft_cot_7b", "sft", 1, 4, overrides=["sft.optimizer.num_train_epochs=1.5"])


def test_envs_data_and_resume_layout():
    overrides = ["rl.dynamic_sampling.enabled=false", "run.output_dir=/out/x", "data.traces_dir=/d/traces/cot",
                 "rl.init_from=/out/sft_hf"]
    cfg = build("dapo_tight_7b", "rl", 2, 4, overrides=overrides).config
    assert {k: v for k, v in cfg["spatialiq"].items() if k != "plan"} == {
        "recipe": "dapo_tight_7b", "recipe_overrides": overrides, "phase": "rl"}
    assert cfg["spatialiq"]["plan"]["data"]["traces_dir"] == "/d/traces/cot"  # the plan the driver trains with
    assert cfg["grpo"]["use_dynamic_sampling"] is False and cfg["grpo"]["batch_multiplier"] == 1
    assert cfg["env"] == {TRAIN_ENV: {"reward": {"format": 0.1, "integer_distance": 0.9}},
                          VAL_ENV: {"reward": "exact_match"}}
    assert cfg["data"]["train"] == {"dataset_name": "spatialiq:/d/traces/cot/rl.jsonl",
                                    "data_path": "/d/traces/cot/rl.jsonl", "split": "rl", "env_name": TRAIN_ENV}
    assert cfg["data"]["validation"]["split"] == "val" and cfg["data"]["validation"]["env_name"] == VAL_ENV
    assert cfg["policy"]["model_name"] == "/out/sft_hf" == cfg["policy"]["tokenizer"]["name"]
    assert cfg["checkpointing"]["checkpoint_dir"] == "/out/x/nemo_rl/rl/checkpoints"
    assert cfg["checkpointing"]["metric_name"] == "val:accuracy" and cfg["checkpointing"]["save_optimizer"]
    assert cfg["checkpointing"]["save_consolidated"] is True


def test_a_recipe_file_is_recorded_by_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "r.yaml").write_text((SHIPPED_RECIPES / "sft_cot_7b.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    cfg = build("r.yaml", "sft", 1, 4).config
    assert {k: v for k, v in cfg["spatialiq"].items() if k != "plan"} == {
        "recipe": str(tmp_path / "r.yaml"), "recipe_overrides": [], "phase": "sft"}


def test_without_validation_nothing_validates():
    off = ["data.eval_split=null", "rl.validation.every_steps=null", "sft.validation.every_steps=null",
           "sft.validation.early_stopping_patience=null", "sft.validation.early_stopping_min_delta=0"]
    rl = build("dapo_tight_7b", "rl", 1, 4, overrides=off).config
    assert rl["data"]["validation"] is None and list(rl["env"]) == [TRAIN_ENV]
    assert rl["grpo"]["val_period"] == 0 and rl["checkpointing"]["metric_name"] is None
    sft = build("dapo_tight_7b", "sft", 1, 4, overrides=off).config
    assert sft["data"]["validation"] is None and sft["checkpointing"]["metric_name"] is None
    assert (sft["sft"]["val_period"], sft["sft"]["val_at_start"], sft["sft"]["val_at_end"]) == (0, False, False)


def test_recipe_fields_reach_the_config():
    """Betas, warm-up start, validation periods and sizes, sequence budget and refill rounds come from the recipe."""
    changed = ["rl.optimizer.adam_beta2=0.95", "rl.optimizer.warmup_start_factor=0.2", "rl.validation.every_steps=10",
               "rl.validation.max_samples=32", "vllm.max_model_len=3072", "rl.dynamic_sampling.max_refill_rounds=3",
               "sft.optimizer.lr_scheduler_type=constant_with_warmup", "sft.optimizer.warmup_steps=4",
               "sft.validation.every_steps=25", "sft.validation.max_samples=40", "logging.save_steps=50"]
    rl = build("dapo_tight_7b", "rl", 1, 4, overrides=changed).config
    assert rl["policy"]["optimizer"]["kwargs"]["betas"] == [0.9, 0.95]
    assert rl["policy"]["scheduler"][0]["kwargs"] == {"start_factor": 0.2, "end_factor": 1.0, "total_iters": 50}
    assert (rl["grpo"]["val_period"], rl["grpo"]["max_val_samples"], rl["grpo"]["val_batch_size"]) == (10, 32, 32)
    assert rl["policy"]["max_total_sequence_length"] == 3072 == rl["policy"]["generation"]["vllm_cfg"]["max_model_len"]
    assert rl["grpo"]["dynamic_sampling_max_gen_batches"] == 3
    sft = build("dapo_tight_7b", "sft", 1, 4, overrides=changed).config
    assert sft["policy"]["optimizer"]["kwargs"]["betas"] == [0.9, 0.98]  # the recipe's SFT betas, as released
    assert sft["policy"]["scheduler"][0]["kwargs"]["start_factor"] == 1e-9  # warm-up from zero, as TRL's
    assert (sft["sft"]["val_period"], sft["sft"]["val_batches"], sft["sft"]["val_global_batch_size"]) == (25, 5, 8)


def test_refill_rounds_and_nemo_rls_cap_mean_the_same_batch_count():
    """NeMo-RL v0.7.0 keeps generating after batch k while k <= dynamic_sampling_max_gen_batches, so a cap of N is
    N + 1 generation batches; TRL's N refill rounds after the first generation are N + 1 batches too."""
    from spatialiq_train.nemo.recipe_values import max_gen_batches

    assert [max_gen_batches(n, True) for n in (1, 2, 10)] == [1, 2, 10]
    with pytest.raises(nkeys.NemoConfigError, match="max_refill_rounds 0: NeMo-RL needs at least 1"):
        build("dapo_tight_7b", "rl", 1, 4, overrides=["rl.dynamic_sampling.max_refill_rounds=0"])
    off = build("dapo_tight_7b", "rl", 1, 4, overrides=["rl.dynamic_sampling.max_refill_rounds=0",
                                                         "rl.dynamic_sampling.enabled=false"]).config
    assert off["grpo"]["use_dynamic_sampling"] is False


def test_key_check_knows_our_section():
    ks = nkeys.load_key_set("grpo")
    assert ks.allows("spatialiq.recipe") and ks.allows("spatialiq.recipe_overrides") and ks.allows("spatialiq.phase")
    assert not ks.allows("spatialiq.traces_dir")
    assert "spatialiq" in nkeys.missing_keys({}, ks)
    assert {"spatialiq.recipe", "spatialiq.phase"} <= set(nkeys.missing_keys({"spatialiq": {}}, ks))
    with pytest.raises(nkeys.NemoConfigError, match="unknown key 'spatialiq.recipee'"):
        nkeys.check_config({"spatialiq": {"recipee": "x"}}, "grpo")


# --- the command ----------------------------------------------------------------------------------------------


def test_cli_writes_checked_yaml_atomically(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    out = tmp_path / "cfg" / "dapo.yaml"
    res = CliRunner().invoke(app, ["recipes", "nemo-rl", "dapo_tight_32b", "--out", str(out), "--nodes", "8",
                                   "--gpus-per-node", "4", "--set", "rl.init_from=/ckpt/sft_hf"])
    assert res.exit_code == 0, res.output
    cfg = yaml.safe_load(out.read_text())
    nkeys.check_config(cfg, "grpo")
    assert cfg["cluster"] == {"gpus_per_node": 4, "num_nodes": 8} and cfg["policy"]["model_name"] == "/ckpt/sft_hf"
    assert out.read_text().startswith("# NeMo-RL v0.7.0") and [p.name for p in out.parent.iterdir()] == ["dapo.yaml"]
    res = CliRunner().invoke(app, ["recipes", "nemo-rl", "sft_cot_32b", "--out", str(tmp_path / "s.yaml"),
                                   "--phase", "sft", "--nodes", "4"])
    assert res.exit_code == 0 and yaml.safe_load((tmp_path / "s.yaml").read_text())["sft"]["val_period"] == 50
    res = CliRunner().invoke(app, ["recipes", "nemo-rl", "sft_cot_7b", "--out", str(tmp_path / "b.yaml"),
                                   "--phase", "sft", "--nodes", "8"])
    assert res.exit_code == 2 and "--nodes 8" in res.output and not (tmp_path / "b.yaml").exists()


def test_cli_refuses_a_directory_as_out_and_leaves_nothing_behind(tmp_path):
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    out = tmp_path / "cfg"
    out.mkdir()
    res = CliRunner().invoke(app, ["recipes", "nemo-rl", "dapo_tight_7b", "--out", str(out)])
    assert res.exit_code == 2 and f"--out {out}: a directory" in res.output
    assert list(tmp_path.iterdir()) == [out] and list(out.iterdir()) == []


def test_unknown_reward_names_are_refused_before_a_config_is_built():
    from spatialiq_train.core.errors import UserError

    with pytest.raises(UserError, match=r"recipe: tiny_cpu: reward\.weights\.nope: unknown reward 'nope'"):
        build("tiny_cpu", "rl", 1, 4, overrides=["reward.weights={nope: 1}"])
    with pytest.raises(UserError, match=r"reward\.weights\.no_such_mod:f: .*cannot import module 'no_such_mod'"):
        build("tiny_cpu", "rl", 1, 4, overrides=["reward.weights={'no_such_mod:f': 1}"])


def test_keys_v0_7_0_declares_but_never_reads_are_refused():
    built = build("dapo_tight_7b", "rl", 1, 4)
    for path, where in [("policy.generation_batch_size", ("policy",)), ("logger.tensorboard.log_dir", ("logger",
                                                                                                      "tensorboard")),
                        ("data.add_bos", ("data",))]:
        cfg = json.loads(json.dumps(built.config))
        node = cfg
        for part in where:
            node = node[part]
        node[path.rsplit(".", 1)[1]] = 32 if "size" in path else "x"
        with pytest.raises(nkeys.NemoConfigError, match=rf"key '{re.escape(path)}' has no effect: NeMo-RL v0.7.0 "
                                                          "declares it but its code never reads it"):
            nkeys.check_config(cfg, "grpo")


def test_the_unread_keys_are_what_the_v0_7_0_code_reads(shared_dir, tmp_path):
    """The shipped list of unread keys, recomputed from the vendored v0.7.0 code by the tool."""
    tree = shared_dir / "vendor" / "nemo-rl-v0.7.0"
    if not tree.is_dir():
        pytest.skip("../shared/vendor/nemo-rl-v0.7.0 is absent")
    out = tmp_path / "keys.json"
    shutil.copy2(nkeys.KEYS_FILE, out)
    subprocess.run([sys.executable, str(ROOT / "tools" / "nemo_rl_keys.py"), str(tree), "--refresh-unread",
                    "--out", str(out)], check=True, capture_output=True)
    assert json.loads(out.read_text()) == json.loads(nkeys.KEYS_FILE.read_text())
    unread = json.loads(out.read_text())["algorithms"]["grpo"]["unread"]
    assert {"policy.generation_batch_size", "data.add_bos", "logger.tensorboard.log_dir"} <= set(unread)


def test_recipes_nemo_rl_refuses_what_the_driver_refuses_before_writing(tmp_path):
    """`recipes nemo-rl` and the driver share one held-out check (contract.check_held_out_plan), so `DRY_RUN=1`
    job scripts catch a validation split that is (or shares structures with) the training split."""
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    out = tmp_path / "dapo.yaml"
    res = CliRunner().invoke(app, ["recipes", "nemo-rl", "dapo_tight_7b", "--out", str(out), "--set",
                                   "data.eval_split=rl"])
    assert res.exit_code == 2 and "data.eval_split 'rl' is also a training split" in res.output, res.output
    assert not out.exists()
    traces = tmp_path / "traces"  # trace files on this machine: their structures are compared, as the driver does
    traces.mkdir()
    (traces / "rl.jsonl").write_text('{"structure_id": "s1"}\n{"structure_id": "s2"}\n')
    (traces / "val.jsonl").write_text('{"structure_id": "s2"}\n{"structure_id": "s3"}\n')
    res = CliRunner().invoke(app, ["recipes", "nemo-rl", "dapo_tight_7b", "--out", str(out), "--set",
                                   f"data.traces_dir={traces}"])
    assert res.exit_code == 2 and "val.jsonl shares 1 of its 2 structures with training split 'rl'" in res.output
    assert not out.exists()
    (traces / "val.jsonl").write_text('{"structure_id": "s3"}\n')
    res = CliRunner().invoke(app, ["recipes", "nemo-rl", "dapo_tight_7b", "--out", str(out), "--set",
                                   f"data.traces_dir={traces}"])
    assert res.exit_code == 0 and out.is_file(), res.output


@pytest.mark.parametrize("name", SHIPPED)
def test_the_generated_batch_is_the_recipes(name):
    """grpo.num_prompts_per_step x num_generations_per_prompt = policy.train_global_batch_size, all from the recipe
    (rl.prompts_per_step, rl.num_generations); tiny_cpu: the TRL batch of 4 prompts x 8 completions."""
    recipe = load_recipe(SHIPPED_RECIPES / f"{name}.yaml")
    cfg = build(name, "rl", 1, 1, overrides=CLUSTER_SETS.get(name, [])).config
    g, pol = cfg["grpo"], cfg["policy"]
    want = recipe.rl.prompts_per_step or 8
    assert (g["num_prompts_per_step"], g["num_generations_per_prompt"]) == (want, recipe.rl.num_generations)
    assert pol["train_global_batch_size"] == want * recipe.rl.num_generations
    if name == "tiny_cpu":
        assert (want, pol["train_global_batch_size"]) == (4, 32)  # the TRL batch: 4 prompts x 8 completions
    assert cfg["data"]["num_workers"] == 0


@pytest.mark.parametrize(("baseline", "std", "loo", "normalize"), [
    ("group_mean", "none", False, False), ("group_mean", "group", False, True),
    ("group_mean", "leave_one_out", False, True), ("leave_one_out", "none", True, False),
    ("leave_one_out", "group", True, True), ("leave_one_out", "leave_one_out", True, True)])
def test_rl_advantage_maps_to_v070s_estimator_switches(baseline, std, loo, normalize):
    g = build("dapo_tight_7b", "rl", 1, 4, overrides=[f"rl.advantage.baseline={baseline}",
                                                      f"rl.advantage.std={std}"]).config["grpo"]
    assert (g["use_leave_one_out_baseline"], g["normalize_rewards"]) == (loo, normalize)
    assert g["adv_estimator"] == {"name": "grpo", "use_leave_one_out_baseline": loo, "normalize_rewards": normalize,
                                  "minus_baseline": True}


def test_a_run_device_nemo_rl_does_not_use_is_said_not_dropped():
    """run.device chooses a TRL run's device; NeMo-RL's workers decide theirs: the generator says so."""
    said = [n for n in build("dapo_tight_7b", "rl", 1, 4, overrides=["run.device=cpu"]).notes if "run.device" in n]
    assert said == ["run.device = 'cpu' is not used by NeMo-RL: its workers decide the device (run.device chooses "
                    "a TRL run's)"]
    assert not [n for n in build("dapo_tight_7b", "rl", 1, 4).notes if "run.device" in n]  # auto: nothing to say
