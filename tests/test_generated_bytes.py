"""Generated datasets keep their bytes: two small datasets pinned by digest (``spatialiq gen`` end to end).

The digests were taken from datasets written by commit 3e0f6c3 (before the generation run became one object, issue
30); any change to what ``gen`` writes shows up here, naming the file. The Mitsuba digests of files that hold images
or the render backend were taken again when the CPU's vendor and vector instruction set joined the render backend
(the image bytes follow them); its ``plan.json`` and dataset card kept their 3e0f6c3 digests, and are checked on
any machine. The project version is replaced by
``<version>`` before hashing (the manifest and the dataset card name it), so a version bump alone changes nothing.
Per-view files (``scene.json``, ``gt.json``, ``view.png``) are pinned together by one digest of their (path,
sha256) listing; every completion record holds their sha256 too, and those records are pinned one by one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spatialiq_train.cli import app
from spatialiq_train.core.versions import PROJECT_VERSION

VIEWS = "per-view files"

NONE_ARGS = ["--structures", "3", "--seed", "7", "--split", "train", "--num-shards", "2"]
NONE_DIGESTS = {
    "README.md": "15ab363e46b436ac7310274739b23fdf684646ff8eeb0e8c039cbc312e259bed",
    "data/train-00000-of-00002.parquet": "47c39dd6ef4095a9dbc5b4f5817060fdf986d3b0f86565bd9ae3c365e2b6b3cd",
    "data/train-00001-of-00002.parquet": "5c395abae9c7052ae5c7e5c8680cdf4cf24c4bc95ae90d544fa4151ede25f159",
    "gen_config.json": "55df6e27401cf68fcaf262521e007102607baf9c98275745de8dc6b1c54d23a1",
    "manifest.json": "1174ace766a49764f55cbc0dcd7bb5aacc24eb8f3b168b327c768efbd61fc8c1",
    "plan.json": "1eb380bfed8c677f4e7f9f004c8e1f2e017ccf6b62160486030759c3d6675ce9",
    "shards/train-00000-of-00002.done.json": "a3ecab90dfbcbc580b53af38cec292e265ef342ea13e1bc29c159dc07c97a8ed",
    "shards/train-00001-of-00002.done.json": "0d5c30054ee96bb4f269eecc6cf5bdc84cd9d4217d291ec0cc27b47cd97b0956",
    VIEWS: "9a893e0fad6e55b6594eb7c0aadc4660a0bae8a7004386021d4fb34f196ea44e",
}

MITSUBA_ARGS = ["--structures", "1", "--seed", "7", "--split", "train", "--renderer", "mitsuba",
                "--render-variant", "scalar_rgb", "--resolution", "16"]
MITSUBA_BACKEND = {"renderer": "mitsuba", "variant": "scalar_rgb", "version": "3.9.1",
                   "device": {"cpu_arch": "x86_64", "cpu_isa": "avx512f", "cpu_vendor": "AuthenticAMD"}}
"""The render backend the Mitsuba digests were taken on; image bytes are pinned for this backend only."""
MITSUBA_DIGESTS = {
    "README.md": "cb880c9f4e3451c5394ded8bfda58f04031880e75e50a205ca45334db4340449",
    "data/train-00000-of-00001.parquet": "29d3c41744e33c97bae5e1476cf9ca95e5f1284bb5efbc5db48e0ece5c33df1b",
    "gen_config.json": "7ab915df2300e24d9cdcd53fca7f770e9ca6c68aaa2a70bcc7284cb3416eeef0",
    "manifest.json": "592b602ecf901d762c8eee57cfb0025aee7c4e20e9f0530c758d56e9712f181d",
    "plan.json": "a7e91f70287c606acedf3c5e9b237a7c8106eec77f249ce4f9665c4cf57e3c83",
    "shards/train-00000-of-00001.done.json": "8a1e71bf5513fa9e44033816b0337680096d26e38db646431577f1c4ca724df9",
    VIEWS: "2cd5a1e3764da76fd34a45bbb3f2b2a091c97eca3eb5ce2243d6065048251d68",
}
MACHINE_FREE = ("README.md", "plan.json")
"""The Mitsuba dataset's files whose bytes do not depend on the render backend."""


def fingerprint(root: Path) -> dict[str, str]:
    """sha256 of every file outside the split folders (version-neutral), plus one digest of the per-view files."""
    out: dict[str, str] = {}
    views: list[str] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        digest = hashlib.sha256(path.read_bytes().replace(PROJECT_VERSION.encode(), b"<version>")).hexdigest()
        if rel.startswith(("train/", "benchmark/")):
            views.append(f"{rel} {digest}\n")
        else:
            out[rel] = digest
    out[VIEWS] = hashlib.sha256("".join(views).encode()).hexdigest()
    return out


def generate(out: Path, args: list[str]) -> dict[str, str]:
    result = CliRunner().invoke(app, ["gen", "--out", str(out), *args, "--quiet"])
    assert result.exit_code == 0, result.output
    return fingerprint(out)


def differing(found: dict[str, str], pinned: dict[str, str]) -> list[str]:
    return [f"{rel}: pinned {pinned.get(rel)}, generated {found.get(rel)}"
            for rel in sorted({*found, *pinned}) if found.get(rel) != pinned.get(rel)]


def test_a_ground_truth_dataset_has_its_pinned_bytes(tmp_path: Path) -> None:
    assert differing(generate(tmp_path / "d", NONE_ARGS), NONE_DIGESTS) == []


@pytest.fixture(scope="module")
def mitsuba_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[dict[str, str], dict[str, object]]]:
    """The pinned Mitsuba dataset generated with one and with two workers: (fingerprint, render backend) each."""
    pytest.importorskip("mitsuba")
    root = tmp_path_factory.mktemp("mitsuba")
    runs = {}
    for workers in (1, 2):
        out = root / f"workers{workers}"
        found = generate(out, [*MITSUBA_ARGS, "--workers", str(workers)])
        runs[workers] = found, json.loads((out / "gen_config.json").read_text())["render_backend"]
    return runs


def test_a_mitsuba_dataset_is_the_same_with_one_or_two_workers(mitsuba_runs: dict) -> None:
    """With two workers every worker process builds its own renderer; the bytes are the same on any machine, and
    so are the pinned bytes of the files the render backend does not decide."""
    assert mitsuba_runs[1] == mitsuba_runs[2]
    found = mitsuba_runs[1][0]
    assert differing({k: found.get(k) for k in MACHINE_FREE}, {k: MITSUBA_DIGESTS[k] for k in MACHINE_FREE}) == []


def test_a_mitsuba_dataset_has_its_pinned_bytes(mitsuba_runs: dict) -> None:
    found, here = mitsuba_runs[1]
    if here != MITSUBA_BACKEND:
        pytest.skip(f"image bytes are pinned for render backend {MITSUBA_BACKEND}; this machine has {here}")
    assert differing(found, MITSUBA_DIGESTS) == []


def test_the_fingerprint_names_a_changed_file(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "gt.json").write_text("{}")
    (tmp_path / "plan.json").write_text(f'{{"version": "{PROJECT_VERSION}"}}')
    found = fingerprint(tmp_path)
    assert found["plan.json"] == hashlib.sha256(b'{"version": "<version>"}').hexdigest()
    assert differing(found, {**found, "plan.json": "0" * 64}) == [
        f"plan.json: pinned {'0' * 64}, generated {found['plan.json']}"]
    (tmp_path / "train" / "gt.json").write_text("{ }")
    assert fingerprint(tmp_path)[VIEWS] != found[VIEWS]
