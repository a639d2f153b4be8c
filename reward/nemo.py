"""The pure core a NeMo-RL environment's ``step`` calls (no Ray, no nemo_rl import).

NeMo-RL hands ``step`` the batch's message logs (each a list of ``{"role", "content"}`` dicts,
assistant content decoded to text) and each sample's ``extra_env_info`` as ``metadata``. The
last assistant message is the completion; metadata dicts carry ``answer`` and the ground-truth
fields (``task2``..``task9``, ``num_hidden_blocks``, ``task_main``), which become the reward's
columns by name. The Ray actor wrapping this belongs to the NeMo-RL backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reward.registry import RewardSpec, components_of, resolve_reward
from reward.trl import completion_text


def metadata_columns(metadata: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Per-sample metadata dicts as columns; a key missing from some samples gives None there.

    Every sample must carry ``answer``: its absence is a data-processor bug, raised at once.
    """
    keys: dict[str, None] = {}
    for i, meta in enumerate(metadata):
        if not isinstance(meta, Mapping):
            raise ValueError(f"metadata[{i}] must be a dict with 'answer' and ground-truth fields, got {meta!r}")
        if "answer" not in meta:
            raise ValueError(f"metadata[{i}] has no 'answer' (keys: {sorted(meta)}); put the ground truth there")
        keys.update(dict.fromkeys(meta))
    return {k: [meta.get(k) for meta in metadata] for k in keys}


def _completions(message_logs: Sequence[Any], metadata: Sequence[Any]) -> list[Any]:
    if len(message_logs) != len(metadata):
        raise ValueError(f"{len(message_logs)} message logs but {len(metadata)} metadata entries")
    return [completion_text(log) if isinstance(log, list) else log for log in message_logs]


def score_message_logs_components(
    message_logs: Sequence[Any], metadata: Sequence[Mapping[str, Any]], reward: RewardSpec = "default"
) -> dict[str, list[float]]:
    """Each term of ``reward`` (unweighted) plus ``total``, for a multi-reward (``reward/<name>``) return."""
    texts = _completions(message_logs, metadata)
    comps, total = components_of(resolve_reward(reward), texts, **metadata_columns(metadata))
    return {**comps, "total": total}
