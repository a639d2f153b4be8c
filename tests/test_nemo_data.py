"""The NeMo-RL data processor: trace rows -> DatumSpec dicts, the same prompt and image tokens as the TRL path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _train_support import one_thread, tiny_model_dir, tiny_recipe, trace_row
from PIL import Image

from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT
from spatialiq_train.nemo.data import DatumError, datum_processor, load_rows

VIEW = 512
"""A 512x512 view: 256 image tokens under the budget saved with the tiny processor (200,704 pixels, what NeMo-RL
would apply: it loads processors with their saved defaults), 16 under tiny_cpu's 112x112 budget."""


def _write(root: Path, n: int = 2, size: int = VIEW, system: str | None = COT_SYSTEM_PROMPT) -> Path:
    rng = np.random.default_rng(0)
    (root / "img").mkdir(parents=True, exist_ok=True)
    (root / "traces").mkdir(exist_ok=True)
    lines = []
    for i in range(n):
        rel = f"img/v{i}.png"
        Image.fromarray((rng.random((size, size, 3)) * 255).astype("uint8")).save(root / rel)
        row = trace_row(rel, answer=3 + i, structure_id=f"s{i}", system=system)
        row.update({"task2": 1, "num_hidden_blocks": 0})
        lines.append(json.dumps(row))
    (root / "traces" / "rl.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root / "traces"


def _trl_prompt(row: dict[str, Any], processor: Any) -> Any:
    """What the TRL GRPO trainer tokenizes for this row (trl's prepare_multimodal_messages + the chat template)."""
    from trl.data_utils import prepare_multimodal_messages

    with Image.open(row["images"][0]) as im:
        image = im.convert("RGB")
    messages = prepare_multimodal_messages(row["prompt"], images=[image])
    out = processor.apply_chat_template(conversation=[messages], add_generation_prompt=True, tokenize=True,
                                        return_dict=True)
    return out


@pytest.fixture(scope="module")
def processors() -> tuple[Any, Any]:
    """(default-budget processor as NeMo-RL loads it, recipe-budget processor as the TRL path loads it)."""
    from spatialiq_train.core.processor import load_processor

    one_thread()
    recipe = tiny_recipe()
    folder = tiny_model_dir()
    return load_processor(folder), load_processor(folder, recipe.model.min_pixels, recipe.model.max_pixels)


def test_rl_datum_matches_the_trl_prompt_token_for_token(tmp_path: Path, processors: tuple[Any, Any]) -> None:
    import torch

    nemo_proc, trl_proc = processors
    recipe = tiny_recipe()
    traces = _write(tmp_path)
    rows = load_rows(traces, "rl", tmp_path, "rl")
    fn = datum_processor(tmp_path, recipe.model.min_pixels, recipe.model.max_pixels, "rl")
    datum = fn(rows[0], None, nemo_proc, 2048, 0)

    ids = torch.cat([m["token_ids"] for m in datum["message_log"]])
    trl = _trl_prompt(rows[0], trl_proc)
    trl_ids = torch.as_tensor(trl["input_ids"][0])
    pad = nemo_proc.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((ids == pad).sum()) == int((trl_ids == pad).sum()) == 16
    assert ids.tolist() == trl_ids.tolist()
    assert datum["length"] == len(ids)
    assert [m["role"] for m in datum["message_log"]] == ["system", "user"]
    assert COT_SYSTEM_PROMPT in datum["message_log"][0]["content"]
    user = datum["message_log"][1]
    assert user["image_grid_thw"].tolist() == [[1, 8, 8]]
    assert torch.equal(torch.as_tensor(user["pixel_values"]), torch.as_tensor(trl["pixel_values"]))
    assert datum["vllm_images"][0].size == (112, 112)
    assert datum["vllm_content"] == nemo_proc.apply_chat_template(
        [{"role": "system", "content": COT_SYSTEM_PROMPT},
         {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many blocks are there?"}]}],
        tokenize=False, add_generation_prompt=True)
    assert datum["extra_env_info"] == {"answer": 3, "task_id": "task_main", "structure_id": "s0", "task2": 1,
                                       "num_hidden_blocks": 0, "task_main": 3}
    assert datum["task_name"] == "spatialiq" and datum["loss_multiplier"] == 1.0 and datum["idx"] == 0


def test_the_trl_dataset_row_tokenizes_like_the_datum(tmp_path: Path, processors: tuple[Any, Any]) -> None:
    """Through the Arrow dataset TRL trains on (placeholders gain ``text: None``), the prompt is the same tokens."""
    import torch
    from trl.data_utils import prepare_multimodal_messages

    from spatialiq_train.train.data import examples_to_dataset

    nemo_proc, trl_proc = processors
    recipe = tiny_recipe()
    rows = load_rows(_write(tmp_path), "rl", tmp_path, "rl")
    datum = datum_processor(tmp_path, recipe.model.min_pixels, recipe.model.max_pixels, "rl")(
        rows[1], None, nemo_proc, 2048, 1)
    row = examples_to_dataset(rows)[1]
    assert row["prompt"][1]["content"][0] == {"type": "image", "text": None}
    messages = prepare_multimodal_messages(row["prompt"], images=row["images"])
    trl = trl_proc.apply_chat_template(conversation=[messages], add_generation_prompt=True, tokenize=True,
                                       return_dict=True)
    ids = torch.cat([m["token_ids"] for m in datum["message_log"]])
    assert ids.tolist() == torch.as_tensor(trl["input_ids"][0]).tolist()


def test_a_row_whose_images_do_not_match_its_placeholders_is_refused(tmp_path: Path) -> None:
    from spatialiq_train.nemo.data import chat_messages

    row = load_rows(_write(tmp_path, n=1), "rl", tmp_path, "rl")[0]
    with pytest.raises(DatumError, match="1 image placeholders and 2 images"):
        chat_messages(row, ["A", "B"], "rl")
    filled = chat_messages(row, ["A"], "rl")
    assert filled[1]["content"] == [{"type": "image", "image": "A"},
                                    {"type": "text", "text": "How many blocks are there?"}]


def test_without_the_resize_the_saved_budget_would_spend_256_tokens(processors: tuple[Any, Any]) -> None:
    from spatialiq_train.core.processor import image_token_count

    nemo_proc, _ = processors
    assert image_token_count(VIEW, VIEW, nemo_proc) == 256


def test_sft_datum_puts_the_target_in_its_own_assistant_turn(tmp_path: Path, processors: tuple[Any, Any]) -> None:
    nemo_proc, _ = processors
    recipe = tiny_recipe()
    traces = _write(tmp_path, n=1)
    (traces / "warmup.jsonl").write_text((traces / "rl.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    rows = load_rows(traces, "warmup", tmp_path, "sft")
    datum = datum_processor(tmp_path, recipe.model.min_pixels, recipe.model.max_pixels, "sft")(
        rows[0], None, nemo_proc, 2048, 5)
    roles = [m["role"] for m in datum["message_log"]]
    assert roles == ["system", "user", "assistant"]
    assistant = datum["message_log"][2]
    assert assistant["content"] == "<answer>3</answer><|im_end|>\n"
    assert datum["message_log"][1]["content"].endswith("<|im_start|>assistant\n")
    assert datum["extra_env_info"] is None and "vllm_content" not in datum and datum["idx"] == 5


def test_over_long_prompt_is_masked_like_nemo_rl(tmp_path: Path, processors: tuple[Any, Any]) -> None:
    nemo_proc, _ = processors
    recipe = tiny_recipe()
    rows = load_rows(_write(tmp_path, n=1), "rl", tmp_path, "rl")
    datum = datum_processor(tmp_path, recipe.model.min_pixels, recipe.model.max_pixels, "rl")(
        rows[0], None, nemo_proc, 32, 0)
    assert datum["loss_multiplier"] == 0.0
    assert all(len(m["token_ids"]) <= 4 for m in datum["message_log"])
    assert datum["message_log"][1]["pixel_values"].shape[0] == 0
    assert datum["vllm_content"] is None and datum["vllm_images"] == []


def test_paths_escaping_the_root_are_refused(tmp_path: Path, processors: tuple[Any, Any]) -> None:
    nemo_proc, _ = processors
    traces = _write(tmp_path / "data", n=1)
    row = json.loads((traces / "rl.jsonl").read_text(encoding="utf-8"))
    row["messages"][1]["content"][0]["image"] = "../outside.png"
    (traces / "rl.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(DatumError, match=r"rl\.jsonl:row 1: .*escapes the dataset root"):
        load_rows(traces, "rl", tmp_path / "data", "rl")
    fn = datum_processor(tmp_path / "data", 3136, 12544, "rl")
    bad = {"prompt": [{"role": "user", "content": "x"}], "images": [str(tmp_path / "outside.png")], "answer": 1}
    with pytest.raises(DatumError, match="escapes the dataset root"):
        fn(bad, None, nemo_proc, 2048, 0)
    with pytest.raises(DatumError, match="is relative"):
        fn({**bad, "images": ["img/v0.png"]}, None, nemo_proc, 2048, 0)


def test_a_processor_that_resizes_again_is_refused(tmp_path: Path) -> None:
    from spatialiq_train.core.processor import load_processor

    rows = load_rows(_write(tmp_path, n=1), "rl", tmp_path, "rl")
    small = load_processor(tiny_model_dir(), 3136, 3136)  # 56x56 at most: it would shrink our 112x112 views
    fn = datum_processor(tmp_path, 3136, 12544, "rl")
    with pytest.raises(DatumError, match="4 image tokens where the recipe's pixel budget gives 16"):
        fn(rows[0], None, small, 2048, 0)


def test_rl_rows_without_answer_are_skipped_and_an_empty_split_is_an_error(tmp_path: Path) -> None:
    traces = _write(tmp_path, n=2)
    lines = (traces / "rl.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    del first["answer"]
    (traces / "rl.jsonl").write_text(json.dumps(first) + "\n" + lines[1] + "\n", encoding="utf-8")
    assert [r["answer"] for r in load_rows(traces, "rl", tmp_path, "rl")] == [4]
    (traces / "rl.jsonl").write_text(json.dumps(first) + "\n", encoding="utf-8")
    with pytest.raises(DatumError, match="no rows usable for rl"):
        load_rows(traces, "rl", tmp_path, "rl")
    with pytest.raises(DatumError, match="does not exist"):
        load_rows(traces, "val", tmp_path, "rl")
