"""The recipe's global batch on any number of processes (`core.batch`), the GPU memory plan (`core.memory_plan`),
the phase plan's efficiency settings (`train.plan`) and the FLOP accounting (`core.throughput`): pure functions."""

from __future__ import annotations

import pytest

from spatialiq_train.core import throughput as tp
from spatialiq_train.core.batch import BatchError, divisors, nearest_multiples, rl_batch, sft_batch
from spatialiq_train.core.memory_plan import ModelShape, activation_bytes_per_token, plan_micro_batch, state_bytes
from spatialiq_train.core.recipes import load_recipe, shipped_recipes

QWEN25_VL_7B_TEXT = ModelShape(parameters=8_292_166_656, hidden=3584, intermediate=18944, layers=28, kv_width=512)
H200 = 141e9


@pytest.mark.parametrize(("world", "micro", "expected"), [(1, None, (16, 1)), (2, None, (8, 1)), (8, None, (2, 1)),
                                                          (1, 4, (4, 4)), (2, 1, (1, 8)), (8, 1, (1, 2))])
def test_sft_global_batch_is_kept_on_any_world(world: int, micro: int | None, expected: tuple[int, int]) -> None:
    plan = sft_batch(16, world, micro)
    assert (plan.micro_batch, plan.accumulation) == expected
    assert plan.micro_batch * plan.accumulation * world == 16
    assert plan.trl_args() == {"per_device_train_batch_size": expected[0], "gradient_accumulation_steps": expected[1]}


@pytest.mark.parametrize(("world", "micro"), [(1, None), (1, 8), (2, 4), (4, 2), (8, 1), (8, 8)])
def test_rl_plan_generates_the_global_batch_once_per_step(world: int, micro: int | None) -> None:
    plan = rl_batch(8, 8, world, micro)
    assert plan.global_batch == 64 and plan.per_process == 64 // world
    assert plan.micro_batch * plan.accumulation * world == 64
    assert plan.steps_per_generation == plan.accumulation  # one generation batch per optimizer step
    # TRL's generation batch = per_device x world x steps_per_generation: the whole global batch, whole groups
    assert plan.micro_batch * world * plan.steps_per_generation == 64
    assert plan.per_process % 8 == 0


def test_uneven_splits_are_refused_with_the_nearest_valid_choices() -> None:
    with pytest.raises(BatchError, match=r"global_batch_size = 16 .* 3 processes: the nearest valid global batches "
                                         r"are 15, 18, or run on 1, 2, 4, 8, 16 process"):
        sft_batch(16, 3, None)
    with pytest.raises(BatchError, match=r"rl.prompts_per_step = 8 .* 3 processes .* nearest valid values are 6, 9, "
                                         r"or run on 1, 2, 4, 8 process"):
        rl_batch(8, 8, 3, None)
    with pytest.raises(BatchError, match=r"rl.optimizer.micro_batch_size = 3 does not divide the 32 completions .* "
                                         r"valid micro-batch sizes are 1, 2, 4, 8, 16, 32"):
        rl_batch(8, 8, 2, 3)
    with pytest.raises(BatchError, match=r"sft.optimizer.micro_batch_size = 32 .* valid micro-batch sizes are 1, 2, "
                                         r"4, 8, 16"):
        sft_batch(16, 1, 32)
    assert divisors(12) == [1, 2, 3, 4, 6, 12] and nearest_multiples(16, 3) == [15, 18]
    assert nearest_multiples(1, 4) == [4]


def test_every_shipped_recipe_splits_on_1_2_and_8_processes() -> None:
    from spatialiq_train.train.plan import phase_plan

    for path in shipped_recipes():
        recipe = load_recipe(path)
        if path.stem.startswith("tiny_cpu"):
            continue  # the CPU recipes: 4 prompts, 1 or 2 processes (tests/test_batch_invariance.py)
        for world in (1, 2, 8):
            for phase in ("sft", "rl"):
                plan = phase_plan(recipe, phase, gpu=False, world=world).batch
                expected = (recipe.sft.optimizer.global_batch_size if phase == "sft"
                            else recipe.rl.prompts_per_step * recipe.rl.num_generations)
                assert plan.micro_batch * plan.accumulation * world == expected, (path.stem, phase, world)


