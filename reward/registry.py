"""Named rewards, parametrised reward factories and weighted combinations.

A reward is a plain batched function ``fn(completions, *, answer, **columns) -> list[float]``
(columns arrive by dataset column name). Three kinds of names live in one namespace:

* ``@register("name")`` for a reward function;
* ``@register_factory("name")`` for a factory ``(**params) -> reward`` (e.g. ``overlong``);
* ``register_combination("name", weights)`` for a named weighted sum (``default``).

:func:`get_reward` looks a name up (a dotted ``pkg.module:function`` path is also accepted),
:func:`combine` builds a weighted sum from a recipe mapping, and :func:`resolve_reward` accepts
either form. Duplicate names raise; unknown names raise with the list of valid ones.
:func:`check_reward_names` checks a recipe's ``reward.weights`` names before anything runs (every command that
trains, plans a sweep or writes a NeMo-RL config calls it).

The built-in rewards (``reward.functions``) are registered by the package itself: ``reward/__init__.py`` imports
them, and Python runs it before any module of the package, this one included. The registry imports none of its users.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from spatialiq_train.core.recipes import RecipeError
from spatialiq_train.core.reward_weights import weights_problem

RewardFn = Callable[..., list[float]]
"""``fn(completions: list[str], *, answer: list[int], **columns) -> list[float]``."""

WeightSpec = float | int | Mapping[str, Any]
"""A combination entry: a weight, or ``{"weight": w, **factory_params}``."""

RewardSpec = str | Mapping[str, WeightSpec] | RewardFn
"""What a recipe may name: a registered name or dotted path, a weight mapping, or a callable."""

_DOTTED = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", re.ASCII)

log = logging.getLogger(__name__)


class _Factory(Protocol):
    def __call__(self, **params: Any) -> RewardFn: ...


_REWARDS: dict[str, RewardFn] = {}
_FACTORIES: dict[str, _Factory] = {}
_COMBINATIONS: dict[str, dict[str, WeightSpec]] = {}


@dataclass(frozen=True)
class RewardInfo:
    """One entry of :func:`list_rewards`."""

    name: str
    kind: str
    """``reward``, ``factory`` or ``combination``."""
    summary: str


def _check_new(name: str) -> None:
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"reward name must be a non-empty string without ':', got {name!r}")
    if name in _REWARDS or name in _FACTORIES or name in _COMBINATIONS:
        raise ValueError(f"reward {name!r} is already registered")


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: register a batched reward function under ``name`` (raises on duplicates)."""
    _check_new(name)

    def deco(fn: RewardFn) -> RewardFn:
        _check_new(name)
        _REWARDS[name] = fn
        return fn

    return deco


def register_factory(name: str) -> Callable[[_Factory], _Factory]:
    """Decorator: register a factory ``(**params) -> reward`` under ``name`` (raises on duplicates)."""
    _check_new(name)

    def deco(factory: _Factory) -> _Factory:
        _check_new(name)
        _FACTORIES[name] = factory
        return factory

    return deco


def register_combination(name: str, weights: Mapping[str, WeightSpec]) -> None:
    """Register a named weighted combination, e.g. ``default`` = 0.1 format + 0.9 integer_distance."""
    _check_new(name)
    _COMBINATIONS[name] = dict(weights)


def valid_names() -> list[str]:
    return sorted([*_REWARDS, *_FACTORIES, *_COMBINATIONS])


def _unknown(name: str) -> ValueError:
    return ValueError(
        f"unknown reward {name!r}; valid: {', '.join(valid_names())} (or a dotted path 'pkg.module:function')"
    )


