"""A hook on NeMo-RL v0.7.0's rollouts: ``grpo.run_multi_turn_rollout`` with a function called on each result.

``grpo_train`` and ``validate`` call the name ``run_multi_turn_rollout`` from ``nemo_rl.algorithms.grpo``'s globals,
so replacing it there for the duration of a block reaches every synchronous rollout (async GRPO is refused before
Ray starts: ``grouping.check_supported``). Hooks nest: each wraps what was installed before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Hook = Callable[[Any, tuple[Any, ...], dict[str, Any]], None]
"""``hook(batch, args, kwargs)``: the rollout's output batch (changed in place, if at all) and the call's arguments."""


@contextmanager
def after_each_rollout(hook: Hook) -> Iterator[None]:
    """``grpo.run_multi_turn_rollout`` followed by ``hook`` on its batch, for the block."""
    import nemo_rl.algorithms.grpo as grpo

    real = grpo.run_multi_turn_rollout

    def run_multi_turn_rollout(*args: Any, **kwargs: Any) -> Any:
        batch, metrics = real(*args, **kwargs)
        hook(batch, args, kwargs)
        return batch, metrics

    grpo.run_multi_turn_rollout = run_multi_turn_rollout
    try:
        yield
    finally:
        grpo.run_multi_turn_rollout = real
