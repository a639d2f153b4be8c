"""Responder groups: which published tables a responder belongs to, recorded or given, never guessed from its name.

The official analysis reports two groups: ``text`` (zero-shot responders, Table 1, conditional convention
P(prerequisite | dependent)) and ``trained_text`` (trained checkpoints and their zero-shot backbone, Table 4,
P(dependent | prerequisite)). The human baseline is in ``both`` (it appears in each, with the Table 1
convention). A responder's group comes from, first to last:

1. an explicit mapping (``eval paper-tables --group NAME=GROUP``);
2. ``responder_groups.json`` beside the raw files (``spatialiq eval score --group`` records it there);
3. with ``--published-groups``, :data:`PUBLISHED_GROUPS`: the seventeen published responders by exact name;
4. the released human free-response file, ``eval_raw_human_frq.csv``, which is the human baseline by format.

A responder with none of these is refused by the tables that need a group, naming it and the ways to give one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from spatialiq_train.core.errors import InputError
from spatialiq_train.core.io import atomic_write_json

GROUPS: tuple[str, ...] = ("text", "trained_text", "both")
GROUPS_FILE = "responder_groups.json"
"""Beside the ``eval_raw_*`` files: ``{"<model>": "<group>", ...}``."""
HUMAN_GROUP = "both"
_TRAINED = ("Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL-32B-Instruct", "sft-7b-plain-100pct", "sft-7b-cot-100pct",
            "sft-32b-plain-100pct", "sft-32b-cot-100pct", "dapo-7b-tight", "dapo-32b-tight")
_ZERO_SHOT = ("claude", "gemini", "glm", "gpt", "kimi", "qwen", "qwen3b", "vla0")
PUBLISHED_GROUPS: dict[str, str] = {"human": HUMAN_GROUP, **dict.fromkeys(_TRAINED, "trained_text"),
                                    **dict.fromkeys(_ZERO_SHOT, "text")}
"""The seventeen published text responders by exact name (Tables 1 and 4 of the paper)."""
HOW = (f"record it with `spatialiq eval score --group`, list it in {GROUPS_FILE} beside the raw files, or pass "
       f"--group NAME=GROUP (--published-groups for the published responders); groups: text (zero-shot, Table 1), "
       f"trained_text (trained checkpoints and their backbone, Table 4), both (the human baseline)")


def check_group(value: str, where: str) -> str:
    """``value`` when it is a group; else an InputError naming ``where`` and the valid groups."""
    if value not in GROUPS:
        raise InputError(f"{where}: unknown responder group {value!r}; valid: {', '.join(GROUPS)}")
    return value


def parse_group_options(values: Iterable[str], option: str = "--group") -> dict[str, str]:
    """``NAME=GROUP`` options as a mapping; a malformed one or a name given twice is an InputError."""
    out: dict[str, str] = {}
    for value in values:
        name, sep, group = value.partition("=")
        if not sep or not name.strip():
            raise InputError(f"{option} {value!r}: expected NAME=GROUP, e.g. {option} mine=trained_text")
        if name.strip() in out:
            raise InputError(f"{option}: responder {name.strip()!r} is given twice")
        out[name.strip()] = check_group(group.strip(), f"{option} {value}")
    return out


def read_groups_file(directory: Path) -> dict[str, str]:
    """The groups recorded in ``directory/responder_groups.json`` ({} when there is none)."""
    path = Path(directory) / GROUPS_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); expected {{\"<model>\": \"<group>\"}}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object {{\"<model>\": \"<group>\"}}")
    return {str(name): check_group(str(group), f"{path}: key {name!r}") for name, group in data.items()}


def record_group(directory: Path, name: str, group: str) -> Path:
    """Record ``name``'s group in ``directory/responder_groups.json`` (other entries kept); returns the file."""
    groups = read_groups_file(directory)
    groups[name] = check_group(group, "--group")
    path = Path(directory) / GROUPS_FILE
    atomic_write_json(path, dict(sorted(groups.items())))
    return path


def resolve_groups(files: Mapping[str, Path], directory: Path, given: Mapping[str, str] | None = None,
                   published: bool = False, human_file: str = "eval_raw_human_frq.csv") -> dict[str, str | None]:
    """model -> group (None: not known) for the raw ``files`` of ``directory`` (model -> file): ``given`` first,
    then the recorded groups, then (with ``published``) :data:`PUBLISHED_GROUPS`, then the human file. A given
    name that matches no file is refused: it is a typo or a responder from elsewhere."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(files))
    if unknown:
        raise InputError(f"--group {unknown[0]}=...: no eval_raw file of responder {unknown[0]!r} in {directory} "
                         f"(responders there: {', '.join(files)})")
    recorded = read_groups_file(directory)
    fallback = PUBLISHED_GROUPS if published else {}
    return {m: given.get(m) or recorded.get(m) or fallback.get(m) or (HUMAN_GROUP if path.name == human_file else None)
            for m, path in files.items()}


def require_groups(groups: Mapping[str, str | None], where: object) -> None:
    """Raise when any responder has no group, naming them and how to give one."""
    missing = [m for m, g in groups.items() if g is None]
    if missing:
        raise InputError(f"{where}: no responder group for {', '.join(repr(m) for m in missing)}; {HOW}")


def in_group(responder_group: str | None, group: str) -> bool:
    """Whether a responder of ``responder_group`` is reported in the tables of ``group``."""
    return responder_group == group or responder_group == HUMAN_GROUP
