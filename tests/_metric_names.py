"""The metric-name check the tests apply to every logged name.

The table is :data:`spatialiq_train.core.metrics.METRICS`.
"""

from __future__ import annotations

from spatialiq_train.core.metrics import METRICS, REWARD_STATS


def is_known(name: str) -> bool:
    """True when ``name`` is in :data:`METRICS`, a per-reward name matching ``reward/<name>/<stat>`` included."""
    if name in METRICS:
        return True
    parts = name.split("/")
    return len(parts) == 3 and parts[0] == "reward" and bool(parts[1]) and parts[2] in REWARD_STATS
