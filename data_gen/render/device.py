"""The machine a render backend runs on, as far as it decides the image bytes (read lazily, never cached).

* ``cuda_*`` variants (and Isaac Sim, which renders on an RTX GPU): GPU name, compute capability, NVIDIA driver
  version and the CUDA version the driver provides. The driver holds the PTX compiler and OptiX, the
  compute capability selects the hardware's approximate instructions, so any of them can change pixels.
* CPU variants (``llvm_*`` and ``scalar_*``): CPU architecture, vendor and best vector instruction set. Both
  intersect triangle meshes (our blocks) with Embree, which picks SSE, AVX, AVX2 or AVX-512 kernels at run time.
  Measured: one 16-pixel ``scalar_rgb`` structure gave three different sets of bytes (pixels 1/255 apart) on an
  AMD AVX-512 CPU, on QEMU emulating an AVX2 CPU, and on the machine its digests were first pinned on. The
  vendor is recorded too, as approximate instructions (reciprocals) need not round alike on two vendors' CPUs.
  ``llvm_*`` adds the libLLVM version (Dr.Jit compiles for the host CPU, its vector width following the
  instruction set).

Values that cannot be read are None, so a machine where they cannot be read still compares equal only to
another such machine. Ground truth never depends on any of this (it comes from the ray caster).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

_X86_ISAS = ("avx512f", "avx2", "avx", "sse4_2")
"""x86 vector instruction sets, best first."""


def device_identity(renderer: str, variant: str | None) -> dict[str, Any] | None:
    """What besides the renderer, variant and version decides the image bytes here; None for unknown renderers."""
    if renderer == "isaacsim" or (renderer == "mitsuba" and str(variant).startswith("cuda")):
        return cuda_identity(use_drjit=renderer == "mitsuba")
    if renderer != "mitsuba":
        return None
    ident: dict[str, Any] = {"cpu_arch": platform.machine() or None, **cpu_identity()}
    if str(variant).startswith("llvm"):
        ident["llvm"] = _drjit_llvm_version()
    return ident


def cuda_identity(use_drjit: bool = True) -> dict[str, Any]:
    """GPU name, compute capability, driver version and CUDA version of the device a renderer uses.

    Compute capability and CUDA version come from Dr.Jit (the device it initialised) when ``use_drjit``;
    otherwise, and for the GPU name and driver version, from ``nvidia-smi`` for the first visible device.
    """
    smi = _nvidia_smi_query()
    cc, cuda = (_drjit_cuda() if use_drjit else (None, None))
    return {"gpu": smi.get("name"), "compute_capability": cc or smi.get("compute_cap"),
            "driver": smi.get("driver_version"), "cuda": cuda or _nvidia_smi_cuda_version()}


def cpu_identity() -> dict[str, str | None]:
    """This CPU's ``cpu_isa`` (best x86 vector instruction set, the architecture elsewhere) and ``cpu_vendor``."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    return parse_cpuinfo(text, platform.machine())


def parse_cpuinfo(text: str, machine: str) -> dict[str, str | None]:
    """``cpu_isa`` and ``cpu_vendor`` from the text of ``/proc/cpuinfo`` (None for what it does not say).

    On x86 the ISA is the best of avx512f, avx2, avx and sse4_2 in the first ``flags`` line; elsewhere it is the
    architecture. The vendor is the first ``vendor_id`` (x86: GenuineIntel, AuthenticAMD) or, on ARM, ``CPU
    implementer``.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    vendor = fields.get("vendor_id") or fields.get("CPU implementer") or None
    if machine not in ("x86_64", "AMD64", "i686"):
        return {"cpu_isa": machine or None, "cpu_vendor": vendor}
    flags = fields.get("flags", "").split()
    return {"cpu_isa": next((isa for isa in _X86_ISAS if isa in flags), None), "cpu_vendor": vendor}


def _drjit_llvm_version() -> str | None:
    try:
        import drjit as dr

        version = dr.detail.llvm_version()
    except Exception:  # noqa: BLE001 - no Dr.Jit or no LLVM backend: unknown
        return None
    return ".".join(str(v) for v in version) if version and min(version) >= 0 else None


def _drjit_cuda() -> tuple[str | None, str | None]:
    """(compute capability "8.6", CUDA version "12.4") of Dr.Jit's CUDA device, (None, None) when unavailable."""
    try:
        import drjit as dr

        cc = int(dr.detail.cuda_compute_capability())
        cuda = tuple(dr.detail.cuda_version())
    except Exception:  # noqa: BLE001 - no CUDA backend initialised: unknown
        return None, None
    return f"{cc // 10}.{cc % 10}", ".".join(str(v) for v in cuda)


def _nvidia_smi(*args: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def _first_visible_gpu() -> str:
    """The ``nvidia-smi -i`` selector of the first device CUDA sees (index or UUID from CUDA_VISIBLE_DEVICES)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


def _nvidia_smi_query() -> dict[str, str]:
    fields = ("name", "driver_version", "compute_cap")
    out = _nvidia_smi("-i", _first_visible_gpu(), f"--query-gpu={','.join(fields)}", "--format=csv,noheader")
    if not out or not out.strip():
        return {}
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")]
    return {k: v for k, v in zip(fields, values, strict=False) if v and not v.startswith("[")}


def _nvidia_smi_cuda_version() -> str | None:
    """The "CUDA Version: X.Y" of nvidia-smi's banner (what the driver supports)."""
    out = _nvidia_smi() or ""
    marker = "CUDA Version:"
    if marker not in out:
        return None
    return out.split(marker, 1)[1].split()[0] or None
