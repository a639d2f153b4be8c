"""One writer per output: a lock file beside the output a command writes (docs/trust.md).

``with output_lock(path, "eval sample"):`` holds ``<parent>/.<name>.lock`` for the duration: an exclusive
``flock`` on that file, which the kernel drops when the holder exits however it exits, plus a JSON line naming the
holder (pid, host, command, start time). A second writer is refused with a :class:`UserError` naming the holder's pid
and command. A lock file whose holder is gone (the flock is free but the file still names a pid: a killed run) is
taken over, with a note naming that pid. The file is removed when the lock is released. Where the file system
refuses flock (Lustre mounted without ``flock``), the pid the file names decides: a live one on this host (or any on
another host) holds it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from spatialiq_train.core.errors import UserError


class OutputLockedError(UserError):
    """Another live process writes the same output; the message names its pid and command."""


def lock_path(output: str | Path) -> Path:
    """``<parent>/.<name>.lock``: beside the output, never inside it (a folder's content stays the command's)."""
    output = Path(os.path.abspath(output))
    return output.parent / f".{output.name}.lock"


def _holder_text(raw: str) -> tuple[str, dict]:
    try:
        info = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        info = {}
    if not isinstance(info, dict):
        info = {}
    text = f"pid {info.get('pid', '?')}"
    if info.get("host") and info.get("host") != socket.gethostname():
        text += f" on {info['host']}"
    text += f" ({info.get('command') or 'unknown command'}"
    if info.get("started"):
        text += f", since {info['started']}"
    return text + ")", info


_NO_FLOCK = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)
"""flock refused by the file system (Lustre without the flock mount option): the holder's pid is checked instead."""


def _alive_holder(raw: str) -> bool:
    """True when the lock file names a live process on this host (or a process on another host: not checkable)."""
    _, info = _holder_text(raw)
    pid = info.get("pid")
    if not isinstance(pid, int):
        return False
    if info.get("host") not in (None, socket.gethostname()):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while block := os.read(fd, 4096):
        chunks.append(block)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _command_line() -> str:
    argv = [os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]]
    return " ".join(argv)[:300]


@contextlib.contextmanager
def output_lock(output: str | Path, what: str, note: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold the lock of ``output`` (a file or folder) while the block runs; ``what`` names the option (``--out``).

    Refused (:class:`OutputLockedError`) while another process holds it; a stale lock is taken over and ``note``
    (default: a line on stderr) says whose it was."""
    path = lock_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raw = _read(fd)
            if exc.errno in _NO_FLOCK and not _alive_holder(raw):  # a file system without flock: the pid decides
                break
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES, *_NO_FLOCK):
                raise
            holder, _ = _holder_text(raw)
            raise OutputLockedError(
                f"{what} {output} is being written by {holder}; one writer per output: wait for it to finish, or "
                f"write elsewhere (lock file {path})") from None
        # the file we locked must still be the one at `path` (a releasing holder unlinks it)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        raw = _read(fd)
        if raw.strip():
            holder, info = _holder_text(raw)
            (note or (lambda text: print(f"note: {text}", file=sys.stderr)))(
                f"{what} {output}: taking over the lock of {holder}, which is no longer running (it was killed or "
                "crashed: its output is resumed or replaced as this command does)")
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": _command_line(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)
