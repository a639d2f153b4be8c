"""Issue 44, case 4: a score never silently changes meaning. The mode comes from the provenance record, a stray line
is set aside and named, a whole last line is scored, samples numbered from 1 are renumbered with a message the
command then agrees with, and views short of k samples are reported against k (docs/trust.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_eval_pipeline import TruthEngine, make_dataset
from typer.testing import CliRunner

from eval.completions import Completion, append_completions, load_completions
from eval.provenance import dataset_record, provenance_path
from eval.sample import SamplingConfig, run_sampling
from eval.scenes import find_scenes
from spatialiq_train.cli import app
from spatialiq_train.core.errors import EXIT_USAGE


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("score") / "data")


def _sampled(data: Path, out: Path, k: int, record: bool = True) -> Path:
    """A from-trace completions file of perfect traces, with the provenance record `eval sample` writes."""
    config = SamplingConfig(k=k)
    run_sampling(find_scenes(data), TruthEngine(data), config, out)
    if record:
        settings = config.model_dump()
        provenance_path(out).write_text(json.dumps({
            "model": "m", "model_digest": None, "model_revision": None,
            "data": dataset_record(data, "benchmark", find_scenes(data)),
            "sampling": {key: settings[key] for key in ("mode", "k", "temperature", "top_p", "max_new_tokens",
                                                        "dialect", "cot_system_prompt", "tasks", "seed")}}))
    return out


def _score(completions: Path, data: Path, out: Path, *extra: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["eval", "score", "--completions", str(completions), "--data", str(data),
                                    "--out", str(out), "--name", "m", *extra])


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics_m.json").read_text())


def _flat(output: str) -> str:
    return " ".join(output.split())


def test_a_stray_line_never_switches_a_recorded_from_trace_file_to_independent(data: Path, tmp_path: Path) -> None:
    out = _sampled(data, tmp_path / "c.jsonl", k=1)
    view = find_scenes(data)[0].view
    append_completions(out, [Completion(view, "task5", 0, "3")])  # one stray line, line 33
    res = _score(out, data, tmp_path / "o")
    assert res.exit_code == 0, res.output
    m = _metrics(tmp_path / "o")
    assert m["mode"] == "from-trace" and m["object_counting"]["acc@1"] == 1.0 and m["counts"]["absent"] == 0
    assert m["counts"]["stray_lines"] == 1
    assert "1 line(s) ask a task that mode from-trace (from provenance) does not score and are set aside: " \
           "line 33 (task5)" in _flat(res.output)
    res = _score(out, data, tmp_path / "o2", "--mode", "independent")  # disagrees with the record: refused
    assert res.exit_code == EXIT_USAGE and not (tmp_path / "o2").exists()
    assert "was sampled in mode from-trace (its provenance record says so)" in _flat(res.output)
    assert "pass --mode from-trace" in _flat(res.output)
    assert _score(out, data, tmp_path / "o3", "--mode", "from-trace").exit_code == 0


def test_a_mixed_file_without_a_record_is_refused_and_scored_as_told(data: Path, tmp_path: Path) -> None:
    out = _sampled(data, tmp_path / "c.jsonl", k=1, record=False)
    append_completions(out, [Completion(find_scenes(data)[3].view, "task5", 0, "3")])
    res = _score(out, data, tmp_path / "o")
    assert res.exit_code == EXIT_USAGE and not (tmp_path / "o").exists()
    assert "mixes 32 task_main line(s) with 1 of other tasks (line 33 (task5))" in _flat(res.output)
    res = _score(out, data, tmp_path / "o", "--mode", "from-trace")  # the advice works
    assert res.exit_code == 0, res.output
    assert _metrics(tmp_path / "o")["object_counting"]["acc@1"] == 1.0 and "line 33 (task5)" in _flat(res.output)


def test_a_whole_last_line_without_its_newline_is_scored_and_resumed(data: Path, tmp_path: Path) -> None:
    out = _sampled(data, tmp_path / "c.jsonl", k=1)
    out.write_bytes(out.read_bytes().rstrip(b"\n"))
    assert len(load_completions(out)) == 32
    res = _score(out, data, tmp_path / "o")
    assert res.exit_code == 0, res.output
    assert _metrics(tmp_path / "o")["coverage"]["scenes_covered"] == 32 and "half-written" not in res.output
    engine = TruthEngine(data)
    run_sampling(find_scenes(data), engine, SamplingConfig(k=1), out)  # a resume: nothing to draw, newline added
    assert engine.asked == [] and out.read_bytes().endswith(b"}\n")
    cut = tmp_path / "cut.jsonl"  # a truly cut line is still set aside
    cut.write_bytes(out.read_bytes() + b'{"view": "x", "task": "task_main", "sam')
    assert len(load_completions(cut)) == 32


def test_samples_numbered_from_one_are_renumbered_and_k_agrees(data: Path, tmp_path: Path) -> None:
    out = _sampled(data, tmp_path / "c.jsonl", k=3, record=False)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    out.write_text("".join(json.dumps({**r, "sample": r["sample"] + 1}) + "\n" for r in lines))  # 1..3
    res = _score(out, data, tmp_path / "o")
    assert res.exit_code == 0, res.output
    m = _metrics(tmp_path / "o")
    assert m["k"] == 3 and m["object_counting"]["acc@1"] == 1.0 and m["counts"]["sample_offset"] == 1
    assert "numbered 1..3" in _flat(res.output) and "scored as 0..2" in _flat(res.output)
    assert _score(out, data, tmp_path / "o3", "--k", "3").exit_code == 0
    res = _score(out, data, tmp_path / "o4", "--k", "4")
    assert res.exit_code == EXIT_USAGE and "no view holds more than 3" in res.output


def test_a_gap_in_one_views_numbering_gets_advice_the_command_accepts(data: Path, tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    out = _sampled(data, tmp_path / "c.jsonl", k=3, record=False)
    view = find_scenes(data)[0].view
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    out.write_text("".join(json.dumps({**r, "sample": r["sample"] + (r["view"] == view)}) + "\n" for r in lines))
    res = _score(out, data, tmp_path / "o")
    assert res.exit_code == 0, res.output
    said = _flat(caplog.text)
    assert "no view holds more than 3 completion(s), so their numbering has gaps" in said and "--k 4" not in said


def test_views_short_of_k_samples_are_reported_against_k(data: Path, tmp_path: Path) -> None:
    out = _sampled(data, tmp_path / "c.jsonl", k=4)
    short = {s.view for s in find_scenes(data)[:12]}
    kept = [line for line in out.read_text().splitlines()
            if not (json.loads(line)["view"] in short and json.loads(line)["sample"] >= 2)]
    out.write_text("\n".join(kept) + "\n")
    res = _score(out, data, tmp_path / "o")
    assert res.exit_code == 0, res.output
    m = _metrics(tmp_path / "o")
    assert m["k"] == 4 and m["counts"]["views_short_of_k"] == 12 and "pass@4" in m["object_counting"]
    assert "12 of 32 view(s) hold fewer than the k = 4 samples scored (fewest: 2," in _flat(res.output)
