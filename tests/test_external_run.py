"""`spatialiq eval external spatialchain` end to end on the tiny model through the real transformers engine:
the files and their layout, resume, refusals, and the LLM judge against a local stand-in endpoint."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from _external_support import ROWS, judge_server, write_spatialchain
from _train_support import tiny_model_dir
from typer.testing import CliRunner

from eval.external.judge import JudgeConfig, JudgeReplyError, judge_metrics, parse_verdict, run_judge
from eval.external.prompts import SPATIALCHAIN_JUDGE_PROMPT
from eval.external.spatialchain import SpatialChain
from spatialiq_train.cli import app
from spatialiq_train.core.errors import UserError

pytest.importorskip("torch")
pytest.importorskip("rouge_score")


def _command(root: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", "external", "spatialchain", "--data", str(root / "test.csv"), "--images", str(root / "images"),
            "--model", tiny_model_dir(), "--out", str(out), "--engine", "transformers", "--max-new-tokens", "6",
            *extra]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """One sampled run (three items, greedy, six new tokens): the data root, the output folder, the console."""
    root = write_spatialchain(tmp_path_factory.mktemp("sc"))
    out = root.parent / "out"
    res = CliRunner().invoke(app, _command(root, out))
    assert res.exit_code == 0, res.output
    return root, out, res.output


def test_the_run_writes_the_agreed_layout(run: tuple[Path, Path, str]) -> None:
    root, out, console = run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["benchmark"] == "spatialchain" and metrics["n"] == 3 and metrics["primary"] == "accuracy_all"
    assert metrics["model"] == str(Path(tiny_model_dir()).resolve()) and len(metrics["model_digest"]) == 64
    assert metrics["metrics"]["n_binary"] == 2  # the attribute answer is left out of the accuracy
    assert set(metrics["signals"]) == {"opener", "opener_share", "chain_words_mean"}
    assert metrics["sampling"]["temperature"] == 0.0 and metrics["data"]["items"] == 3
    rows = [json.loads(line) for line in (out / metrics["per_item"]).read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"{n}:{r['imageId']}" for n, r in enumerate(ROWS, start=1)]
    assert rows[2]["correct"] is None and all(r["correct"] in (0, 1) for r in rows[:2])
    assert set(rows[0]["scores"]) >= {"rouge1", "rougeL", "token_f1", "entity_overlap", "length_ratio"}
    # the numbers are the adapter's on the texts the engine wrote (one per item, the benchmark as task)
    texts = {json.loads(line)["view"]: json.loads(line)["text"] for line in (out / "completions.jsonl").open()}
    adapter = SpatialChain()
    assert adapter.score(adapter.load(root / "test.csv", root / "images"), texts).rows == rows
    # the breakdowns: the data's relation column labels every item; each fixture question names one relation
    assert list(metrics["breakdowns"]["relation"]) == ["left_of", "right_of"]
    assert metrics["breakdowns"]["relation"]["right_of"]["n_items"] == 2
    assert metrics["breakdowns"]["relation"]["right_of"]["n"] == 1  # the attribute answer has no accuracy
    assert [r["hops"] for r in rows] == ["single"] * 3 and metrics["metrics"]["n_single_hop"] == 2
    assert metrics["metrics"]["relation_from_column"] == 3 and metrics["metrics"]["relation_agreement"] == 1.0
    assert {"macro_f1", "f1_yes", "f1_no", "accuracy_multi_hop", "hop_delta"} <= set(metrics["metrics"])
    report = (out / "report.md").read_text()
    assert (out / "completions.jsonl.provenance.json").is_file() and "| accuracy |" in report
    assert "## Accuracy by relation" in report and "## Accuracy by hops" in report
    assert "0 already on file, 3 written" in console


def test_resume_draws_only_what_is_missing_and_the_same_text(run: tuple[Path, Path, str], tmp_path: Path) -> None:
    root, out, _ = run
    again = tmp_path / "again"
    shutil.copytree(out, again)
    lines = (again / "completions.jsonl").read_text().splitlines(keepends=True)
    (again / "completions.jsonl").write_text("".join(lines[:2]) + lines[2][:9])  # a cut last line
    res = CliRunner().invoke(app, _command(root, again))
    assert res.exit_code == 0, res.output
    assert "2 already on file, 1 written" in res.output
    assert (again / "completions.jsonl").read_text() == "".join(lines)  # greedy: the text an uninterrupted run drew
    assert (again / "metrics.json").read_text() == (out / "metrics.json").read_text().replace(str(out), str(again))


def test_other_settings_or_data_are_refused_before_any_model_loads(run: tuple[Path, Path, str],
                                                                 tmp_path: Path) -> None:
    root, out, _ = run
    res = CliRunner().invoke(app, _command(root, out, "--temperature", "0.5"))
    assert res.exit_code != 0 and "temperature: 0.0 -> 0.5" in res.output
    other = write_spatialchain(tmp_path / "other", rows=ROWS[:2])
    res = CliRunner().invoke(app, _command(other, out))
    assert res.exit_code != 0 and "dataset:" in res.output
    res = CliRunner().invoke(app, ["eval", "external", "gqa", "--data", "x", "--model", "m", "--out", "o"])
    assert res.exit_code != 0 and "unknown benchmark 'gqa'; known: mentalblackboard, spatialchain" in res.output


def _verdict(faithfulness: float) -> str:
    return json.dumps({"answer_correctness": 1.0, "reasoning_faithfulness": faithfulness,
                       "reasoning_completeness": 0.5})


def test_the_judge_through_the_command(run: tuple[Path, Path, str], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root, out, _ = run
    judged = tmp_path / "judged"
    shutil.copytree(out, judged)
    replies = dict(zip((r["question"] for r in ROWS), [_verdict(0.5), "```json\n" + _verdict(1.0) + "\n```",
                                                      _verdict(1.0)], strict=True))

    def reply(body: dict) -> str:  # by item, whatever order the concurrent requests arrive in
        question = body["messages"][1]["content"].split("\n", 1)[0].removeprefix("Question: ")
        return replies[question]

    monkeypatch.setenv("JUDGE_KEY", "secret")
    with judge_server(reply) as (url, seen):
        extra = ("--judge-url", url, "--judge-model", "judge-7b", "--judge-api-key-env", "JUDGE_KEY")
        res = CliRunner().invoke(app, _command(root, judged, *extra))
        assert res.exit_code == 0, res.output
        assert len(seen) == 3 and seen[0]["path"] == "/v1/chat/completions" and seen[0]["auth"] == "Bearer secret"
        body = seen[0]["body"]
        assert body["model"] == "judge-7b" and body["temperature"] == 0
        assert body["messages"][0] == {"role": "system", "content": SPATIALCHAIN_JUDGE_PROMPT}
        first = next(b["body"] for b in seen if ROWS[0]["question"] in b["body"]["messages"][1]["content"])
        assert first["messages"][1]["content"].startswith(f"Question: {ROWS[0]['question']}\nGroundTruth: Yes")
        res = CliRunner().invoke(app, _command(root, judged, *extra))  # every verdict on file: nothing asked
        assert res.exit_code == 0 and len(seen) == 3
    m = json.loads((judged / "metrics.json").read_text())["metrics"]
    assert m["judge_n"] == 2 and m["judge_invalid"] == 1  # the fenced reply is not the rubric's JSON
    assert m["judge_faithfulness"] == pytest.approx(0.75) and m["judge_completeness"] == 0.5
    assert m["judge_faithfulness_single_hop"] == pytest.approx(0.75) and m["judge_faithfulness_multi_hop"] is None
    assert "secret" not in "".join(p.read_text() for p in judged.iterdir() if p.is_file())


def test_verdicts_are_parsed_strictly() -> None:
    assert parse_verdict(' {"answer_correctness": 1, "reasoning_faithfulness": 0.5, "reasoning_completeness": 0} ') \
        == {"answer_correctness": 1.0, "reasoning_faithfulness": 0.5, "reasoning_completeness": 0.0}
    for reply, why in [("```json\n{}\n```", "not JSON"), ("[1, 2]", "not a JSON object"),
                       (_verdict(1.0)[:-1] + ', "justification": "ok"}', "keys"),
                       (_verdict(1.5), r"in \[0, 1\]"), (_verdict(1.0).replace("0.5", "true"), r"in \[0, 1\]"),
                       ('{"answer_correctness": 1}', "keys")]:
        with pytest.raises(JudgeReplyError, match=why):
            parse_verdict(reply)


def test_judge_metrics_against_hand_computed_values() -> None:
    rows = [{"id": i, "correct": c, "hops": h, "scores": {}}
            for i, c, h in (("a", 1, "single"), ("b", 1, "multi"), ("c", 0, "single"), ("d", 1, "multi"))]
    verdicts = {"a": {"scores": {"answer_correctness": 1.0, "reasoning_faithfulness": 0.5,
                                 "reasoning_completeness": 1.0}},
                "b": {"scores": {"answer_correctness": 1.0, "reasoning_faithfulness": 1.0,
                                 "reasoning_completeness": 1.0}},
                "c": {"scores": {"answer_correctness": 0.0, "reasoning_faithfulness": 0.0,
                                 "reasoning_completeness": 0.5}},
                "d": {"scores": None, "error": "not JSON"}}
    m = judge_metrics(rows, verdicts)
    assert m["judge_n"] == 3 and m["judge_invalid"] == 1
    assert m["judge_faithfulness"] == pytest.approx(0.5) and m["judge_completeness"] == pytest.approx(2.5 / 3)
    assert m["judge_answer_correctness"] == pytest.approx(2 / 3) and m["judge_pass_rate"] == pytest.approx(2 / 3)
    assert m["judged_shortcut_rate"] == pytest.approx(1 / 2)  # of the correct a and b, a has faithfulness <= 0.5
    assert rows[0]["scores"]["judge_reasoning_faithfulness"] == 0.5
    assert rows[3]["scores"]["judge_reasoning_faithfulness"] is None
    # Table 18's RF per hop stratum: single a (0.5) and c (0.0), multi b (1.0); d's invalid verdict left out
    assert m["judge_faithfulness_single_hop"] == 0.25 and m["judge_faithfulness_multi_hop"] == 1.0
    assert m["judge_faithfulness_hop_delta"] == 0.75 and m["judge_faithfulness_ambiguous_hop"] is None


def test_the_judge_asks_several_at_once_and_keeps_what_came_back(tmp_path: Path) -> None:
    import threading
    import time

    state = {"now": 0, "most": 0}
    lock = threading.Lock()

    def ask_one(config: JudgeConfig, system: str, user: str) -> str:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        if user == "fails":
            raise UserError("--judge-url u: u answered HTTP 500 (boom)")
        return _verdict(1.0)

    prompts = {f"i{k}": ("s", f"u{k}") for k in range(8)}
    path = tmp_path / "judge.jsonl"
    verdicts = run_judge(JudgeConfig("u", "m", workers=4), prompts, path, ask_one)
    assert state["most"] > 1 and list(verdicts) == list(prompts)  # the items' order, whatever the replies' was
    assert sorted(json.loads(x)["id"] for x in path.read_text().splitlines()) == sorted(prompts)
    more = {**prompts, "x": ("s", "fails"), "y": ("s", "y")}
    with pytest.raises(UserError, match="HTTP 500"):  # a failed request stops the run; what came back is kept
        run_judge(JudgeConfig("u", "m", workers=1), more, path, ask_one)
    assert len(path.read_text().splitlines()) == 8
    asked: list[str] = []
    run_judge(JudgeConfig("u", "m"), {**more, "x": ("s", "x")}, path, lambda c, s, u: asked.append(u) or _verdict(1))
    assert sorted(asked) == ["x", "y"] and len(path.read_text().splitlines()) == 10  # a rerun asks the rest only
    with pytest.raises(UserError, match="--judge-workers must be at least 1, got 0"):
        run_judge(JudgeConfig("u", "m", workers=0), prompts, path, ask_one)


def test_an_unreachable_judge_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = JudgeConfig(f"http://127.0.0.1:{port}/v1", "judge", timeout=5)
    with pytest.raises(UserError, match=f"cannot reach http://127.0.0.1:{port}/v1/chat/completions"):
        run_judge(config, {"x": ("system", "user")}, tmp_path / "judge.jsonl")
    assert not (tmp_path / "judge.jsonl").exists()
