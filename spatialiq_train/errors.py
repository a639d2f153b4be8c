"""The one user-error type every command renders the same way.

Bad input (a missing file, a malformed row, a wrong key or argument) raises :class:`UserError`, or
one of its subclasses, with a message that names the file, row, key or argument and says what would
be right. The CLI prints it as one ``error: ...`` line and exits with :attr:`UserError.exit_code`;
the traceback is shown only under ``--verbose``. Library code raises it; only the CLI renders it.
"""

from __future__ import annotations

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
