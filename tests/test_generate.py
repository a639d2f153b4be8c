"""Generation pipeline: layout, parquet, manifest, determinism, resume, sharding, errors (data_gen.generate)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from data_gen import executor, generation_run, plan, shards, structure, visibility, writer
from data_gen.config import VIEWS_PER_STRUCTURE, GenConfig, GenerationError
from data_gen.generate import run
from data_gen.generation_run import GenerationRun
from data_gen.render.device import device_identity as probe_device  # the real probe (tests patch it)
from spatialiq_train.cli import app
from spatialiq_train.core import splits
from spatialiq_train.core.dataset import iter_leaf_dirs, iter_scene_files, read_gt
from spatialiq_train.core.io import sha256_file
from spatialiq_train.core.views import LEAF_VIEWS, sample_relpath, view_relpath

RES = 48  # small images keep the ray casts fast; test_resolution_512 covers the benchmark size once
GT_KEYS = ["object_type", "sample_idx", "view_idx", "offset", "fov", "dist", "task1", "task_main", "task2", "task3",
           "task4", "total_blocks", "num_hidden_blocks", "num_columns", "num_layers", "task5", "task6", "task7",
           "task8", "task9", "task10", "task11", "visible_blocks"]
SCENE_KEYS = ["height_map", "rows", "cols", "total_blocks", "visible_blocks", "non_visible_blocks", "level",
              "sample_idx", "structure_id", "seed", "index", "object_type"]


@pytest.fixture
def truth() -> types.ModuleType:
    """The ground-truth module (tests patch its structure_truth to simulate crashes)."""
    import data_gen.truth as module

    return module


@pytest.fixture(autouse=True)
def fake_device(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A fixed device identity: tests never probe this machine's GPU, CPU or LLVM (nor touch Dr.Jit's backends)."""
    from data_gen.render import device

    ident: dict[str, object] = {"cpu_arch": "test-arch"}
    monkeypatch.setattr(device, "device_identity", lambda name, variant: dict(ident) if name == "mitsuba" else None)
    return ident


def cfg(out: Path, **kw: object) -> GenConfig:
    base: dict[str, object] = {"out": out, "structures": 3, "seed": 7, "split": "train", "resolution": RES}
    base.update(kw)
    return GenConfig(**base)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class FakeRenderer:
    """Instance ids from the exact ray caster, an RGB image that depends on the spec; can fail on call N."""

    name = "fake"
    num_environments = 4

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls, self.fail_on, self.specs = 0, fail_on, []

    def render(self, spec):  # noqa: ANN001, ANN201
        from data_gen import visibility
        from data_gen.render import RenderResult

        self.calls += 1
        self.specs.append(spec)
        if self.fail_on is not None and self.calls == self.fail_on:
            raise RuntimeError("simulated renderer crash")
        ids, _ = visibility.cast(np.asarray(spec.height_map), spec.camera)
        ids = np.asarray(ids).reshape(spec.camera.resolution, spec.camera.resolution)
        rgb = np.zeros((*ids.shape, 3), np.uint8)
        rgb[..., 0] = (ids + 1) * 3 % 256
        rgb[..., 1] = spec.environment * 60
        return RenderResult(rgb=rgb, instance_ids=ids)


def test_layout_and_keys(tmp_path: Path, truth: types.ModuleType) -> None:
    manifest = run(cfg(tmp_path, structures=2, split="benchmark"), progress=False)
    scenes = list(iter_scene_files(tmp_path))
    assert [p.relative_to(tmp_path).as_posix() for p in scenes] == [
        "benchmark/level_1/sample_00001/scene.json", "benchmark/level_1/sample_00002/scene.json"]
    scene = json.loads(scenes[0].read_text())
    assert list(scene) == SCENE_KEYS
    hmap = np.array(scene["height_map"])
    assert scene["structure_id"] == structure.structure_id(hmap)
    assert splits.split_of(scene["structure_id"]) == "benchmark"
    assert np.array_equal(hmap, structure.sample_structure(structure.structure_rng(7, scene["index"])))
    assert scene["total_blocks"] == hmap.sum() and scene["visible_blocks"] == visibility.scene_visible_count(hmap)
    views = list(iter_leaf_dirs(scenes[0].parent))
    assert len(views) == 16 and {v.leaf for v in views} == set(LEAF_VIEWS)
    gt_text = (views[0].path / "gt.json").read_text()
    gt = json.loads(gt_text)
    assert [k for k in gt if k in GT_KEYS] == GT_KEYS and gt["sample_idx"] == 1
    assert gt_text.startswith('{\n  "object_type"')  # indent 2
    assert not list(tmp_path.rglob("view.png"))  # renderer none
    assert manifest is not None and manifest["counts"]["views"] == 32
    assert manifest["counts"]["splits"] == {"benchmark": {"structures": 2, "views": 32}}
    assert manifest["arguments"]["seed"] == 7 and str(tmp_path) not in json.dumps(manifest)