def test_memory_plan_picks_the_largest_micro_batch_that_fits() -> None:
    shape = QWEN25_VL_7B_TEXT
    # full fine-tuning in bf16: weights + grads + two AdamW moments = 8 bytes a parameter, + 2 for a reference
    assert state_bytes(shape, 2, 1.0, False) == shape.parameters * 8
    assert state_bytes(shape, 2, 1.0, True) == shape.parameters * 10
    assert state_bytes(shape, 2, 0.0, False) == shape.parameters * 2  # LoRA: frozen base weights only
    assert activation_bytes_per_token(shape, 2, True, False) < activation_bytes_per_token(shape, 2, False, True) < \
        activation_bytes_per_token(shape, 2, False, False)
    sft = plan_micro_batch(shape, 16, 613, H200)  # dapo_tight_7b SFT on one H200: 16 sequences of ~613 tokens
    assert sft.fits and not sft.gradient_checkpointing and sft.micro_batch in (4, 8)
    assert sft.estimate_gib <= 0.8 * H200 / 2**30
    bigger = plan_micro_batch(shape, 16, 613, H200, liger=True)
    assert bigger.micro_batch >= sft.micro_batch
    rl = plan_micro_batch(shape, 64, 1300, H200, reference=True)  # RL: 64 completions of ~1,300 tokens
    assert rl.fits and not rl.gradient_checkpointing and 64 % rl.micro_batch == 0
    tight = plan_micro_batch(shape, 64, 4000, 110e9, reference=True)  # long sequences, less memory: checkpointing
    assert tight.gradient_checkpointing and tight.fits
    hopeless = plan_micro_batch(shape, 64, 1300, 80e9, reference=True)  # 83 GB of state
    assert not hopeless.fits and hopeless.micro_batch == 1 and hopeless.gradient_checkpointing
    # 32B (ZeRO-3 on 8 H200s): the state of 33.5 B parameters fits only partitioned over the 8 processes
    b32 = ModelShape(parameters=33_500_000_000, hidden=5120, intermediate=27648, layers=64, kv_width=1024)
    assert not plan_micro_batch(b32, 8, 1400, H200, reference=True).fits
    sharded = plan_micro_batch(b32, 8, 1400, H200, reference=True, state_shards=8)
    assert sharded.fits and sharded.state_gib == pytest.approx(33.5e9 * 10 / 8 / 2**30)
    with pytest.raises(ValueError, match="share >= 1"):
        plan_micro_batch(shape, 0, 10, H200)


def test_phase_plan_efficiency_settings_are_wired(monkeypatch: pytest.MonkeyPatch) -> None:
    from spatialiq_train.train import plan as plan_mod
    from spatialiq_train.train.mapper import config_kwargs

    recipe = load_recipe("dapo_tight_7b")
    cpu = plan_mod.phase_plan(recipe, "rl", gpu=False, world=1)
    x = cpu.execution
    assert (x.gradient_checkpointing, x.liger_kernel, cpu.batch.micro_source) == (False, False, "whole share")
    assert "use_liger_kernel" not in config_kwargs(cpu, "out") and not x.padding_free
    monkeypatch.setattr(plan_mod, "liger_importable", lambda: True)
    gpu = plan_mod.phase_plan(recipe, "rl", gpu=True, world=1, shape=QWEN25_VL_7B_TEXT, device_bytes=H200)
    args = config_kwargs(gpu, "out")
    assert args["use_liger_kernel"] is True and args["liger_kernel_config"]["fused_linear_cross_entropy"] is False
    assert args["liger_kernel_config"]["rms_norm"] and args["liger_kernel_config"]["swiglu"]
    assert gpu.batch.micro_source == "memory plan" and gpu.provenance["execution.gradient_checkpointing"] == "hardware"
    assert args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] == 64
    assert args["steps_per_generation"] == args["gradient_accumulation_steps"]
    assert gpu.record()["memory"]["micro_batch"] == gpu.batch.micro_batch
    forced = load_recipe("dapo_tight_7b", ["rl.optimizer.micro_batch_size=2", "model.liger_kernel=false",
                                           "rl.optimizer.gradient_checkpointing=true"])
    p = plan_mod.phase_plan(forced, "rl", gpu=True, world=8, shape=QWEN25_VL_7B_TEXT, device_bytes=H200)
    assert (p.batch.micro_batch, p.batch.accumulation, p.execution.gradient_checkpointing,
            p.execution.liger_kernel) == (2, 4, True, False)
    monkeypatch.setattr(plan_mod, "liger_importable", lambda: False)
    with pytest.raises(ValueError, match="model.liger_kernel is true but liger_kernel is not installed"):
        plan_mod.phase_plan(load_recipe("dapo_tight_7b", ["model.liger_kernel=true"]), "sft", gpu=True, world=1)
    # colocated vLLM keeps its share while RL trains, unless sleep mode frees it
    monkeypatch.setattr(plan_mod.importlib.util, "find_spec", lambda name: object() if name == "vllm" else None)
    on_gpu = {phase: plan_mod.phase_plan(recipe, phase, gpu=True, world=1) for phase in ("sft", "rl")}
    assert on_gpu["rl"].vllm_training_share == 0.6 and on_gpu["sft"].vllm_training_share == 0.0
    assert plan_mod.phase_plan(load_recipe("dapo_tight_32b"), "rl", gpu=True, world=1).vllm_training_share == 0.0
    assert on_gpu["rl"].memory_open  # the memory plan sizes the micro-batch once the model is known
    monkeypatch.undo()
    monkeypatch.setattr(plan_mod, "liger_importable", lambda: False)
    no_shape = plan_mod.phase_plan(recipe, "sft", gpu=True, world=1)
    assert (no_shape.batch.micro_batch, no_shape.execution.gradient_checkpointing) == (1, True)


