"""External spatial benchmarks scored with their own prompts, answer formats and metrics (docs/transfer.md).

Each benchmark is one adapter (:class:`eval.external.base.Adapter`) in its own module, registered in
:data:`ADAPTERS` by the name `spatialiq eval external NAME` takes.
"""

from __future__ import annotations

import importlib
from typing import Any

from spatialiq_train.core.errors import UserError

ADAPTERS: dict[str, str] = {
    "spatialchain": "eval.external.spatialchain:SpatialChain",
    "mentalblackboard": "eval.external.mentalblackboard:MentalBlackboard",
}
"""Adapter name -> ``module:class``, imported when asked for."""


def get_adapter(name: str) -> Any:
    """A fresh adapter for ``name``; a UserError lists the known ones."""
    target = ADAPTERS.get(name)
    if target is None:
        raise UserError(f"unknown benchmark {name!r}; known: {', '.join(sorted(ADAPTERS))}")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)()
