"""One writer per output: a lock file beside the output a command writes (docs/trust.md).

``with output_lock(path, "eval sample"):`` holds ``<parent>/.<name>.lock`` for the duration, ``<parent>/<name>``
being the output's resolved path (symbolic links, ``..`` and relative spellings all name one lock): an exclusive
``flock`` on that file, which the kernel drops when the holder exits however it exits, plus a JSON line naming the
holder (pid, host, command, start time). A second writer is refused with a :class:`UserError` naming the holder's pid
and command; so is a writer of an output inside a locked folder (a phase folder of a running run) and of a folder
holding a locked output. A lock file whose holder is gone (the flock is free but the file still names a pid: a killed
run) is taken over, with a note naming that pid. The file is removed when the lock is released, also on SIGTERM
(a Slurm cancel or time limit): while a lock is held, SIGTERM ends the command as an exception would (exit 143).
Where the file system refuses flock (Lustre mounted without ``flock``), the pid the file names decides: a live one on
this host (or any on another host) holds it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from spatialiq_train.core.errors import UserError


class OutputLockedError(UserError):
    """Another live process writes the same output; the message names its pid and command."""


def resolved(output: str | Path) -> Path:
    """The output's one name: absolute, symbolic links and ``..`` resolved (a part that does not exist yet is kept
    as written)."""
    return Path(os.path.realpath(os.path.abspath(output)))


def lock_path(output: str | Path) -> Path:
    """``<parent>/.<name>.lock`` of the resolved output: beside it, never inside it (a folder's content stays the
    command's); every spelling of one output names the same lock."""
    output = resolved(output)
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


def held_by(lock_file: Path) -> str | None:
    """The holder of ``lock_file`` (pid and command) while a live process holds it; None when it is free or absent
    (a lock file left by a killed run holds nothing)."""
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            raw = _read(fd)
            if exc.errno in _NO_FLOCK:
                return _holder_text(raw)[0] if _alive_holder(raw) else None
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return _holder_text(raw)[0]
            raise
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _lock_of(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.lock"


def nested_holder(output: str | Path) -> tuple[Path, Path, str] | None:
    """(the locked folder, its lock file, the holder) when a live process holds a folder that holds ``output`` (a
    run folder around a phase folder), or an output inside ``output`` (a phase folder of the run folder asked for);
    None when neither. One writer per output covers what is inside it."""
    full = resolved(output)
    for folder in full.parents:
        if folder.parent != folder and (holder := held_by(_lock_of(folder))) is not None:
            return folder, _lock_of(folder), holder
    if full.is_dir():
        for root, _dirs, files in os.walk(full):
            for name in files:
                if name.startswith(".") and name.endswith(".lock") and len(name) > 6:
                    lock_file = Path(root) / name
                    if (holder := held_by(lock_file)) is not None:
                        return Path(root) / name[1:-5], lock_file, holder
    return None


class Terminated(SystemExit):
    """SIGTERM while an output lock is held: the command unwinds (its lock is released) and exits 143."""


@contextlib.contextmanager
def _sigterm_unwinds(output: str | Path) -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (exit 143) so that the lock is released as at a normal
    end; only in the main thread, and only where SIGTERM had its default action (a handler someone installed, or an
    ignored SIGTERM, is left as it is)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        print(f"terminated: SIGTERM received; the lock of {output} is released (what was written is complete or "
              "absent: rerun the same command to resume)", file=sys.stderr)
        raise Terminated(128 + signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is terminate:  # a library (Ray) that installed its own keeps it
            signal.signal(signal.SIGTERM, previous)


def _refuse_nested(output: str | Path, what: str, fd: int, path: Path) -> None:
    """Release the lock just taken and refuse, when a locked folder holds ``output`` or ``output`` holds one."""
    found = nested_holder(output)
    if found is None:
        return
    folder, lock_file, holder = found
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.close(fd)
    where = "is inside" if folder in resolved(output).parents else "holds"
    raise OutputLockedError(
        f"{what} {output} {where} {folder}, which is being written by {holder}; one writer per output, and a "
        f"folder's writer owns what is inside it: wait for it to finish, or write elsewhere (lock file {lock_file})")


@contextlib.contextmanager
def output_lock(output: str | Path, what: str, note: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold the lock of ``output`` (a file or folder) while the block runs; ``what`` names the option (``--out``).

    Refused (:class:`OutputLockedError`) while another process holds it, a folder holding it or an output inside
    it; a stale lock is taken over and ``note`` (default: a line on stderr) says whose it was. SIGTERM releases it
    as a normal end does (:func:`_sigterm_unwinds`)."""
    path = lock_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(output, what, path)
    _refuse_nested(output, what, fd, path)
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
        with _sigterm_unwinds(output):
            yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)


def _acquire(output: str | Path, what: str, path: Path) -> int:
    """The open, flocked lock file at ``path`` (a stale one included); refused while a live process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raw = _read(fd)
            if exc.errno in _NO_FLOCK and not _alive_holder(raw):  # a file system without flock: the pid decides
                return fd
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
            return fd
        os.close(fd)
