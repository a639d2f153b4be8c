"""Scene discovery, resumable sampling with fake engines, scoring, export round trip, report and CLI."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from eval.completions import Completion, append_completions, load_completions
from eval.hierarchy import CONVENTIONS, summary_row
from eval.rawcsv import read_raw_csv, read_raw_dir, write_raw_csv
from eval.sample import Request, SamplingConfig, plan_requests, run_sampling
from eval.scenes import find_scenes
from eval.score import collect_predictions, first_sample_table, score_predictions
from spatialiq_train.cli import app
from spatialiq_train.core.errors import EXIT_USAGE, UserError
from spatialiq_train.core.tasks import fill_cot_template
from spatialiq_train.core.views import LEAF_VIEWS


def _structure(rng: np.random.Generator) -> dict[str, int]:
    """The fields constant across a structure's views (task2, task3, task4, task9: benchmark-spec 4.3)."""
    t3 = int(rng.integers(5, 10))
    return {"task2": int(rng.integers(1, t3 + 1)), "task3": t3, "task4": int(rng.integers(3, 5)),
            "task9": int(rng.integers(1, 3))}


def _gt(rng: np.random.Generator, structure: dict[str, int]) -> dict[str, object]:
    """Random truth of one view that keeps every relation of benchmark-spec 4.3 (core.truth.RELATIONS)."""
    t2, t3, t4 = structure["task2"], structure["task3"], structure["task4"]
    t5 = int(rng.integers(t3 + 3, t3 + 7))
    hidden = int(rng.integers(0, 4))
    t8 = min(hidden, 1 + int(rng.integers(0, 2))) if hidden else 0
    t7 = min(int(rng.integers(0, 4)), t2 * (t4 - 1))
    return {"object_type": str(rng.choice(["cube", "factory_box"])), "task1": "blocks", "task_main": t5 + hidden,
            "task2": t2, "task3": t3, "task4": t4, "total_blocks": t5 + hidden, "num_hidden_blocks": hidden,
            "num_columns": t3, "num_layers": t4, "task5": t5, "task6": min(t7, t2), "task7": t7, "task8": t8,
            "task9": structure["task9"], "task10": int(rng.integers(0, 3)), "task11": int(rng.integers(0, 4))}


