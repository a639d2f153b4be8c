"""Atomic writes and dataset-root path checks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from spatialiq_train.core.io import atomic_write_bytes, atomic_write_json, read_json, resolve_inside


def test_atomic_write_leaves_no_temp_file_and_uses_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "sub" / "a.bin", b"xyz")
    finally:
        os.umask(old)
    target = tmp_path / "sub" / "a.bin"
    assert target.read_bytes() == b"xyz"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # readable by the group and others, as open() would give
    assert [p.name for p in target.parent.iterdir()] == ["a.bin"]


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    atomic_write_json(target, {"v": 1})

    class Boom:
        pass

    with pytest.raises(TypeError):
        atomic_write_json(target, {"v": Boom()})
    assert read_json(target) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_read_json_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "gt.json"
    bad.write_text('{\n  "task2": 3,\n  oops\n}')
    with pytest.raises(ValueError, match=r"gt\.json: invalid JSON at line 3"):
        read_json(bad)


def test_resolve_inside_rejects_escapes(tmp_path: Path) -> None:
    (tmp_path / "root" / "a").mkdir(parents=True)
    assert resolve_inside(tmp_path / "root", "a") == (tmp_path / "root" / "a").resolve()
    for bad in ("../x", "a/../../x", str(tmp_path / "root" / "a")):
        with pytest.raises(ValueError, match="root"):
            resolve_inside(tmp_path / "root", bad)
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="escapes"):
        resolve_inside(tmp_path / "root", "link/other")


def test_check_model_source_accepts_folders_and_hub_ids_only(tmp_path: Path) -> None:
    from spatialiq_train.core.io import check_model_source

    assert check_model_source(tmp_path, "--model") == str(tmp_path)
    assert check_model_source("Qwen/Qwen2.5-VL-7B-Instruct", "--model") == "Qwen/Qwen2.5-VL-7B-Instruct"
    for bad in (tmp_path / "missing", "./runs/final", "runs/sft/final"):
        with pytest.raises(FileNotFoundError, match="rl.init_from .*no such checkpoint folder"):
            check_model_source(bad, "rl.init_from")
