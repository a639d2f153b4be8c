"""Score completions with named rewards: each reward's total and, for a combination, each component.

Column names: a reward's total under the name given on the command line (``default``, ``stepwise``,
``my_pkg.rewards:my_fn``), and each term of a combination as ``<name>.<term>`` (``default.format``).
Ground truth reaches the rewards as columns by name, as in training: ``answer`` (= ``task_main``) and every
integer field of the view's gt.json (``task2`` ... ``task9``, ``num_hidden_blocks`` ...), None where absent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reward.errors import error_counts, reset_errors
from reward.registry import Combination, RewardFn, components_of, get_reward
from spatialiq_train.core.dataset import GT_INT_FIELDS
from spatialiq_train.core.errors import UserError

COLUMN_FIELDS: tuple[str, ...] = GT_INT_FIELDS
"""Ground-truth fields passed to every reward as columns (besides ``answer``)."""


def parse_reward_item(item: str, option: str = "--rewards") -> tuple[str, dict[str, Any]]:
    """``NAME[:KEY=VALUE]...`` -> (name, parameters): the parameters go to a reward factory, each value read as YAML
    (``overlong:max_len=2048:cache=512`` -> ``("overlong", {"max_len": 2048, "cache": 512})``). A dotted path keeps
    its own colon (``my_pkg.rewards:my_fn``); every part after the first ``KEY=VALUE`` must be one too."""
    import yaml

    parts = item.split(":")
    first = next((i for i, part in enumerate(parts) if "=" in part), len(parts))
    name, pairs = ":".join(parts[:first]), parts[first:]
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"{option}: {item!r}: parameter {pair!r} is not KEY=VALUE (write NAME:KEY=VALUE:KEY=VALUE, "
                            "e.g. overlong:max_len=2048:cache=512)")
        if key.strip() in params:
            raise UserError(f"{option}: {item!r}: parameter {key.strip()!r} is given twice")
        try:
            params[key.strip()] = yaml.safe_load(value.strip())
        except yaml.YAMLError:
            raise UserError(f"{option}: {item!r}: value {value!r} of {key.strip()!r} is not a YAML scalar") from None
    if not name:
        raise UserError(f"{option}: {item!r} has parameters but no reward name")
    return name, params


def parse_reward_list(text: str, option: str = "--rewards") -> list[tuple[str, RewardFn]]:
    """``default,stepwise,my_pkg.rewards:my_fn,overlong:max_len=2048:cache=512`` -> [(name, reward)], each named as
    written; a UserError names an unknown or repeated one, or bad parameters (:func:`parse_reward_item`)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"{option} {text!r}: give at least one reward name, e.g. {option} default,stepwise")
    out: list[tuple[str, RewardFn]] = []
    for item in names:
        if any(item == n for n, _ in out):
            raise UserError(f"{option}: reward {item!r} is named twice")
        name, params = parse_reward_item(item, option)
        try:
            out.append((item, get_reward(name, **params)))
        except ValueError as exc:
            raise UserError(f"{option}: {exc}") from None
    return out


def column_names(rewards: Sequence[tuple[str, RewardFn]]) -> list[str]:
    """Every output column, in order: each reward's total, then its components (combinations only)."""
    out: list[str] = []
    for name, fn in rewards:
        out.append(name)
        if isinstance(fn, Combination):
            out += [f"{name}.{term}" for term, _, _ in fn.parts]
    return out


def gt_columns(gts: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The reward columns of a batch whose i-th completion belongs to a view with ground truth ``gts[i]``."""
    columns = {f: [gt.get(f) for gt in gts] for f in COLUMN_FIELDS}
    columns["answer"] = columns["task_main"]
    return columns


def score_batch(rewards: Sequence[tuple[str, RewardFn]], texts: list[str], columns: Mapping[str, list[Any]]
                ) -> dict[str, np.ndarray]:
    """Every column of :func:`column_names` for one batch of completions (a missing column raises ValueError)."""
    out: dict[str, np.ndarray] = {}
    for name, fn in rewards:
        comps, total = components_of(fn, texts, **columns)
        out[name] = np.asarray(total, dtype=np.float64)
        if isinstance(fn, Combination):
            for term, values in comps.items():
                out[f"{name}.{term}"] = np.asarray(values, dtype=np.float64)
    return out


def score_all(rewards: Sequence[tuple[str, RewardFn]], texts: list[str], gts: Sequence[Mapping[str, Any]],
              chunk: int = 4096) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """:func:`score_batch` over ``texts`` in chunks, and the per-reward error counts of the whole pass."""
    reset_errors()
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, len(texts), chunk):
        stop = start + chunk
        try:
            parts.append(score_batch(rewards, texts[start:stop], gt_columns(gts[start:stop])))
        except ValueError as exc:  # a reward needs a column the data does not have: a configuration error
            raise UserError(f"--rewards: {exc}") from None
    names = column_names(rewards)
    merged = {n: np.concatenate([p[n] for p in parts]) if parts else np.zeros(0) for n in names}
    return merged, error_counts()
