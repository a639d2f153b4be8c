"""Helpers the command modules share for turning option mistakes into one :class:`UserError` line."""

from __future__ import annotations

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
