"""spatialiq release / release-data: model card, checksums, verification, loading, LoRA merge, push guard."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from data_gen.dataset_card import card_text, features_yaml
from spatialiq_train.cli import app
from spatialiq_train.core.errors import EXIT_USAGE
from spatialiq_train.release.card import CardInputs, DataFacts, eval_rows, model_card, recipe_differences
from spatialiq_train.release.checksums import verify_sums, write_sums
from spatialiq_train.release.hub import push_folder

METRICS = {"name": "tiny", "mode": "from-trace", "k": 10, "scenes": 64, "convention": "official",
           "object_counting": {"acc@1": 0.25, "acc@1_n": 64, "maj@10": 0.3125, "pass@10": 0.5,
                               "selected@10[self_consistent]": 0.28125},
           "summary": {"object_count": 0.25, "visible_count": 0.5, "hidden_count": 0.125, "referential_chain": 0.1,
                       "visible_support": 0.2, "hidden_support": 0.3, "summation_mechanism": 0.4,
                       "mental_rotation_mean": None}}


def _front_matter(text: str) -> dict[str, object]:
    assert text.startswith("---\n")
    head, sep, _ = text[4:].partition("\n---\n")
    assert sep
    return yaml.safe_load(head)


def test_card_front_matter_and_evaluation_table() -> None:
    inputs = CardInputs(name="m", run_recipe={"name": "tiny_cpu", "rl": {"optimizer": {"learning_rate": 1e-4}}},
                        base_recipe={"name": "tiny_cpu", "rl": {"optimizer": {"learning_rate": 3e-4}}}, base_model="b",
                        datasets=("org/data",), data=DataFacts(generator_version="0.1.0", seed=7, structures=3,
                                                               split_hashes={"rl": "ab" * 32}), metrics=METRICS)
    text = model_card(inputs)
    meta = _front_matter(text)
    assert meta["license"] == "apache-2.0" and meta["base_model"] == "b" and meta["datasets"] == ["org/data"]
    results = meta["model-index"][0]["results"][0]["metrics"]
    assert {m["type"]: m["value"] for m in results}["maj@10"] == 0.3125
    assert {m["type"] for m in results} >= {"acc@1", "maj@10", "pass@10", "selected@10[self_consistent]",
                                            "object_count", "summation_mechanism"}
    assert "| acc@1 | 0.2500 | 64 | [0.1601, 0.3682] |" in text  # Wilson interval of 16/64
    assert "| `rl.optimizer.learning_rate` | 0.0003 | 0.0001 |" in text
    assert "Data generator seed: 7" in text and "ab" * 32 in text
    assert "mental_rotation_mean" not in {r.metric for r in eval_rows(METRICS)}  # absent columns are left out
    plain = model_card(CardInputs(name="m", run_recipe={}, base_recipe=None, base_model="b"))
    assert "Not evaluated" in plain and "model-index" not in _front_matter(plain)
    assert "Note:" not in text
    noted = model_card(CardInputs(name="m", run_recipe={}, base_recipe=None, base_model="b",
                                  metrics={**METRICS, "note": "tiny model; accuracy means nothing"}))
    assert "> **Note:** tiny model; accuracy means nothing" in noted


def test_recipe_differences_lists_changed_added_and_removed_keys() -> None:
    diffs = recipe_differences({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": 1, "c": 3}, "e": 0})
    assert diffs == [("a.c", 3, 2), ("d", "(absent)", [1]), ("e", 0, "(absent)")]


def test_checksums_catch_changed_missing_and_unlisted_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "sub" / "b.bin").write_bytes(b"\0\1")
    write_sums(tmp_path)
    assert verify_sums(tmp_path) == []
    (tmp_path / "a.txt").write_text("A")
    (tmp_path / "sub" / "b.bin").unlink()
    (tmp_path / "c.txt").write_text("c")
    problems = verify_sums(tmp_path)
    assert any(p.startswith("a.txt: sha256 differs") for p in problems)
    assert any(p.startswith("sub/b.bin: listed") for p in problems)
    assert any(p.startswith("c.txt: present but not listed") for p in problems)


def test_push_needs_a_token_and_an_owner_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(hub, "get_token", lambda: None)
    with pytest.raises(Exception, match="no Hugging Face token"):
        push_folder(tmp_path, "org/name")
    with pytest.raises(Exception, match="expected OWNER/NAME"):
        push_folder(tmp_path, "just-a-name", api=object())

    class Api:
        calls: list[tuple[str, dict[str, object]]] = []

        def __getattr__(self, name: str):  # noqa: ANN204
            return lambda **kw: self.calls.append((name, kw)) or f"https://hub/{kw.get('repo_id')}"

    api = Api()
    assert push_folder(tmp_path, "org/name", revision_tag="release-abc", api=api) == "https://hub/org/name"
    assert [c[0] for c in api.calls] == ["create_repo", "upload_folder", "create_tag"]
    assert api.calls[0][1]["private"] is True and api.calls[2][1]["tag"] == "release-abc"


def test_dataset_card_loads_with_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    res = CliRunner().invoke(app, ["gen", "--out", str(tmp_path / "d"), "--structures", "2", "--seed", "3",
                                   "--split", "train", "--renderer", "none", "--quiet"])
    assert res.exit_code == 0, res.output
    meta = _front_matter((tmp_path / "d" / "README.md").read_text())
    assert meta["configs"][0]["data_files"] == [{"split": "train", "path": "data/train-*.parquet"}]
    assert meta["dataset_info"]["splits"] == [{"name": "train", "num_examples": 32}]
    ds = datasets.load_dataset(str(tmp_path / "d"), cache_dir=str(tmp_path / "cache"))
    assert ds["train"].num_rows == 32
    assert features_yaml(ds["train"].features.to_dict()) == ds["train"].features._to_yaml_list()
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert "--seed 3" in card_text(manifest, ds["train"].features.to_dict())


# --- a real release of the tiny model ------------------------------------------------------------------------


def _greedy(model_dir: Path, image_size: int = 64) -> str:
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from spatialiq_train.core.processor import load_processor

    processor = load_processor(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(str(model_dir)).eval()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many blocks?"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=[Image.new("RGB", (image_size, image_size), (90, 30, 200))],
                       return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    return processor.batch_decode(out[:, inputs["input_ids"].shape[1]:])[0]


@pytest.fixture()
def tiny_run(tmp_path: Path) -> Path:
    pytest.importorskip("torch")
    from spatialiq_train.core.recipes import SHIPPED_RECIPES, load_recipe, recipe_to_yaml
    from spatialiq_train.tiny import save_tiny

    run = tmp_path / "run"
    save_tiny(run / "final", seed=1)
    recipe = load_recipe(SHIPPED_RECIPES / "tiny_cpu.yaml", ["rl.optimizer.learning_rate=1e-4"])
    (run / "recipe.yaml").write_text(recipe_to_yaml(recipe))
    return run


@pytest.mark.slow
def test_release_loads_and_generates_like_the_run(tiny_run: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForImageTextToText

    from spatialiq_train.core.weights import checkpoint_digest

    metrics = tmp_path / "metrics_tiny.json"
    metrics.write_text(json.dumps({**METRICS, "model_digest": checkpoint_digest(tiny_run / "final")}))
    out = tmp_path / "release"
    res = CliRunner().invoke(app, ["release", "--run", str(tiny_run), "--out", str(out), "--metrics", str(metrics)])
    assert res.exit_code == 0, res.output
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "model.safetensors.index.json", "generation_config.json",
            "preprocessor_config.json", "README.md", "SHA256SUMS", "training_recipe.yaml"} <= names
    assert not list(out.glob("*.bin")) and not (tmp_path / "release.partial").exists()
    assert AutoModelForImageTextToText.from_pretrained(str(out)) is not None
    preproc = json.loads((out / "preprocessor_config.json").read_text())
    budget = json.dumps(preproc)
    assert "12544" in budget and "3136" in budget  # tiny_cpu's pixel budget
    assert _greedy(out) == _greedy(tiny_run / "final")
    text = (out / "README.md").read_text()
    assert "| `rl.optimizer.learning_rate` | 0.0005 | 0.0001 |" in text and "| maj@10 | 0.3125 | 64 |" in text
    res = CliRunner().invoke(app, ["release", "--verify", str(out)])
    assert res.exit_code == 0, res.output
    if importlib.util.find_spec("torchvision") is None:  # stock AutoProcessor cannot build it here: never "verified"
        assert "stock AutoProcessor NOT checked: torchvision is not installed" in res.output
        assert "release verified (checksums, config, processor files (stock AutoProcessor NOT checked)" in res.output
    else:
        assert "release verified (checksums, config, processor with stock AutoProcessor, model card)" in res.output
    (out / "config.json").write_text((out / "config.json").read_text() + " ")
    res = CliRunner().invoke(app, ["release", "--verify", str(out)])
    assert res.exit_code == 1 and "config.json: sha256 differs" in res.output
    res = CliRunner().invoke(app, ["release", "--run", str(tiny_run), "--out", str(out)])
    assert res.exit_code != 0 and "--overwrite" in res.output


@pytest.mark.slow
def test_release_merges_a_lora_adapter(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    from spatialiq_train.tiny import save_tiny

    base = save_tiny(tmp_path / "base", seed=2)
    model = AutoModelForImageTextToText.from_pretrained(str(base))
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # a non-zero adapter, so merging changes the weights
    run = tmp_path / "run"
    peft_model.save_pretrained(str(run / "final"))
    from spatialiq_train.core.processor import load_processor

    load_processor(base).save_pretrained(str(run / "final"))
    (run / "final" / "config.json").write_text((base / "config.json").read_text())
    out = tmp_path / "release"
    res = CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(out)])
    assert res.exit_code == 0, res.output
    merged = AutoModelForImageTextToText.from_pretrained(str(out))
    expected = peft_model.merge_and_unload().state_dict()
    got = merged.state_dict()
    assert set(expected) == set(got)
    assert all(torch.allclose(expected[k], got[k], atol=1e-6) for k in expected)
    assert "Not evaluated" in (out / "README.md").read_text()


@pytest.mark.parametrize(("case", "expected"), [
    ("verify_missing", "--verify {t}/nope: no such folder"),
    ("metrics_missing", "--metrics {t}/nometrics.json: no such file"),
    ("data_without_manifest", "--data {t}: no manifest.json"),
    ("out_is_the_run", "--out {t}/run is the run folder"),
    ("out_holds_the_run", "--out {t} is the run folder {t}/run or holds it"),
])
def test_release_bad_input_is_one_error_line_naming_the_option(tmp_path: Path, case: str, expected: str) -> None:
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}", encoding="utf-8")
    out = str(tmp_path / "rel")
    args = {"verify_missing": ["--verify", str(tmp_path / "nope")],
            "metrics_missing": ["--run", str(run), "--out", out, "--metrics", str(tmp_path / "nometrics.json")],
            "data_without_manifest": ["--run", str(run), "--out", out, "--data", str(tmp_path)],
            "out_is_the_run": ["--run", str(run), "--out", str(run), "--overwrite"],
            "out_holds_the_run": ["--run", str(run), "--out", str(tmp_path), "--overwrite"]}[case]
    res = CliRunner().invoke(app, ["release", *args])
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert res.exit_code == 2 and len(errors) == 1, res.output
    assert errors[0].startswith("error: " + expected.format(t=tmp_path)), errors
    assert not (tmp_path / "rel").exists() and (run / "final" / "config.json").is_file()


def _poison(model_dir: Path) -> str:
    """Write one NaN into the first floating tensor of ``model_dir``'s weights; returns the tensor's name."""
    from safetensors.torch import load_file, save_file

    path = model_dir / "model.safetensors"
    tensors = load_file(str(path))
    name = next(n for n in sorted(tensors) if tensors[n].is_floating_point())
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(path), metadata={"format": "pt"})
    return name


def test_release_and_eval_sample_refuse_non_finite_weights(tiny_run: Path, tmp_path: Path) -> None:
    from spatialiq_train.core.weights import checkpoint_digest

    before = checkpoint_digest(tiny_run / "final")
    name = _poison(tiny_run / "final")
    assert checkpoint_digest(tiny_run / "final") != before
    res = CliRunner().invoke(app, ["release", "--run", str(tiny_run), "--out", str(tmp_path / "rel")])
    assert res.exit_code == EXIT_USAGE, res.output
    assert f"--run checkpoint {tiny_run / 'final'} is broken: tensor {name!r} in model.safetensors holds NaN" \
        in " ".join(res.output.split())
    assert not (tmp_path / "rel").exists() and not (tmp_path / "rel.partial").exists()
    data = tmp_path / "data"
    gen = CliRunner().invoke(app, ["gen", "--out", str(data), "--structures", "1", "--seed", "0",
                                   "--split", "benchmark", "--renderer", "none", "--quiet"])
    assert gen.exit_code == 0, gen.output
    res = CliRunner().invoke(app, ["eval", "sample", "--model", str(tiny_run / "final"), "--data", str(data),
                                   "--out", str(tmp_path / "c.jsonl"), "--k", "1", "--engine", "transformers"])
    assert res.exit_code == EXIT_USAGE, res.output
    assert "--model" in res.output and "is broken" in res.output and name in " ".join(res.output.split())
    assert not (tmp_path / "c.jsonl").exists()


def test_verify_names_a_processor_stock_loaders_would_not_build(tmp_path: Path) -> None:
    from spatialiq_train.release.checkpoint import STOCK_NOT_CHECKED, check_stock_processor
    from spatialiq_train.tiny import save_tiny

    folder = save_tiny(tmp_path / "tiny")
    notes: list[str] = []
    assert check_stock_processor(folder, notes) == []
    assert len(notes) == 1 and notes[0].startswith(STOCK_NOT_CHECKED) is (importlib.util.find_spec("torchvision")
                                                                          is None)
    config = json.loads((folder / "processor_config.json").read_text())
    del config["video_processor"]
    config["processor_class"] = "Qwen2_5_VLImageOnlyProcessor"  # what tiny.py used to write: vLLM refuses it
    (folder / "processor_config.json").write_text(json.dumps(config))
    problems = check_stock_processor(folder, [])
    assert any("processor_config.json: video_processor is missing" in p for p in problems), problems
    assert any("processor_class is 'Qwen2_5_VLImageOnlyProcessor', not 'Qwen2_5_VLProcessor'" in p for p in problems)
