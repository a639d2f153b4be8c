"""The advantage estimator's test cases, shared by the main suite's parity tests (tests/test_advantage_parity.py) and
the NeMo-RL stage's (tests/engines/nemo/test_grouping.py): every baseline x std and the degenerate views."""

from __future__ import annotations

import itertools

from spatialiq_train.core.advantages import BASELINES, STDS

COMBINATIONS = list(itertools.product(BASELINES, STDS))
# (name, group size, rewards, valid flags or None)
CASES = [
    ("one correct of 8", 8, [1, 0, 0, 0, 0, 0, 0, 0], None),
    ("all equal", 4, [0.55] * 4 + [0.0] * 4, None),
    ("spread", 4, [0.1, 0.82, 1.0, 0.46, 0.3, 0.1, 0.3, 0.2], None),
    ("G = 2", 2, [1.0, 0.0, 0.3, 0.3, 0.9, 0.2], None),
    ("one valid sample", 4, [1.0, 0.2, 0.7, 0.0, 0.4, 0.9, 0.1, 0.6], [1, 0, 0, 0, 1, 1, 1, 1]),
    ("masked samples", 4, [1.0, 0.2, 0.7, 0.0, 0.4, 0.9, 0.1, 0.6], [1, 1, 0, 1, 0, 1, 1, 1]),
    ("shaped (overlong penalty)", 4, [1.0, 0.1 - 0.25, 0.1, 0.1 - 1.0], None),
]
