"""Which module implements each renderer name, and building one by name (``get_renderer``).

Backends are imported only when asked for, so data generation with ``--renderer none`` never loads Mitsuba or Isaac
Sim. This table sits apart from the interface (``data_gen.render.base``), which every backend imports.
"""

from __future__ import annotations

import importlib

from data_gen.render.base import Renderer

# name -> (module, class, pip extra that provides it)
_BACKENDS: dict[str, tuple[str, str, str]] = {
    "mitsuba": ("data_gen.render.mitsuba_backend", "MitsubaRenderer", "render"),
    "isaacsim": ("data_gen.render.isaacsim_backend", "IsaacSimRenderer", "isaacsim"),
}


def renderer_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def get_renderer(name: str, **options: object) -> Renderer:
    """Instantiate a backend by name; unknown names and missing optional dependencies get clear errors."""
    try:
        module_name, class_name, extra = _BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown renderer {name!r}; valid: none, {', '.join(_BACKENDS)}") from None
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name)
    try:
        return cls(**options)
    except ImportError as exc:
        hint = "" if "pip install" in str(exc) else f"; install it with: pip install -e '.[{extra}]'"
        message = f"renderer {name!r} needs an optional dependency that is not installed ({exc}){hint}"
        raise ImportError(message) from exc
