"""One generation run in one process: its arguments, this machine's render backend, and the renderer it renders with.

:class:`GenerationRun` is opened and closed in one place (``with``): opening builds the renderer when this process
renders (so a missing dependency fails before anything is written), resolves this machine's render backend and pins
the resolved Mitsuba variant into the arguments (so that worker processes render what is recorded); closing closes a
renderer it built (an injected one stays open). :meth:`GenerationRun.record` writes or checks ``gen_config.json`` and
:meth:`GenerationRun.process` turns one planned structure into its files and parquet rows. The executor
(``data_gen.executor``) holds the parent's run; each worker process opens its own (:meth:`GenerationRun.worker`).

What the backend record holds and how two are compared is ``data_gen.identity`` (pure); this module probes the
machine for it (``data_gen.render.device``) and builds renderers (``data_gen.render.get_renderer``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from data_gen import identity
from data_gen.config import GenConfig, GenerationError
from data_gen.pipeline import StructureOutput, process_structure
from data_gen.plan import PlannedStructure
from spatialiq_train.core.dataset import GEN_CONFIG_FILE
from spatialiq_train.core.io import atomic_write_json, read_json

RENDER_MODULES = {"mitsuba": ("mitsuba", "render"), "isaacsim": ("isaacsim", "isaacsim")}
"""Importable module and pip extra of each rendering backend."""


class GenerationRun:
    """A run's arguments (``cfg``), this machine's render backend record (``backend``, None for ``--renderer none``
    or a planning-only run) and this process's renderer (``renderer``, None where this process does not render).

    ``renderer`` given: used as it is and never closed here (tests inject fakes this way). ``render`` False: nothing
    is rendered or resolved (``--plan-only``). ``in_worker``: the run of a worker process (:meth:`worker`).
    """

    def __init__(self, cfg: GenConfig, renderer: Any = None, render: bool = True, *, in_worker: bool = False) -> None:
        self.cfg, self.renderer, self.render, self.in_worker = cfg, renderer, render, in_worker
        self.backend: dict[str, Any] | None = None
        self._built: Any = None

    @classmethod
    def worker(cls, cfg: GenConfig, render: bool) -> GenerationRun:
        """The run a worker process opens: it renders (with ``render``) with a renderer of its own and resolves no
        backend (it renders the variant its parent pinned in ``cfg``, and the parent writes every record)."""
        return cls(cfg, render=render, in_worker=True)

    @property
    def renders_here(self) -> bool:
        """This process renders: a worker, or the parent of a one-worker run. With several workers the parent
        resolves the backend without a renderer, and every worker process builds its own."""
        return self.in_worker or self.cfg.workers == 1

    def __enter__(self) -> GenerationRun:
        if self.render and self.renderer is None and self.renders_here:
            self.renderer = self._built = make_renderer(self.cfg)
        if self.render and not self.in_worker:
            try:
                self.backend = render_backend(self.cfg, self.renderer)  # without a renderer: resolved and checked
            except BaseException:
                self.__exit__(None, None, None)  # the renderer just built is closed: no ``with`` block will
                raise
            self.cfg = identity.pin_variant(self.cfg, self.backend)
        return self

    def __exit__(self, *exc: object) -> None:
        built, self._built = self._built, None
        if built is not None:
            self.renderer = None
            close_renderer(built)

    @property
    def out(self) -> Path:
        return Path(self.cfg.out)

    def record(self) -> None:
        """Write ``gen_config.json`` (the arguments and, once something renders, the backend), or refuse a run whose
        arguments or backend differ from the recorded ones (``identity.gen_config_update``)."""
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / GEN_CONFIG_FILE
        recorded = read_json(path) if path.exists() else None
        update = identity.gen_config_update(recorded, self.cfg, self.backend)
        if update is not None:
            atomic_write_json(path, update)

    def process(self, entry: PlannedStructure) -> StructureOutput:
        """One planned structure: its files written, its parquet rows and file checksums returned."""
        return process_structure(self.cfg, entry, self.renderer)


def render_backend(cfg: GenConfig, renderer: Any = None) -> dict[str, Any] | None:
    """This machine's render backend (None for ``none``): renderer name, resolved Mitsuba variant, version and
    ``device``, the machine identity that decides image bytes (``data_gen.render.device``).

    From ``renderer`` when one was built (or injected; a ``device`` attribute there wins, as test fakes use);
    otherwise resolved without building one, which still fails fast (before anything is written) when the
    backend's package is missing. The device is read after the variant is resolved, never before.
    """
    if cfg.renderer == "none":
        return None
    if renderer is not None:
        name, variant = str(getattr(renderer, "name", cfg.renderer)), getattr(renderer, "variant", None)
    else:
        name, variant = cfg.renderer, _resolve_variant(cfg)
    backend: dict[str, Any] = {"renderer": name, "variant": variant, "version": _backend_version(name)}
    device = getattr(renderer, "device", None)
    if device is None:
        from data_gen.render import device as render_device

        device = render_device.device_identity(name, variant)
    if device is not None:
        backend["device"] = dict(device)
    return backend


def make_renderer(cfg: GenConfig) -> Any:
    """The backend named by ``cfg.renderer`` (None for ``none``); a missing dependency names the pip extra."""
    if cfg.renderer == "none":
        return None
    from data_gen.render import get_renderer

    options: dict[str, Any] = {}
    if cfg.renderer == "mitsuba":
        options["variant"] = cfg.render_variant
        if cfg.workers > 1:  # several worker processes each get one render thread: no oversubscribed cores
            options["threads"] = 1
    try:
        return get_renderer(cfg.renderer, **options)
    except ImportError as exc:
        raise _missing(cfg, str(exc)) from exc
    except RuntimeError as exc:
        if cfg.renderer != "mitsuba":
            raise
        raise identity.refusal(f"--render-variant {cfg.render_variant}: {exc}") from exc


def close_renderer(renderer: Any) -> None:
    """Release what a renderer holds (e.g. Isaac Sim's texture folder), when it has a ``close()``."""
    close = getattr(renderer, "close", None)
    if callable(close):
        close()


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _missing(cfg: GenConfig, reason: str) -> GenerationError:
    extra = RENDER_MODULES[cfg.renderer][1]
    hint = "" if "pip install" in reason else f"; install it with: pip install -e '.[{extra}]'"
    return identity.refusal(f"--renderer {cfg.renderer} is unavailable ({reason}){hint}")


def _resolve_variant(cfg: GenConfig) -> str | None:
    """The Mitsuba variant ``cfg.render_variant`` resolves to here (None for Isaac Sim), without a renderer."""
    module = RENDER_MODULES[cfg.renderer][0]
    if not _importable(module):
        raise _missing(cfg, f"No module named {module!r}")
    if cfg.renderer != "mitsuba":
        return None
    from data_gen.render.mitsuba_backend import resolve_variant

    try:
        return resolve_variant(cfg.render_variant)
    except ImportError as exc:
        raise _missing(cfg, str(exc)) from exc
    except RuntimeError as exc:
        raise identity.refusal(f"--render-variant {cfg.render_variant}: {exc}") from exc


def _backend_version(name: str) -> str | None:
    """Version of the backend's package, None when it is not an installed distribution (e.g. a test fake)."""
    if name == "mitsuba":
        try:
            import mitsuba
        except ImportError:
            return None
        return str(mitsuba.__version__)
    if name == "isaacsim":
        from importlib import metadata

        try:
            return metadata.version("isaacsim")
        except metadata.PackageNotFoundError:
            return None
    return None
