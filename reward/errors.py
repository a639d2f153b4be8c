"""Counting, not hiding, the errors raised inside reward functions.

A reward never raises on model output: a sample whose scoring fails gets 0 and one count here,
under the reward's name. Trainers read :func:`error_counts` (the TRL adapter logs the per-batch
count as ``reward/<name>/errors``), and the first failure of each kind is logged as a warning.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_seen: set[tuple[str, str]] = set()


def record_error(reward_name: str, exc: BaseException) -> None:
    """Count one failed sample for ``reward_name``; warn the first time each exception type appears."""
    key = (reward_name, type(exc).__name__)
    with _lock:
        _counts[reward_name] += 1
        first = key not in _seen
        _seen.add(key)
    if first:
        logger.warning("reward %r scored a sample 0 after %s: %s", reward_name, type(exc).__name__, exc)
    else:
        logger.debug("reward %r scored a sample 0 after %s: %s", reward_name, type(exc).__name__, exc)


def error_counts() -> dict[str, int]:
    """Failed samples per reward name since the last :func:`reset_errors`."""
    with _lock:
        return dict(_counts)


def total_errors() -> int:
    """All failed samples, over every reward, since the last :func:`reset_errors`."""
    with _lock:
        return sum(_counts.values())


def reset_errors() -> None:
    """Forget every count (tests and per-batch logging call this)."""
    with _lock:
        _counts.clear()
        _seen.clear()
