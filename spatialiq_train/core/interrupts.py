"""SIGINT as an interrupt, however the process was started.

A shell starts a background job (``cmd &`` in a script, ``nohup``, many batch wrappers) with SIGINT *ignored*, and
Python then installs no handler of its own: a SIGINT sent to the job's process group does nothing to Python, while
a library that catches SIGINT itself (Mitsuba winds a render down and returns a partial image) still reacts. A
command that must stop cleanly on SIGINT sets the disposition it needs explicitly (:func:`interruptible`): SIGINT
raises KeyboardInterrupt, which the command group turns into "interrupted: ..." and exit 130.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def raise_on_sigint() -> None:
    """SIGINT raises KeyboardInterrupt in this process (Python's default handler), whatever was inherited; only the
    main thread can set a handler, so elsewhere nothing changes."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def interruptible() -> Iterator[None]:
    """:func:`raise_on_sigint` for the block, the previous disposition restored after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    raise_on_sigint()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
