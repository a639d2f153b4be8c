"""What decides the bytes beyond the arguments, as records: ``gen_config.json`` and the render backend, compared.

Image bytes depend on the render backend a machine resolves (Mitsuba's ``auto`` picks cuda, llvm or scalar by
node) and on the machine it renders on (GPU and driver, or CPU and LLVM: ``data_gen.render.device``). The first
rendering run records it (renderer, resolved variant, version, device) as ``render_backend`` in
``gen_config.json``, every shard's completion record repeats it, and a resume, another shard or the merge
refuses a different one, naming the shard and what differs. Everything here is pure: the records come in as
values and what to write goes out as one; the run (``data_gen.generation_run``) probes the machine, reads and
writes.
"""

from __future__ import annotations

from typing import Any

from data_gen.config import GenConfig, GenerationError
from spatialiq_train.core.errors import EXIT_USAGE

_PINNED_VARIANTS = ("scalar_rgb", "llvm_ad_rgb", "cuda_ad_rgb")


def refusal(message: str) -> GenerationError:
    """A refusal before any work: the arguments, or the dataset or machine they do not match (bad input, exit 2)."""
    return GenerationError(message, exit_code=EXIT_USAGE)


def _shown(value: Any) -> Any:
    """A recorded value as its flag takes it (``--parts warmup=2,rl=4``)."""
    return ",".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else value


def gen_config_update(recorded: dict[str, Any] | None, cfg: GenConfig,
                      backend: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What ``gen_config.json`` must hold after this run starts, or None when it stays as ``recorded``; a
    GenerationError when the run's arguments or backend differ from the recorded ones.

    ``recorded`` is the file's content (None when there is none yet). ``backend`` is this machine's render backend
    (None when nothing renders here, e.g. ``--plan-only``); the first rendering run adds it to a record that has
    none, later ones must match it.
    """
    if recorded is None:
        return cfg.identity(backend)
    out = cfg.out
    ident = cfg.identity()
    for key in [*ident, *(k for k in ("parts",) if k in recorded and k not in ident)]:  # optional keys
        value = ident.get(key)
        if recorded.get(key) != value:
            was, asked, flag = _shown(recorded.get(key)), _shown(value), "--" + key.replace("_", "-")
            raise refusal(
                f"{out} was generated with {flag} {was!r}, this run asks for {asked!r}; "
                f"rerun with {flag} {was!r} to resume, or use a new --out directory")
    if backend is None:
        return None
    if recorded.get("render_backend") is None:
        return {**recorded, "render_backend": backend}
    where = str(out) if cfg.shard is None else f"{out} (shard {cfg.shard} of {cfg.shard_count})"
    check_backend(recorded["render_backend"], backend, where)
    return None


def check_backend(recorded: dict[str, Any], current: dict[str, Any], where: str) -> None:
    """Refuse a render backend that differs from the recorded one; the message names ``where`` and what differs.

    Every field decides image bytes, the device fields included (we cannot tell a harmless difference from a
    harmful one), so any difference is refused.
    """
    if recorded == current:
        return
    was, now = recorded.get("renderer"), current.get("renderer")
    if was != now:
        raise refusal(f"{where} was rendered with renderer {was!r}; this run renders with {now!r}; "
                              "use the same renderer or another --out")
    if recorded.get("variant") != current.get("variant"):
        raise refusal(
            f"{where}: this dataset was rendered with {recorded.get('variant')}; this machine resolves "
            f"{current.get('variant')}; pass --render-variant {recorded.get('variant')} or use another --out")
    if recorded.get("version") != current.get("version"):
        raise refusal(
            f"{where}: this dataset was rendered with {was} {recorded.get('version')}; this machine has {was} "
            f"{current.get('version')}; install {was}=={recorded.get('version')} or use another --out")
    _check_device(recorded.get("device"), current.get("device"), where)
    odd = sorted(k for k in {*recorded, *current} if recorded.get(k) != current.get(k))
    raise refusal(f"{where}: render backend field(s) {', '.join(odd)} differ: recorded {recorded}, "
                          f"this machine {current}; use a matching machine or another --out")


def _check_device(recorded: dict[str, Any] | None, current: dict[str, Any] | None, where: str) -> None:
    """Name every device field (GPU, driver, CPU, ...) that differs; images differ across such machines."""
    if recorded == current:
        return
    if recorded is None or current is None:
        missing = "the recorded backend" if recorded is None else "this machine's backend"
        raise refusal(
            f"{where}: {missing} has no render device identity ('device'), so it is unknown whether images rendered "
            "here match the recorded ones; render on the machine kind that wrote the dataset with this version of "
            "spatialiq, or use another --out")
    fields = [k for k in (*recorded, *(k for k in current if k not in recorded)) if recorded.get(k) != current.get(k)]
    was = ", ".join(f"{k} {recorded.get(k)!r}" for k in fields)
    now = ", ".join(f"{k} {current.get(k)!r}" for k in fields)
    raise refusal(
        f"{where}: this dataset was rendered on a device with {was}; this machine has {now}; images differ between "
        "such machines (ground truth does not), so shards must not mix: run it on a node matching the recorded "
        "device, or use another --out")


def pin_variant(cfg: GenConfig, backend: dict[str, Any] | None) -> GenConfig:
    """``cfg`` with ``render_variant`` set to the resolved Mitsuba variant, so that workers render what is recorded."""
    if cfg.renderer == "mitsuba" and backend is not None and backend["variant"] in _PINNED_VARIANTS:
        return cfg.model_copy(update={"render_variant": backend["variant"]})
    return cfg
