"""Helpers the command modules share for turning option mistakes into one :class:`UserError` line."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def flag_of(field: str) -> str:
    """The command-line flag of a config field: ``num_shards`` -> ``--num-shards``."""
    return "--" + field.replace("_", "-")


def option_errors(exc: Any) -> str:
    """A pydantic ValidationError of a command's config as one line per field, naming the flag and the value given.

    ``exc.errors()`` locations start with the config field, which is the option name with ``_`` for ``-``.
    """
    lines = []
    for err in exc.errors():
        loc = err.get("loc") or ()
        flag = flag_of(str(loc[0])) if loc else "arguments"
        given = f" (got {err['input']!r})" if loc and "input" in err else ""
        lines.append(f"{flag}: {err['msg'].removeprefix('Value error, ')}{given}")
    return "; ".join(lines)


def raw_files(raw: list[Path], files: list[Path] | None) -> list[Path]:
    """``--raw`` files plus the ones a shell glob after it spreads as arguments (``--raw runs/*.csv``); arguments
    without any ``--raw`` are refused, naming them."""
    from spatialiq_train.core.errors import UserError

    if files and not raw:
        raise UserError(f"unexpected argument(s) {', '.join(map(str, files))}: files after the options are more "
                        "predictions files for --raw (e.g. --raw runs/*.csv); give --raw first")
    return [*raw, *(files or [])]
