"""The validation split is held out: it shares no structure with a split the run trains on, in the run's own trace
folder or in any replay source (``data.sources``).

The phase runner (`train.phase`) checks it before a phase validates and the two-phase run (`train.run`) before
anything trains; it is a module of its own so that the phase runner imports nothing that imports it back
(`train.preflight` imports the RL phase, which imports the phase runner).
"""

from __future__ import annotations

from collections.abc import Sequence


def check_validation_held_out(traces_dir: str, eval_split: str | None, training_splits: Sequence[str],
                              sources: Sequence[str] = ()) -> None:
    """When a phase validates on `eval_split` (None: no phase validates), it shares no structure with
    `training_splits` (the trace files of the phases about to train), in `traces_dir` and, with replay, in every
    source folder (`sources`: the ``data.sources[i].traces_dir`` in order); else a `splits.HeldOutError` naming the
    files (a source by its key) and the shared structures."""
    from spatialiq_train.core.splits import check_held_out, check_sources_held_out

    if eval_split is not None:
        check_held_out(traces_dir, eval_split, training_splits)
        check_sources_held_out(traces_dir, eval_split, training_splits, sources)
