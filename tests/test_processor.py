"""The core processor module: one loader with the pixel budget, and the resize arithmetic every engine shares."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spatialiq_train.core.processor import (
    ProcessorError,
    apply_pixel_budget,
    budget_of,
    image_token_count,
    load_processor,
    resize_to_budget,
    target_size,
    tokens_for,
)


@settings(max_examples=300, deadline=None)
@given(h=st.integers(1, 3000), w=st.integers(1, 3000), lo=st.integers(3136, 200_000), extra=st.integers(0, 2_000_000))
def test_target_size_is_the_qwen2_vl_resize_rule(h: int, w: int, lo: int, extra: int) -> None:
    pytest.importorskip("transformers")
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    if max(h, w) / min(h, w) > 200:
        with pytest.raises(ProcessorError, match="200:1"):
            target_size(h, w, lo, lo + extra)
        return
    assert target_size(h, w, lo, lo + extra) == smart_resize(h, w, 28, lo, lo + extra)


def test_budget_errors_name_both_bounds() -> None:
    with pytest.raises(ProcessorError, match="min_pixels=100, max_pixels=50"):
        target_size(64, 64, 100, 50)
    with pytest.raises(ProcessorError, match="no area"):
        target_size(0, 64, 3136, 12544)


def test_token_count_of_a_512_view_at_the_recipes_budget() -> None:
    assert tokens_for(512, 512, 3136, 200_704) == 256  # 448x448 -> 16x16 tokens
    assert tokens_for(512, 512, 3136, 12_544) == 16  # tiny_cpu's budget: 112x112


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from spatialiq_train.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("proc") / "tiny")


@pytest.mark.parametrize(("size", "budget"), [((512, 512), (3136, 200_704)), ((300, 170), (3136, 12_544)),
                                              ((48, 48), (3136, 12_544))])
def test_processor_emits_the_counted_tokens(tiny: Path, size: tuple[int, int], budget: tuple[int, int]) -> None:
    from PIL import Image

    processor = load_processor(tiny, *budget)
    assert budget_of(processor) == budget
    image = Image.new("RGB", size, (10, 200, 30))
    out = processor(text=["<|vision_start|><|image_pad|><|vision_end|>"], images=[image], return_tensors="pt")
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((out["input_ids"] == pad).sum()) == image_token_count(size[1], size[0], processor)
    # a pre-resized image costs the same tokens and is left as it is by a second resize
    fitted = resize_to_budget(image, *budget)
    assert resize_to_budget(fitted, *budget) is fitted
    again = processor(text=["<|vision_start|><|image_pad|><|vision_end|>"], images=[fitted], return_tensors="pt")
    assert int((again["input_ids"] == pad).sum()) == int((out["input_ids"] == pad).sum())


def test_budget_survives_save_and_load(tiny: Path, tmp_path: Path) -> None:
    processor = apply_pixel_budget(load_processor(tiny), 3136, 50_176)
    processor.save_pretrained(str(tmp_path / "p"))
    assert budget_of(load_processor(tmp_path / "p")) == (3136, 50_176)
    assert budget_of(load_processor(tmp_path / "p", max_pixels=12_544)) == (3136, 12_544)


def test_load_processor_fails_loudly_instead_of_returning_a_tokenizer(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(ProcessorError, match="no such checkpoint folder"):
        load_processor(tmp_path / "missing")
    tokenizer_only = tmp_path / "tok"
    tokenizer_only.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny / name, tokenizer_only / name)
    with pytest.raises(ProcessorError, match="no preprocessor_config.json or processor_config.json"):
        load_processor(tokenizer_only)
    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    (broken / "processor_config.json").write_text('{"image_processor": {"patch_size": 14,')
    with pytest.raises(ProcessorError, match=f"{broken}: the Qwen2.5-VL processor does not load.*not a valid JSON"):
        load_processor(broken)


def test_every_saved_processor_is_the_standard_qwen25_vl_one(tiny: Path, tmp_path: Path) -> None:
    """The files stock AutoProcessor and vLLM read name Qwen2_5_VLProcessor and carry a video processor, whether or
    not torchvision (which the video processor needs in memory) is installed where they were written."""
    import json

    from spatialiq_train.core.processor import save_processor

    for folder in (tiny, save_processor(apply_pixel_budget(load_processor(tiny), 3136, 12_544), tmp_path / "p")):
        config = json.loads((folder / "processor_config.json").read_text())
        assert config["processor_class"] == "Qwen2_5_VLProcessor"
        assert config["image_processor"]["size"]["longest_edge"] in (200_704, 12_544)
        video = config["video_processor"]
        assert video["video_processor_type"] == "Qwen2VLVideoProcessor"
        assert (video["patch_size"], video["merge_size"], video["temporal_patch_size"]) == (14, 2, 2)
        assert json.loads((folder / "tokenizer_config.json").read_text())["processor_class"] == "Qwen2_5_VLProcessor"
    tokenizer = load_processor(tiny).tokenizer
    with pytest.raises(ProcessorError, match="without an image processor"):
        save_processor(tokenizer, tmp_path / "tok")


def test_without_torchvision_the_loader_says_it_is_image_only_and_keeps_the_image(
        tiny: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import importlib.util

    from PIL import Image

    import spatialiq_train.core.processor as proc

    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: the full processor loads (tests/engines/vllm checks it)")
    monkeypatch.setattr(proc, "_WARNED", [])
    with caplog.at_level("WARNING", logger="spatialiq_train.core.processor"):
        processor = load_processor(tiny)
    assert "needs torchvision" in caplog.text and "image-only processor" in caplog.text
    # one line of our own: not transformers' five-line notice ending "you may need to restart your runtime"
    assert len(caplog.records) == 1 and "\n" not in caplog.records[0].getMessage()
    assert "restart your runtime" not in caplog.text and "torchvision is not installed" in caplog.text
    text = "<|vision_start|><|image_pad|><|vision_end|>How many blocks?"
    batch = processor(text=[text], images=[Image.new("RGB", (224, 224))], return_tensors="pt")
    assert batch["pixel_values"].shape[0] == 256 and batch["image_grid_thw"].tolist() == [[1, 16, 16]]
