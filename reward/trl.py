"""TRL adapter: any registered reward as a TRL reward function.

TRL calls ``fn(prompts=..., completions=..., completion_ids=..., **columns, trainer_state=...,
log_extra=..., log_metric=...)`` and logs the result as ``rewards/<fn.__name__>``. Completions
are strings, or (conversational datasets) lists of messages whose last assistant turn is the
completion. Ground truth comes from the dataset columns TRL forwards (``answer``, ``task2`` ...).

The adapter is a small picklable class holding only the reward *spec*, so it survives TRL's and
accelerate's pickling; the reward itself is resolved from the registry on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reward.errors import error_counts
from reward.registry import (
    Combination,
    RewardFn,
    RewardSpec,
    WeightSpec,
    combination_weights,
    components_of,
    resolve_reward,
    weight_and_params,
)

_TRL_SIDE_CHANNELS = ("trainer_state", "log_extra", "log_metric", "environments", "prompts")


def completion_text(completion: Any) -> Any:
    """The completion string: itself, or the last assistant message's text (content str or text parts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        for message in reversed(completion):
            if isinstance(message, Mapping) and message.get("role") == "assistant":
                return content_text(message.get("content"))
    return completion  # not a completion: the reward counts it as an error and scores 0


def content_text(content: Any) -> Any:
    """A message's text: a string, or the text items of a multimodal content list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(item.get("text", "")) for item in content if isinstance(item, Mapping) and item.get("type") == "text"
        )
    return content


def _spec_name(spec: RewardSpec) -> str:
    if isinstance(spec, str):
        return spec.replace(":", ".")
    if isinstance(spec, Mapping):
        return "+".join(str(k) for k in spec)
    return str(getattr(spec, "__name__", type(spec).__name__))


class TrlReward:
    """A TRL reward function for one reward spec (name, weight mapping or callable)."""

    def __init__(self, spec: RewardSpec, name: str | None = None) -> None:
        self.spec = spec
        self.__name__ = name or _spec_name(spec)
        self._fn: RewardFn | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "__name__": self.__name__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.spec, self.__name__, self._fn = state["spec"], state["__name__"], None

    @property
    def fn(self) -> RewardFn:
        if self._fn is None:
            self._fn = resolve_reward(self.spec)
        return self._fn

    def __call__(
        self, prompts: list[Any] | None = None, completions: list[Any] | None = None, **kwargs: Any
    ) -> list[float]:
        log_metric = kwargs.get("log_metric")
        columns = {k: v for k, v in kwargs.items() if k not in _TRL_SIDE_CHANNELS}
        texts = [completion_text(c) for c in (completions or [])]
        before = sum(error_counts().values())
        fn = self.fn
        if isinstance(fn, Combination) and callable(log_metric):
            comps, total = components_of(fn, texts, **columns)
            for name, values in comps.items():
                if values:
                    log_metric(f"reward/{self.__name__}/{name}", sum(values) / len(values))
        else:
            total = list(fn(texts, **columns))
        if callable(log_metric):
            log_metric(f"reward/{self.__name__}/errors", float(sum(error_counts().values()) - before))
        return total


def make_trl_reward(spec: RewardSpec, name: str | None = None) -> TrlReward:
    """One TRL reward function for ``spec``; TRL logs it as ``rewards/<name>`` (default: the spec's name)."""
    reward = TrlReward(spec, name)
    reward.fn  # noqa: B018 - resolve now so a bad spec fails at setup, not at the first batch
    return reward


def _expand(weights: RewardSpec, scale: float, out: dict[str, tuple[float, RewardSpec]]) -> None:
    if isinstance(weights, str):
        named = combination_weights(weights)
        if named is not None:
            _expand(named, scale, out)
            return
        weights = {weights: 1.0}
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError(f"reward weights must be a combination name or a mapping name -> weight, got {weights!r}")
    for term, entry in weights.items():
        weight, params = weight_and_params(term, entry)
        named = combination_weights(term)
        if named is not None and not params:
            _expand(named, scale * weight, out)
            continue
        spec: RewardSpec = {term: {"weight": 1.0, **params}} if params else term
        if term in out and out[term][1] != spec:
            raise ValueError(f"reward weights name {term!r} twice with different settings")
        out[term] = (out.get(term, (0.0, spec))[0] + scale * weight, spec)


def make_trl_reward_funcs(weights: Mapping[str, WeightSpec] | str) -> tuple[list[TrlReward], list[float]]:
    """``(reward_funcs, reward_weights)`` for TRL's multi-reward config, one function per term.

    ``make_trl_reward_funcs("default")`` gives ``[format, integer_distance]`` with ``[0.1, 0.9]``,
    so TRL logs ``rewards/format`` and ``rewards/integer_distance`` separately.
    """
    terms: dict[str, tuple[float, RewardSpec]] = {}
    _expand(weights, 1.0, terms)
    funcs = [make_trl_reward(spec, name=term) for term, (_, spec) in terms.items()]
    return funcs, [w for w, _ in terms.values()]
