"""Trace JSONL -> TRL rows: message handling, image paths inside the data root, errors naming file and line,
and the metrics.jsonl helpers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _train_support import trace_row, write_traces

from spatialiq_train.core.metrics import read_metrics
from spatialiq_train.core.traces import TraceError, read_traces, trace_to_example
from spatialiq_train.train.data import load_split
from spatialiq_train.train.logging import namespaced


def test_sft_row_has_prompt_completion_and_resolved_image(tmp_path: Path) -> None:
    ex = trace_to_example(trace_row("img/a.png", 7, "s1"), tmp_path, "sft")
    assert ex["prompt"] == [
        {"role": "system", "content": [{"type": "text", "text": "Answer in tags."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many blocks are there?"}]}]
    assert ex["completion"] == [{"role": "assistant", "content": [{"type": "text", "text": "<answer>7</answer>"}]}]
    assert ex["images"] == [str((tmp_path / "img" / "a.png").resolve())]
    assert "answer" not in ex


def test_typed_parts_keep_the_trace_order_and_trl_fills_them(tmp_path: Path) -> None:
    """No flattening: an image after the text stays after it, and TRL fills each placeholder from `images`."""
    from trl.data_utils import prepare_multimodal_messages

    row = trace_row("img/a.png", 7, "s1", system=None)
    row["messages"][0]["content"] = [{"type": "text", "text": "Look:"}, {"type": "image", "image": "img/a.png"},
                                     {"type": "text", "text": "How many?"}, {"type": "image", "image": "img/b.png"}]
    ex = trace_to_example(row, tmp_path, "rl")
    assert [p["type"] for p in ex["prompt"][0]["content"]] == ["text", "image", "text", "image"]
    assert ex["images"] == [str((tmp_path / "img" / n).resolve()) for n in ("a.png", "b.png")]
    filled = prepare_multimodal_messages(ex["prompt"], images=["A", "B"])
    assert [p.get("image", p.get("text")) for p in filled[0]["content"]] == ["Look:", "A", "How many?", "B"]


@pytest.mark.parametrize(("part", "message"), [
    ({"type": "image"}, r"content\[0\] must be a text part or an image part with a path"),
    ({"type": "video", "video": "v.mp4"}, r"content\[0\] must be a text part"),
    ("loose text", r"content\[0\] must be a text part"),
])
def test_unknown_or_empty_parts_are_named(tmp_path: Path, part: object, message: str) -> None:
    row = trace_row("img/a.png", 7, "s1")
    row["messages"][1]["content"] = [part]
    with pytest.raises(TraceError, match=r"row 9: messages\[1\]: " + message):
        trace_to_example(row, tmp_path, "rl", where="row 9")


def test_an_image_outside_a_user_message_is_refused(tmp_path: Path) -> None:
    row = trace_row("img/a.png", 7, "s1")
    row["messages"][2]["content"].append({"type": "image", "image": "img/a.png"})
    with pytest.raises(TraceError, match=r"messages\[2\] \(assistant\) holds an image"):
        trace_to_example(row, tmp_path, "sft")


def test_rl_row_carries_answer_and_ground_truth(tmp_path: Path) -> None:
    row = {**trace_row("img/a.png", 7, "s1", system=None), "task5": 4, "num_hidden_blocks": 3}
    ex = trace_to_example(row, tmp_path, "rl")
    assert [m["role"] for m in ex["prompt"]] == ["user"] and "completion" not in ex
    assert (ex["answer"], ex["structure_id"], ex["task5"], ex["num_hidden_blocks"]) == (7, "s1", 4, 3)


def test_image_path_escaping_the_root_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        trace_to_example(trace_row("../outside.png", 1, "s"), tmp_path / "root", "sft")


def test_bad_rows_name_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "train.jsonl"
    f.write_text(json.dumps(trace_row("img/a.png", 1, "s")) + "\n\n{not json\n")
    with pytest.raises(TraceError, match=r"train\.jsonl:3: invalid JSON at column 2: .*, at {<<here>>not json"):
        read_traces(f)
    f.write_text('{"messages": "nope"}\n')
    with pytest.raises(TraceError, match=r"train\.jsonl:1: expected an object with a 'messages' list"):
        read_traces(f)
    with pytest.raises(TraceError, match="does not exist"):
        read_traces(tmp_path / "missing.jsonl")
    bad = trace_row("img/a.png", 1, "s")
    bad["messages"][0]["role"] = "tool"
    with pytest.raises(TraceError, match=r"row 5: messages\[0\] has role 'tool'"):
        trace_to_example(bad, tmp_path, "sft", where="row 5")
    with pytest.raises(TraceError, match="'answer' must be an integer"):
        trace_to_example({**trace_row("img/a.png", 1, "s"), "answer": "many"}, tmp_path, "rl")


def test_load_split_decodes_images_and_skips_rows_without_answer(tmp_path: Path) -> None:
    traces = write_traces(tmp_path, "rl", 3, np.random.default_rng(0), answer=lambda i: i)
    lines = (traces / "rl.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["answer"] = None  # e.g. task1 (object type) rows of a plain trace file
    (traces / "rl.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    ds = load_split(traces, "rl", tmp_path, "rl")
    assert len(ds) == 2 and ds[0]["answer"] == 1
    assert ds[0]["images"][0].size == (56, 56)
    sft = load_split(traces, "rl", tmp_path, "sft", limit=1)
    assert len(sft) == 1 and sft[0]["completion"][0]["content"][0]["text"] == "<answer>0</answer>"


def test_normalise_logs_adds_stable_names() -> None:
    logs = {"reward": 0.5, "rewards/exact_match/mean": 0.25, "rewards/format/mean": 1.0, "kl": 0.01,
            "clip_ratio/region_mean": 0.1, "completions/mean_length": 12.0, "note": "text", "bad": float("nan")}
    out = namespaced(logs)
    # TRL's own sum (shaping included) keeps its name apart; reward/total/mean is the callback's (test_total_reward)
    assert (out["reward/shaped_total/mean"], out["reward/exact_match/mean"], out["reward/format/mean"]) == \
        (0.5, 0.25, 1.0)
    assert (out["train/clip_fraction"], out["rollout/length_mean"], out["train/kl"]) == (0.1, 12.0, 0.01)
    assert "note" not in out and "bad" not in out


def test_every_trl_name_lands_in_the_metric_table() -> None:
    from _metric_names import is_known

    logs = {"loss": 1.0, "learning_rate": 1e-6, "grad_norm": 2.0, "epoch": 0.5, "entropy": 0.3, "num_tokens": 9.0,
            "mean_token_accuracy": 0.7, "reward_std": 0.2, "rewards/format/std": 0.1, "reward/format/errors": 0.0,
            "completions/min_length": 3.0, "completions/max_length": 9.0, "completions/clipped_ratio": 0.25,
            "dynamic_sampling/kept_groups": 2.0, "eval_loss": 0.9, "eval_rewards/exact_match/mean": 0.4}
    out = namespaced(logs)
    assert len(out) == len(logs) and all(is_known(k) for k in out), sorted(k for k in out if not is_known(k))
    assert (out["rollout/clipped_share"], out["eval/exact_match"], out["eval/loss"]) == (0.25, 0.4, 0.9)
    assert namespaced({"frac_reward_zero_std": 0.5}) == {"trl/frac_reward_zero_std": 0.5}  # kept, marked


def test_read_metrics_skips_a_torn_last_line(tmp_path: Path) -> None:
    f = tmp_path / "metrics.jsonl"
    f.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert [r["step"] for r in read_metrics(f)] == [1, 2]
    assert read_metrics(tmp_path / "none.jsonl") == []


def test_rl_images_reach_trainer_and_vllm_at_one_token_count(tmp_path: Path) -> None:
    """A 512x512 view: the trainer's processor (recipe budget) and vLLM's (the checkpoint's Qwen defaults) would
    count 256 and 324 image tokens on the raw image; on the pre-resized image both count 256."""
    from PIL import Image

    from spatialiq_train.core.processor import tokens_for
    from spatialiq_train.train.data import with_pixel_budget

    traces = write_traces(tmp_path, "rl", 2, np.random.default_rng(0), answer=lambda i: i)
    for png in (tmp_path / "img").glob("*.png"):
        Image.new("RGB", (512, 512), (9, 99, 199)).save(png)
    recipe_budget, qwen_defaults = (3136, 200_704), (3136, 12_845_056)
    raw = load_split(traces, "rl", tmp_path, "rl")
    assert raw[0]["images"][0].size == (512, 512)
    assert (tokens_for(512, 512, *recipe_budget), tokens_for(512, 512, *qwen_defaults)) == (256, 324)
    fitted = with_pixel_budget(raw, *recipe_budget)
    rows = [fitted[i] for i in range(len(fitted))]
    assert all(r["images"][0].size == (448, 448) for r in rows) and rows[1]["answer"] == 1
    w, h = rows[0]["images"][0].size
    assert tokens_for(h, w, *recipe_budget) == tokens_for(h, w, *qwen_defaults) == 256
    assert fitted.column_names == raw.column_names and len(fitted) == len(raw)


def test_rl_errors_name_the_file_line_after_skipped_rows(tmp_path: Path) -> None:
    """Rows without an answer are skipped, yet a later bad row is named by its own line in the file."""
    traces = write_traces(tmp_path, "rl", 3, np.random.default_rng(0), answer=lambda i: i)
    rows = [json.loads(line) for line in (traces / "rl.jsonl").read_text().splitlines()]
    rows[0]["answer"] = None
    rows[2]["messages"][1]["content"][0]["image"] = "../outside.png"
    (traces / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceError, match=r"rl\.jsonl:row 3: .*escapes"):
        load_split(traces, "rl", tmp_path, "rl")
