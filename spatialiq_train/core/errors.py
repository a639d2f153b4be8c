"""The one user-error type every command renders the same way.

Bad input (a missing file, a malformed row, a wrong key or argument) raises :class:`UserError`, or
one of its subclasses, with a message that names the file, row, key or argument and says what would
be right. The CLI prints it as one ``error: ...`` line and exits with :attr:`UserError.exit_code`
(:data:`EXIT_USAGE` for bad input, :data:`EXIT_FAILURE` for a job that ran and failed); the traceback
is shown only under ``--verbose``. Library code raises it; only the CLI renders it
(:func:`describe_error` is the one place that turns an exception into that line and code).
"""

from __future__ import annotations

import errno
import os

EXIT_USAGE = 2
"""Exit status for bad input: a wrong argument, file, row or key (the same code click uses for usage errors)."""
EXIT_FAILURE = 1
"""Exit status for a job that ran and failed for a reason other than its input (a render or training failure)."""


class UserError(Exception):
    """Bad input, explained: the message names where (file, row, key, argument) and what would be right."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InputError(UserError, ValueError):
    """Bad input that is also a ValueError, for callers that catch ValueError (malformed files, rows, values)."""


class JobFailure(UserError):
    """A job that ran and failed (a render, a generation or training step): exit status 1, not a usage error."""

    exit_code = EXIT_FAILURE


# --- OSError as a sentence --------------------------------------------------------------------------------------

_OS_SENTENCES: dict[int, tuple[str, int]] = {
    errno.ENOENT: ("{path} does not exist", EXIT_USAGE),
    errno.EEXIST: ("{path} already exists (remove it or choose another path)", EXIT_USAGE),
    errno.EISDIR: ("{path} is a directory, where a file was expected", EXIT_USAGE),
    errno.ENOTDIR: ("{path} is not a directory (a part of the path is a file)", EXIT_USAGE),
    errno.ENOTEMPTY: ("{path} is a directory that is not empty", EXIT_USAGE),
    errno.EACCES: ("permission denied for {path} (check its owner and mode)", EXIT_USAGE),
    errno.EPERM: ("the operation on {path} is not permitted", EXIT_USAGE),
    errno.ENAMETOOLONG: ("{path}: the file name is too long", EXIT_USAGE),
    errno.ELOOP: ("{path}: too many levels of symbolic links (a link cycle?)", EXIT_USAGE),
    errno.EROFS: ("{path} is on a read-only file system; write somewhere else", EXIT_USAGE),
    errno.EXDEV: ("{path} cannot be moved across file systems", EXIT_USAGE),
    errno.ENOSPC: ("no space left on the device while writing {path}", EXIT_FAILURE),
    errno.EDQUOT: ("disk quota exceeded while writing {path}", EXIT_FAILURE),
    errno.EIO: ("input/output error on {path} (a failing disk or network file system?)", EXIT_FAILURE),
    errno.EMFILE: ("too many open files while opening {path} (raise `ulimit -n`)", EXIT_FAILURE),
    errno.ENOMEM: ("out of memory while working on {path}", EXIT_FAILURE),
}


def _os_error_info(exc: OSError) -> tuple[str, int]:
    known = _OS_SENTENCES.get(exc.errno) if exc.errno is not None else None
    if exc.filename is None:
        # Raised by our own code with a message (FileNotFoundError("...")) or by the OS without a path.
        if exc.errno is None or exc.strerror is None:
            return str(exc), EXIT_USAGE if isinstance(exc, FileNotFoundError) else EXIT_FAILURE
        text = exc.strerror[:1].lower() + exc.strerror[1:]
        return text, known[1] if known else EXIT_FAILURE
    path = os.fsdecode(exc.filename)
    if known is None:
        reason = (exc.strerror or type(exc).__name__).lower()
        sentence, code = f"{path}: {reason}", EXIT_FAILURE
    else:
        sentence, code = known[0].format(path=path), known[1]
    if exc.filename2 is not None:  # rename, link: the reason may concern either path
        reason = (exc.strerror or type(exc).__name__).lower()
        sentence = f"cannot move {path} to {os.fsdecode(exc.filename2)}: {reason}"
    return sentence, code


def describe_os_error(exc: OSError) -> str:
    """An OSError as a sentence: ``[Errno 17] File exists: 'afile'`` -> ``afile already exists (remove ...)``."""
    return _os_error_info(exc)[0]


def describe_error(exc: BaseException) -> tuple[str, int] | None:
    """The ``error: ...`` line's text and the exit code for ``exc``; None for an error the CLI does not render.

    UserError: its message and code. OSError: :func:`describe_os_error`, with exit 2 for path mistakes and 1
    for a job that ran out of disk, memory or files. Any other ValueError or KeyError (a check a library did
    without a UserError type): bad input, exit 2, with a pointer to ``--verbose`` since the message was not
    written for the command line. Everything else (a bug) keeps its traceback.
    """
    if isinstance(exc, UserError):
        return exc.message, exc.exit_code
    if isinstance(exc, OSError):
        return _os_error_info(exc)
    if isinstance(exc, (ValueError, KeyError)):
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        return f"{message} (rerun with --verbose for the traceback)", EXIT_USAGE
    return None