def test_the_device_is_decided_once_from_the_recipe_and_the_machine() -> None:
    from spatialiq_train.train import plan as plan_mod

    cpu_asked = plan_mod.phase_plan(load_recipe("dapo_tight_7b", ["run.device=cpu"]), "rl", gpu=True, world=1)
    assert cpu_asked.execution.device == "cpu" and cpu_asked.provenance["execution.device"] == "recipe"
    assert not cpu_asked.memory_open and cpu_asked.vllm_training_share == 0.0 and not cpu_asked.generation.vllm
    auto = plan_mod.phase_plan(load_recipe("dapo_tight_7b"), "rl", gpu=False, world=1)
    assert auto.execution.device == "cpu" and auto.provenance["execution.device"] == "hardware"
    with pytest.raises(ValueError, match="run.device is 'cuda' but torch sees no CUDA device"):
        plan_mod.phase_plan(load_recipe("dapo_tight_7b", ["run.device=cuda"]), "sft", gpu=False, world=1)


def test_flop_factors_and_token_counts() -> None:
    assert tp.flops_factor("sft") == 6
    assert tp.flops_factor("rl") == 6 and tp.flops_factor("rl", reference=True) == 8
    assert tp.flops_factor("rl", reference=True, old_logprobs=True) == 10
    with pytest.raises(ValueError, match="phase"):
        tp.flops_factor("dpo")
    # TRL: one generation batch per optimizer step, one iteration -> no old-logp forward; reuse or IS -> one
    assert tp.rl_flops_factor_trl(0.05, 4, 4, 1) == 8
    assert tp.rl_flops_factor_trl(0.0, 4, 4, 1) == 6
    assert tp.rl_flops_factor_trl(0.05, 4, 8, 1) == 10  # a generation batch serves two optimizer steps
    assert tp.rl_flops_factor_trl(0.05, 4, 2, 1) == 8  # two generation batches per optimizer step: on-policy
    assert tp.rl_flops_factor_trl(0.05, 4, 4, 2) == 10  # num_iterations 2
    assert tp.rl_flops_factor_trl(0.05, 4, 4, 1, vllm_importance_sampling=True) == 10
    assert tp.sequence_tokens(300, 1024) == 1324 and tp.step_tokens(300, 1024, 64) == 64 * 1324
    with pytest.raises(ValueError):
        tp.sequence_tokens(-1, 3)
    assert tp.step_flops(6, 10, 100) == 6000.0


def test_mfu_and_peaks() -> None:
    assert tp.peak_tflops("NVIDIA H200") == 989.0 and tp.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert tp.peak_tflops("NVIDIA GB200") == 2500.0 and tp.peak_tflops("NVIDIA B200") == 2250.0
    assert tp.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and tp.peak_tflops("cpu") is None
    # 8.29e9 parameters, 6 FLOPs each per token, 908 tokens/s on one H200: the first GPU run's SFT, 4.6 %
    assert tp.mfu(6, 8_292_166_656, 908.0, 989.0) == pytest.approx(0.0457, abs=5e-4)
    assert tp.mfu(6, 10, 1.0, None) is None and tp.mfu(6, 10, float("nan"), 989.0) is None
    assert tp.mfu(8, 10**9, 1e3, 989.0, devices=2) == pytest.approx(8e12 / (2 * 989e12))
    row = tp.perf_row(tokens=2000, seconds=4.0, devices=2, factor=8, parameters=10**9, peak=989.0,
                      peak_memory_gb=12.5, generation_s=1.0, steps=2)
    assert row[tp.PERF_TOKENS_PER_S] == 500 and row[tp.PERF_TOKENS_PER_S_PER_GPU] == 250
    assert row[tp.PERF_STEP_S] == 2 and row[tp.PERF_GENERATION_S] == 0.5 and row[tp.PERF_TRAINING_S] == 1.5
    assert row[tp.PERF_GENERATION_SHARE] == 0.25 and row[tp.PERF_PEAK_MEMORY_GB] == 12.5
    assert row[tp.PERF_MFU] == pytest.approx(8 * 1e9 * 500 / (2 * 989e12))
    assert tp.PERF_MFU not in tp.perf_row(tokens=1, seconds=1, devices=1, factor=6, parameters=1, peak=None)


def test_a_resume_may_change_the_hardware_keys_only(tmp_path) -> None:  # noqa: ANN001
    """Micro-batch, checkpointing and Liger fit a run to its GPUs; the record lets a resume change them, not the
    global batch."""
    from spatialiq_train.core.recipes import RecipeError
    from spatialiq_train.train import record

    record.write_record(tmp_path, load_recipe("dapo_tight_7b"))
    moved = load_recipe("dapo_tight_7b", ["rl.optimizer.micro_batch_size=2", "model.liger_kernel=false",
                                          "rl.optimizer.gradient_checkpointing=true"])
    assert set(record.check_phase_record(tmp_path, moved, "rl", extend=False)) == {
        "rl.optimizer.micro_batch_size", "model.liger_kernel", "rl.optimizer.gradient_checkpointing"}
    with pytest.raises(RecipeError, match=r"rl.prompts_per_step differ"):
        record.check_phase_record(tmp_path, load_recipe("dapo_tight_7b", ["rl.prompts_per_step=4"]), "rl", False)
