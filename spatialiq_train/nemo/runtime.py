"""The NeMo-RL v0.7.0 pieces the driver calls, imported in one place.

:func:`load_api` imports them from NeMo-RL (inside the container ``nvcr.io/nvidia/nemo-rl:v0.7.0``, or with the
v0.7.0 source on ``PYTHONPATH`` as the engine-contract stage runs it) and says where to run when it cannot.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from spatialiq_train.core.errors import UserError

CONTAINER = "nvcr.io/nvidia/nemo-rl:v0.7.0"
PROBE_MODULE = "nemo_rl.environments.interfaces"
"""Imported to decide whether NeMo-RL is present: PyPI's ``nemo-rl`` 0.0.0 placeholder imports as ``nemo_rl``."""


class NemoUnavailable(UserError):
    """NeMo-RL cannot be imported here: the NeMo-RL commands run inside its container."""


@dataclass
class NemoApi:
    """Callables, classes and registries of NeMo-RL the driver uses (names as in NeMo-RL)."""

    register_omegaconf_resolvers: Callable[[], None]
    load_config: Callable[[str], Any]
    parse_hydra_overrides: Callable[[Any, list[str]], Any]
    to_container: Callable[[Any], Any]
    """``OmegaConf.to_container(cfg, resolve=True)``."""
    grpo_master_config: Callable[..., Any]
    grpo_setup: Callable[..., tuple[Any, ...]]
    grpo_train: Callable[..., None]
    sft_master_config: Callable[..., Any]
    sft_setup: Callable[..., tuple[Any, ...]]
    sft_train: Callable[..., None]
    get_next_experiment_dir: Callable[[str], str]
    init_ray: Callable[..., None]
    get_tokenizer: Callable[..., Any]
    configure_generation_config: Callable[..., Any]
    AllTaskProcessedDataset: Callable[..., Any]  # noqa: N815 - NeMo-RL's class name
    TaskDataSpec: Callable[..., Any]  # noqa: N815 - NeMo-RL's class name
    create_env: Callable[[str, dict[str, Any]], Any]
    register_env: Callable[[str, str], None]
    env_registry: MutableMapping[str, dict[str, Any]]
    """``nemo_rl.environments.utils.ENV_REGISTRY``: env name -> ``{"actor_class_fqn": ...}``."""
    actor_registry: MutableMapping[str, str]
    """``nemo_rl.distributed.ray_actor_environment_registry.ACTOR_ENVIRONMENT_REGISTRY``: class path -> Python."""
    system_executable: str
    """``nemo_rl.distributed.virtual_cluster.PY_EXECUTABLES.SYSTEM``."""


def nemo_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(PROBE_MODULE) is not None
    except (ImportError, ValueError):
        return False


def load_api() -> NemoApi:
    """The real NeMo-RL v0.7.0 API, or :class:`NemoUnavailable` (exit 2) saying where it runs."""
    try:
        from nemo_rl.algorithms import grpo, sft
        from nemo_rl.algorithms.utils import get_tokenizer
        from nemo_rl.data.datasets import AllTaskProcessedDataset
        from nemo_rl.data.interfaces import TaskDataSpec
        from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
        from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES, init_ray
        from nemo_rl.environments.utils import ENV_REGISTRY, create_env, register_env
        from nemo_rl.models.generation import configure_generation_config
        from nemo_rl.utils.config import load_config, parse_hydra_overrides, register_omegaconf_resolvers
        from nemo_rl.utils.logger import get_next_experiment_dir
        from omegaconf import OmegaConf
    except ImportError as exc:
        raise NemoUnavailable(
            f"NeMo-RL is not importable here ({exc}); the `spatialiq nemo` training commands run inside the "
            f"container {CONTAINER} with this project on PYTHONPATH (see docs/cluster.md)") from None
    return NemoApi(
        register_omegaconf_resolvers=register_omegaconf_resolvers,
        load_config=load_config,
        parse_hydra_overrides=parse_hydra_overrides,
        to_container=lambda cfg: OmegaConf.to_container(cfg, resolve=True),
        grpo_master_config=grpo.MasterConfig,
        grpo_setup=grpo.setup,
        grpo_train=grpo.grpo_train,
        sft_master_config=sft.MasterConfig,
        sft_setup=sft.setup,
        sft_train=sft.sft_train,
        get_next_experiment_dir=get_next_experiment_dir,
        init_ray=init_ray,
        get_tokenizer=get_tokenizer,
        configure_generation_config=configure_generation_config,
        AllTaskProcessedDataset=AllTaskProcessedDataset,
        TaskDataSpec=TaskDataSpec,
        create_env=create_env,
        register_env=register_env,
        env_registry=ENV_REGISTRY,
        actor_registry=ACTOR_ENVIRONMENT_REGISTRY,
        system_executable=PY_EXECUTABLES.SYSTEM,
    )
