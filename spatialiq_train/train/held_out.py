"""The validation split is held out: it shares no structure with a split the run trains on.

The phase runner (`train.phase`) checks it before a phase validates and the two-phase run (`train.run`) before
anything trains; it is a module of its own so that the phase runner imports nothing that imports it back
(`train.preflight` imports the RL phase, which imports the phase runner).
"""

from __future__ import annotations

from collections.abc import Sequence


def check_validation_held_out(traces_dir: str, eval_split: str | None, training_splits: Sequence[str]) -> None:
    """When a phase validates on `eval_split` (None: no phase validates), it shares no structure with
    `training_splits` (the trace files of the phases about to train); else a `splits.HeldOutError` naming the files
    and the count of shared structures."""
    from spatialiq_train.core.splits import check_held_out

    if eval_split is not None:
        check_held_out(traces_dir, eval_split, training_splits)