def _load_dotted(path: str) -> RewardFn:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"reward {path!r}: cannot import module {module_name!r} ({exc})") from None
    except Exception as exc:  # user code: a SyntaxError or any error its import raises is the module's fault
        raise ValueError(f"reward {path!r}: importing module {module_name!r} raised "
                         f"{type(exc).__name__}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"reward {path!r}: module {module_name!r} has no callable {attr!r}")
    # Only functions that a module registered as rewards: a dotted path must not reach arbitrary callables
    # (``os:system`` would run completion text as a shell command).
    if not any(fn is registered for registered in _REWARDS.values()):
        raise ValueError(f"reward {path!r}: {attr!r} is not a registered reward; decorate it with "
                         f"@reward.registry.register('<name>') in {module_name!r} (importing the module registers it)")
    return fn


def get_reward(name: str, **params: Any) -> RewardFn:
    """The reward called ``name``; ``params`` go to a factory (and are refused by anything else)."""
    if name in _FACTORIES:
        try:
            return _FACTORIES[name](**params)
        except TypeError:
            raise ValueError(factory_usage(name, params)) from None
    if params:
        raise ValueError(f"reward {name!r} takes no parameters, got {sorted(params)}")
    if name in _REWARDS:
        return _REWARDS[name]
    if name in _COMBINATIONS:
        return combine(_COMBINATIONS[name], name=name)
    if isinstance(name, str) and _DOTTED.fullmatch(name):
        return _load_dotted(name)
    raise _unknown(name)


def factory_usage(name: str, given: Mapping[str, Any]) -> str:
    """Why factory ``name`` refused ``given`` parameters, the parameters it takes, and how to pass them."""
    expected = list(inspect.signature(_FACTORIES[name]).parameters)
    example = ":".join(f"{key}=N" for key in expected)
    said = ", ".join(sorted(given)) if given else "none"
    return (f"reward factory {name!r} takes the parameters {', '.join(expected)} (given: {said}); pass them as "
            f"{name}:{example} on the command line, or as {{{name}: {{weight: 1, "
            f"{', '.join(f'{key}: N' for key in expected)}}}}} in a recipe's reward.weights")


def reward_name(fn: RewardFn) -> str:
    """The display name of a reward (its registered name where it has one)."""
    for key, value in _REWARDS.items():
        if value is fn:
            return key
    return str(getattr(fn, "reward_name", None) or getattr(fn, "__name__", type(fn).__name__))


class Combination:
    """A weighted sum of named rewards; :meth:`components` exposes each term before weighting."""

    def __init__(self, parts: list[tuple[str, float, RewardFn]], name: str) -> None:
        self.parts = tuple(parts)
        self.reward_name = name
        self.__name__ = name

    @property
    def weights(self) -> dict[str, float]:
        return {n: w for n, w, _ in self.parts}

    def components(self, completions: list[str], **columns: Any) -> dict[str, list[float]]:
        """Each term's unweighted scores, keyed by term name."""
        return {n: list(fn(completions, **columns)) for n, _, fn in self.parts}

    def total(self, components: Mapping[str, list[float]]) -> list[float]:
        """The weighted sum of already computed components."""
        n = len(next(iter(components.values()))) if components else 0
        out = [0.0] * n
        for name, weight, _ in self.parts:
            for i, value in enumerate(components[name]):
                out[i] += weight * value
        return out

    def __call__(self, completions: list[str], **columns: Any) -> list[float]:
        return self.total(self.components(completions, **columns))

    def __repr__(self) -> str:
        terms = " + ".join(f"{w:g}*{n}" for n, w, _ in self.parts)
        return f"Combination({self.reward_name!r}: {terms})"


def combination_weights(name: str) -> dict[str, WeightSpec] | None:
    """The weight mapping of the named combination ``name``, or None when ``name`` is not one."""
    weights = _COMBINATIONS.get(name)
    return None if weights is None else dict(weights)


def weight_and_params(name: str, spec: WeightSpec) -> tuple[float, dict[str, Any]]:
    """Split a combination entry into its weight and its factory parameters (checking the weight)."""
    if isinstance(spec, Mapping):
        params = dict(spec)
        if "weight" not in params:
            raise ValueError(f"reward {name!r}: a mapping entry needs a 'weight' key, got {sorted(params)}")
        weight = params.pop("weight")
    else:
        weight, params = spec, {}
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
        raise ValueError(f"reward {name!r}: weight must be a finite number, got {weight!r}")
    return float(weight), params


def combine(weights: Mapping[str, WeightSpec], name: str | None = None) -> Combination:
    """A weighted sum from a recipe mapping, e.g. ``{"format": 0.1, "integer_distance": 0.9}``.

    A value may be ``{"weight": w, **params}`` for a factory (``{"overlong": {"weight": 1,
    "max_len": 1024, "cache": 256}}``). A named combination inside is expanded into its terms,
    with weights multiplied; the same plain reward named twice has its weights added.
    """
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError(f"a reward combination needs a non-empty mapping of name -> weight, got {weights!r}")
    given = {term: weight_and_params(term, spec) for term, spec in weights.items()}
    if problem := weights_problem({term: weight for term, (weight, _) in given.items()}):
        raise ValueError(problem)  # the rule recipes apply (spatialiq_train.core.reward_weights)
    parts: dict[str, tuple[float, RewardFn]] = {}
    for term, (weight, params) in given.items():
        fn = get_reward(term, **params)
        sub = fn.parts if isinstance(fn, Combination) else ((reward_name(fn) if ":" not in term else term, 1.0, fn),)
        for sub_name, sub_weight, sub_fn in sub:
            if sub_name in parts:
                if parts[sub_name][1] is not sub_fn:
                    raise ValueError(f"reward combination names {sub_name!r} twice with different settings")
                parts[sub_name] = (parts[sub_name][0] + weight * sub_weight, sub_fn)
            else:
                parts[sub_name] = (weight * sub_weight, sub_fn)
    label = name or "+".join(parts)
    return Combination([(n, w, fn) for n, (w, fn) in parts.items()], name=label)


def resolve_reward(spec: RewardSpec) -> RewardFn:
    """A reward from a recipe value: a name or dotted path, a weight mapping, or a callable."""
    if isinstance(spec, str):
        return get_reward(spec)
    if isinstance(spec, Mapping):
        return combine(spec)
    if callable(spec):
        return spec
    raise ValueError(f"a reward spec must be a name, a mapping of name -> weight or a callable, got {spec!r}")


def components_of(fn: RewardFn, completions: list[str], **columns: Any) -> tuple[dict[str, list[float]], list[float]]:
    """``(components, total)`` for any reward: a combination's terms, or the reward alone."""
    if isinstance(fn, Combination):
        comps = fn.components(completions, **columns)
        return comps, fn.total(comps)
    scores = list(fn(completions, **columns))
    return {reward_name(fn): scores}, scores


def _summary(obj: object) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def list_rewards() -> list[RewardInfo]:
    """Every registered name with its kind and the first line of its docstring."""
    infos = [RewardInfo(n, "reward", _summary(f)) for n, f in _REWARDS.items()]
    infos += [RewardInfo(n, "factory", _summary(f)) for n, f in _FACTORIES.items()]
    infos += [
        RewardInfo(n, "combination", " + ".join(f"{weight_and_params(k, v)[0]:g}*{k}" for k, v in w.items()))
        for n, w in _COMBINATIONS.items()
    ]
    return sorted(infos, key=lambda i: i.name)


def check_reward_names(weights: Mapping[str, Any], source: str, import_modules: bool = False) -> None:
    """Every name of a recipe's ``reward.weights`` is a registered reward, or a dotted path; a RecipeError names
    ``source`` and the key otherwise. A dotted path (``pkg.module:function``) is checked for its form only unless
    ``import_modules`` is true, because importing a module runs its code (``this:x`` would run ``import this``);
    training always imports them."""
    known = set(valid_names())
    for name in weights:
        if name in known:
            continue
        if _DOTTED.fullmatch(name) and not import_modules:
            log.info("%s: reward %r is a dotted path; not imported (pass --import-rewards to import it)", source, name)
            continue
        try:
            get_reward(name)
        except ValueError as exc:
            raise RecipeError(f"{source}: reward.weights.{name}: {exc}") from None
