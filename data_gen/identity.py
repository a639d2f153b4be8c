"""What decides the bytes beyond the arguments: the render backend a machine resolves, recorded and checked.

Image bytes depend on the render backend a machine resolves (Mitsuba's ``auto`` picks cuda, llvm or scalar by
node) and on the machine it renders on (GPU and driver, or CPU and LLVM: ``data_gen.render.device``). The first
rendering run records it (renderer, resolved variant, version, device) as ``render_backend`` in
``gen_config.json``, every shard's completion record repeats it, and a resume, another shard or the merge
refuses a different one, naming the shard and what differs. This module also builds (and closes) the renderer, so that a
missing dependency fails before anything is written.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from data_gen.config import GenConfig, GenerationError
from spatialiq_train.core.dataset import GEN_CONFIG_FILE
from spatialiq_train.core.errors import EXIT_USAGE
from spatialiq_train.core.io import atomic_write_json, read_json

RENDER_MODULES = {"mitsuba": ("mitsuba", "render"), "isaacsim": ("isaacsim", "isaacsim")}
"""Importable module and pip extra of each rendering backend."""
_PINNED_VARIANTS = ("scalar_rgb", "llvm_ad_rgb", "cuda_ad_rgb")


def _refusal(message: str) -> GenerationError:
    """A refusal before any work: the arguments, or the dataset or machine they do not match (bad input, exit 2)."""
    return GenerationError(message, exit_code=EXIT_USAGE)


def check_gen_config(out: Path, cfg: GenConfig, backend: dict[str, Any] | None = None) -> None:
    """Record the run's arguments, or refuse when ``out`` was generated with different ones.

    ``backend`` is this machine's render backend (None when nothing renders here, e.g. ``--plan-only``); the
    first rendering run adds it to a ``gen_config.json`` that has none, later ones must match it.
    """
    path = out / GEN_CONFIG_FILE
    where = str(out) if cfg.shard is None else f"{out} (shard {cfg.shard} of {cfg.shard_count})"
    if path.exists():
        old = read_json(path)
        for key, value in cfg.identity().items():
            if old.get(key) != value:
                flag = "--" + key.replace("_", "-")
                raise _refusal(
                    f"{out} was generated with {flag} {old.get(key)!r}, this run asks for {value!r}; "
                    f"rerun with {flag} {old.get(key)!r} to resume, or use a new --out directory")
        if backend is not None:
            recorded = old.get("render_backend")
            if recorded is None:
                atomic_write_json(path, {**old, "render_backend": backend})
            else:
                check_backend(recorded, backend, where)
        return
    atomic_write_json(path, cfg.identity(backend))


def check_backend(recorded: dict[str, Any], current: dict[str, Any], where: str) -> None:
    """Refuse a render backend that differs from the recorded one; the message names ``where`` and what differs.

    Every field decides image bytes, the device fields included (we cannot tell a harmless difference from a
    harmful one), so any difference is refused.
    """
    if recorded == current:
        return
    was, now = recorded.get("renderer"), current.get("renderer")
    if was != now:
        raise _refusal(f"{where} was rendered with renderer {was!r}; this run renders with {now!r}; "
                              "use the same renderer or another --out")
    if recorded.get("variant") != current.get("variant"):
        raise _refusal(
            f"{where}: this dataset was rendered with {recorded.get('variant')}; this machine resolves "
            f"{current.get('variant')}; pass --render-variant {recorded.get('variant')} or use another --out")
    if recorded.get("version") != current.get("version"):
        raise _refusal(
            f"{where}: this dataset was rendered with {was} {recorded.get('version')}; this machine has {was} "
            f"{current.get('version')}; install {was}=={recorded.get('version')} or use another --out")
    _check_device(recorded.get("device"), current.get("device"), where)
    odd = sorted(k for k in {*recorded, *current} if recorded.get(k) != current.get(k))
    raise _refusal(f"{where}: render backend field(s) {', '.join(odd)} differ: recorded {recorded}, "
                          f"this machine {current}; use a matching machine or another --out")


def _check_device(recorded: dict[str, Any] | None, current: dict[str, Any] | None, where: str) -> None:
    """Name every device field (GPU, driver, CPU, ...) that differs; images differ across such machines."""
    if recorded == current:
        return
    if recorded is None or current is None:
        missing = "the recorded backend" if recorded is None else "this machine's backend"
        raise _refusal(
            f"{where}: {missing} has no render device identity ('device'), so it is unknown whether images rendered "
            "here match the recorded ones; render on the machine kind that wrote the dataset with this version of "
            "spatialiq, or use another --out")
    fields = [k for k in (*recorded, *(k for k in current if k not in recorded)) if recorded.get(k) != current.get(k)]
    was = ", ".join(f"{k} {recorded.get(k)!r}" for k in fields)
    now = ", ".join(f"{k} {current.get(k)!r}" for k in fields)
    raise _refusal(
        f"{where}: this dataset was rendered on a device with {was}; this machine has {now}; images differ between "
        "such machines (ground truth does not), so shards must not mix: run it on a node matching the recorded "
        "device, or use another --out")


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


def pin_variant(cfg: GenConfig, backend: dict[str, Any] | None) -> GenConfig:
    """``cfg`` with ``render_variant`` set to the resolved Mitsuba variant, so that workers render what is recorded."""
    if cfg.renderer == "mitsuba" and backend is not None and backend["variant"] in _PINNED_VARIANTS:
        return cfg.model_copy(update={"render_variant": backend["variant"]})
    return cfg


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
        raise _refusal(f"--render-variant {cfg.render_variant}: {exc}") from exc


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
    return _refusal(f"--renderer {cfg.renderer} is unavailable ({reason}){hint}")


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
        raise _refusal(f"--render-variant {cfg.render_variant}: {exc}") from exc


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
