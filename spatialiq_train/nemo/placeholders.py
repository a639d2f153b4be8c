"""Sampled vision placeholder tokens in NeMo-RL v0.7.0's GRPO rollouts: masked before the policy sees them.

Qwen2.5-VL's forward pass counts ``<|image_pad|>`` tokens in ``input_ids`` and fails when they outnumber the image
features ("Image features and image tokens do not match"). A policy sampling at temperature 1 can emit that token
(and the other vision tokens) in a completion; vLLM decodes it as text, but v0.7.0's ``grpo_train`` then feeds the
prompt plus the completion, with the prompt's images, to ``policy.get_logprobs`` and the step fails. TRL guards its
own generation (``suppress_tokens=[image_token_id]``); v0.7.0 builds vLLM's ``SamplingParams`` from a fixed list of
keys with no bad-words or logit-bias entry, so it cannot be told not to sample them. It happened here within six
steps on the tiny model.

So the driver wraps ``grpo.run_multi_turn_rollout``: in each sample's generated (assistant) messages every vision
token id is replaced by the tokenizer's pad token and the sample's ``loss_multiplier`` set to 0. The sample keeps the
reward the environment gave it (its group's baseline and the dynamic-sampling filter see it as generated); it adds
nothing to the loss. Validation rollouts pass through the same wrapper (they have no loss; the replacement is
harmless there). How many samples were masked is logged per rollout, the largest share of a step's rollouts is the
step's metric ``vision_token_masked_share``, and a rollout with more than 1 % of its samples masked stops the run,
naming the likely causes: on a trained Qwen2.5-VL frequent hits mean a failed refit or dummy weights, and masking
them would turn that failure into silent training.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

log = logging.getLogger(__name__)

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen2.5-VL's vision tokens: none may appear in a completion the policy trains on."""


def vision_token_ids(tokenizer: Any) -> list[int]:
    """The ids of :data:`VISION_TOKENS` the tokenizer knows (an unknown token is skipped)."""
    vocab = tokenizer.get_vocab()
    return sorted({int(vocab[t]) for t in VISION_TOKENS if t in vocab})


def mask_sampled_placeholders(batch: Any, ids: Sequence[int], replacement: int) -> int:
    """Replace vision token ids in every sample's assistant messages by ``replacement`` and zero that sample's
    ``loss_multiplier`` (in ``batch``, a NeMo-RL ``BatchedDataDict`` after a rollout); returns how many samples."""
    import torch

    if not ids:
        return 0
    banned = torch.tensor(list(ids))
    hit: list[int] = []
    for i, messages in enumerate(batch["message_log"]):
        for msg in messages:
            if msg.get("role") != "assistant" or "token_ids" not in msg:
                continue
            tokens = msg["token_ids"]
            found = torch.isin(tokens, banned.to(tokens.device))
            if bool(found.any()):
                msg["token_ids"] = torch.where(found, torch.full_like(tokens, replacement), tokens)
                if not hit or hit[-1] != i:
                    hit.append(i)
    if hit and "loss_multiplier" in batch:
        mult = batch["loss_multiplier"].clone()
        mult[torch.tensor(hit)] = 0
        batch["loss_multiplier"] = mult
    return len(hit)


MAX_MASKED_SHARE = 0.01
"""Above this share of a rollout's samples holding a vision token, the run stops (:class:`VisionTokenGuard`)."""
MASKED_SHARE_METRIC = "vision_token_masked_share"
"""The training metric (prefix ``train``) with the largest masked share among the step's rollouts."""
LIKELY_CAUSES = ("the generation engine did not receive the policy's weights (a failed refit: vLLM still holds "
                 "its dummy load_format weights)", "a checkpoint or tokenizer that does not match the model "
                 "(vision token ids shifted)", "generation at a temperature or top_p far from the recipe's")


class VisionTokenMaskError(RuntimeError):
    """Too many sampled completions held a vision token: masking them would hide a broken rollout."""


class VisionTokenGuard:
    """Masks sampled vision tokens in every rollout (:func:`mask_sampled_placeholders`), logs the masked share as
    the training metric :data:`MASKED_SHARE_METRIC`, and stops the run when a rollout's share exceeds
    ``max_share``: a trained Qwen2.5-VL samples these tokens rarely, so frequent hits mean a broken rollout."""

    def __init__(self, tokenizer: Any, max_share: float | None = None) -> None:
        self.ids = vision_token_ids(tokenizer)
        replacement = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if replacement is None or replacement in self.ids:
            raise ValueError("the tokenizer has neither a pad nor an end-of-sequence token outside the vision tokens")
        self.replacement = int(replacement)
        self.max_share = MAX_MASKED_SHARE if max_share is None else max_share
        self._pending: list[float] = []

    def check(self, batch: Any) -> float:
        """Mask one rollout's batch; the masked share, or VisionTokenMaskError above ``max_share``."""
        total = len(batch["message_log"])
        masked = mask_sampled_placeholders(batch, self.ids, self.replacement)
        share = masked / total if total else 0.0
        self._pending.append(share)
        if masked:
            log.warning("%d of %d sampled completions held a vision token (%s): replaced by the pad token and left "
                        "out of the loss (NeMo-RL v0.7.0 cannot take them through the policy's forward pass)",
                        masked, total, ", ".join(VISION_TOKENS))
        if share > self.max_share:
            raise VisionTokenMaskError(
                f"{masked} of {total} sampled completions ({share:.1%}) held a vision token, above the "
                f"{self.max_share:.0%} this run masks; stopped rather than train on a broken rollout. Likely "
                f"causes: {'; '.join(LIKELY_CAUSES)}")
        return share

    def attach(self, logger: Any) -> None:
        """Add :data:`MASKED_SHARE_METRIC` to each training step's metrics as ``logger`` receives them."""
        real = logger.log_metrics

        def log_metrics(metrics: dict[str, Any], step: int, prefix: str | None = "", *args: Any,
                        **kwargs: Any) -> Any:
            if prefix == "train" and "grad_norm" in metrics and self._pending:
                metrics = {**metrics, MASKED_SHARE_METRIC: max(self._pending)}
                self._pending.clear()
            return real(metrics, step, prefix, *args, **kwargs)

        logger.log_metrics = log_metrics

    def installed(self) -> AbstractContextManager[None]:
        """v0.7.0's rollouts followed by :meth:`check`, for the block."""
        from spatialiq_train.nemo.rollouts import after_each_rollout

        return after_each_rollout(lambda batch, args, kwargs: self.check(batch))
