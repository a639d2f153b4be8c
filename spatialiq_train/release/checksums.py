"""``SHA256SUMS`` over every file of a release folder (``sha256sum -c`` compatible), written and verified."""

from __future__ import annotations

from pathlib import Path

from spatialiq_train.core.io import atomic_write_text, sha256_file

SUMS_FILE = "SHA256SUMS"


def release_files(root: Path) -> list[Path]:
    """Every regular file under ``root`` but SHA256SUMS itself, in sorted relative-path order."""
    return sorted((p for p in root.rglob("*") if p.is_file() and p.name != SUMS_FILE),
                  key=lambda p: p.relative_to(root).as_posix())


def write_sums(root: Path) -> Path:
    """Write ``root/SHA256SUMS``: one ``<hex>  <relative path>`` line per file."""
    lines = [f"{sha256_file(p)}  {p.relative_to(root).as_posix()}\n" for p in release_files(root)]
    out = root / SUMS_FILE
    atomic_write_text(out, "".join(lines))
    return out


def verify_sums(root: Path) -> list[str]:
    """Problems found re-checking ``root/SHA256SUMS`` (empty when every file matches and none is unlisted)."""
    sums = root / SUMS_FILE
    if not sums.is_file():
        return [f"{sums} is missing: not a release folder written by spatialiq release"]
    listed: dict[str, str] = {}
    problems = []
    for number, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel:
            problems.append(f"{sums}:{number}: expected '<64 hex digits>  <path>', got {line[:80]!r}")
            continue
        listed[rel] = digest
    for rel, digest in listed.items():
        path = (root / rel).resolve()
        if not path.is_relative_to(root.resolve()):
            problems.append(f"{sums}: {rel!r} points outside the release folder")
        elif not path.is_file():
            problems.append(f"{rel}: listed in {SUMS_FILE} but missing")
        elif sha256_file(path) != digest:
            problems.append(f"{rel}: sha256 differs from {SUMS_FILE} (the file changed after release)")
    for p in release_files(root):
        rel = p.relative_to(root).as_posix()
        if rel not in listed:
            problems.append(f"{rel}: present but not listed in {SUMS_FILE}")
    return problems
