"""`eval sample --engine transformers` batches the requests of a call (left padding) and still gives every
request the completions it gets alone: greedy ones identical, sampled ones drawn from the request's own seed (so
the same as before batching, whatever shares the batch, and after a resume)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from eval.sample import Request, SamplingConfig

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _png(seed: int, size: tuple[int, int]) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def _requests(k: int) -> list[Request]:
    """Prompts of different lengths, one or two images of different sizes, a resumed request with fewer samples."""
    prompts = ["How many cubes?", "Count every block in the stacked structure, visible and hidden, and answer.",
               "Which blocks appear in the second view?", "How many?"]
    images = [(_png(0, (64, 64)),), (_png(1, (96, 64)),), (_png(2, (64, 64)), _png(3, (64, 96))),
              (_png(4, (56, 84)),)]
    samples = [tuple(range(k)), tuple(range(k)), tuple(range(k)), tuple(range(1, k))]
    return [Request(f"v{i}", "task_main", p, "Think first." if i % 2 else None, ims, s, 1000 + 7 * i)
            for i, (p, ims, s) in enumerate(zip(prompts, images, samples, strict=True))]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from eval.engines import TransformersEngine
    from spatialiq_train.tiny import save_tiny

    return TransformersEngine(save_tiny(tmp_path_factory.mktemp("tiny") / "model", seed=0))


def _one_at_a_time(engine, requests: list[Request], config: SamplingConfig) -> list[list[str]]:  # type: ignore[no-untyped-def]
    return [engine.generate([r], config)[0] for r in requests]


def test_greedy_batched_equals_one_view_at_a_time(engine) -> None:  # type: ignore[no-untyped-def]
    config = SamplingConfig(k=3, temperature=0.0, max_new_tokens=12)
    requests = _requests(3)
    batched = engine.generate(requests, config)
    assert batched == _one_at_a_time(engine, requests, config)
    assert [len(t) for t in batched] == [3, 3, 3, 2] and all(len(set(t)) == 1 for t in batched)
    assert any(t[0].strip() for t in batched)  # the tiny model writes something


def test_sampled_batched_equals_one_view_at_a_time_and_the_seed_decides(engine) -> None:  # type: ignore[no-untyped-def]
    config = SamplingConfig(k=3, temperature=1.0, top_p=0.9, max_new_tokens=12)
    requests = _requests(3)
    batched = engine.generate(requests, config)
    assert batched == _one_at_a_time(engine, requests, config)
    assert batched == engine.generate(requests, config)  # reproducible
    assert engine.generate(requests[::-1], config) == batched[::-1]  # batch order does not matter
    assert any(len(set(t)) > 1 for t in batched)  # samples differ within a request
    other = [Request(r.view, r.task, r.prompt, r.system, r.images, r.samples, r.seed + 1) for r in requests]
    assert engine.generate(other, config) != batched  # ... and the seed decides them


def test_sampled_equal_a_lone_generate_call_seeded_globally(engine) -> None:  # type: ignore[no-untyped-def]
    """What the engine did before batching: torch.manual_seed(seed), then generate(do_sample=True) per request."""
    import torch

    from eval.engines import _images, _messages, fit_images, generate_kwargs, pixel_budget

    config = SamplingConfig(k=3, temperature=0.7, top_p=0.95, max_new_tokens=10)
    requests = _requests(3)[:3]
    want = []
    for req in requests:
        text = engine.processor.apply_chat_template(_messages(req), tokenize=False, add_generation_prompt=True)
        images = fit_images(_images(req), pixel_budget(engine.processor))
        inputs = engine.processor(text=[text], images=images, return_tensors="pt")
        texts = []
        for seed in req.sample_seeds:  # each sample alone, seeded with its own seed
            torch.manual_seed(seed)
            with torch.no_grad():
                out = engine.model.generate(**inputs, **generate_kwargs(config, 1))
            texts += engine.processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        want.append(texts)
    assert engine.generate(requests, config) == want


def _scenes(tmp_path: Path) -> list:
    from PIL import Image

    from eval.scenes import find_scenes
    from tests.test_eval_pipeline import make_dataset

    data = make_dataset(tmp_path / "data", structures=1)
    for i, gt in enumerate(sorted((data / "benchmark").rglob("gt.json"))):
        Image.new("RGB", (64 + 8 * (i % 3), 64), (40 * i % 256, 80, 120)).save(gt.parent / "view.png")
    return find_scenes(data)[:5]


def test_a_resume_after_a_cut_line_writes_what_an_uninterrupted_run_writes(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Interrupted at any byte of the file (an append cut off inside a request's samples, inside a line, inside a
    multi-byte character) and resumed, the file holds the texts of the uninterrupted run: each sample depends only
    on its seed and index (issue 39, case 5)."""
    from eval.completions import load_completions
    from eval.sample import run_sampling

    scenes = _scenes(tmp_path)[:3]
    config = SamplingConfig(k=3, max_new_tokens=6, batch_size=2)
    whole = tmp_path / "whole.jsonl"
    run_sampling(scenes, engine, config, whole)
    want = {k: v.text for k, v in load_completions(whole).items()}
    raw = whole.read_bytes()
    ends = [i + 1 for i, b in enumerate(raw) if b == ord("\n")]
    cuts = {ends[0] + 5, ends[1] - 3, ends[3] + 1, ends[4] + len(raw[ends[4]:ends[5]]) // 2}  # inside requests
    for cut in sorted(cuts):
        part = tmp_path / f"part-{cut}.jsonl"
        part.write_bytes(raw[:cut])
        run_sampling(scenes, engine, config, part)
        assert {k: v.text for k, v in load_completions(part).items()} == want, f"cut at byte {cut}"


def test_a_last_line_cut_inside_a_multibyte_character_is_set_aside(tmp_path: Path) -> None:
    """The cut last line is set aside as bytes before decoding; a bad byte in a complete line is still refused."""
    from eval.completions import Completion, load_completions
    from spatialiq_train.core.errors import InputError

    done = Completion("v1", "task_main", 0, "Zähle die Würfel: 4").to_json() + "\n"
    cut = Completion("v1", "task_main", 1, "Würfel").to_json().encode()
    path = tmp_path / "c.jsonl"
    path.write_bytes(done.encode() + cut[:cut.index("ü".encode()) + 1])  # stops after the first byte of 'ü'
    assert list(load_completions(path)) == [("v1", "task_main", 0)]
    path.write_bytes(b'{"view": "v1", "task": "task_main", "sample": 0, "text": "\xc3"}\n' + done.encode())
    with pytest.raises(InputError, match="line 1: not valid UTF-8"):
        load_completions(path)


def test_a_resumed_request_keeps_its_samples(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """run_sampling resumes by sample index; every sample is seeded by its own index, so an interrupted and resumed
    run writes what an uninterrupted one writes."""
    from eval.completions import load_completions
    from eval.sample import run_sampling

    scenes = _scenes(tmp_path)
    config = SamplingConfig(k=2, max_new_tokens=6, batch_size=3)
    whole = tmp_path / "whole.jsonl"
    run_sampling(scenes, engine, config, whole)
    part = tmp_path / "part.jsonl"
    run_sampling(scenes[:2], engine, config, part)
    run_sampling(scenes, engine, config, part)
    assert {k: v.text for k, v in load_completions(part).items()} == {
        k: v.text for k, v in load_completions(whole).items()}