def make_dataset(root: Path, structures: int = 2, prefix: str = "benchmark/level_1", seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for s in range(1, structures + 1):
        structure = _structure(rng)
        for leaf in LEAF_VIEWS:
            d = root / prefix / f"sample_{s:05d}" / leaf.relpath
            d.mkdir(parents=True)
            (d / "gt.json").write_text(json.dumps(_gt(rng, structure)))
    return root


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return make_dataset(tmp_path / "data")


class TruthEngine:
    """Answers with the ground truth (CoT template or bare integer), or with ``wrong`` for chosen samples."""

    def __init__(self, data: Path, wrong: dict[int, str] | None = None) -> None:
        self.gt = {s.view: s.gt for s in find_scenes(data)}
        self.wrong = wrong or {}
        self.asked: list[tuple[str, str, int]] = []

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> list[list[str]]:
        out = []
        for req in requests:
            gt = self.gt[req.view]
            truth = fill_cot_template(gt) if config.mode == "from-trace" else str(gt[req.task])
            out.append([self.wrong.get(i, truth) for i in req.samples])
            self.asked += [(req.view, req.task, i) for i in req.samples]
        return out


class DyingEngine(TruthEngine):
    def __init__(self, data: Path, calls_before_death: int) -> None:
        super().__init__(data)
        self.left = calls_before_death

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> list[list[str]]:
        if self.left == 0:
            raise KeyboardInterrupt("simulated crash")
        self.left -= 1
        return super().generate(requests, config)


def test_find_scenes_keys_sorting_and_partners(dataset: Path) -> None:
    scenes = find_scenes(dataset)
    assert len(scenes) == 32
    assert scenes[0].view.startswith("benchmark/level_1/sample_00001/view_01/")
    assert scenes[0].view.endswith("view_01/offset3_fov1_dist1")  # natural order: 3 before 12.5
    assert scenes[1].view.endswith("view_01/offset3_fov3_dist0.3") and scenes[16].view.split("/")[2] == "sample_00002"
    s = next(x for x in scenes if x.leaf.view_idx == 4 and x.leaf.offset == 12.5 and x.leaf.fov == 3)
    assert s.partner_view(1) == "benchmark/level_1/sample_00001/view_01/offset12.5_fov3_dist0.3"
    assert s.partner_view(2) == "benchmark/level_1/sample_00001/view_02/offset12.5_fov3_dist0.3"


def test_released_layout_any_prefix(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "rel", structures=1, prefix="eval_set/data_20260403_170859/level_1")
    scenes = find_scenes(root)
    assert len(scenes) == 16
    assert scenes[0].view.startswith("eval_set/data_20260403_170859/level_1/sample_00001/view_01/")


def test_missing_split_beside_another_split_raises(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "data", structures=1, prefix="train/level_1")
    with pytest.raises(FileNotFoundError, match=r"benchmark does not exist.*holds split folder\(s\) train"):
        find_scenes(root, "benchmark")
    assert len(find_scenes(root, "train")) == 16
    assert all(s.view.startswith("train/") for s in find_scenes(root, "train"))
    released = make_dataset(tmp_path / "rel", structures=1, prefix="eval_set/data_1/level_1")
    assert len(find_scenes(released, "benchmark")) == 16  # no split folder at all: the root is read


def test_malformed_gt_names_file_line_and_key(dataset: Path) -> None:
    bad = next((dataset / "benchmark").rglob("gt.json"))
    bad.write_text('{\n"task_main": 3,\n"task2": }')
    with pytest.raises(ValueError, match=r"gt\.json: invalid JSON at line 3"):
        find_scenes(dataset)
    bad.write_text(json.dumps({"task_main": "seven"}))
    with pytest.raises(ValueError, match="key 'task_main' must be an integer"):
        find_scenes(dataset)


def test_independent_requests_send_partner_views(dataset: Path) -> None:
    scenes = find_scenes(dataset)
    cfg = SamplingConfig(mode="independent", k=3, tasks=["task10", "task11", "task5"])
    reqs = plan_requests(scenes[:4], cfg, set())
    assert len(reqs) == 12 and all(r.samples == (0, 1, 2) for r in reqs)
    r10 = next(r for r in reqs if r.task == "task10")
    assert r10.images[0].parent.parent.name == "view_01" and r10.images[1].parent.parent.name == "view_02"
    assert r10.images[0].parent.name == r10.images[1].parent.name
    r11 = next(r for r in reqs if r.task == "task11")
    assert r11.images[1].parent.parent.name == "view_03"
    assert "objects" in r10.prompt and r10.system is None  # Type1 dialect by default
    trace = plan_requests(scenes[:1], SamplingConfig(), set())[0]
    assert trace.task == "task_main" and trace.system is not None and "<answer>" in trace.system


def test_interrupted_run_resumes_without_repeating(dataset: Path, tmp_path: Path) -> None:
    scenes = find_scenes(dataset)
    out = tmp_path / "completions.jsonl"
    cfg = SamplingConfig(k=4, batch_size=5)
    with pytest.raises(KeyboardInterrupt):
        run_sampling(scenes, DyingEngine(dataset, calls_before_death=3), cfg, out)
    first = out.read_text()
    assert first.count("\n") == 3 * 5 * 4
    with out.open("a") as fh:  # a crash in the middle of a write leaves half a line
        fh.write('{"view": "benchmark/level_1/sa')
    engine = TruthEngine(dataset)
    report = run_sampling(scenes, engine, cfg, out)
    assert report.already_done == 60 and report.written == 32 * 4 - 60
    done_first = {(json.loads(line)["view"], "task_main", json.loads(line)["sample"]) for line in first.splitlines()}
    assert not done_first & set(engine.asked)
    text = out.read_text()
    assert text.startswith(first)
    keys = [(r["view"], r["task"], r["sample"]) for r in map(json.loads, text.splitlines())]
    assert len(keys) == len(set(keys)) == 32 * 4
    assert run_sampling(scenes, TruthEngine(dataset), cfg, out).written == 0


def test_partial_request_draws_only_missing_indices(dataset: Path, tmp_path: Path) -> None:
    scenes = find_scenes(dataset)[:1]
    out = tmp_path / "c.jsonl"
    append_completions(out, [Completion(scenes[0].view, "task_main", 1, "x")])
    engine = TruthEngine(dataset)
    run_sampling(scenes, engine, SamplingConfig(k=3), out)
    assert sorted(i for _, _, i in engine.asked) == [0, 2]
    assert load_completions(out)[(scenes[0].view, "task_main", 1)].text == "x"


def _sample(dataset: Path, tmp_path: Path, cfg: SamplingConfig, wrong: dict[int, str] | None = None) -> Path:
    out = tmp_path / f"{cfg.mode}.jsonl"
    run_sampling(find_scenes(dataset), TruthEngine(dataset, wrong), cfg, out)
    return out


def test_from_trace_scoring_of_perfect_traces(dataset: Path, tmp_path: Path) -> None:
    out = _sample(dataset, tmp_path, SamplingConfig(k=3), wrong={2: "I cannot tell"})
    preds = collect_predictions(find_scenes(dataset), load_completions(out))
    assert preds.mode == "from-trace" and preds.k == 3
    assert preds.counts["unparseable"] == 32 and preds.counts["absent"] == 0
    m = score_predictions(preds, "dapo-toy", "dependent_given_prerequisite")
    oc = m["object_counting"]
    assert oc["acc@1"] == 1.0 and oc["maj@3"] == 1.0 and oc["pass@3"] == 1.0
    assert oc["selected@3[self_consistent]"] == 1.0
    assert oc["pass@k_unbiased"]["1"] == pytest.approx(2 / 3)
    assert all(v["accuracy"] == 1.0 for v in m["per_task"].values())
    assert m["summary"]["summation_mechanism"] == 1.0 and m["composition"]["exact_match_rate"] == 1.0
    audit = m["faithfulness"]["all_samples"]
    assert audit["shortcut_rate"] == 0.0 and audit["self_consistency_rate"] == pytest.approx(2 / 3)
    assert audit["self_consistency_rate_among_answered"] == 1.0


def test_unanswered_first_sample_is_wrong_in_every_headline_and_the_export(dataset: Path, tmp_path: Path) -> None:
    out = _sample(dataset, tmp_path, SamplingConfig(k=2), wrong={0: "I cannot tell"})  # every first sample abstains
    preds = collect_predictions(find_scenes(dataset), load_completions(out))
    m = score_predictions(preds, "abstainer", "dependent_given_prerequisite")
    oc = m["object_counting"]
    assert oc["acc@1"] == 0.0 and oc["n"]["acc@1"] == 32 and oc["coverage@1"] == 0.0
    assert m["summary"]["object_count"] == 0.0  # over all 32 scenes, not NaN over none
    table = first_sample_table(preds, "abstainer")
    np.testing.assert_array_equal(table.correct["main"], np.zeros(32))  # scored 0, as the released GLM file
    assert np.isnan(table.pred["main"]).all() and np.isnan(table.correct["task5"]).all()  # sub-tasks stay empty
    assert oc["pass@2"] == 1.0  # the second samples answer


def test_shortcut_trace_is_detected(dataset: Path, tmp_path: Path) -> None:
    out = _sample(dataset, tmp_path, SamplingConfig(k=1))
    records = load_completions(out)
    scenes = find_scenes(dataset)
    for s in scenes:  # right answer, wrong visible count on line 6 -> every correct trace is a shortcut
        gt = dict(s.gt)
        text = fill_cot_template(gt).replace(f"the number of visible objects is: {gt['task5']}",
                                             f"the number of visible objects is: {int(gt['task5']) + 1}")
        records[(s.view, "task_main", 0)] = Completion(s.view, "task_main", 0, text)
    m = score_predictions(collect_predictions(scenes, records), "x", "dependent_given_prerequisite")
    assert m["object_counting"]["acc@1"] == 1.0
    assert m["per_task"]["task5"]["accuracy"] == 0.0
    assert m["faithfulness"]["all_samples"]["shortcut_rate"] == 1.0


def test_independent_scoring_counts_missing_and_majority(dataset: Path, tmp_path: Path) -> None:
    cfg = SamplingConfig(mode="independent", k=3, tasks=["task5", "task8", "task_main"])
    out = _sample(dataset, tmp_path, cfg, wrong={0: "<think>hmm</think>", 1: "99"})
    records = load_completions(out)
    missing_view = find_scenes(dataset)[0].view
    for i in range(3):
        del records[(missing_view, "task5", i)]
    preds = collect_predictions(find_scenes(dataset), records)
    assert preds.mode == "independent" and set(preds.pred) == {"task5", "task8", "main"}
    assert preds.counts["absent"] == 3 and preds.counts["unparseable"] == 32 * 3 - 1
    m = score_predictions(preds, "qwen-toy", "prerequisite_given_dependent")
    oc = m["object_counting"]
    assert oc["acc@1_n"] == 32 and oc["acc@1"] == 0.0  # every first sample unparseable: wrong, over all scenes
    assert oc["coverage@1"] == 0.0 and math.isnan(oc["acc@1_answered"]) and oc["n"]["acc@1_answered"] == 0
    assert oc["maj@3"] == 0.0  # 99 and the truth tie with one vote each; 99 came first
    assert oc["pass@3"] == 1.0
    assert m["decoding"]["task5"]["scenes_without_answer"] == 1


def test_eval_self_consistency_is_the_parsers_predicate(dataset: Path, tmp_path: Path) -> None:
    from spatialiq_train.core.parsing import parse_trace_official

    records = load_completions(_sample(dataset, tmp_path, SamplingConfig(k=3)))
    keys = list(records)
    edits = [("<answer>", "<answer>1"), ("The total is ", "The total is 1"), ("The total is", "Total"), ("", "")]
    for n, key in enumerate(keys):  # tag off by digits, total line changed, total line gone, untouched
        old, new = edits[n % 4]
        records[key] = Completion(*key, records[key].text.replace(old, new) if old else records[key].text)
    scenes = find_scenes(dataset)
    preds = collect_predictions(scenes, records)
    row = {s.view: i for i, s in enumerate(scenes)}
    expected = np.full((len(scenes), 3), np.nan)
    for (view, _, sample), rec in records.items():
        flag = parse_trace_official(rec.text).self_consistent  # the default parse rule
        expected[row[view], sample] = np.nan if flag is None else float(flag)
    assert preds.self_consistency is not None
    np.testing.assert_array_equal(preds.self_consistency, expected)
    assert {0.0, 1.0} <= set(expected[~np.isnan(expected)].tolist()) and np.isnan(expected).any()
    audit = score_predictions(preds, "x", "dependent_given_prerequisite")["faithfulness"]["all_samples"]
    assert audit["self_consistency_rate"] == pytest.approx(float(np.nansum(expected)) / expected.size)
    assert audit["traces_without_total_or_answer"] == int(np.isnan(expected).sum())


def test_export_round_trip_through_paper_tables_reader(dataset: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    wrong = {0: "<answer>5</answer>"}
    out = _sample(dataset, tmp_path, SamplingConfig(k=2), wrong=wrong)
    records = load_completions(out)
    for key in list(records)[::3]:  # perturb a third of the traces
        gt_text = records[key].text
        records[key] = Completion(*key, gt_text.replace("is: ", f"is: {int(rng.integers(0, 9))} ", 1))
    preds = collect_predictions(find_scenes(dataset), records)
    table = first_sample_table(preds, "sft-toy")
    export = tmp_path / "export"
    write_raw_csv(export / "eval_raw_sft-toy_text.csv", table)
    back = read_raw_dir(export)["sft-toy"]
    assert back.views == table.views and back.tasks == table.tasks
    for conv in CONVENTIONS:
        a, b = summary_row(table, conv), summary_row(back, conv)
        assert all((math.isnan(a[c]) and math.isnan(b[c])) or a[c] == b[c] for c in a)
    for t in table.tasks:
        np.testing.assert_array_equal(back.correct[t], table.correct[t])
        np.testing.assert_array_equal(back.pred[t], table.pred[t])
    header = (export / "eval_raw_sft-toy_text.csv").read_text().splitlines()[0]
    assert header.startswith("view,object_type,total_blocks,num_hidden_blocks,num_columns,num_layers,task2,")
    assert header.endswith("task9,task9_pred,task9_gt,main,main_pred,main_gt")


def test_cli_score_report_compare(dataset: Path, tmp_path: Path) -> None:
    out = _sample(dataset, tmp_path, SamplingConfig(k=2), wrong={1: "<answer>1</answer>"})
    runner = CliRunner()
    res = runner.invoke(app, ["eval", "score", "--completions", str(out), "--data", str(dataset),
                              "--out", str(tmp_path / "s"), "--name", "dapo-toy", "--note", "toy responder"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((tmp_path / "s" / "metrics_dapo-toy.json").read_text())
    assert metrics["note"] == "toy responder"
    assert metrics["object_counting"]["maj@2"] == 1.0 and metrics["object_counting"]["pass@2"] == 1.0
    assert metrics["convention"] == "dependent_given_prerequisite"
    assert read_raw_csv(tmp_path / "s" / "eval_raw_dapo-toy_text.csv").name == "dapo-toy"
    res = runner.invoke(app, ["eval", "report", "--metrics", str(tmp_path / "s" / "metrics_dapo-toy.json"),
                              "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r" / "report.md").read_text()
    assert "| dapo-toy | 2 | 1.000 (n=32) | 1.000 (n=32) |" in md
    assert "> **dapo-toy**: toy responder" in md
    for png in ("pass_at_k.png", "summation_2x2.png", "difficulty_bins.png", "object_type.png"):
        assert (tmp_path / "r" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "r" / "report.json").read_text())["responders"][0]["name"] == "dapo-toy"
    base = read_raw_csv(tmp_path / "s" / "eval_raw_dapo-toy_text.csv", "base")
    for t in base.tasks:  # every right answer made wrong, pred and correctness together (the reader checks both)
        right = base.correct[t] == 1
        base.pred[t][right] += 1
        base.correct[t][right] = 0
    write_raw_csv(tmp_path / "s" / "eval_raw_base_text.csv", base)
    res = runner.invoke(app, ["eval", "compare", "--raw", str(tmp_path / "s"), "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    rows = (tmp_path / "c" / "mcnemar.csv").read_text().splitlines()
    assert rows[0].startswith("task,model_a,model_b") and len(rows) == 2


def test_cli_score_fails_when_no_completion_matches(dataset: Path, tmp_path: Path) -> None:
    out = _sample(dataset, tmp_path, SamplingConfig(k=1))
    other = make_dataset(tmp_path / "other", structures=1, prefix="eval_set/data_1/level_1")
    res = CliRunner().invoke(app, ["eval", "score", "--completions", str(out), "--data", str(other),
                                   "--out", str(tmp_path / "s"), "--name", "x"])
    assert res.exit_code == EXIT_USAGE  # bad input (completions of another --data): 2 since issue 9.4
    assert "none of the 32 completions matches" in res.output and f"data root {other} " in res.output
    assert "view 'benchmark/level_1/sample_00001/view_01/" in res.output
    assert not (tmp_path / "s" / "metrics_x.json").exists()


def test_cli_score_refuses_bad_inputs_before_writing(dataset: Path, tmp_path: Path) -> None:
    out = _sample(dataset, tmp_path, SamplingConfig(k=1))
    runner = CliRunner()
    base = ["eval", "score", "--data", str(dataset), "--out", str(tmp_path / "s")]
    missing = runner.invoke(app, [*base, "--completions", str(tmp_path / "nope.jsonl"), "--name", "x"])
    assert missing.exit_code == EXIT_USAGE and "nope.jsonl: no such file" in missing.output
    slash = runner.invoke(app, [*base, "--completions", str(out), "--name", "a/b"])
    assert slash.exit_code == EXIT_USAGE and "--name 'a/b'" in slash.output
    zero = runner.invoke(app, [*base, "--completions", str(out), "--name", "x", "--k", "0"])
    assert zero.exit_code == EXIT_USAGE and "--k must be at least 1" in zero.output
    assert not (tmp_path / "s").exists()


def test_cli_errors_are_clean(tmp_path: Path) -> None:
    runner = CliRunner()
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "eval_raw_x_text.csv").write_text("view,object_type\n")
    res = runner.invoke(app, ["eval", "paper-tables", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "o")])
    assert res.exit_code == EXIT_USAGE and "eval_raw_x_text.csv: line 1" in res.output
    res = runner.invoke(app, ["eval", "sample", "--model", str(tmp_path), "--data", str(tmp_path / "raw"),
                              "--out", str(tmp_path / "c.jsonl"), "--mode", "sideways"])
    assert res.exit_code == EXIT_USAGE and "--mode" in res.output


def test_training_dialect_without_a_task_prompt_fails_up_front(dataset: Path, tmp_path: Path) -> None:
    cfg = SamplingConfig(mode="independent", dialect="training", tasks=["task5", "task11"])
    with pytest.raises(ValueError, match=r"task 'task11' has no prompt in the 'training' dialect; use --dialect type1"):
        cfg.task_prompts()
    with pytest.raises(ValueError, match="task11"):
        plan_requests(find_scenes(dataset), cfg, set())
    assert set(SamplingConfig(mode="independent", dialect="type1", tasks=["task11"]).task_prompts()) == {"task11"}
    for tasks in (["--tasks", "task5,task11"], []):  # explicit, and the default list of every integer task
        res = CliRunner().invoke(app, ["eval", "sample", "--model", str(tmp_path / "no-model"), "--data", str(dataset),
                                       "--out", str(tmp_path / "c.jsonl"), "--mode", "independent",
                                       "--dialect", "training", *tasks])
        assert res.exit_code == EXIT_USAGE and "task 'task11' has no prompt in the 'training' dialect" in res.output
        assert res.exception is None or isinstance(res.exception, SystemExit)
    assert not (tmp_path / "c.jsonl").exists()


def test_vllm_engine_fails_clearly_when_absent(tmp_path: Path) -> None:
    from eval.engines import VLLMEngine, vllm_available

    if vllm_available():
        pytest.skip("vLLM is installed here")
    with pytest.raises(UserError, match="--engine vllm: the vllm engine needs vLLM, which is not installed"):
        VLLMEngine(tmp_path)


class _FakeInputs(dict):
    def to(self, device: str) -> _FakeInputs:
        return self


class _FakeTokenizer:
    padding_side = "right"


class _FakeProcessor:
    tokenizer = _FakeTokenizer()

    def apply_chat_template(self, messages: object, tokenize: bool, add_generation_prompt: bool) -> str:
        return "prompt"

    def __call__(self, text: list[str], images: object, padding: bool, return_tensors: str) -> _FakeInputs:
        import torch

        assert self.tokenizer.padding_side == "left"  # a batch of prompts is padded on the left
        return _FakeInputs(input_ids=torch.zeros((len(text), 3), dtype=torch.long))

    def batch_decode(self, tokens: object, skip_special_tokens: bool) -> list[str]:
        return [f"seq{i}" for i in range(len(tokens))]  # type: ignore[arg-type]


class _FakeModel:
    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    def generate(self, **kwargs: object) -> object:
        import torch

        self.calls.append(kwargs)
        if kwargs["do_sample"] and kwargs.get("temperature", 1.0) == 0:
            raise ValueError("temperature has to be a strictly positive float")  # what transformers does
        if not kwargs["do_sample"] and kwargs["num_return_sequences"] != 1:
            raise ValueError("greedy decoding returns one sequence")
        return torch.zeros((int(kwargs["num_return_sequences"]), 5), dtype=torch.long)  # type: ignore[call-overload]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_transformers_engine_greedy_at_temperature_zero(dataset: Path, temperature: float) -> None:
    pytest.importorskip("torch")
    from eval.engines import TransformersEngine

    engine = TransformersEngine.__new__(TransformersEngine)
    engine.device, engine.processor, engine.model = "cpu", _FakeProcessor(), _FakeModel()
    req = Request("v", "task_main", "p", None, (), (0, 1, 2), 5)
    texts = engine.generate([req], SamplingConfig(k=3, temperature=temperature, top_p=0.9))
    kwargs = engine.model.calls[0]
    if temperature == 0:
        assert kwargs["do_sample"] is False and not {"temperature", "top_p", "top_k"} & kwargs.keys()
        assert texts == [["seq0", "seq0", "seq0"]]
    else:  # temperature and top-p go to the per-request sampler; generate's own draw sees one-hot scores
        assert kwargs["do_sample"] is True and kwargs["temperature"] == 1.0 and kwargs["top_p"] == 1.0
        assert kwargs["top_k"] == 0 and kwargs["num_return_sequences"] == 3
        (sampler,) = kwargs["logits_processor"]  # type: ignore[misc]
        assert [type(w).__name__ for w in sampler.warpers] == ["TemperatureLogitsWarper", "TopPLogitsWarper"]
        assert sampler.warpers[0].temperature == 0.7 and sampler.warpers[1].top_p == 0.9
        assert texts == [["seq0", "seq1", "seq2"]]
    assert engine.processor.tokenizer.padding_side == "right"  # restored


@pytest.mark.slow
def test_transformers_engine_samples_from_tiny_model(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from PIL import Image

    from eval.engines import TransformersEngine
    from spatialiq_train.tiny import save_tiny

    model_dir = save_tiny(tmp_path / "tiny", seed=0)
    data = make_dataset(tmp_path / "data", structures=1)
    for gt in (data / "benchmark").rglob("gt.json"):
        Image.new("RGB", (64, 64), (120, 80, 40)).save(gt.parent / "view.png")
    scenes = find_scenes(data)[:1]
    engine = TransformersEngine(model_dir)
    cfg = SamplingConfig(k=2, max_new_tokens=6)
    out = tmp_path / "c.jsonl"
    report = run_sampling(scenes, engine, cfg, out)
    assert report.written == 2
    records = load_completions(out)
    assert sorted(records) == [(scenes[0].view, "task_main", 0), (scenes[0].view, "task_main", 1)]
    assert all(isinstance(r.text, str) for r in records.values())
    greedy = tmp_path / "greedy.jsonl"  # temperature 0 is greedy decoding, as in vLLM (no ValueError)
    assert run_sampling(scenes, engine, SamplingConfig(k=2, temperature=0.0, max_new_tokens=4), greedy).written == 2
    assert len({r.text for r in load_completions(greedy).values()}) == 1
    cfg2 = SamplingConfig(mode="independent", k=2, max_new_tokens=4, tasks=["task10"])
    for s in find_scenes(data):  # partner images exist for every view of the structure
        assert s.partner_image(1).is_file()
    assert run_sampling(scenes, engine, cfg2, tmp_path / "i.jsonl").written == 2
    preds = collect_predictions(scenes, load_completions(out))  # random text: parsed or counted, never a crash
    assert preds.counts["completions"] == 2
    runner = CliRunner()
    res = runner.invoke(app, ["eval", "sample", "--model", str(model_dir), "--data", str(data), "--out",
                              str(tmp_path / "cli.jsonl"), "--engine", "transformers", "--k", "2",
                              "--max-new-tokens", "4", "--limit", "2"])
    assert res.exit_code == 0, res.output
    assert len(load_completions(tmp_path / "cli.jsonl")) == 4
    res = runner.invoke(app, ["eval", "score", "--completions", str(tmp_path / "cli.jsonl"), "--data", str(data),
                              "--out", str(tmp_path / "score"), "--name", "tiny", "--min-coverage", "0.1"])
    assert res.exit_code == 0, res.output
    assert "covers 2 of 16 scenes" in res.output  # the warning: most scenes are absent
    counts = json.loads((tmp_path / "score" / "metrics_tiny.json").read_text())["counts"]
    assert counts["completions"] == 4 and counts["absent"] == 16 * 2 - 4


def test_unknown_views_and_tasks_are_counted_not_fatal(dataset: Path) -> None:
    scenes = find_scenes(dataset)
    records = {("elsewhere/view_01/offset3_fov1_dist1", "task5", 0): Completion("elsewhere", "task5", 0, "3"),
               (scenes[0].view, "task42", 0): Completion(scenes[0].view, "task42", 0, "3"),
               (scenes[0].view, "task5", 0): Completion(scenes[0].view, "task5", 0, "no number here")}
    preds = collect_predictions(scenes, records)
    assert preds.mode == "independent" and list(preds.pred) == ["task5"]
    assert preds.counts["unknown_view_or_task"] == 2 and preds.counts["unparseable"] == 1
    assert preds.counts["absent"] == 31
    m = score_predictions(preds, "x", "prerequisite_given_dependent")
    assert m["object_counting"] == {} and m["per_task"]["task5"]["n"] == 0


def test_parquet_split_is_read_when_no_view_folders(dataset: Path, tmp_path: Path) -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from eval.engines import _images

    folder_scenes = find_scenes(dataset)
    png = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(png, format="PNG")
    rows = []
    for s in folder_scenes:
        row = {k: v for k, v in s.gt.items() if k != "task1"}
        row.update(view=s.view, view_idx=s.leaf.view_idx, offset=s.leaf.offset, fov=s.leaf.fov, dist=s.leaf.dist,
                   image={"bytes": png.getvalue(), "path": f"{s.view}/view.png"})
        rows.append(row)
    root = tmp_path / "pq"
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows[:20]), root / "data" / "benchmark-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[20:]), root / "data" / "benchmark-00001-of-00002.parquet")
    scenes = find_scenes(root)
    assert [s.view for s in scenes] == [s.view for s in folder_scenes]
    assert all(a.gt["task_main"] == b.gt["task_main"] for a, b in zip(scenes, folder_scenes, strict=True))
    req = plan_requests(scenes, SamplingConfig(mode="independent", k=1, tasks=["task11"]), set())[0]
    assert all(isinstance(i, bytes) for i in req.images) and len(req.images) == 2
    assert _images(req)[1].getpixel((0, 0)) == (1, 2, 3)
    bad = rows[0] | {"task5": None}
    pq.write_table(pa.Table.from_pylist([bad]), root / "data" / "benchmark-00000-of-00002.parquet")
    with pytest.raises(ValueError, match=r"benchmark-00000-of-00002.parquet: key 'task5' .* \(row 0\)"):
        find_scenes(root)


def _score_cli(completions: Path, dataset: Path, out: Path, *extra: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["eval", "score", "--completions", str(completions), "--data", str(dataset),
                                    "--out", str(out), "--name", "m", *extra])


def test_cli_score_parses_as_the_official_evaluator_by_default(dataset: Path, tmp_path: Path) -> None:
    records = load_completions(_sample(dataset, tmp_path, SamplingConfig(k=1)))
    for key, rec in records.items():  # "11.0"-style tags: the official evaluator falls back to the total line
        tag = rec.text[rec.text.rindex("<answer>"):]
        records[key] = Completion(*key, rec.text.replace(tag, tag.replace("</answer>", ".0</answer>")))
    edited = tmp_path / "edited.jsonl"
    append_completions(edited, records.values())
    res = _score_cli(edited, dataset, tmp_path / "o")
    assert res.exit_code == 0, res.output
    official = json.loads((tmp_path / "o" / "metrics_m.json").read_text())
    assert official["parse"] == "official" and "evaluate_text_ckpts.py" in official["parse_rule"]
    assert official["object_counting"]["acc@1"] == 1.0 and "parse official" in res.output
    res = _score_cli(edited, dataset, tmp_path / "s", "--parse", "strict")
    assert res.exit_code == 0, res.output
    strict = json.loads((tmp_path / "s" / "metrics_m.json").read_text())
    assert strict["parse"] == "strict" and strict["object_counting"]["acc@1"] == 0.0  # "12.0" read as 0
    assert strict["per_task"]["task5"]["accuracy"] == official["per_task"]["task5"]["accuracy"] == 1.0
    bad = _score_cli(edited, dataset, tmp_path / "b", "--parse", "loose")
    assert bad.exit_code != 0 and "--parse must be official or strict" in bad.output


def test_score_infers_k_from_the_most_common_count_and_refuses_a_far_index(dataset: Path, tmp_path: Path) -> None:
    out = _sample(dataset, tmp_path, SamplingConfig(k=3))
    view = find_scenes(dataset)[0].view
    append_completions(out, [Completion(view, "task_main", 3, "<answer>1</answer>")])  # one view holds 4
    preds = collect_predictions(find_scenes(dataset), load_completions(out))
    assert preds.k == 3 and preds.counts["beyond_k"] == 1
    append_completions(out, [Completion(view, "task_main", 100000, "<answer>1</answer>")])
    lines = len(out.read_text().splitlines())
    with pytest.raises(UserError, match=rf"line {lines}: sample index 100000 is far beyond the 3 completion"):
        collect_predictions(find_scenes(dataset), load_completions(out))
    res = _score_cli(out, dataset, tmp_path / "o")
    assert res.exit_code == EXIT_USAGE and f"line {lines}: sample index 100000" in res.output
    explicit = collect_predictions(find_scenes(dataset), load_completions(out), k=2)  # --k: the rest is ignored
    assert explicit.k == 2 and explicit.pred["main"].shape == (32, 2) and explicit.counts["beyond_k"] == 32 + 2
    res = _score_cli(out, dataset, tmp_path / "o", "--k", "100001")
    assert res.exit_code == EXIT_USAGE and "--k 100001: no view holds more than 5 completion(s)" in res.output


def test_score_shows_n_and_refuses_low_coverage(dataset: Path, tmp_path: Path) -> None:
    full = load_completions(_sample(dataset, tmp_path, SamplingConfig(k=1)))
    one = tmp_path / "one.jsonl"
    append_completions(one, [next(iter(full.values()))])  # 1 of 32 scenes
    res = _score_cli(one, dataset, tmp_path / "o")
    assert res.exit_code == EXIT_USAGE and "covers 1 of 32 scenes (3.1%), below --min-coverage 0.9" in res.output
    assert not (tmp_path / "o").exists()
    res = _score_cli(one, dataset, tmp_path / "o", "--min-coverage", "0")
    assert res.exit_code == 0, res.output
    assert "most scenes are absent" in res.output
    assert ("acc@1 0.0312 (n=32)  maj@1 0.0312 (n=32)  pass@1 0.0312 (n=32)  coverage@1 0.0312  "
            "acc@1_answered 1.0000 (n=1)  scenes 1/32") in res.output
    m = json.loads((tmp_path / "o" / "metrics_m.json").read_text())
    assert m["coverage"] == {"scenes": 32, "scenes_covered": 1, "share": 1 / 32}
    assert m["object_counting"]["n"] == {"acc@1": 32, "acc@1_answered": 1, "maj@1": 32, "pass@1": 32,
                                         "selected@1[self_consistent]": 32,
                                         "selected@1[self_consistent_and_invariants]": 32}
    report = CliRunner().invoke(app, ["eval", "report", "--metrics", str(tmp_path / "o" / "metrics_m.json"),
                                      "--out", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    assert "0.031 (n=32)" in (tmp_path / "r" / "report.md").read_text()
    assert "1.000 (n=1)" in (tmp_path / "r" / "report.md").read_text()  # answered-only, under its own column
    assert _score_cli(one, dataset, tmp_path / "o2", "--min-coverage", "1.5").exit_code != 0


def test_score_refuses_an_empty_completions_file(dataset: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = _score_cli(empty, dataset, tmp_path / "o")
    assert res.exit_code == EXIT_USAGE and f"--completions {empty}: the file is empty" in res.output
    empty.write_text('{"view": "a", "task": "task_main", "sam')  # only a half-written line
    res = _score_cli(empty, dataset, tmp_path / "o")
    assert res.exit_code == EXIT_USAGE and "holds no complete completion line" in res.output
    assert not (tmp_path / "o").exists()


def test_a_completions_file_records_what_wrote_it_and_refuses_another(tmp_path: Path) -> None:
    """Resuming into a file written by another checkpoint (two run folders both named ``hf``) or with other
    sampling settings is refused, naming the difference; the same model and settings resume."""
    pytest.importorskip("torch")
    from PIL import Image

    from eval.provenance import provenance_path
    from spatialiq_train.tiny import save_tiny

    sft, rl = save_tiny(tmp_path / "sft" / "hf", seed=0), save_tiny(tmp_path / "rl" / "hf", seed=1)
    data = make_dataset(tmp_path / "data", structures=1)
    for gt in (data / "benchmark").rglob("gt.json"):
        Image.new("RGB", (64, 64), (120, 80, 40)).save(gt.parent / "view.png")
    out = tmp_path / "c.jsonl"

    def sample(model: Path, *extra: str):  # noqa: ANN202
        return CliRunner().invoke(app, ["eval", "sample", "--model", str(model), "--data", str(data), "--out", str(out),
                                        "--engine", "transformers", "--k", "1", "--max-new-tokens", "2", "--limit", "1",
                                        *extra])

    res = sample(sft)
    assert res.exit_code == 0, res.output
    record = json.loads(provenance_path(out).read_text())
    assert record["model"] == str(sft.resolve()) and len(record["model_digest"]) == 64
    assert record["sampling"]["k"] == 1 and record["sampling"]["temperature"] == 1.0
    lines = out.read_bytes()
    res = sample(sft)
    assert res.exit_code == 0 and "1 already on file, 0 written" in res.output
    res = sample(rl)
    assert res.exit_code == EXIT_USAGE and "another model" in res.output
    flat = " ".join(res.output.split())
    assert "model_digest" in flat and str(rl.resolve()) in flat
    res = sample(sft, "--temperature", "0.7")
    assert res.exit_code == EXIT_USAGE and "temperature: 1.0 -> 0.7" in " ".join(res.output.split())
    assert out.read_bytes() == lines  # nothing appended by a refused resume
    provenance_path(out).unlink()  # a file from before provenance records: nothing says what wrote it
    res = sample(sft)
    assert res.exit_code == EXIT_USAGE and "no provenance record" in " ".join(res.output.split())
