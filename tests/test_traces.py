"""SFT-plain / SFT-CoT traces: targets, record contents, partitions and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data_gen.traces import build_traces, load_views, plain_target, write_traces
from reward import get_reward
from spatialiq_train.cli import app
from spatialiq_train.core.dataset import REWARD_FIELDS
from spatialiq_train.core.io import natural_key
from spatialiq_train.core.prompts import COT_SYSTEM_PROMPT
from spatialiq_train.core.splits import part_of, partition_of
from spatialiq_train.core.tasks import build_prompt

EX4_GT = dict(task1="blocks", task2=4, task3=8, task4=2, task5=11, task6=3, task7=3, task8=1, task9=3,
              num_hidden_blocks=1, task_main=12)
EX4_COT = (
    "<think>\n"
    "1) The object type making up the structure is: blocks.\n"
    "2) The number of columns in the object structure is: 8.\n"
    "3) The number of layers in the object structure is: 2.\n"
    "4) The number of objects in the top-most layer is: 4.\n"
    "5) The number of distinct clusters is: 3.\n"
    "6) Given 8 columns, 2 layers, 4 objects in the top-most layer, and 3 clusters, the number of visible objects "
    "is: 11.\n"
    "7) The number of visible objects in the columns containing the top-most object(s) (excluding the top-most objects "
    "themselves) is: 3.\n"
    "8) The number of visible objects directly supporting the top-most object(s) is: 3.\n"
    "9) The number of visible objects in direct contact directly above a hidden object is: 1.\n"
    "10) Given 4 objects in top-most columns, 3 supporting objects, and 1 objects above hidden ones, the number of "
    "hidden objects is: 1.\n"
    "The total is 11 + 1 = 12.\n"
    "</think>\n"
    "<answer>12</answer>"
)
LEAVES = ("offset3_fov1_dist1", "offset12.5_fov3_dist0.3")


def _gt(sample: int, view: int) -> dict:
    """Consistent made-up ground truth that varies by sample and view."""
    visible = 7 + (sample + view) % 5
    hidden = (sample + view) % 3
    total = visible + hidden
    gt = dict(EX4_GT, task5=visible, num_hidden_blocks=hidden, task_main=total, total_blocks=total)
    gt.update(task3=8 + sample % 3, task8=min(hidden, 2), task10=1, task11=2, view_idx=view)
    return gt


def _pick_ids(n_train: int) -> list[str]:
    """Structure ids covering the three parts (val, warmup, rl), one val structure among them whose warm-up/RL
    hash draw says warm-up and one whose draw says RL (the cases where the old independent partitions overlapped)."""
    ids: list[str] = []
    needed = {"val", "warmup", "rl", ("val", "warmup"), ("val", "rl")}
    i = 0
    while len(ids) < n_train or needed:
        sid = f"struct{i:04d}"
        kinds = {part_of(sid), (partition_of(sid, "trainval"), partition_of(sid, "dapo"))}
        if len(ids) < n_train or kinds & needed:
            ids.append(sid)
            needed -= kinds
        i += 1
    return ids


def make_dataset(root: Path, n_train: int = 12, n_bench: int = 3, images: bool = True) -> Path:
    """A tiny generated-layout dataset: <root>/<split>/level_1/sample_NNNNN/view_VV/<leaf>/gt.json."""
    plan = [("train", sid) for sid in _pick_ids(n_train)] + [("benchmark", f"bench{i}") for i in range(n_bench)]
    for idx, (split, sid) in enumerate(plan, start=1):
        sample = root / split / "level_1" / f"sample_{idx:05d}"
        sample.mkdir(parents=True)
        (sample / "scene.json").write_text(json.dumps({"structure_id": sid, "sample_idx": idx}))
        for view in (1, 2):
            for leaf in LEAVES:
                d = sample / f"view_{view:02d}" / leaf
                d.mkdir(parents=True)
                (d / "gt.json").write_text(json.dumps(_gt(idx, view)))
                if images:
                    (d / "view.png").write_bytes(b"png")
    return root


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_natural_key_orders_numbers_numerically() -> None:
    paths = ["s/sample_100/v", "s/sample_99/v", "s/sample_9/v"]
    assert sorted(paths, key=natural_key) == ["s/sample_9/v", "s/sample_99/v", "s/sample_100/v"]


def test_plain_and_cot_targets_byte_exact(tmp_path: Path) -> None:
    leaf = tmp_path / "train" / "level_1" / "sample_01" / "view_01" / "offset3_fov1_dist1"
    leaf.mkdir(parents=True)
    (leaf / "gt.json").write_text(json.dumps(EX4_GT))
    (leaf / "view.png").write_bytes(b"")
    views = load_views(tmp_path)
    plain = next(iter(build_traces(views, "plain").values()))[0]
    cot = next(iter(build_traces(views, "cot").values()))[0]
    masked = next(iter(build_traces(views, "cot", mask_final_answer="X").values()))[0]
    assert plain["messages"][-1]["content"] == [{"type": "text", "text": "<answer>12</answer>"}]
    assert plain_target(12) == "<answer>12</answer>"
    assert cot["messages"][-1]["content"][0]["text"] == EX4_COT
    assert masked["messages"][-1]["content"][0]["text"] == EX4_COT.replace("= 12.", "= X.").replace(
        "<answer>12<", "<answer>X<"
    )
    assert masked["answer"] == 12  # the real value stays available to rewards
    assert [m["role"] for m in plain["messages"]] == ["user", "assistant"]
    assert [m["role"] for m in cot["messages"]] == ["system", "user", "assistant"]
    assert cot["messages"][0]["content"] == [{"type": "text", "text": COT_SYSTEM_PROMPT}]
    image_rel = "train/level_1/sample_01/view_01/offset3_fov1_dist1/view.png"
    assert plain["messages"][0]["content"] == [
        {"type": "image", "image": image_rel},
        {"type": "text", "text": build_prompt("task_main")},
    ]


def test_cli_writes_partitioned_files(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["traces", "--data", str(data), "--out", str(out), "--kind", "cot"])
    assert result.exit_code == 0, result.output
    files = {p.stem: _read(p) for p in out.glob("*.jsonl")}
    assert set(files) == {"train", "val", "warmup", "rl", "benchmark"}
    n_views = 4  # 2 views x 2 leaves per structure
    train_ids = {r["structure_id"] for r in files["train"]}
    val_ids = {r["structure_id"] for r in files["val"]}
    warm_ids = {r["structure_id"] for r in files["warmup"]}
    rl_ids = {r["structure_id"] for r in files["rl"]}
    bench_ids = {r["structure_id"] for r in files["benchmark"]}
    assert train_ids and val_ids and warm_ids and rl_ids
    assert not train_ids & val_ids and not warm_ids & rl_ids
    assert not val_ids & warm_ids and not val_ids & rl_ids  # validation is held out from both training parts
    assert train_ids == warm_ids | rl_ids
    assert not (train_ids | val_ids) & bench_ids
    assert bench_ids == {"bench0", "bench1", "bench2"}
    assert all(part_of(s) == "val" for s in val_ids)
    assert all(part_of(s) == "warmup" for s in warm_ids) and all(part_of(s) == "rl" for s in rl_ids)
    every = train_ids | val_ids  # train/val are the recorded trainval draw, as before (files unchanged)
    assert val_ids == {s for s in every if partition_of(s, "trainval") == "val"}
    assert warm_ids == {s for s in every if partition_of(s, "dapo") == "warmup"} - val_ids
    assert len(files["train"]) == len(files["warmup"]) + len(files["rl"])
    assert len(files["benchmark"]) == 3 * n_views


def test_record_fields_and_reward_roundtrip(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_train=3, n_bench=0)
    files = build_traces(load_views(data), "cot")
    records = files["train"] + files["val"]
    for rec in records:
        assert list(rec)[:5] == ["messages", "view", "structure_id", "answer", "task_id"]
        gt = json.loads((data / rec["view"] / "gt.json").read_text())
        assert rec["answer"] == gt["task_main"] and rec["task_id"] == "task_main"
        assert {f: rec[f] for f in REWARD_FIELDS} == {f: gt[f] for f in REWARD_FIELDS}
        assert (data / rec["messages"][1]["content"][0]["image"]).is_file()
    # The gold CoT target earns every reward's maximum when scored against its own record's columns.
    completions = [r["messages"][-1]["content"][0]["text"] for r in records]
    columns = {f: [r[f] for r in records] for f in REWARD_FIELDS}
    for name in ("default", "stepwise", "consistency", "exact_match"):
        assert get_reward(name)(completions, answer=[r["answer"] for r in records], **columns) == [1.0] * len(records)


def test_order_is_deterministic_and_natural(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_train=12, n_bench=0)
    a = build_traces(load_views(data), "plain")
    b = build_traces(load_views(data), "plain")
    assert a == b
    views = [r["view"] for r in a["rl"]]
    assert views == sorted(views, key=natural_key)


def test_plain_tasks_and_skips(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_train=2, n_bench=0)
    files = build_traces(load_views(data), "plain", tasks=["task_main", "task3", "task10", "task1"])
    recs = files["warmup"] + files["rl"]
    by_task: dict[str, list[dict]] = {}
    for r in recs:
        by_task.setdefault(r["task_id"], []).append(r)
    assert set(by_task) == {"task_main", "task3", "task1"}  # task10 skipped like the release
    for r in by_task["task3"]:
        assert r["answer"] == r["task3"]
        assert r["messages"][-1]["content"][0]["text"] == f"<answer>{r['task3']}</answer>"
        assert r["messages"][0]["content"][1]["text"] == build_prompt("task3")
    assert all(r["answer"] is None and r["messages"][-1]["content"][0]["text"] == "<answer>blocks</answer>"
               for r in by_task["task1"])


def test_released_layout_groups_by_sample_folder(tmp_path: Path) -> None:
    """No scene.json, no split folder: the group id is the sample folder path (benchmark-spec 6.3)."""
    for run in ("data_20260410_101955", "data_20260411_090000"):
        leaf = tmp_path / "eval_set" / run / "level_1" / "sample_01" / "view_01" / "offset3_fov1_dist1"
        leaf.mkdir(parents=True)
        (leaf / "gt.json").write_text(json.dumps(EX4_GT))
        (leaf / "view.png").write_bytes(b"")
    with pytest.raises(ValueError, match="--split"):
        load_views(tmp_path)
    views = load_views(tmp_path, split="benchmark")
    assert [v.structure_id for v in views] == [
        "eval_set/data_20260410_101955/level_1/sample_01",
        "eval_set/data_20260411_090000/level_1/sample_01",
    ]
    assert list(build_traces(views, "plain")) == ["benchmark"]


def test_malformed_gt_names_the_file(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_train=1, n_bench=0)
    bad = next(data.rglob("gt.json"))
    bad.write_text('{"task_main": 3,')
    with pytest.raises(ValueError, match=str(bad)):
        load_views(data)
    bad.write_text(json.dumps(dict(EX4_GT, task5="11")))
    with pytest.raises(ValueError, match=r"'task5'"):
        load_views(data)


def test_images_required_and_option_errors(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_train=2, n_bench=0, images=False)
    views = load_views(data)
    assert build_traces(views, "plain") == {}
    files = build_traces(views, "plain", require_images=False)
    assert len(files["train"]) + len(files["val"]) == len(views)
    assert len(files["warmup"]) + len(files["rl"]) == len(files["train"])
    with pytest.raises(ValueError, match="plain only"):
        build_traces(views, "cot", tasks=["task3"])
    with pytest.raises(ValueError, match="cot only"):
        build_traces(views, "plain", mask_final_answer="X")
    with pytest.raises(ValueError, match="--tasks: unknown task"):
        build_traces(views, "plain", tasks=["task99"])


def test_structure_in_both_splits_is_refused(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_train=1, n_bench=1)
    scene = next((data / "benchmark").rglob("scene.json"))
    train_scene = json.loads(next((data / "train").rglob("scene.json")).read_text())
    scene.write_text(json.dumps({"structure_id": train_scene["structure_id"]}))
    with pytest.raises(ValueError, match="both the train and benchmark"):
        build_traces(load_views(data), "plain")


def test_write_traces_is_complete_and_atomic(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_train=3, n_bench=0)
    files = build_traces(load_views(data), "plain")
    counts = write_traces(tmp_path / "out", files)
    assert set(counts) == {"train", "val", "warmup", "rl"}  # all four, even an empty one
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["rl.jsonl", "train.jsonl", "val.jsonl",
                                                                      "warmup.jsonl"]
    for name, n in counts.items():
        assert len(_read(tmp_path / "out" / f"{name}.jsonl")) == n == len(files.get(name, []))


def test_cli_errors_name_the_problem(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "d", n_train=1, n_bench=0)
    bad = next(data.rglob("gt.json"))
    bad.write_text("{")
    runner = CliRunner()
    args = ["traces", "--data", str(data), "--out", str(tmp_path / "out")]
    result = runner.invoke(app, [*args, "--kind", "plain"], env={"COLUMNS": "1000"})
    assert result.exit_code != 0 and "invalid JSON" in result.output and bad.name in result.output
    result = runner.invoke(app, [*args, "--kind", "sft"], env={"COLUMNS": "1000"})
    assert result.exit_code != 0 and "unknown trace kind 'sft'" in result.output
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_write_traces_removes_stale_trace_files_of_an_earlier_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    both = make_dataset(tmp_path / "both", n_train=3, n_bench=2)
    write_traces(out, build_traces(load_views(both), "plain"))
    assert (out / "benchmark.jsonl").is_file() and (out / "train.jsonl").is_file()
    (out / "notes.txt").write_text("mine")
    (out / "extra.jsonl").write_text("{}\n")
    views = load_views(both)
    counts = write_traces(out, build_traces([v for v in views if v.split == "train"], "plain"))
    names = sorted(p.name for p in out.iterdir())
    assert names == ["extra.jsonl", "notes.txt", "rl.jsonl", "train.jsonl", "val.jsonl", "warmup.jsonl"]
    assert set(counts) == {"train", "val", "warmup", "rl"}
    write_traces(out, build_traces([v for v in views if v.split == "benchmark"], "plain"))
    assert sorted(p.name for p in out.glob("*.jsonl")) == ["benchmark.jsonl", "extra.jsonl"]


def test_trace_discovery_uses_the_layout_names(tmp_path: Path) -> None:
    from data_gen import traces
    from spatialiq_train.core import dataset
    from spatialiq_train.core.dataset import GT_FILE, IMAGE_FILE, find_gt_files

    assert traces.iter_views is dataset.iter_views and find_gt_files is dataset.find_gt_files
    data = make_dataset(tmp_path / "d", n_train=2, n_bench=0)
    hidden = data / ".cache" / "gt.json"
    hidden.parent.mkdir()
    hidden.write_text("{}")
    found = find_gt_files(data)
    assert found and all(p.name == GT_FILE and ".cache" not in p.parts for p in found)
    views = load_views(data)  # the hidden gt.json (not valid ground truth) is not read
    assert all(v.image.endswith("/" + IMAGE_FILE) for v in views)
