"""The model card is computed from the run: n and intervals from the metrics file's counts, text from the phases
that ran and the trace kind they trained on; released files are world-readable (issue 20)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import pytest

from data_gen.trace_kind import record_kind
from eval.decoding import decoding_metrics
from eval.stats import wilson_interval
from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT
from spatialiq_train.release.card import CardInputs, eval_rows, model_card, successes_of
from spatialiq_train.release.release import make_public, run_phases, trace_kind

# The demo's metrics: 64 scenes, 51 answered on the first sample, 2 of them right.
DEMO = {"name": "demo", "mode": "from-trace", "k": 4, "scenes": 64, "convention": "prerequisite_given_dependent",
        "object_counting": {"acc@1": 2 / 51, "acc@1_n": 51, "maj@4": 3 / 64, "pass@4": 5 / 64,
                            "n": {"acc@1": 51, "maj@4": 64, "pass@4": 64},
                            "correct": {"acc@1": 2, "maj@4": 3, "pass@4": 5}},
        "per_task": {"main": {"accuracy": 2 / 51, "n_correct": 2, "n": 51}},
        "summary": {"object_count": 2 / 51, "referential_chain": 0.5}}


def _row(text: str, metric: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {metric} |"))


def test_card_n_and_interval_come_from_the_counts() -> None:
    text = model_card(CardInputs(name="m", run_recipe={}, base_recipe=None, base_model="b", metrics=DEMO))
    lo, hi = wilson_interval(2, 51)
    assert _row(text, "object_count") == f"| object_count | 0.0392 | 51 | [{lo:.4f}, {hi:.4f}] |"
    assert _row(text, "acc@1") == f"| acc@1 | 0.0392 | 51 | [{lo:.4f}, {hi:.4f}] |"
    assert "| object_count | 0.0392 | 64 | [0.0161, 0.1290] |" not in text  # the old card: n of all scenes, 3/64
    lo, hi = wilson_interval(5, 64)
    assert _row(text, "pass@4") == f"| pass@4 | 0.0781 | 64 | [{lo:.4f}, {hi:.4f}] |"
    assert _row(text, "referential_chain").startswith("| referential_chain | 0.5000 | — | — (")


def test_card_takes_whatever_denominator_the_file_carries() -> None:
    # an acc@1 over all 64 scenes (abstention counted wrong): the card follows the file's n, not its own rule
    metrics = json.loads(json.dumps(DEMO))
    metrics["object_counting"].update({"acc@1": 2 / 64, "n": {"acc@1": 64, "maj@4": 64, "pass@4": 64}})
    rows = {r.metric: r for r in eval_rows(metrics)}
    assert (rows["acc@1"].n, rows["acc@1"].successes) == (64, 2)
    # an older file without "correct": the count is the whole number value x n, else no interval
    del metrics["object_counting"]["correct"]
    assert {r.metric: r.successes for r in eval_rows(metrics)}["maj@4"] == 3
    assert successes_of(0.3, 7) is None and successes_of(2 / 51, 51) == 2


def test_decoding_metrics_carry_success_counts() -> None:
    preds = np.array([[1.0, 2.0], [np.nan, 3.0], [4.0, 4.0]])
    out = decoding_metrics(preds, np.array([1.0, 3.0, 5.0]), np.ones_like(preds))
    assert out["correct"] == {"acc@1": 1, "acc@1_answered": 1, "maj@2": 2, "pass@2": 2, "selected@2": 2}


def test_sft_only_plain_card_says_what_ran() -> None:
    run = {"name": "sft_plain_7b", "sft": {"optimizer": {"learning_rate": 1e-5}},
           "rl": {"optimizer": {"learning_rate": 9.0}}, "reward": {"weights": {"format": 1.0}}}
    base = {"name": "sft_plain_7b", "sft": {"optimizer": {"learning_rate": 2e-5}},
            "rl": {"optimizer": {"learning_rate": 1e-6}}, "reward": {"weights": {"format": 0.1}}}
    text = model_card(CardInputs(name="m", run_recipe=run, base_recipe=base, base_model="b", phases=("sft",),
                                 trace_kind="plain"))
    assert "GRPO" not in text and "DAPO" not in text and "dapo" not in text.split("---")[1]
    assert "`sft.optimizer.learning_rate`" in text
    assert "`rl.optimizer.learning_rate`" not in text and "`reward.weights.format`" not in text
    assert COT_SYSTEM_PROMPT not in text and "SYSTEM_PROMPT" not in text and "<answer>N</answer>" in text
    both = model_card(CardInputs(name="m", run_recipe=run, base_recipe=base, base_model="b", phases=("sft", "rl"),
                                 trace_kind="cot"))
    assert "then GRPO/DAPO" in both and "`rl.optimizer.learning_rate`" in both and COT_SYSTEM_PROMPT in both


def test_phases_and_trace_kind_are_read_from_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    assert run_phases(run, run / "final") is None
    (run / "metrics.jsonl").write_text('{"step": 1, "phase": "sft", "train/loss": 1.0}\nnot json\n')
    assert run_phases(run, run / "final") == ("sft",)
    (run / "rl").mkdir()
    (run / "rl" / "metrics.jsonl").write_text('{"step": 1, "phase": "rl"}\n')
    assert run_phases(run, run / "final") == ("sft", "rl")
    traces = tmp_path / "traces"
    traces.mkdir()
    user = {"role": "user", "content": []}
    (traces / "train.jsonl").write_text(json.dumps({"messages": [user]}) + "\n")
    recipe = {"data": {"traces_dir": str(traces), "sft_split": "train", "rl_split": "rl"}}
    assert trace_kind(recipe, ("sft",), run) == "plain" and trace_kind(recipe, ("rl",), run) is None
    assert record_kind({"messages": [{"role": "system", "content": []}, user]}) == "cot"


def test_released_files_are_world_readable(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"x")
    weights.chmod(0o600)
    make_public(tmp_path)
    assert stat.S_IMODE(weights.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "sub").stat().st_mode) == 0o755


@pytest.mark.parametrize("phases", [("rl",), None])
def test_card_summary_without_sft(phases: tuple[str, ...] | None) -> None:
    text = model_card(CardInputs(name="m", run_recipe={}, base_recipe=None, base_model="b", phases=phases))
    assert "SFT" not in text.split("## What was trained")[0]
    assert ("- rlvr" in text.split("---")[1]) == (phases == ("rl",))  # RL tags only for a recorded RL phase


def test_push_prerequisites_are_checked_before_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = pytest.importorskip("huggingface_hub")
    from typer.testing import CliRunner

    from spatialiq_train.cli import app

    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    out = tmp_path / "rel"
    res = CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(out), "--push", "no-owner"])
    assert res.exit_code == 2 and "expected OWNER/NAME" in res.output and not out.exists()
    monkeypatch.setattr(hub, "get_token", lambda: None)
    res = CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(out), "--push", "org/m"])
    assert res.exit_code == 2 and "no Hugging Face token" in res.output, res.output
    assert not out.exists() and not (tmp_path / "rel.partial").exists()


def test_a_built_release_is_pushed_again_without_rebuilding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import spatialiq_train.release.hub as hub
    import spatialiq_train.release.release as rel
    from spatialiq_train.cli import app
    from spatialiq_train.release.checksums import write_sums

    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "config.json").write_text("{}")
    write_sums(tmp_path / "rel")
    calls: list[str] = []
    monkeypatch.setattr(rel, "verify_release", lambda folder, notes=None: [])
    monkeypatch.setattr(hub, "check_push", lambda repo, api=None: object())

    def failing(folder: Path, repo: str, **kw: object) -> str:
        calls.append(repo)
        if len(calls) == 1:
            raise ConnectionError("network down")
        return f"https://hub/{repo}"

    monkeypatch.setattr(hub, "push_folder", failing)
    res = CliRunner().invoke(app, ["release", "--verify", str(tmp_path / "rel"), "--push", "org/m"])
    assert res.exit_code == 1 and f"release --verify {tmp_path / 'rel'} --push org/m" in res.output, res.output
    res = CliRunner().invoke(app, ["release", "--verify", str(tmp_path / "rel"), "--push", "org/m"])
    assert res.exit_code == 0 and "pushed to https://hub/org/m" in res.output, res.output


def test_a_replay_run_card_names_every_source_its_weight_and_digests(tmp_path: Path) -> None:
    """Replay (``data.sources``): the card names each source by folder with its weight and share, its traces'
    digest, and the training split digest the phase recorded for it (``data.json``); the released recipe names the
    sources by folder, and no file of the release holds a path of this machine."""
    import shutil

    from _train_support import tiny_model_dir, tiny_recipe, write_traces
    from typer.testing import CliRunner

    from spatialiq_train.cli import app
    from spatialiq_train.core.recipes import load_recipe, recipe_to_yaml
    from spatialiq_train.core.resolve import Hardware, resolve
    from spatialiq_train.core.run_folder import data_record, write_data_record
    from spatialiq_train.release.paths import traces_digest

    own, other = tmp_path / "own", tmp_path / "other"
    for root, name, n in ((own, "cot", 6), (other, "folding", 2)):
        write_traces(root, "warmup", n, np.random.default_rng(n), answer=lambda i: i).rename(root / name)
    sources = [{"traces_dir": str(own / "cot"), "weight": 3, "data_root": str(own)},
               {"traces_dir": str(other / "folding"), "weight": 1, "data_root": str(other)}]
    recipe = tiny_recipe([f"data.traces_dir={own / 'cot'}", f"data.data_root={own}", "data.sft_split=warmup",
                          f"data.sources={json.dumps(sources)}", "sft.optimizer.global_batch_size=4"])
    run = tmp_path / "run"  # a `train sft --out run` folder as the phase leaves it: weights, recipe, data record
    shutil.copytree(tiny_model_dir(), run / "final")  # the suite's one tiny model (built once per process)
    (run / "recipe.yaml").write_text(recipe_to_yaml(recipe))
    record = data_record(resolve(recipe, "sft", Hardware(gpu=False)))
    write_data_record(run, record)
    res = CliRunner().invoke(app, ["release", "--run", str(run), "--out", str(tmp_path / "rel")])
    assert res.exit_code == 0, res.output
    card = (tmp_path / "rel" / "README.md").read_text()
    assert ("- Replay: every global batch mixed from 2 trace sources by weight: `cot` (`data.sources[0]`, weight 3, "
            "75 %), `folding` (`data.sources[1]`, weight 1, 25 %).") in card
    assert (f"- `data.sources[1].traces_dir`: folder `folding`, sha256 over its trace files' names and sha256s "
            f"`{traces_digest(other / 'folding')}`") in card
    assert f"`folding/warmup.jsonl` sha256 `{record['traces']['folding/warmup.jsonl']}`" in card
    assert f"`warmup.jsonl` sha256 `{record['traces']['warmup.jsonl']}`" in card
    assert (f"; images of `folding` (`data.sources[1]`): `other` (2 images, sha256 over their names and sha256s "
            f"`{record['sources'][0]['images_sha256']}`).") in card
    released = load_recipe(tmp_path / "rel" / "training_recipe.yaml")
    assert [(s.traces_dir, s.data_root, s.weight) for s in released.data.sources] == [("cot", "own", 3),
                                                                                       ("folding", "other", 1)]
    texts = [p.read_text(errors="ignore") for p in (tmp_path / "rel").rglob("*") if p.suffix != ".safetensors"
             and p.is_file()]
    assert not any(str(tmp_path) in text for text in texts)
