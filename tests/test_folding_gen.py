"""Paper-folding generation: seeded, resumable, byte-identical, split by configuration; traces from the simulator."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from data_gen.folding_gen import GROUPS, generate, iter_tasks
from data_gen.folding_traces import build_fold_traces, write_fold_traces
from data_gen.split_check import check_splits
from reward import components_of, get_reward
from spatialiq_train.core.errors import InputError
from spatialiq_train.core.folding_answers import parse_holes, parse_unfolding
from spatialiq_train.core.folding_records import check_records
from spatialiq_train.core.traces import load_examples


def _digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("folding")
    assert generate(root, "train", 18, 7, list(GROUPS)) == (18, 0)
    assert generate(root, "benchmark", 4, 7, list(GROUPS)) == (4, 0)
    return root


def test_tasks_follow_the_groups_and_agree_with_the_simulator(dataset: Path) -> None:
    records = [r for _, r in iter_tasks(dataset)]
    assert all(c.agrees for c in check_records(records))
    for rec in records:
        steps, rotating = GROUPS[rec["group"]]
        kinds = ["R" if f["foldType"].startswith("rotation") else "F" for f in rec["foldingTypes"]]
        assert len(kinds) == steps == rec["numberofFoldingSteps"] and kinds[0] == "F"
        assert ("R" in kinds) == bool(rotating) and "RR" not in "".join(kinds) and kinds.count("F") <= 4
        assert len(rec["unfoldingTypes"]) == kinds.count("F") and rec["totalNumberofHoles"] == len(rec["resultHoles"])
        assert rec["prompt"].count("\n") > 8 and rec["split"] in ("train", "benchmark")
    image = Image.open(dataset / "train" / "train_000000" / "sheet.png")
    assert image.size == (168, 168) and (0, 170, 0) in {c for _, c in image.getcolors(1 << 16)}


def test_a_rerun_changes_no_byte_and_an_interrupted_run_resumes(dataset: Path, tmp_path: Path) -> None:
    before = _digest(dataset)
    assert generate(dataset, "train", 18, 7, list(GROUPS)) == (0, 18)
    (dataset / "train" / "train_000005" / "record.json").unlink()  # as a run killed before its last file
    assert generate(dataset, "train", 18, 7, list(GROUPS)) == (1, 17)
    assert _digest(dataset) == before
    generate(tmp_path / "fresh", "train", 3, 7, list(GROUPS))
    fresh = _digest(tmp_path / "fresh")
    assert fresh == {k: v for k, v in before.items() if k in fresh} and len(fresh) == 7  # 3 tasks + fold_gen.json
    generate(tmp_path / "other", "train", 3, 8, list(GROUPS))  # another seed, other tasks
    assert _digest(tmp_path / "other") != fresh
    with pytest.raises(InputError, match="drawn with other arguments \\(seed 8 there, 7 now\\)"):
        generate(tmp_path / "other", "train", 4, 7, list(GROUPS))


def test_no_configuration_is_in_two_splits_and_a_copied_task_is_caught(dataset: Path, tmp_path: Path) -> None:
    report = check_splits([dataset])
    assert report.leaks == [] and report.problems == [] and len(report.structures["benchmark"]) == 4
    shutil.copytree(dataset / "benchmark" / "benchmark_000000", tmp_path / "train" / "benchmark_000000")
    leaks = check_splits([dataset, tmp_path]).leaks
    assert any("in both train and benchmark" in str(leak) for leak in leaks)


def test_traces_carry_simulated_targets_that_the_rewards_score_full(dataset: Path, tmp_path: Path) -> None:
    counts = write_fold_traces(dataset, tmp_path, "cot")
    assert counts["benchmark"] == 4 and counts["train"] == counts["warmup"] + counts["rl"]
    assert counts["train"] + counts["val"] == 18
    rows = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    targets = [r["messages"][-1]["content"][0]["text"] for r in rows]
    assert all("Step 1: unfold" in t for t in targets)
    assert [parse_unfolding(t) for t in targets] == [r["unfolding"] for r in rows]
    truth = [json.loads(r["holes"]) for r in rows]
    assert [len(parse_holes(t)) for t in targets] == [r["answer"] for r in rows] == [len(h) for h in truth]
    _, total = components_of(get_reward("folding"), targets, answer=[r["answer"] for r in rows], holes=truth)
    assert total == pytest.approx([1.0] * len(rows))
    plain = build_fold_traces(dataset, "plain")["benchmark"][0]["messages"][-1]["content"][0]["text"]
    assert plain.startswith("<unfolding>") and plain.endswith(f"<answer>{len(parse_holes(plain))}</answer>")
    examples = load_examples(tmp_path, "rl", dataset, "rl")  # the reader both engines use carries the family's truth
    assert all(json.loads(ex["holes"]) for ex in examples) and all(Path(ex["images"][0]).is_file() for ex in examples)
    with pytest.raises(InputError, match="--kind 'both'"):
        build_fold_traces(dataset, "both")
    bad = dataset / "benchmark" / "benchmark_000001" / "record.json"
    rec = json.loads(bad.read_text(encoding="utf-8"))
    bad.write_text(json.dumps(dict(rec, resultHoles=rec["resultHoles"][:1])), encoding="utf-8")
    try:
        with pytest.raises(InputError, match="benchmark_000001/record.json: the record disagrees with the simulator"):
            build_fold_traces(dataset, "plain")
    finally:
        bad.write_text(json.dumps(rec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
