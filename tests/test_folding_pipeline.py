"""Paper folding end to end on the CPU: `fold gen` -> `fold traces` -> `run dapo-tight` (TRL, the shipped
tiny_cpu_folding recipe, shortened) -> `fold sample` -> `fold score`; and the paper's metrics on the released
records (perfect answers in our format and in the release's JSON form score 1, no answer scores 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _train_support import REPO, one_thread
from typer.testing import CliRunner

from eval.folding import parse_release_answer, record_requests, score_completions, truth_of
from spatialiq_train.cli import app
from spatialiq_train.core.folding_answers import answer_text
from spatialiq_train.core.folding_records import check_records

one_thread()

SHORT = [
    "model.tiny=true",
    "sft.optimizer.max_steps=1",
    "sft.optimizer.global_batch_size=2",  # the 40 tasks' warm-up split holds 3 rows
    "rl.optimizer.max_steps=1",
    "rl.prompts_per_step=1",
    "rl.num_generations=2",
    "generation.max_completion_length=8",
    "rl.overlong.buffer_length=2",
    "logging.save_steps=1000",
]


def _run(*args: object) -> str:
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, f"spatialiq {' '.join(map(str, args))}\n{res.output[-3000:]}\n{res.exception!r}"
    return res.output


@pytest.mark.slow
def test_generate_trace_train_sample_and_score_folding_tasks(tmp_path: Path) -> None:
    data, traces, run = tmp_path / "data", tmp_path / "traces", tmp_path / "run"
    _run("fold", "gen", "--out", data, "--count", "40", "--groups", "one_step,two_step", "--seed", "0")
    _run("fold", "gen", "--out", data, "--split", "benchmark", "--count", "2", "--groups", "one_step", "--seed", "0")
    assert "no leaks" in _run("check-splits", data)
    _run("fold", "traces", "--data", data, "--out", traces, "--kind", "plain")
    _run(
        "run",
        "dapo-tight",
        "--recipe",
        REPO / "recipes" / "tiny_cpu_folding.yaml",
        "--out",
        run,
        *SHORT,
        f"data.traces_dir={traces}",
        f"data.data_root={data}",
    )
    rows = [json.loads(x) for x in (run / "rl" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert any("reward/hole_partial/mean" in r and r.get("reward/hole_partial/errors") == 0 for r in rows), rows
    asked = ("fold", "sample", "--data", data, "--model", run / "final", "--out", tmp_path / "c.jsonl", "--k", "2",
             "--max-new-tokens", "8", "--engine", "transformers")
    assert "0 completion(s) already on file, 4 written" in _run(*asked)
    assert "4 completion(s) already on file, 0 written" in _run(*asked)  # a rerun resumes: nothing left to draw
    out = _run(
        "fold",
        "score",
        "--data",
        data,
        "--split",
        "benchmark",
        "--completions",
        tmp_path / "c.jsonl",
        "--out",
        tmp_path / "m.json",
    )
    metrics = json.loads((tmp_path / "m.json").read_text(encoding="utf-8"))
    assert metrics["metrics"]["n"] == 4 and len(metrics["scores"]) == 4 and "partial_accuracy" in out


def test_the_released_records_score_with_the_papers_metrics(shared_dir: Path) -> None:
    records = json.loads((shared_dir / "fixtures" / "mentalblackboard" / "PFHP_Prediction_Data.json").read_text())
    truth = truth_of(records)
    sims = {c.id: c.simulated for c in check_records(records)}
    ours = [{"id": rid, "completion": answer_text(s.holes, s.unfolding)} for rid, s in sims.items()]
    theirs = [
        {
            "id": r["id"],
            "completion": "Here you go:\n```json\n"
            + json.dumps(
                {
                    "resultHoles": r["resultHoles"],
                    "totalNumberofHoles": r["totalNumberofHoles"],
                    "unfoldingTypes": r["unfoldingTypes"],
                }
            )
            + "\n```",
        }
        for r in records
    ]
    for rows in (ours, theirs):
        _, table = score_completions(truth, rows)
        assert table["n"] == 900 and table["exact_match"] == 1.0 and table["partial_accuracy"] == 1.0
        assert table["unfolding_exact"] == 1.0 and table["extra_holes"] == table["missing_holes"] == 0.0
    _, none = score_completions(truth, [])
    assert none["exact_match"] == 0.0 and none["missing_holes"] == 1.0 and none["parsed"] == 0.0
    asked = record_requests(records[:2], 1, 0)  # `fold sample --records`: our text of the release's tasks
    assert [r.view for r in asked] == ["PFHP_1", "PFHP_2"] and "(rotation-270)" in asked[0].prompt
    assert asked[0].images == () and "location 12 (row 2, column 2, right triangle)" in asked[0].prompt
    # the release's [row, column, triangle] locations read as locations 1-32
    holes, codes = parse_release_answer(
        '{"resultHoles": [{"shape": "circle", "size": "small", "direction": "", '
        '"location": [1, 2, 1]}], "unfoldingTypes": ["V1-F"]}'
    )
    assert [h.location for h in holes or []] == [14] and codes == ["V1-F"]
    for junk in ("{" * 100_000 + "}" * 100_000, '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "no json"):
        assert parse_release_answer(junk) == (None, None)  # never raises, bounded work
