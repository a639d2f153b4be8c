"""`spatialiq_train.nemo.placeholders`: sampled vision tokens replaced, their samples out of the loss, others kept."""

from __future__ import annotations

import pytest
import torch

from spatialiq_train.nemo.placeholders import VISION_TOKENS, mask_sampled_placeholders, vision_token_ids
from spatialiq_train.tiny import build_tokenizer

PAD, IMAGE, VIDEO = 0, 5, 6


def _batch(completions: list[list[int]]) -> dict:
    logs = [[{"role": "user", "token_ids": torch.tensor([1, IMAGE, IMAGE, 2])},
             {"role": "assistant", "token_ids": torch.tensor(c)}] for c in completions]
    return {"message_log": logs, "loss_multiplier": torch.ones(len(completions))}


def test_only_samples_with_a_sampled_vision_token_change() -> None:
    batch = _batch([[9, 10, 11], [9, IMAGE, 11], [VIDEO, 10, IMAGE]])
    assert mask_sampled_placeholders(batch, [IMAGE, VIDEO], PAD) == 2
    out = [m[1]["token_ids"].tolist() for m in batch["message_log"]]
    assert out == [[9, 10, 11], [9, PAD, 11], [PAD, 10, PAD]]
    assert batch["loss_multiplier"].tolist() == [1.0, 0.0, 0.0]
    # the prompt's own image tokens are the images' placeholders: never touched
    assert all(m[0]["token_ids"].tolist() == [1, IMAGE, IMAGE, 2] for m in batch["message_log"])


def test_a_clean_batch_is_left_as_it_is() -> None:
    batch = _batch([[9, 10], [11, 12]])
    before = batch["loss_multiplier"]
    assert mask_sampled_placeholders(batch, [IMAGE, VIDEO], PAD) == 0
    assert batch["loss_multiplier"] is before and before.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("token", VISION_TOKENS)
def test_the_tiny_tokenizer_knows_every_vision_token(token: str) -> None:
    tok = build_tokenizer()
    assert tok.convert_tokens_to_ids(token) in vision_token_ids(tok)
