"""The generated ``policy`` section through v0.7.0's DTensor-v2 set-up (``nemo_rl.models.automodel.setup``):
``validate_and_prepare_config`` and ``setup_model_and_optimizer`` build the optimizer and learning-rate schedule
from it. The one fake is the model loader: NeMo Automodel's ``from_pretrained`` places the model on CUDA with
FSDP2, so the test loads the same checkpoint with transformers on the CPU in its place."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
from _nemo_support import CASES, write_all_traces, write_config

from spatialiq_train.core.recipes import load_recipe


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_all_traces(tmp_path_factory.mktemp("siq"))


@pytest.fixture(scope="module")
def process_group() -> Any:
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo")
    yield dist
    dist.destroy_process_group()


class CpuPlacement:
    """In place of NeMo Automodel's GPU loader: the same checkpoint, loaded by transformers on the CPU."""

    kwargs: dict[str, Any] = {}

    @classmethod
    def from_pretrained(cls, name: str, **kwargs: Any) -> Any:
        from transformers import AutoModelForImageTextToText

        cls.kwargs = kwargs
        return AutoModelForImageTextToText.from_pretrained(name)


def _build(policy: dict[str, Any]) -> Any:
    from _cpu_workers import cpu_distributed_context
    from nemo_rl.algorithms.utils import get_tokenizer
    from nemo_rl.models.automodel import setup as automodel_setup

    processor = get_tokenizer(policy["tokenizer"], get_processor=True)
    runtime = automodel_setup.validate_and_prepare_config(policy, processor, 0)._replace(model_class=CpuPlacement)
    context = cpu_distributed_context()
    return automodel_setup.setup_model_and_optimizer(policy, processor.tokenizer, runtime, context,
                                                     checkpoint_manager=None, is_vlm=True, init_optimizer=True)


def _recipe_lr(recipe: Any, phase: str, step: int) -> float:
    """The learning rate the recipe asks for after ``step`` optimizer steps (linear warm-up from the start
    factor, then constant; read from the recipe, not from the NeMo-RL mapping)."""
    opt = (recipe.rl if phase == "rl" else recipe.sft).optimizer
    budget = opt.max_steps if opt.max_steps > 0 else 500
    warm = round(opt.warmup_steps * budget) if 0 < opt.warmup_steps < 1 else int(opt.warmup_steps)
    assert opt.lr_scheduler_type in ("constant", "constant_with_warmup"), "extend this check for decaying schedules"
    if warm == 0 or step >= warm:
        return opt.learning_rate
    start = opt.warmup_start_factor or 1.0 / warm
    return opt.learning_rate * (start + (1.0 - start) * step / warm)


@pytest.mark.parametrize(("name", "phase"), CASES)
def test_policy_section_builds_the_optimizer_and_schedule(name: str, phase: str, data_root: Path, tmp_path: Path,
                                                          process_group: Any) -> None:
    _, written = write_config(name, phase, data_root, tmp_path)
    state = _build(written["policy"])
    recipe = load_recipe(name, written["spatialiq"]["recipe_overrides"])
    opt = (recipe.rl if phase == "rl" else recipe.sft).optimizer
    group = state.optimizer.param_groups[0]
    assert type(state.optimizer).__name__ == "AdamW"
    assert (group["weight_decay"], tuple(group["betas"])) == (opt.weight_decay, (opt.adam_beta1, opt.adam_beta2))
    trainable = sum(p.numel() for p in state.model.parameters() if p.requires_grad)
    assert sum(p.numel() for g in state.optimizer.param_groups for p in g["params"]) == trainable
    for step in range(0, 60):
        assert group["lr"] == pytest.approx(_recipe_lr(recipe, phase, step), rel=1e-6), step
        state.optimizer.step()
        state.scheduler.step()
