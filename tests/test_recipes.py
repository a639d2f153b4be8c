"""Recipes: every shipped YAML validates, typos name the key and the nearest valid one, overrides, CLI exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.core.recipe_model import Recipe
from spatialiq_train.core.recipes import (
    RecipeError,
    apply_overrides,
    load_recipe,
    parse_override,
    recipe_from_dict,
    recipe_to_yaml,
)

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
SHIPPED = sorted(RECIPES.glob("*.yaml"))
EXPECTED = {"sft_plain_7b", "sft_cot_7b", "dapo_tight_7b", "sft_plain_32b", "sft_cot_32b", "dapo_tight_32b",
            "tiny_cpu", "tiny_cpu_folding"}


def test_every_expected_recipe_is_shipped() -> None:
    assert {p.stem for p in SHIPPED} == EXPECTED


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_recipe_validates_and_round_trips(path: Path) -> None:
    recipe = load_recipe(path)
    assert recipe.name == path.stem
    again = recipe_from_dict(__import__("yaml").safe_load(recipe_to_yaml(recipe)))
    assert again == recipe


@pytest.mark.parametrize("scale", ["7b", "32b"])
def test_paper_values(scale: str) -> None:
    dapo = load_recipe(RECIPES / f"dapo_tight_{scale}.yaml")
    assert (dapo.eval.k, dapo.eval.temperature, dapo.eval.top_p, dapo.eval.max_new_tokens) == (10, 1.0, 1.0, 1024)
    assert dapo.reward.weights == {"format": 0.1, "integer_distance": 0.9}
    assert (dapo.rl.epsilon, dapo.rl.epsilon_high, dapo.rl.loss_type) == (0.2, 0.28, "dapo")
    assert (dapo.rl.beta, dapo.rl.kl_estimator) == (0.05, "k3")
    assert dapo.rl.optimizer.learning_rate == 5e-7 and dapo.rl.optimizer.warmup_steps > 0
    assert dapo.rl.dynamic_sampling.enabled and dapo.rl.overlong.enabled
    assert (dapo.data.sft_split, dapo.data.rl_split) == ("warmup", "rl")
    assert dapo.model.name_or_path == f"Qwen/Qwen2.5-VL-{scale.upper()}-Instruct"
    for kind in ("plain", "cot"):
        sft = load_recipe(RECIPES / f"sft_{kind}_{scale}.yaml")
        assert sft.sft.optimizer.learning_rate == 2e-5 and sft.sft.assistant_only_loss
        assert sft.data.traces_dir.endswith(kind)


def test_misspelled_key_names_path_and_nearest_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrl:\n  epsilon_hgih: 0.3\n  dynamic_sampling:\n    max_refil_rounds: 2\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(bad)
    msg = str(err.value)
    assert str(bad) in msg
    assert "'rl.epsilon_hgih'" in msg and "did you mean 'rl.epsilon_high'" in msg
    assert "'rl.dynamic_sampling.max_refil_rounds'" in msg and "'rl.dynamic_sampling.max_refill_rounds'" in msg


def test_unknown_section_suggests_section() -> None:
    with pytest.raises(RecipeError, match=r"unknown key 'generaton'.*did you mean 'generation'"):
        recipe_from_dict({"name": "x", "generaton": {"temperature": 1.0}})


def test_bad_value_names_key() -> None:
    with pytest.raises(RecipeError, match=r"rl\.loss_type"):
        recipe_from_dict({"name": "x", "rl": {"loss_type": "ppo"}})
    with pytest.raises(RecipeError, match=r"epsilon_high"):
        recipe_from_dict({"name": "x", "rl": {"epsilon": 0.3, "epsilon_high": 0.2}})
    with pytest.raises(RecipeError, match=r"rl.optimizer.global_batch_size: the RL global batch is "
                                          r"rl.prompts_per_step x rl.num_generations = 32 completions"):
        recipe_from_dict({"name": "x", "rl": {"optimizer": {"global_batch_size": 64}, "prompts_per_step": 8,
                                              "num_generations": 4}})


def test_retired_batch_keys_are_refused_with_their_replacement() -> None:
    """per_device_train_batch_size / gradient_accumulation_steps / steps_per_generation: refused, naming the keys
    and values that give the old global batch on 8 processes."""
    with pytest.raises(RecipeError, match=r"1 x 2 x 8 = 16 sequences on 8 processes; write "
                                          r"sft.optimizer.global_batch_size: 16 .*micro_batch_size: 1"):
        recipe_from_dict({"name": "x", "sft": {"optimizer": {"per_device_train_batch_size": 1,
                                                             "gradient_accumulation_steps": 2}}})
    with pytest.raises(RecipeError, match=r"2 x 4 x 8 = 64 completions .* write rl.prompts_per_step: 8 "
                                          r"\(with rl.num_generations: 8\) .* rl.optimizer.micro_batch_size: 2"):
        recipe_from_dict({"name": "x", "rl": {"num_generations": 8, "steps_per_generation": 4, "optimizer": {
            "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4}}})
    with pytest.raises(RecipeError, match=r"rl.steps_per_generation is no longer a recipe key"):
        recipe_from_dict({"name": "x", "rl": {"steps_per_generation": 4}})
    with pytest.raises(RecipeError, match=r"sft.optimizer.global_batch_size: set the sequences"):
        recipe_from_dict({"name": "x", "sft": {"optimizer": {"global_batch_size": None}}})


def test_parse_override_uses_yaml_values() -> None:
    assert parse_override("rl.optimizer.learning_rate=1.0e-6") == (["rl", "optimizer", "learning_rate"], 1e-6)
    assert parse_override("rl.dynamic_sampling.enabled=false") == (["rl", "dynamic_sampling", "enabled"], False)
    assert parse_override("reward.weights={format: 1}") == (["reward", "weights"], {"format": 1})
    assert parse_override("data.eval_split=null") == (["data", "eval_split"], None)
    with pytest.raises(RecipeError, match="KEY.PATH=VALUE"):
        parse_override("rl.optimizer.learning_rate")


def test_overrides_apply_and_validate() -> None:
    data = {"name": "x", "rl": {"beta": 0.05}}
    out = apply_overrides(data, ["rl.beta=0.0", "rl.optimizer.learning_rate=1e-6", "generation.temperature=0.7"])
    assert data["rl"] == {"beta": 0.05}  # input untouched
    recipe = recipe_from_dict(out)
    assert (recipe.rl.beta, recipe.rl.optimizer.learning_rate, recipe.generation.temperature) == (0.0, 1e-6, 0.7)
    with pytest.raises(RecipeError, match="is a value, not a section"):
        apply_overrides(data, ["rl.beta.x=1"])
    with pytest.raises(RecipeError, match="did you mean 'rl.optimizer.learning_rate'"):
        recipe_from_dict(apply_overrides(data, ["rl.learnig_rate=1"]))


def test_defaults_are_the_paper_defaults() -> None:
    r = Recipe(name="defaults")
    assert r.reward.weights == {"format": 0.1, "integer_distance": 0.9}
    assert (r.rl.optimizer.learning_rate, r.sft.optimizer.learning_rate, r.rl.beta) == (5e-7, 2e-5, 0.05)


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    from spatialiq_train.cli import app

    runner = CliRunner()
    files = [str(RECIPES / "tiny_cpu.yaml"), str(RECIPES / "dapo_tight_7b.yaml")]
    ok = runner.invoke(app, ["recipes", "validate", *files])
    assert ok.exit_code == 0, ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsft:\n  learnin_rate: 1\n")
    res = runner.invoke(app, ["recipes", "validate", str(bad)])
    assert res.exit_code != 0
    assert "sft.optimizer.learning_rate" in res.output
    missing = runner.invoke(app, ["recipes", "validate", str(tmp_path / "nope.yaml")])
    assert missing.exit_code != 0
    shown = runner.invoke(app, ["recipes", "show", str(RECIPES / "tiny_cpu.yaml"), "rl.beta=0.125"])
    assert shown.exit_code == 0 and "beta: 0.125" in shown.output


def test_cli_validate_checks_reward_names_against_the_registry(tmp_path: Path) -> None:
    from spatialiq_train.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["recipes", "validate", str(RECIPES / "tiny_cpu.yaml"),
                             "--set", "reward.weights={format: 0.2, exact_match: 0.8}"])
    assert ok.exit_code == 0, ok.output
    res = runner.invoke(app, ["recipes", "validate", str(RECIPES / "tiny_cpu.yaml"),
                              "--set", "reward.weights={formatt: 1.0}"])
    assert res.exit_code != 0
    assert "reward.weights.formatt" in res.output and "integer_distance" in res.output


@pytest.mark.parametrize("value", [0, -8])
def test_max_steps_is_positive_or_minus_one(value: int) -> None:
    with pytest.raises(RecipeError, match="sft.optimizer.max_steps"):
        load_recipe(RECIPES / "tiny_cpu.yaml", [f"sft.optimizer.max_steps={value}"])
    assert load_recipe(RECIPES / "tiny_cpu.yaml", ["rl.optimizer.max_steps=-1"]).rl.optimizer.max_steps == -1


def test_a_shipped_recipe_loads_by_name() -> None:
    assert load_recipe("dapo_tight_7b").name == load_recipe(RECIPES / "dapo_tight_7b.yaml").name
    with pytest.raises(RecipeError, match="shipped recipe name: .*tiny_cpu"):
        load_recipe("dapo_tight_9b")


EXPERIMENTS = sorted((RECIPES / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_recipes_validate_and_load_by_name(path: Path) -> None:
    recipe = load_recipe(path.stem)
    assert recipe.name == path.stem and recipe == load_recipe(path)


@pytest.mark.parametrize("scale", ["7b", "32b"])
def test_dapo_tight_follows_the_released_configuration(scale: str) -> None:
    r = load_recipe(RECIPES / f"dapo_tight_{scale}.yaml").rl
    opt = r.optimizer
    assert (r.prompts_per_step, r.num_generations) == (8, 8)  # released: 8 prompts x 8 = 64 completions a step
    assert opt.global_batch_size is None and opt.micro_batch_size is None  # null: sized to the GPU's memory
    assert (opt.learning_rate, opt.weight_decay, opt.adam_beta1, opt.adam_beta2) == (5e-7, 0.01, 0.9, 0.999)
    assert (opt.lr_scheduler_type, opt.warmup_steps, opt.warmup_start_factor) == ("constant_with_warmup", 50, 0.1)
    assert (opt.max_steps, r.validation.every_steps, r.validation.max_samples) == (500, 20, 64)
    assert (r.advantage.baseline, r.advantage.std) == ("leave_one_out", "leave_one_out")  # as the released runs
    assert (r.dynamic_sampling.max_refill_rounds, r.loss_type, r.prompts_per_step) == (10, "dapo", 8)
    full = load_recipe(RECIPES / f"dapo_tight_{scale}.yaml")
    assert (full.generation.max_completion_length, full.vllm.max_model_len) == (1024, 2048)
    assert (full.generation.temperature, full.generation.top_p) == (1.0, 1.0)
    # 32B: TRL keeps the ZeRO-3 training state on the GPU while vLLM generates (docs/training.md, memory plan)
    # 7B: sleep mode open (null): each engine's way (TRL off, NeMo-RL v0.7.0 on, as released)
    expected = ("colocate", 0.6, None) if scale == "7b" else ("colocate", 0.3, True)
    assert (full.vllm.mode, full.vllm.gpu_memory_utilization, full.vllm.enable_sleep_mode) == expected


@pytest.mark.parametrize("name", ["sft_plain_7b", "sft_cot_7b", "sft_plain_32b", "sft_cot_32b", "dapo_tight_7b",
                                  "dapo_tight_32b"])
def test_sft_follows_the_released_configuration(name: str) -> None:
    s = load_recipe(RECIPES / f"{name}.yaml").sft
    opt = s.optimizer
    assert (opt.learning_rate, opt.adam_beta1, opt.adam_beta2, opt.weight_decay) == (2e-5, 0.9, 0.98, 0.01)
    assert (opt.global_batch_size, opt.micro_batch_size) == (16, None)  # released train_global_batch_size 16
    assert (opt.num_train_epochs, opt.lr_scheduler_type) == (3, "constant")
    assert (s.validation.every_steps, s.validation.early_stopping_patience) == (50, 3)


@pytest.mark.parametrize(("name", "fires"), [("dapo_tight_7b", False), ("dapo_tight_32b", False),
                                             ("dapo_paper_7b", True)])
def test_overlong_shaping_fires_only_in_the_dapo_paper_variant(name: str, fires: bool) -> None:
    from spatialiq_train.train.rl import reward_setup

    recipe = load_recipe(name)
    setup = reward_setup(recipe, base=[(lambda completions, **kw: [0.0] * len(completions), 1.0)])
    shaping = setup.funcs[1]
    assert getattr(shaping, "__name__", "") == "soft_overlong_punishment_reward"
    at_budget = shaping([[0] * recipe.generation.max_completion_length])[0]
    assert (at_budget < 0) is fires


@pytest.mark.parametrize(("weights", "message"), [
    ("{}", "name at least one reward"),
    ("{format: .nan}", "must be finite"),
    ("{format: .inf, integer_distance: 0.9}", "must be finite"),
    ("{format: 0.0, integer_distance: -1.0}", "no positive weight"),
    ("{format: true}", "not a boolean"),
])
def test_cli_validate_refuses_unusable_reward_weights(weights: str, message: str) -> None:
    from spatialiq_train.cli import app

    res = CliRunner().invoke(app, ["recipes", "validate", str(RECIPES / "tiny_cpu.yaml"),
                                   "--set", f"reward.weights={weights}"])
    assert res.exit_code != 0
    assert "reward.weights" in res.output and message in res.output


@pytest.mark.parametrize(("override", "key"), [
    ("sft.optimizer.max_steps=true", "sft.optimizer.max_steps"),
    ("rl.optimizer.max_steps=true", "rl.optimizer.max_steps"),
    ("rl.num_generations=4.0", "rl.num_generations"),
    ("rl.dynamic_sampling.enabled=1", "rl.dynamic_sampling.enabled"),
    ("model.lora.r=2.5", "model.lora.r"),
    ("vllm.enabled=yes_please", "vllm.enabled"),
    ("rl.optimizer.learning_rate=true", "rl.optimizer.learning_rate"),
])
def test_counts_and_switches_are_strict(override: str, key: str) -> None:
    with pytest.raises(RecipeError, match=key.replace(".", r"\.")):
        load_recipe(RECIPES / "tiny_cpu.yaml", [override])


def test_validate_imports_a_dotted_reward_module_only_when_asked(tmp_path: Path, monkeypatch) -> None:
    import sys

    from spatialiq_train.cli import app

    marker = tmp_path / "imported"
    (tmp_path / "preflight_probe_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["recipes", "validate", str(RECIPES / "tiny_cpu.yaml"),
            "--set", "reward.weights={format: 0.5, 'preflight_probe_mod:score': 0.5}"]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert not marker.exists() and "preflight_probe_mod" not in sys.modules
    checked = CliRunner().invoke(app, [*args, "--import-rewards"])
    assert marker.exists()  # imported: and refused, since it registers no reward called `score`
    assert checked.exit_code != 0 and "preflight_probe_mod:score" in checked.output
    sys.modules.pop("preflight_probe_mod", None)


@pytest.mark.parametrize(("override", "key", "message"), [
    ("sft.optimizer.learning_rate=1e8", "sft.optimizer.learning_rate", "below 1"),
    ("rl.optimizer.learning_rate=.inf", "rl.optimizer.learning_rate", "finite"),
    ("sft.optimizer.learning_rate=.nan", "sft.optimizer.learning_rate", "finite"),
    ("sft.optimizer.learning_rate=0", "sft.optimizer.learning_rate", "> 0"),
    ("rl.optimizer.max_grad_norm=.inf", "rl.optimizer.max_grad_norm", "finite"),
    ("rl.optimizer.num_train_epochs=.inf", "rl.optimizer.num_train_epochs", "finite"),
    ("rl.beta=.nan", "rl.beta", "finite"),
    ("rl.optimizer.weight_decay=5", "rl.optimizer.weight_decay", "1"),
    ("rl.epsilon=2", "rl.epsilon", "1"),
    ("generation.temperature=1e9", "generation.temperature", "2"),
    ("eval.temperature=.inf", "eval.temperature", "finite"),
])
def test_non_finite_and_absurd_hyperparameters_are_refused(override: str, key: str, message: str) -> None:
    with pytest.raises(RecipeError, match=key.replace(".", r"\.")) as info:
        load_recipe(RECIPES / "tiny_cpu.yaml", [override])
    assert message in str(info.value)
