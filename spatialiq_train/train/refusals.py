"""What a training command refuses before it works, and what a refused command leaves: nothing (docs/trust.md).

:func:`check_before_work` turns settings this machine cannot run into one line naming the key and a fix that works
here, before a model is built. :func:`nothing_left_if_refused` removes a run folder the command created when it
ends before training wrote anything (a refusal found late, a bad value, Ctrl-C during setup), so that the corrected
command starts clean instead of meeting a stray ``base/`` or a recipe record of the refused settings.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from spatialiq_train.core.errors import UserError
from spatialiq_train.core.recipe_model import Recipe


def check_before_work(recipe: Recipe) -> None:
    """A :class:`UserError` for settings this machine cannot run, before a model is built: ``run.device=cuda``
    without CUDA, ``model.liger_kernel: true`` on the CPU (its kernels are Triton GPU kernels, installed or not) or
    on a GPU without ``liger_kernel`` installed (`core.resolve.check_execution`, the decision the plan makes)."""
    from spatialiq_train.core.resolve import check_execution
    from spatialiq_train.train.plan import hardware

    try:
        check_execution(recipe, hardware())
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _trained(run_dir: Path) -> bool:
    """True when training wrote into ``run_dir`` (or a phase folder in it): a checkpoint, a metrics row, a final
    policy."""
    for folder in (run_dir, *(p for p in run_dir.iterdir() if p.is_dir())):
        if any(folder.glob("checkpoint-*")) or (folder / "final").is_dir():
            return True
        metrics = folder / "metrics.jsonl"
        if metrics.is_file() and metrics.stat().st_size > 0:
            return True
    return False


@contextlib.contextmanager
def nothing_left_if_refused(run_dir: Path) -> Iterator[None]:
    """Within the block, a run folder that did not exist before is removed again when the block fails before
    training wrote anything into it (:func:`_trained`); a folder that existed is left as it is."""
    existed = run_dir.exists()
    try:
        yield
    except BaseException:
        if not existed and run_dir.is_dir() and not _trained(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
