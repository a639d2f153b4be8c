"""Release hygiene: a release names what it was made from by folder name and digest, never by a path of the machine
that made it (on a cluster, a user's home or project path would go public with the model).

* :func:`public_recipe`: the recipe as released (``training_recipe.yaml`` and the card's table): every path-valued
  key (:data:`PATH_KEYS`, and each replay source's in ``data.sources``) that names a place on this machine (absolute,
  ``~``, or climbing out with ``..``) becomes its folder name; a relative path inside the project (``data/train``)
  or a Hub id stays as it is.
* :func:`sources`: the run's dataset, traces (each replay source's too) and starting checkpoints, each by folder
  name and the digest of what it held (the dataset's ``manifest.json``, the trace files,
  :func:`~spatialiq_train.core.weights.checkpoint_digest`).
* :func:`paths_found`: the last check, over every text file of a release folder, for the paths this release was made
  from.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from spatialiq_train.core.io import sha256_file
from spatialiq_train.core.weights import checkpoint_digest

PATH_KEYS = ("model.name_or_path", "data.data_root", "data.traces_dir", "rl.init_from", "run.output_dir")
"""The recipe keys that hold a path of the machine the run was made on (and each replay source's, below)."""
SOURCE_PATH_KEYS = ("traces_dir", "data_root")
"""The keys of a ``data.sources`` entry (replay) that hold a path."""
BINARY_SUFFIXES = (".safetensors", ".bin", ".pt", ".png", ".jpg", ".parquet")
"""Files :func:`paths_found` does not read as text."""


def names_a_place(value: object) -> bool:
    """True for a string that names a place on this machine: an absolute path, a ``~`` path, or one climbing out of
    the project with ``..``. A relative path inside the project and a Hub id (``Qwen/Qwen2.5-VL-7B-Instruct``) do
    not."""
    if not isinstance(value, str) or not value:
        return False
    path = PurePosixPath(value.replace("\\", "/"))
    return value.startswith("~") or path.is_absolute() or ".." in path.parts or (len(value) > 1 and value[1] == ":")


def folder_name(value: str) -> str:
    """The last folder of a path (``/home/alice/data/train`` -> ``train``)."""
    parts = [p for p in PurePosixPath(value.replace("\\", "/")).parts
             if p not in ("/", ".", "..") and not p.startswith("~") and not p.endswith(":")]
    return parts[-1] if parts else "."


def public_value(value: Any) -> Any:
    """``value`` as a release may show it: its folder name when it names a place on this machine, else as is."""
    return folder_name(value) if names_a_place(value) else value


def _source_entries(recipe: Any) -> list[dict[str, Any]]:
    data = recipe.get("data") if isinstance(recipe, dict) else None
    entries = data.get("sources") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def source_paths(recipe: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(``data.sources[i].traces_dir`` or ``.data_root``, its value) for every path of a replay source in
    ``recipe``."""
    return [(f"data.sources[{i}].{leaf}", entry[leaf]) for i, entry in enumerate(_source_entries(recipe))
            for leaf in SOURCE_PATH_KEYS if isinstance(entry.get(leaf), str)]


def public_recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``recipe`` (a nested dict) with every :data:`PATH_KEYS` value, and every replay source's
    :data:`SOURCE_PATH_KEYS` value, passed through :func:`public_value`."""
    out = copy.deepcopy(recipe)
    for key in PATH_KEYS:
        *parents, leaf = key.split(".")
        section: Any = out
        for part in parents:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict) and leaf in section:
            section[leaf] = public_value(section[leaf])
    for entry in _source_entries(out):
        entry.update({leaf: public_value(entry[leaf]) for leaf in SOURCE_PATH_KEYS if leaf in entry})
    return out


@dataclass(frozen=True)
class Source:
    """One thing a release was made from, as the card names it."""

    key: str
    """The recipe key (or command option) that named it."""
    name: str
    """Its folder name (a Hub id as is)."""
    digest: str | None
    digest_of: str
    """What the digest is over."""


def traces_digest(folder: Path) -> str | None:
    """sha256 over ``name<TAB>sha256`` of each trace file (``*.jsonl``) of a traces folder, sorted by name; None
    when it holds none."""
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        return None
    return hashlib.sha256("".join(f"{f.name}\t{sha256_file(f)}\n" for f in files).encode()).hexdigest()


def _source(key: str, value: str | None, where: Path | None) -> Source | None:
    if not value:
        return None
    name = str(public_value(value))
    if key.endswith("data_root"):  # data.data_root, data.sources[i].data_root
        manifest = where / "manifest.json" if where is not None else None
        ok = manifest is not None and manifest.is_file()
        return Source(key, name, sha256_file(manifest) if ok else None, "sha256 of its manifest.json")
    if key.endswith("traces_dir"):
        return Source(key, name, traces_digest(where) if where is not None and where.is_dir() else None,
                      "sha256 over its trace files' names and sha256s")
    ok = where is not None and (where / "config.json").is_file()
    return Source(key, name, checkpoint_digest(where) if ok and where is not None else None, "checkpoint digest")


def sources(items: Iterable[tuple[str, str | None, Path | None]]) -> tuple[Source, ...]:
    """(recipe key, its value, where it was found on this machine or None) -> the card's sources, each by folder name
    and digest (None where it was not found)."""
    return tuple(s for key, value, where in items if (s := _source(key, value, where)) is not None)


def source_comment(found: Iterable[Source]) -> str:
    """YAML comment lines for ``training_recipe.yaml``: what each path key named, by folder name and digest."""
    lines = ["# Paths of the machine this run was made on are given by folder name; what they held:"]
    for s in found:
        digest = f"{s.digest_of} {s.digest}" if s.digest else "not found when released"
        lines.append(f"#   {s.key}: {s.name} ({digest})")
    return "\n".join(lines) + "\n" if len(lines) > 1 else ""


def paths_found(folder: Path, paths: Iterable[str | Path]) -> list[tuple[str, str]]:
    """(file relative to ``folder``, path) for each of ``paths`` (absolute, with two or more parts) that a text file
    of ``folder`` holds, as a whole path (``/a/run`` is not found in ``/a/run2``)."""
    wanted = sorted({str(p) for p in paths if PurePosixPath(str(p)).is_absolute() and len(Path(p).parts) > 2},
                    key=len, reverse=True)
    found: list[tuple[str, str]] = []
    for file in sorted(folder.rglob("*")):
        if not file.is_file() or file.suffix in BINARY_SUFFIXES:
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [(file.relative_to(folder).as_posix(), p) for p in wanted
                  if re.search(re.escape(p) + r"(?![\w.\-])", text)]
    return found