def test_parquet_loads_with_datasets_one_row_per_view(tmp_path: Path, truth: types.ModuleType) -> None:
    datasets = pytest.importorskip("datasets")
    run(cfg(tmp_path, structures=3), progress=False)
    files = sorted(str(p) for p in (tmp_path / "data").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert len(ds) == 48
    row = ds[0]
    sid = row["structure_id"]
    assert row["trainval"] == splits.partition_of(sid, "trainval") and row["dapo"] == splits.partition_of(sid, "dapo")
    gt = read_gt(tmp_path / row["view"])
    for key in ("task_main", "task5", "num_hidden_blocks", "task9", "view_idx", "offset"):
        assert row[key] == gt[key]
    assert row["visible_blocks"] == gt["visible_blocks"]
    assert sorted({(r["sample_idx"], r["view"]) for r in ds}) == sorted(
        (i, view_relpath("train", i, leaf)) for i in (1, 2, 3) for leaf in LEAF_VIEWS)


def test_same_seed_same_bytes_and_other_seed_differs(tmp_path: Path, truth: types.ModuleType) -> None:
    run(cfg(tmp_path / "a"), progress=False)
    run(cfg(tmp_path / "b"), progress=False)
    run(cfg(tmp_path / "c", seed=8), progress=False)
    a, b, c = tree(tmp_path / "a"), tree(tmp_path / "b"), tree(tmp_path / "c")
    assert a == b
    assert a["data/train-00000-of-00001.parquet"] != c["data/train-00000-of-00001.parquet"]
    assert not [name for name in a if name.endswith(".tmp") or "/." in name]


def test_resume_after_interruption_is_byte_identical(
    tmp_path: Path, truth: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = tmp_path / "clean"
    run(cfg(clean, structures=6, num_shards=3), progress=False)
    original = truth.structure_truth
    calls = {"n": 0}

    def flaky(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] == 4:  # shard 0 (samples 1-2) finishes, shard 1 dies on its second structure
            raise RuntimeError("simulated crash")
        return original(*args, **kwargs)

    broken = tmp_path / "broken"
    monkeypatch.setattr(truth, "structure_truth", flaky)
    with pytest.raises(GenerationError, match=r"train/level_1/sample_00004.*simulated crash"):
        run(cfg(broken, structures=6, num_shards=3), progress=False)
    assert shards.shard_complete(broken, "train", 0, 3)
    assert not shards.shard_complete(broken, "train", 1, 3)
    assert not (broken / "data/train-00001-of-00003.parquet").exists()
    assert not (broken / "manifest.json").exists()
    assert not [p for p in broken.rglob("*") if p.name.endswith(".tmp")]
    monkeypatch.setattr(truth, "structure_truth", original)
    # a writer killed mid-file leaves its temp file behind; the rerun of that shard removes it
    leftover = broken / view_relpath("train", 3, LEAF_VIEWS[0]) / ".gt.json.abc123.tmp"
    leftover.write_text("{half")
    (broken / "data" / ".train-00001-of-00003.parquet.x.tmp").write_bytes(b"PAR1")
    run(cfg(broken, structures=6, num_shards=3), progress=False)
    assert tree(broken) == tree(clean)


def test_shards_and_merge_match_a_single_run(tmp_path: Path, truth: types.ModuleType) -> None:
    whole = tmp_path / "whole"
    run(cfg(whole, structures=5, num_shards=2), progress=False)
    split_run = tmp_path / "split"
    for shard in (1, 0):
        assert run(cfg(split_run, structures=5, num_shards=2, shard=shard), progress=False) is None
    assert not (split_run / "manifest.json").exists()
    result = CliRunner().invoke(app, ["gen-merge", "--out", str(split_run)])
    assert result.exit_code == 0, result.output
    assert tree(split_run) == tree(whole)


def test_merge_detects_tampering_and_missing_shards(tmp_path: Path, truth: types.ModuleType) -> None:
    run(cfg(tmp_path / "partial", structures=4, num_shards=2, shard=0), progress=False)
    result = CliRunner().invoke(app, ["gen-merge", "--out", str(tmp_path / "partial")])
    assert result.exit_code == 1 and "1 of 2 shard(s) are not complete" in result.output
    run(cfg(tmp_path / "d", structures=2), progress=False)
    shard = tmp_path / "d" / "data/train-00000-of-00001.parquet"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["gen-merge", "--out", str(tmp_path / "d")])
    assert result.exit_code == 1 and "train-00000-of-00001.parquet: sha256" in result.output
    assert not shards.shard_complete(tmp_path / "d", "train", 0, 1)  # a rerun of gen would redo it


def test_rerun_with_other_arguments_names_the_argument(tmp_path: Path, truth: types.ModuleType) -> None:
    run(cfg(tmp_path, structures=2), progress=False)
    with pytest.raises(GenerationError, match="--seed 7.*this run asks for 9"):
        run(cfg(tmp_path, structures=2, seed=9), progress=False)
    with pytest.raises(GenerationError, match="--structures"):
        run(cfg(tmp_path, structures=3), progress=False)
    before = tree(tmp_path)
    run(cfg(tmp_path, structures=2, workers=3), progress=False)  # workers do not change the bytes: nothing to do
    assert tree(tmp_path) == before


def test_plan_skips_other_split_and_duplicates() -> None:
    accepted = plan.accepted(3, "benchmark", 4)
    assert len(accepted) == 4 and len({sid for _, sid in accepted}) == 4
    assert all(splits.split_of(sid) == "benchmark" for _, sid in accepted)
    indices = [i for i, _ in accepted]
    assert indices == sorted(indices) and indices[-1] >= 4  # other candidates went to train
    for i in range(indices[-1]):
        if i not in indices:
            sid = structure.structure_id(structure.sample_structure(structure.structure_rng(3, i)))
            assert splits.split_of(sid) == "train" or sid in {s for _, s in accepted}
    # batch sizes and parallel width never change the plan
    assert plan.accepted(3, "benchmark", 4, width=3) == accepted
    assert plan.accepted(3, "benchmark", 3) == accepted[:3]


def test_parts_take_the_first_structures_of_each_part_in_candidate_order() -> None:
    """``--parts`` keeps the plan's candidate order: its structures are the first ones of each part that a plain run
    of the same seed holds (the demo renders only what it trains on, the same structures and images as before)."""
    plain = plan.accepted(0, "train", 40)
    picked = plan.accepted(0, "train", 6, parts={"warmup": 2, "rl": 4})
    by_part = {p: [e for e in plain if splits.part_of(e[1]) == p] for p in splits.PARTS}
    assert picked == sorted(by_part["warmup"][:2] + by_part["rl"][:4])
    assert plan.accepted(0, "train", 6, width=3, parts={"warmup": 2, "rl": 4}) == picked
    with pytest.raises(ValueError, match="summing to 5"):
        plan.accepted(0, "train", 5, parts={"warmup": 2, "rl": 4})


def test_parts_are_recorded_and_a_rerun_without_them_is_refused(tmp_path: Path, truth: types.ModuleType) -> None:
    run(cfg(tmp_path, structures=3, parts={"warmup": 1, "rl": 2}), progress=False)
    assert json.loads((tmp_path / "gen_config.json").read_text())["parts"] == {"warmup": 1, "rl": 2}
    assert json.loads((tmp_path / "plan.json").read_text())["parts"] == {"warmup": 1, "rl": 2}
    with pytest.raises(GenerationError, match="--parts 'warmup=1,rl=2', this run asks for None"):
        run(cfg(tmp_path, structures=3), progress=False)
    with pytest.raises(ValueError, match="summing to structures"):
        cfg(tmp_path, structures=4, parts={"warmup": 1, "rl": 2})
    with pytest.raises(ValueError, match="divide the train split"):
        cfg(tmp_path, structures=3, split="benchmark", parts={"warmup": 1, "rl": 2})


def test_cli_parts_default_the_structure_count_and_name_a_bad_item(tmp_path: Path) -> None:
    ok = CliRunner().invoke(app, ["gen", "--out", str(tmp_path / "a"), "--parts", "warmup=1,rl=1", "--seed", "0",
                                  "--split", "train", "--quiet"])
    assert ok.exit_code == 0 and "2 structures, 32 views" in ok.output, ok.output
    bad = CliRunner().invoke(app, ["gen", "--out", str(tmp_path / "b"), "--parts", "warmup=1,rx=2", "--seed", "0",
                                   "--split", "train"])
    assert bad.exit_code == 2 and "'rx=2'" in bad.output and not (tmp_path / "b").exists()


def test_duplicates_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = iter(["a", "b", "a", "c", "b", "d"] + [f"x{i}" for i in range(100)])
    monkeypatch.setattr(plan, "candidate_ids", lambda batch: [next(ids) for _ in range(batch[1], batch[2])])
    monkeypatch.setattr(plan.splits, "split_of", lambda sid: "train")
    assert plan.accepted(0, "train", 4) == [(0, "a"), (1, "b"), (3, "c"), (5, "d")]


def test_stale_plan_is_an_error(tmp_path: Path, truth: types.ModuleType) -> None:
    run(cfg(tmp_path, structures=1, num_shards=1), progress=False)
    data = json.loads((tmp_path / "plan.json").read_text())
    data["entries"][0][1] = "0000000000000000"
    (tmp_path / "plan.json").write_text(json.dumps(data))
    (tmp_path / "shards/train-00000-of-00001.done.json").unlink()
    with pytest.raises(GenerationError, match="plan.json: candidate .* the plan says 0000000000000000"):
        run(cfg(tmp_path, structures=1, num_shards=1), progress=False)


def test_shard_ranges_cover_every_sample_once() -> None:
    for n, k in ((5, 2), (64, 1), (100, 7), (3, 3)):
        covered = [i for s in range(k) for i in range(shards.shard_range(s, k, n)[0],
                                                        shards.shard_range(s, k, n)[1] + 1)]
        assert covered == list(range(1, n + 1))
    assert GenConfig(out=Path("x"), structures=130, seed=0, split="train").shard_count == 3


@pytest.mark.parametrize(("args", "message"), [
    (["--structures", "0"], "--structures: Input should be greater than 0"),
    (["--split", "val"], "--split: Input should be 'train' or 'benchmark'"),
    (["--renderer", "blender"], "--renderer: Input should be 'none', 'mitsuba' or 'isaacsim'"),
    (["--object-type", "mug"], "--object-type: Input should be 'cube' or 'can'"),
    (["--shard", "2", "--num-shards", "2"], "shard must be in 0..1"),
    (["--shard", "0"], "shard needs num_shards"),
    (["--object-type", "can"], "choose renderer mitsuba or isaacsim"),
    (["--seed", "-1"], "--seed: Input should be greater than or equal to 0"),
])
def test_bad_arguments_exit_nonzero_naming_the_argument(tmp_path: Path, args: list[str], message: str) -> None:
    base = {"--out": str(tmp_path / "o"), "--structures": "2", "--seed": "1", "--split": "train"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    result = CliRunner().invoke(app, ["gen", *[x for kv in base.items() for x in kv]])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "o").exists()


def test_cli_gen_end_to_end(tmp_path: Path, truth: types.ModuleType) -> None:
    result = CliRunner().invoke(app, ["gen", "--out", str(tmp_path), "--structures", "2", "--seed", "5", "--split",
                                      "train", "--resolution", str(RES), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "2 structures, 32 views, 1 shard(s)" in result.output
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    shard = manifest["shards"][0]
    assert shard["sha256"] == sha256_file(tmp_path / shard["path"])
    # a rerun with other arguments is a bad-input refusal: exit 2 (the CLI's promise), nothing changed
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    result = CliRunner().invoke(app, ["gen", "--out", str(tmp_path), "--structures", "2", "--seed", "6", "--split",
                                      "train", "--resolution", str(RES), "--quiet"])
    assert result.exit_code == 2 and "was generated with --seed 5, this run asks for 6" in result.output
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before


def test_renderer_writes_png_and_image_column(tmp_path: Path, truth: types.ModuleType) -> None:
    datasets = pytest.importorskip("datasets")
    renderer = FakeRenderer()
    run(cfg(tmp_path, structures=1, renderer="mitsuba"), renderer=renderer, progress=False)
    assert renderer.calls == 16
    assert len({(s.environment, s.seed) for s in renderer.specs}) == 1  # one environment per structure
    pngs = sorted(tmp_path.rglob("view.png"))
    assert len(pngs) == 16
    files = [str(p) for p in (tmp_path / "data").glob("*.parquet")]
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert isinstance(ds.features["image"], datasets.Image)
    img = ds[0]["image"]
    assert img.size == (RES, RES) and img.mode == "RGB"
    assert (tmp_path / ds[0]["view"] / "view.png").read_bytes() == writer.encode_png(np.asarray(img))


class HidingRenderer(FakeRenderer):
    """An instance buffer that differs from the ray caster's: per view, the lowest-id visible block with a visible
    block right above it owns no pixel (its pixels show the ground), so the buffer hides a supporting block."""

    def __init__(self) -> None:
        super().__init__()
        self.buffers: list[set[tuple[int, int, int]]] = []

    def render(self, spec):  # noqa: ANN001, ANN201
        from data_gen.render import RenderResult
        from data_gen.visibility import block_id, visible_set

        result = super().render(spec)
        cols = len(spec.height_map[0])
        ids = result.instance_ids.copy()
        seen = visible_set(ids, cols)
        supporting = sorted(b for b in seen if (b[0], b[1], b[2] + 1) in seen)
        if supporting:
            ids[ids == block_id(*supporting[0], cols)] = -1
        self.buffers.append(visible_set(ids, cols))
        return RenderResult(rgb=result.rgb, instance_ids=ids)


def test_can_visibility_comes_from_the_instance_buffer(tmp_path: Path) -> None:
    run(cfg(tmp_path / "cube", structures=1), progress=False)
    renderer = HidingRenderer()
    run(cfg(tmp_path / "can", structures=1, renderer="mitsuba", object_type="can"), renderer=renderer,
        progress=False)
    differs = 0
    for leaf, buffer in zip(LEAF_VIEWS, renderer.buffers, strict=True):  # rendered in leaf order
        rel = view_relpath("train", 1, leaf)
        cube, can = read_gt(tmp_path / "cube" / rel), read_gt(tmp_path / "can" / rel)
        assert can["object_type"] == "can"
        assert can["visible_blocks"] == sorted(list(b) for b in buffer)  # what the buffer shows, not the caster
        differs += can["visible_blocks"] != cube["visible_blocks"]
    assert differs > 0  # the buffer really hid blocks the ray caster sees


def test_renderer_crash_names_the_view_and_leaves_the_shard_incomplete(
    tmp_path: Path, truth: types.ModuleType
) -> None:
    with pytest.raises(GenerationError, match=r"view train/level_1/sample_00001/view_0\d/offset.*simulated renderer"):
        run(cfg(tmp_path, structures=1, renderer="mitsuba"), renderer=FakeRenderer(fail_on=5), progress=False)
    assert not shards.shard_complete(tmp_path, "train", 0, 1)
    assert not (tmp_path / "shards").exists()


def test_missing_renderer_dependency_gives_install_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import data_gen.render

    def absent(name: str, **_: object) -> None:
        raise ImportError("No module named 'mitsuba'")

    monkeypatch.setattr(data_gen.render, "get_renderer", absent)
    with pytest.raises(GenerationError, match=r"pip install -e '\.\[render\]'"):
        run(cfg(tmp_path, structures=1, renderer="mitsuba"), progress=False)
    assert not tmp_path.joinpath("gen_config.json").exists()  # a later run with other arguments is not refused


def test_workers_give_identical_bytes(tmp_path: Path) -> None:
    run(cfg(tmp_path / "one", structures=4, num_shards=2), progress=False)
    run(cfg(tmp_path / "two", structures=4, num_shards=2, workers=2), progress=False)
    assert tree(tmp_path / "one") == tree(tmp_path / "two")


def test_resolution_512(tmp_path: Path) -> None:
    run(GenConfig(out=tmp_path, structures=1, seed=1, split="train"), progress=False)
    gts = [read_gt(v.path) for v in iter_leaf_dirs(tmp_path / sample_relpath("train", 1))]
    assert len(gts) == 16
    assert all(g["task5"] + g["num_hidden_blocks"] == g["task_main"] for g in gts)
    assert json.loads((tmp_path / "gen_config.json").read_text())["resolution"] == 512


FAKE_SBATCH = """#!/usr/bin/env bash
for a in "$@"; do case $a in --wrap=*) printf '%s\\n' "${a#--wrap=}" >> "$SBATCH_LOG";; esac; done
wc -l < "$SBATCH_LOG"
"""


def test_slurm_array_script_runs_plan_shards_and_merge(tmp_path: Path, truth: types.ModuleType) -> None:
    import os
    import shutil
    import subprocess

    if shutil.which("bash") is None or shutil.which("spatialiq") is None:
        pytest.skip("needs bash and the spatialiq console script")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(FAKE_SBATCH)
    (bindir / "sbatch").chmod(0o755)
    log = tmp_path / "sbatch.log"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SBATCH_LOG": str(log), "SIQ_CPUS": "1"}
    script = Path(__file__).resolve().parents[1] / "slurm" / "gen_array.sh"
    out = tmp_path / "slurm_run"
    subprocess.run(["bash", str(script), str(out), "4", "3", "train", "2", "--resolution", str(RES)], env=env,
                   check=True, capture_output=True)
    plan_cmd, array_cmd, merge_cmd = log.read_text().splitlines()
    subprocess.run(["bash", "-c", plan_cmd], env=env, check=True, capture_output=True)
    for task in ("1", "0"):
        subprocess.run(["bash", "-c", array_cmd], env={**env, "SLURM_ARRAY_TASK_ID": task}, check=True,
                       capture_output=True)
    subprocess.run(["bash", "-c", merge_cmd], env=env, check=True, capture_output=True)
    run(cfg(tmp_path / "direct", structures=4, seed=3, num_shards=2), progress=False)
    produced = {k: v for k, v in tree(out).items() if not k.startswith("slurm/")}
    assert produced == tree(tmp_path / "direct")


def test_mitsuba_end_to_end_small(tmp_path: Path) -> None:
    pytest.importorskip("mitsuba")
    result = CliRunner().invoke(app, ["gen", "--out", str(tmp_path), "--structures", "1", "--seed", "4", "--split",
                                      "train", "--renderer", "mitsuba", "--object-type", "can", "--resolution", "32",
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    pngs = sorted(tmp_path.rglob("view.png"))
    assert len(pngs) == 16
    from PIL import Image

    with Image.open(pngs[0]) as img:
        assert img.size == (32, 32) and img.mode == "RGB"
    gts = [read_gt(p.parent) for p in pngs]
    assert all(g["object_type"] == "can" and g["task5"] == len(g["visible_blocks"]) > 0 for g in gts)


class VariantRenderer(FakeRenderer):
    """A fake Mitsuba renderer that reports the variant it resolved."""

    name = "mitsuba"

    def __init__(self, variant: str) -> None:
        super().__init__()
        self.variant = variant


def test_render_backend_is_recorded_and_a_different_variant_is_refused(tmp_path: Path) -> None:
    shard0 = cfg(tmp_path, structures=2, num_shards=2, shard=0, renderer="mitsuba")
    run(shard0, renderer=VariantRenderer("llvm_ad_rgb"), progress=False)
    recorded = json.loads((tmp_path / "gen_config.json").read_text())["render_backend"]
    assert recorded["renderer"] == "mitsuba" and recorded["variant"] == "llvm_ad_rgb"
    done = json.loads((tmp_path / "shards/train-00000-of-00002.done.json").read_text())
    assert done["render_backend"] == recorded
    shard1 = cfg(tmp_path, structures=2, num_shards=2, shard=1, renderer="mitsuba")
    with pytest.raises(GenerationError, match="rendered with llvm_ad_rgb; this machine resolves scalar_rgb; "
                                              "pass --render-variant llvm_ad_rgb or use another --out"):
        run(shard1, renderer=VariantRenderer("scalar_rgb"), progress=False)
    assert not (tmp_path / "shards/train-00001-of-00002.done.json").exists()
    run(shard1, renderer=VariantRenderer("llvm_ad_rgb"), progress=False)
    manifest = shards.merge(tmp_path)
    assert manifest["arguments"]["render_backend"] == recorded


def test_merge_refuses_a_shard_rendered_with_another_backend(tmp_path: Path) -> None:
    run(cfg(tmp_path, structures=2, num_shards=2, renderer="mitsuba"), renderer=VariantRenderer("cuda_ad_rgb"),
        progress=False)
    done = tmp_path / "shards/train-00001-of-00002.done.json"
    record = json.loads(done.read_text())
    record["render_backend"]["variant"] = "scalar_rgb"  # as a Slurm task racing on another node would write
    done.write_text(json.dumps(record))
    with pytest.raises(GenerationError, match=r"train-00001-of-00002\.done\.json: this dataset was rendered with "
                                              r"cuda_ad_rgb; this machine resolves scalar_rgb"):
        shards.merge(tmp_path)


def test_plan_only_records_no_backend_and_the_first_rendering_run_does(tmp_path: Path) -> None:
    run(cfg(tmp_path, structures=1, renderer="mitsuba"), progress=False, plan_only=True)
    assert "render_backend" not in json.loads((tmp_path / "gen_config.json").read_text())
    run(cfg(tmp_path, structures=1, renderer="mitsuba"), renderer=VariantRenderer("scalar_rgb"), progress=False)
    assert json.loads((tmp_path / "gen_config.json").read_text())["render_backend"]["variant"] == "scalar_rgb"


def test_render_variant_reaches_the_mitsuba_renderer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import data_gen.render

    seen: list[dict[str, object]] = []

    def fake_get_renderer(name: str, **options: object) -> VariantRenderer:
        seen.append({"name": name, **options})
        return VariantRenderer(str(options["variant"]))

    monkeypatch.setattr(data_gen.render, "get_renderer", fake_get_renderer)
    run(cfg(tmp_path, structures=1, renderer="mitsuba", render_variant="scalar_rgb"), progress=False)
    assert seen == [{"name": "mitsuba", "variant": "scalar_rgb"}]
    assert json.loads((tmp_path / "gen_config.json").read_text())["render_backend"]["variant"] == "scalar_rgb"


def test_render_variant_needs_the_mitsuba_renderer(tmp_path: Path) -> None:
    base = ["gen", "--out", str(tmp_path / "o"), "--structures", "1", "--seed", "1", "--split", "train"]
    result = CliRunner().invoke(app, [*base, "--render-variant", "llvm_ad_rgb"])
    assert result.exit_code == 2 and "(--render-variant) 'llvm_ad_rgb' is a Mitsuba variant" in (
        result.output)
    result = CliRunner().invoke(app, [*base, "--renderer", "mitsuba", "--render-variant", "metal"])
    assert result.exit_code == 2 and "--render-variant: Input should be 'auto'" in result.output
    assert not (tmp_path / "o").exists()


def test_parent_builds_a_renderer_only_when_it_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    handed: list[object] = []
    monkeypatch.setattr(generation_run, "make_renderer",
                        lambda c: built.append(c.workers) or VariantRenderer("scalar_rgb"))
    monkeypatch.setattr(generation_run, "_resolve_variant", lambda c: "llvm_ad_rgb")
    monkeypatch.setattr(executor.Executor, "complete", lambda ex, progress: handed.append(
        (ex.run.renderer, ex.cfg.render_variant, ex.run.backend["variant"])))
    with pytest.raises(GenerationError, match="not complete"):  # the shards were not written: merge refuses
        run(cfg(tmp_path / "many", structures=1, renderer="mitsuba", workers=2), progress=False)
    assert built == [] and handed == [(None, "llvm_ad_rgb", "llvm_ad_rgb")]  # workers get the resolved variant
    with pytest.raises(GenerationError, match="not complete"):
        run(cfg(tmp_path / "one", structures=1, renderer="mitsuba"), progress=False)
    assert built == [1] and isinstance(handed[1][0], VariantRenderer)


def test_missing_dependency_fails_fast_with_several_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generation_run, "_importable", lambda module: False)
    with pytest.raises(GenerationError, match=r"--renderer isaacsim is unavailable .*pip install -e '\.\[isaacsim\]'"):
        run(cfg(tmp_path, structures=1, renderer="isaacsim", workers=2), progress=False)
    assert not tmp_path.joinpath("gen_config.json").exists()


def test_planning_workers_build_no_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(c: GenConfig) -> None:
        raise AssertionError("a planning worker built a renderer")

    monkeypatch.setattr(generation_run, "make_renderer", boom)
    c = cfg(Path("x"), renderer="mitsuba", workers=2)
    with GenerationRun.worker(c, render=False) as worker:
        assert worker.renderer is None and worker.cfg == c and worker.backend is None
    with pytest.raises(AssertionError, match="planning worker"), GenerationRun.worker(c, render=True):
        pass


def _served(cfg_json: str, render: bool, items: list[object]) -> list[tuple[object, bool, object]]:
    """What a worker's main function answers to ``items`` (run in this process, on plain queues)."""
    import pickle
    import queue

    tasks: queue.Queue = queue.Queue()
    results: queue.Queue = queue.Queue()
    for seq, item in enumerate(items):
        tasks.put((seq, executor._call, item))
    tasks.put(None)
    executor._serve(cfg_json, render, tasks, results)
    return [pickle.loads(results.get_nowait()) for _ in range(results.qsize())]


def test_a_worker_answers_each_task_and_reports_errors_and_a_failed_start(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    c = cfg(Path("x"), renderer="mitsuba", workers=2)
    answers = _served(c.model_dump_json(), False, [(plan.candidate_ids, (7, 0, 2)), (int, "x")])
    assert answers[0] == (0, True, plan.candidate_ids((7, 0, 2)))
    assert answers[1][:2] == (1, False) and isinstance(answers[1][2], ValueError)
    closed: list[str] = []
    monkeypatch.setattr(generation_run, "make_renderer", lambda c: ClosingRenderer("scalar_rgb"))
    monkeypatch.setattr(generation_run, "close_renderer", lambda r: closed.append(type(r).__name__))
    assert _served(c.model_dump_json(), True, [(len, "ab")]) == [(0, True, 2)]
    assert closed == ["ClosingRenderer"]  # the worker closed the renderer it built
    monkeypatch.setattr(generation_run, "make_renderer", lambda c: (_ for _ in ()).throw(
        GenerationError("--renderer mitsuba is unavailable")))
    [(seq, ok, error)] = _served(c.model_dump_json(), True, [(len, "ab")])
    assert (seq, ok) == (None, False) and "unavailable" in str(error)


@pytest.mark.parametrize(("target", "key"), [("gen_config.json", "split"),
                                             ("shards/train-00000-of-00001.done.json", "sha256")])
def test_merge_names_the_file_and_the_missing_key(tmp_path: Path, truth: types.ModuleType, target: str,
                                                  key: str) -> None:
    run(cfg(tmp_path, structures=1), progress=False)
    data = json.loads((tmp_path / target).read_text())
    del data[key]
    (tmp_path / target).write_text(json.dumps(data))
    with pytest.raises(GenerationError, match=rf"{target.split('/')[-1]}: key '{key}' missing"):
        shards.merge(tmp_path)


def test_plan_file_without_entries_names_the_file_and_key(tmp_path: Path) -> None:
    plan.load_or_make(tmp_path, 7, "train", 2)
    path = tmp_path / plan.PLAN_FILE
    data = json.loads(path.read_text())
    data["entries"] = data["entries"][:1]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"plan\.json: key 'entries' must list 2 .*got 1"):
        plan.load_or_make(tmp_path, 7, "train", 2)
    del data["entries"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"plan\.json: key 'entries' missing"):
        plan.load_or_make(tmp_path, 7, "train", 2)


def test_shard_record_counts_every_partition_kind(tmp_path: Path, truth: types.ModuleType) -> None:
    run(cfg(tmp_path, structures=3), progress=False)
    record = json.loads((tmp_path / "shards/train-00000-of-00001.done.json").read_text())
    assert set(record["partitions"]) == set(splits.PARTITIONS)
    assert all(sum(sides.values()) == 3 for sides in record["partitions"].values())
    assert VIEWS_PER_STRUCTURE == len(LEAF_VIEWS) and record["views"] == 3 * len(LEAF_VIEWS)


class ClosingRenderer(VariantRenderer):
    """Counts close() calls, as IsaacSimRenderer's texture folder needs."""

    closed = 0

    def close(self) -> None:
        ClosingRenderer.closed += 1


def test_a_renderer_built_by_run_is_closed_and_an_injected_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ClosingRenderer, "closed", 0)
    monkeypatch.setattr(generation_run, "make_renderer", lambda c: ClosingRenderer("scalar_rgb"))
    run(cfg(tmp_path / "built", structures=1, renderer="mitsuba"), progress=False)
    assert ClosingRenderer.closed == 1
    run(cfg(tmp_path / "given", structures=1, renderer="mitsuba"), renderer=ClosingRenderer("scalar_rgb"),
        progress=False)
    assert ClosingRenderer.closed == 1
    monkeypatch.setattr(shards, "finish_shard", lambda *a: (_ for _ in ()).throw(GenerationError("boom")))
    with pytest.raises(GenerationError, match="boom"):
        run(cfg(tmp_path / "fails", structures=1, renderer="mitsuba"), progress=False)
    assert ClosingRenderer.closed == 2  # closed on failure too
    monkeypatch.setattr(generation_run, "render_backend", lambda c, r: (_ for _ in ()).throw(GenerationError("probe")))
    with pytest.raises(GenerationError, match="probe"):
        run(cfg(tmp_path / "probe", structures=1, renderer="mitsuba"), progress=False)
    assert ClosingRenderer.closed == 3  # a failure while the run opens closes what it built


def test_worker_processes_keep_order_and_report_errors_and_deaths(tmp_path: Path) -> None:
    """More items than are ever in flight come back in order; a task's error and a dead worker stop the run."""
    import os
    import time

    with executor.Executor(GenerationRun(cfg(tmp_path, workers=2), render=False)) as ex:
        assert list(ex.map(abs, range(-30, 0))) == list(range(30, 0, -1))
        with pytest.raises(ValueError, match="invalid literal"):
            list(ex.map(int, ["1", "x"]))
        with pytest.raises(TypeError):  # fails at once while the other tasks of the iteration are still running
            list(ex.map(time.sleep, ["x", *[0.2] * 7]))
        assert list(ex.map(abs, [-1, -2])) == [1, 2]  # the answers the failed iteration left unread are not taken
    with executor.Executor(GenerationRun(cfg(tmp_path, workers=2), render=False)) as ex:
        with pytest.raises(GenerationError, match=r"worker process \d+ exited with code 3 before its work was done"):
            list(ex.map(os._exit, [3]))


def test_plan_only_asks_its_workers_for_no_renderer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flags: list[bool] = []
    real_init = executor._Workers.__init__

    def spy(self, gen_run):  # noqa: ANN001, ANN202
        flags.append(gen_run.render)
        real_init(self, gen_run)

    monkeypatch.setattr(executor._Workers, "__init__", spy)
    monkeypatch.setattr(generation_run, "make_renderer", lambda c: (_ for _ in ()).throw(AssertionError("built")))
    run(cfg(tmp_path, structures=2, renderer="mitsuba", workers=2), progress=False, plan_only=True)
    assert flags == [False] and (tmp_path / "plan.json").is_file()


H100 = {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": "550.54.15", "cuda": "12.4"}


class DeviceRenderer(VariantRenderer):
    """A fake cuda Mitsuba renderer on a given GPU (``device`` as render_backend reads it)."""

    def __init__(self, **device: str) -> None:
        super().__init__("cuda_ad_rgb")
        self.device = {**H100, **device}


def test_the_render_device_is_recorded_and_a_shard_on_another_device_is_refused(tmp_path: Path) -> None:
    shard0 = cfg(tmp_path, structures=2, num_shards=2, shard=0, renderer="mitsuba")
    run(shard0, renderer=DeviceRenderer(), progress=False)
    recorded = json.loads((tmp_path / "gen_config.json").read_text())["render_backend"]
    assert recorded["device"] == H100
    assert json.loads((tmp_path / "shards/train-00000-of-00002.done.json").read_text())["render_backend"] == recorded
    shard1 = cfg(tmp_path, structures=2, num_shards=2, shard=1, renderer="mitsuba")
    with pytest.raises(GenerationError, match=r"\(shard 1 of 2\): this dataset was rendered on a device with driver "
                                              r"'550\.54\.15'; this machine has driver '535\.104\.05'"):
        run(shard1, renderer=DeviceRenderer(driver="535.104.05"), progress=False)
    message = (r"device with gpu 'NVIDIA H100 80GB HBM3', compute_capability '9\.0'; "
               r"this machine has gpu 'NVIDIA A100-SXM4-80GB', compute_capability '8\.0'")
    with pytest.raises(GenerationError, match=message):
        run(shard1, renderer=DeviceRenderer(gpu="NVIDIA A100-SXM4-80GB", compute_capability="8.0"), progress=False)
    assert not (tmp_path / "shards/train-00001-of-00002.done.json").exists()
    run(shard1, renderer=DeviceRenderer(), progress=False)
    assert shards.merge(tmp_path)["arguments"]["render_backend"] == recorded


def test_merge_names_the_shard_and_the_device_field_that_differs(tmp_path: Path) -> None:
    run(cfg(tmp_path, structures=2, num_shards=2, renderer="mitsuba"), renderer=DeviceRenderer(), progress=False)
    done = tmp_path / "shards/train-00001-of-00002.done.json"
    record = json.loads(done.read_text())
    record["render_backend"]["device"]["compute_capability"] = "8.6"  # a Slurm task that raced on another node
    done.write_text(json.dumps(record))
    with pytest.raises(GenerationError, match=r"train-00001-of-00002\.done\.json: this dataset was rendered on a "
                                              r"device with compute_capability '9\.0'; this machine has "
                                              r"compute_capability '8\.6'.*delete this shard's \.done\.json"):
        shards.merge(tmp_path)


def test_a_backend_recorded_without_a_device_is_refused_by_name(tmp_path: Path) -> None:
    run(cfg(tmp_path, structures=2, num_shards=2, shard=0, renderer="mitsuba"), renderer=DeviceRenderer(),
        progress=False)
    path = tmp_path / "gen_config.json"
    old = json.loads(path.read_text())
    del old["render_backend"]["device"]  # as written before the device was recorded
    path.write_text(json.dumps(old))
    with pytest.raises(GenerationError, match="the recorded backend has no render device identity"):
        run(cfg(tmp_path, structures=2, num_shards=2, shard=1, renderer="mitsuba"), renderer=DeviceRenderer(),
            progress=False)


def test_the_device_is_probed_when_the_renderer_names_none(tmp_path: Path, fake_device: dict[str, object]) -> None:
    run(cfg(tmp_path, structures=1, renderer="mitsuba"), renderer=VariantRenderer("scalar_rgb"), progress=False)
    assert json.loads((tmp_path / "gen_config.json").read_text())["render_backend"]["device"] == fake_device
    assert generation_run.render_backend(cfg(tmp_path), FakeRenderer()) is None  # renderer none records no backend


FAKE_NVIDIA_SMI = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$SMI_LOG"
case "$*" in
  *--query-gpu=*) echo "NVIDIA H100 80GB HBM3, 550.54.15, 9.0";;
  *) echo "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |";;
esac
"""


def test_device_probe_reads_the_visible_gpu_and_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    from data_gen.render import device

    (tmp_path / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("SMI_LOG", str(tmp_path / "smi.log"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234,GPU-5678")
    assert probe_device("isaacsim", None) == H100  # no Dr.Jit: compute capability and CUDA version from nvidia-smi
    assert "-i GPU-1234 --query-gpu=name,driver_version,compute_cap" in (tmp_path / "smi.log").read_text()
    monkeypatch.setattr(device, "_drjit_cuda", lambda: ("8.9", "12.6"))  # Dr.Jit's own device wins for Mitsuba
    assert probe_device("mitsuba", "cuda_ad_rgb") == {**H100, "compute_capability": "8.9", "cuda": "12.6"}
    monkeypatch.setattr(device, "_drjit_llvm_version", lambda: "19.1.7")
    cpu = {"cpu_isa": "avx2", "cpu_vendor": "GenuineIntel"}
    monkeypatch.setattr(device, "cpu_identity", lambda: dict(cpu))
    arch = platform.machine()
    assert probe_device("mitsuba", "llvm_ad_rgb") == {"cpu_arch": arch, **cpu, "llvm": "19.1.7"}
    assert probe_device("mitsuba", "scalar_rgb") == {"cpu_arch": arch, **cpu}  # Embree's kernels follow the CPU
    assert probe_device("fake", None) is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi, no Dr.Jit CUDA: every field unknown
    assert probe_device("isaacsim", None) == dict.fromkeys(H100)


def test_verify_reports_damaged_files_and_a_rerun_repairs_them_byte_for_byte(tmp_path: Path) -> None:
    c = cfg(tmp_path, structures=4, num_shards=2, renderer="mitsuba")
    run(c, renderer=FakeRenderer(), progress=False)
    original = tree(tmp_path)
    verify = CliRunner().invoke(app, ["gen", "--verify", "--out", str(tmp_path)])
    assert verify.exit_code == 0 and "verified 134 file(s)" in verify.output and "all match" in verify.output
    gt = view_relpath("train", 1, LEAF_VIEWS[3]) + "/gt.json"
    png = view_relpath("train", 4, LEAF_VIEWS[9]) + "/view.png"
    for rel in (gt, png):
        (tmp_path / rel).write_bytes(original[rel][: len(original[rel]) // 2])  # truncated
    verify = CliRunner().invoke(app, ["gen", "--verify", "--out", str(tmp_path)])
    assert verify.exit_code == 1
    for rel in (gt, png):
        found = writer.sha256_bytes(original[rel][: len(original[rel]) // 2])
        assert f"MISMATCH {rel}: expected sha256 {writer.sha256_bytes(original[rel])}, found {found}" in verify.output
    assert "2 mismatch(es)" in verify.output
    renderer = FakeRenderer()
    run(c, renderer=renderer, progress=False)  # the same arguments: repairs sample 1 (shard 0) and 4 (shard 1)
    assert renderer.calls == 2 * len(LEAF_VIEWS)  # only the two damaged structures were regenerated
    assert tree(tmp_path) == original
    assert CliRunner().invoke(app, ["gen", "--verify", "--out", str(tmp_path)]).exit_code == 0


def test_verify_reports_a_missing_file_a_bad_parquet_and_an_incomplete_shard(tmp_path: Path) -> None:
    run(cfg(tmp_path, structures=2, num_shards=2), progress=False)
    original = tree(tmp_path)
    scene = sample_relpath("train", 2) + "/scene.json"
    (tmp_path / scene).unlink()
    parquet = "data/train-00000-of-00002.parquet"
    (tmp_path / parquet).write_bytes(b"PAR1")
    verify = CliRunner().invoke(app, ["gen", "--verify", "--out", str(tmp_path)])
    assert verify.exit_code == 1
    assert f"MISMATCH {scene}: expected sha256 {writer.sha256_bytes(original[scene])}, found missing" in verify.output
    assert f"MISMATCH {parquet}: expected sha256 {writer.sha256_bytes(original[parquet])}" in verify.output
    run(cfg(tmp_path, structures=2, num_shards=2, workers=2), progress=False)  # shard 0 redone, sample 2 repaired
    assert tree(tmp_path) == original
    (tmp_path / "shards/train-00001-of-00002.done.json").unlink()
    verify = CliRunner().invoke(app, ["gen", "--verify", "--out", str(tmp_path)])
    assert verify.exit_code == 1 and "INCOMPLETE data/train-00001-of-00002.parquet" in verify.output


def test_verify_needs_a_generated_directory_and_gen_needs_its_options(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["gen", "--verify", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "has no gen_config.json" in result.output
    result = CliRunner().invoke(app, ["gen", "--out", str(tmp_path), "--seed", "1"])
    assert result.exit_code == 2 and "missing option(s) --structures, --split" in result.output


def test_a_completion_record_that_is_not_an_object_is_refused_by_name(tmp_path: Path) -> None:
    run(cfg(tmp_path, structures=2, num_shards=2), progress=False)
    done = tmp_path / "shards/train-00001-of-00002.done.json"
    done.write_text("[1]")
    for args in (["gen", "--verify", "--out", str(tmp_path)],
                 ["gen", "--out", str(tmp_path), "--structures", "2", "--seed", "7", "--split", "train",
                  "--resolution", str(RES), "--num-shards", "2"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1, result.output
        assert f"error: {done}: a completion record must be a JSON object, got list" in result.output


def test_a_repair_that_does_not_reproduce_the_bytes_is_refused(tmp_path: Path, truth: types.ModuleType,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run(cfg(tmp_path, structures=1), progress=False)
    gt = tmp_path / view_relpath("train", 1, LEAF_VIEWS[0]) / "gt.json"
    gt.write_text("{")
    original = truth.structure_truth

    def other(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - as another machine's truth would differ
        out = original(*args, **kwargs)
        out[LEAF_VIEWS[0]]["task9"] += 1
        return out

    monkeypatch.setattr(truth, "structure_truth", other)
    with pytest.raises(GenerationError, match=r"gt\.json: regenerated with sha256 .* this machine does not "
                                              "reproduce the dataset"):
        run(cfg(tmp_path, structures=1), progress=False)


def test_slurm_array_script_passes_extra_sbatch_options(tmp_path: Path) -> None:
    """SIQ_EXTRA (e.g. a node constraint, so every shard renders on one render identity) reaches every job."""
    import os
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> "$SBATCH_LOG"\necho 7\n')
    (bindir / "sbatch").chmod(0o755)
    log = tmp_path / "sbatch.log"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SBATCH_LOG": str(log),
           "SIQ_EXTRA": "--constraint=h100 --exclusive"}
    script = Path(__file__).resolve().parents[1] / "slurm" / "gen_array.sh"
    subprocess.run(["bash", str(script), str(tmp_path / "o"), "4", "3", "train", "2"], env=env, check=True,
                   capture_output=True)
    jobs = log.read_text().splitlines()
    assert len(jobs) == 3 and all("--constraint=h100 --exclusive" in job for job in jobs)


CPUINFO_X86 = """processor\t: 0
vendor_id\t: {vendor}
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 {flags}

processor\t: 1
vendor_id\t: OtherVendor
flags\t\t: fpu avx512f
"""


@pytest.mark.parametrize(("vendor", "flags", "isa"), [
    ("AuthenticAMD", "sse4_2 avx avx2 avx512f avx512bw", "avx512f"),
    ("GenuineIntel", "sse4_1 sse4_2 avx avx2 fma", "avx2"),
    ("GenuineIntel", "sse4_2 avx", "avx"),
    ("GenuineIntel", "sse4_1", None),
])
def test_the_cpu_identity_is_the_first_cpus_vendor_and_best_vector_isa(vendor: str, flags: str,
                                                                       isa: str | None) -> None:
    from data_gen.render.device import parse_cpuinfo

    text = CPUINFO_X86.format(vendor=vendor, flags=flags)
    assert parse_cpuinfo(text, "x86_64") == {"cpu_isa": isa, "cpu_vendor": vendor}


def test_the_cpu_identity_off_x86_and_without_cpuinfo() -> None:
    from data_gen.render.device import parse_cpuinfo

    arm = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"
    assert parse_cpuinfo(arm, "aarch64") == {"cpu_isa": "aarch64", "cpu_vendor": "0x41"}
    assert parse_cpuinfo("", "x86_64") == {"cpu_isa": None, "cpu_vendor": None}
