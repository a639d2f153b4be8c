"""How large a micro-batch fits on one GPU, and whether gradient checkpointing is needed for it (pure).

An estimate, not a measurement, made before anything is loaded, from the model's shape and the device's memory:

- model state: weights in the training dtype for every parameter; for the trainable ones also their gradients
  and AdamW's two moments (torch keeps them in the parameter's dtype: bf16 when the model is loaded in bf16), so
  ``weight_bytes`` x (1 + 3 x trainable share) per parameter; a KL reference model adds its weights;
- activations kept for the backward, per token and decoder layer, in elements: the residual stream and the two
  norms' outputs, q, k, v and the rotated q and k, the attention output and its projection input (about 10 x
  hidden + 3 x key-value width), and the SwiGLU MLP's gate, up, activation and product (4 x intermediate); Liger's
  fused RMSNorm and SwiGLU do not keep the norms' float32 copies and the activation (2 x hidden + 1 x intermediate
  fewer). With gradient checkpointing only each layer's input (hidden) is kept, plus one layer's full activations
  while it is recomputed. The loss head keeps no logits (TRL computes per-token log-probabilities in tiles).

Under DeepSpeed ZeRO-3 the model state is divided by the number of processes it is partitioned over (the layer
being gathered is left out of the estimate). The plan takes the largest micro-batch that divides the process's
share of the global batch and fits under ``usable`` x device memory without checkpointing; only when not even a
micro-batch of one fits does it turn checkpointing on (and then again takes the largest that fits).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from spatialiq_train.core.batch import divisors

USABLE_SHARE = 0.8
"""Share of the device's memory the plan fills (the rest: allocator fragmentation, CUDA context, kernels' scratch)."""


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a decoder: parameter count and the text model's widths."""

    parameters: int
    hidden: int
    intermediate: int
    layers: int
    kv_width: int
    """num_key_value_heads x head_dim."""

    @classmethod
    def from_config(cls, config: Any, parameters: int) -> ModelShape:
        """From a transformers config (its text config for a vision-language model)."""
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        kv = getattr(text, "num_key_value_heads", None) or heads
        return cls(parameters, text.hidden_size, text.intermediate_size, text.num_hidden_layers, kv * head_dim)


@dataclass(frozen=True)
class MemoryPlan:
    micro_batch: int
    gradient_checkpointing: bool
    estimate_gib: float
    """Estimated peak at the chosen micro-batch."""
    state_gib: float
    activation_gib_per_sequence: float
    device_gib: float
    fits: bool
    """False when not even a micro-batch of one fits with checkpointing (the plan is then that, and may fail)."""

    def record(self) -> dict[str, Any]:
        return asdict(self)


def state_bytes(shape: ModelShape, weight_bytes: int, trainable_share: float, reference: bool) -> float:
    """Weights, gradients and AdamW moments, plus a reference model's weights."""
    per_param = weight_bytes * (1 + 3 * trainable_share) + (weight_bytes if reference else 0)
    return shape.parameters * per_param


def activation_bytes_per_token(shape: ModelShape, weight_bytes: int, checkpointing: bool, liger: bool) -> float:
    """Activation memory kept for the backward per token, over all layers."""
    h, i, kv = shape.hidden, shape.intermediate, shape.kv_width
    layer = 10 * h + 3 * kv + 4 * i - ((2 * h + i) if liger else 0)
    if checkpointing:
        return weight_bytes * (h * shape.layers + layer)
    return weight_bytes * layer * shape.layers


def plan_micro_batch(
    shape: ModelShape,
    share: int,
    tokens_per_sequence: int,
    device_bytes: float,
    *,
    weight_bytes: int = 2,
    trainable_share: float = 1.0,
    reference: bool = False,
    liger: bool = False,
    checkpointing: bool | None = None,
    usable: float = USABLE_SHARE,
    state_shards: int = 1,
) -> MemoryPlan:
    """The largest micro-batch dividing ``share`` that fits; checkpointing only when needed (or as forced).
    ``state_shards``: processes the model state is partitioned over (DeepSpeed ZeRO-3: the world size)."""
    if share < 1 or tokens_per_sequence < 1 or device_bytes <= 0 or state_shards < 1:
        raise ValueError(f"memory plan needs share >= 1, tokens >= 1, device memory > 0, shards >= 1 (got {share}, "
                         f"{tokens_per_sequence}, {device_bytes}, {state_shards})")
    state = state_bytes(shape, weight_bytes, trainable_share, reference) / state_shards
    budget = usable * device_bytes
    gib = 2**30
    options = [checkpointing] if checkpointing is not None else [False, True]
    for ckpt in options:
        per_seq = activation_bytes_per_token(shape, weight_bytes, ckpt, liger) * tokens_per_sequence
        fitting = [m for m in divisors(share) if state + m * per_seq <= budget]
        if fitting:
            m = fitting[-1]
            return MemoryPlan(m, ckpt, (state + m * per_seq) / gib, state / gib, per_seq / gib, device_bytes / gib,
                              True)
    ckpt = options[-1]
    per_seq = activation_bytes_per_token(shape, weight_bytes, ckpt, liger) * tokens_per_sequence
    return MemoryPlan(1, ckpt, (state + per_seq) / gib, state / gib, per_seq / gib, device_bytes / gib, False)
