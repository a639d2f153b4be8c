"""In-test stand-ins for the NeMo-RL v0.7.0 pieces the driver calls (NeMo-RL cannot be installed off-container).

Each stand-in has the parameter list of the v0.7.0 function it replaces (``grpo.setup``, ``grpo_train``,
``sft.setup``, ``sft_train``, ``create_env``, ``register_env``, ...), so a call the real one would refuse (a missing
argument, ``grpo_train(processor=...)`` which exists only on main) fails the same way; the registries behave like
NeMo-RL's (``create_env`` asserts the name is registered and raises ``ValueError`` for a class path without a Python
environment). Every call is recorded in :attr:`StandinRecorder.calls` for the tests to inspect. Nothing is
trained: ``setup`` returns labelled placeholders of the real tuple's arity.
"""

from __future__ import annotations

import copy
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from spatialiq_train.nemo.runtime import NemoApi

BUILTIN_ENVS = {"vlm": "nemo_rl.environments.vlm_environment.VLMEnvironment",
                "math": "nemo_rl.environments.math_environment.MathEnvironment"}
"""Two of v0.7.0's built-in registry entries, so a test can tell ours from theirs."""


class GRPOMasterConfig(BaseModel):
    """``nemo_rl.algorithms.grpo.MasterConfig``'s required sections (extra sections allowed, as there)."""

    model_config = ConfigDict(extra="allow")
    policy: dict[str, Any]
    loss_fn: dict[str, Any]
    env: dict[str, Any]
    data: dict[str, Any]
    grpo: dict[str, Any]
    logger: dict[str, Any]
    cluster: dict[str, Any]
    checkpointing: dict[str, Any]


class SFTMasterConfig(BaseModel):
    """``nemo_rl.algorithms.sft.MasterConfig``'s required sections."""

    model_config = ConfigDict(extra="allow")
    policy: dict[str, Any]
    data: dict[str, Any]
    sft: dict[str, Any]
    logger: dict[str, Any]
    cluster: dict[str, Any]
    checkpointing: dict[str, Any]


@dataclass
class TaskDataSpec:
    task_name: str | None = None
    prompt_file: str | None = None
    system_prompt_file: str | None = None


class AllTaskProcessedDataset:
    """v0.7.0's constructor; ``__getitem__`` calls the task data processor as NeMo-RL does."""

    def __init__(self, dataset: Any, tokenizer: Any, default_task_data_spec: Any, task_data_processors: Any,
                 task_data_preprocessors: Any = None, max_seq_length: int | None = None) -> None:
        if isinstance(task_data_processors, dict):
            raise NotImplementedError("the stand-in supports the single-task form (one processor callable)")
        self.dataset, self.tokenizer = dataset, tokenizer
        self.default_task_data_spec, self.task_data_processors = default_task_data_spec, task_data_processors
        self.max_seq_length = max_seq_length

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int) -> Any:
        return self.task_data_processors(self.dataset[idx], self.default_task_data_spec, self.tokenizer,
                                         self.max_seq_length, idx)


@dataclass
class EnvHandle:
    """What ``create_env`` returns in place of a Ray actor handle."""

    env_name: str
    actor_class_fqn: str
    env_config: dict[str, Any]


@dataclass
class StandinRecorder:
    """The stand-in API's state: registries, recorded calls, and an optional failure for ``grpo_train``."""

    env_registry: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {k: {"actor_class_fqn": v} for k, v in BUILTIN_ENVS.items()})
    actor_registry: dict[str, str] = field(default_factory=lambda: dict.fromkeys(BUILTIN_ENVS.values(), "SYSTEM"))
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    grpo_train_raises: BaseException | None = None

    def record(self, name: str, **kwargs: Any) -> None:
        self.calls.append((name, kwargs))

    def called(self, name: str) -> list[dict[str, Any]]:
        return [kw for n, kw in self.calls if n == name]

    # --- nemo_rl.utils.config / logger / virtual_cluster ----------------------------------------------------

    def load_config(self, config_path: str) -> dict[str, Any]:
        data = yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
        if "defaults" in data:
            raise NotImplementedError("the stand-in does not follow `defaults:` inheritance")
        return data

    def parse_hydra_overrides(self, cfg: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
        """Strict like NeMo-RL's: a key must exist unless added with a leading '+'."""
        for text in overrides:
            key, _, raw = text.partition("=")
            add = key.startswith("+")
            parts = key.lstrip("+").split(".")
            node = cfg
            for part in parts[:-1]:
                node = node.setdefault(part, {}) if add else node[part]
            if not add and parts[-1] not in node:
                raise ValueError(f"Could not override '{key}'. Key '{key}' is not in struct")
            node[parts[-1]] = yaml.safe_load(raw)
        return cfg

    def get_next_experiment_dir(self, base_log_dir: str) -> str:
        base = Path(base_log_dir)
        ids = [int(p.name[4:]) for p in base.glob("exp_*") if p.name[4:].isdigit()] if base.is_dir() else []
        out = base / f"exp_{max(ids, default=0) + 1:03d}"
        out.mkdir(parents=True, exist_ok=True)
        return str(out)

    def init_ray(self, log_dir: str | None = None) -> None:
        self.record("init_ray", log_dir=log_dir)

    # --- nemo_rl.algorithms.utils / models.generation -------------------------------------------------------

    def get_tokenizer(self, tokenizer_config: dict[str, Any], get_processor: bool = False) -> Any:
        """The processor with its saved defaults (NeMo-RL has no pixel-budget knob)."""
        from spatialiq_train.processor import load_processor

        self.record("get_tokenizer", tokenizer_config=tokenizer_config, get_processor=get_processor)
        if not get_processor:
            raise NotImplementedError("the stand-in loads VLM processors only")
        return load_processor(tokenizer_config["name"])

    def configure_generation_config(self, config: dict[str, Any], tokenizer: Any, is_eval: bool = False,
                                    has_refit_draft_weights: bool = False) -> dict[str, Any]:
        out = dict(config)
        out["_pad_token_id"] = tokenizer.pad_token_id
        return out

    # --- nemo_rl.environments.utils -------------------------------------------------------------------------

    def register_env(self, env_name: str, actor_class_fqn: str) -> None:
        if env_name in self.env_registry:
            raise ValueError(f"Env name {env_name} already registered")
        self.env_registry[env_name] = {"actor_class_fqn": actor_class_fqn}

    def create_env(self, env_name: str, env_config: dict[str, Any]) -> EnvHandle:
        assert env_name in self.env_registry, f"Env name {env_name} is not registered in ENV_REGISTRY."
        fqn = self.env_registry[env_name]["actor_class_fqn"]
        module, _, attr = fqn.rpartition(".")
        actor_class = getattr(importlib.import_module(module), attr)  # hydra's get_object, in short
        if fqn not in self.actor_registry:
            raise ValueError(f"No actor environment registered for {fqn}.")
        if not (hasattr(actor_class, "options") and hasattr(actor_class, "remote")):
            raise TypeError(f"{fqn} is not a Ray actor class (NeMo-RL calls .options(...).remote(cfg))")
        self.record("create_env", env_name=env_name, env_config=copy.deepcopy(env_config))
        return EnvHandle(env_name, fqn, env_config)

    # --- nemo_rl.algorithms.grpo ----------------------------------------------------------------------------

    def grpo_setup(self, master_config: Any, tokenizer: Any, dataset: Any, val_dataset: Any,
                   processor: Any = None, policy_factory: Any = None) -> tuple[Any, ...]:
        self.record("grpo_setup", master_config=master_config, tokenizer=tokenizer, dataset=dataset,
                    val_dataset=val_dataset, processor=processor)
        names = ("policy", "policy_generation", "nemo_gym", "cluster", "dataloader", "val_dataloader", "loss_fn",
                 "logger", "checkpointer", "grpo_save_state", "master_config", "teacher_worker_groups",
                 "alias_to_group_alias")
        return tuple(master_config if n == "master_config" else f"<{n}>" for n in names)

    def grpo_train(self, policy: Any, policy_generation: Any, wrapped_dataloader: Any, val_dataloader: Any,
                   tokenizer: Any, loss_fn: Any, task_to_env: Any, val_task_to_env: Any, logger: Any,
                   checkpointer: Any, grpo_save_state: Any, master_config: Any) -> None:
        self.record("grpo_train", policy=policy, policy_generation=policy_generation,
                    wrapped_dataloader=wrapped_dataloader, val_dataloader=val_dataloader, tokenizer=tokenizer,
                    loss_fn=loss_fn, task_to_env=task_to_env, val_task_to_env=val_task_to_env, logger=logger,
                    checkpointer=checkpointer, grpo_save_state=grpo_save_state, master_config=master_config)
        if self.grpo_train_raises is not None:
            raise self.grpo_train_raises

    # --- nemo_rl.algorithms.sft -----------------------------------------------------------------------------

    def sft_setup(self, master_config: Any, tokenizer: Any, train_dataset: Any, val_dataset: Any) -> tuple[Any, ...]:
        self.record("sft_setup", master_config=master_config, tokenizer=tokenizer, train_dataset=train_dataset,
                    val_dataset=val_dataset)
        names = ("policy", "cluster", "train_dataloader", "val_dataloader", "loss_fn", "logger", "checkpointer",
                 "sft_save_state", "master_config")
        return tuple(master_config if n == "master_config" else f"<{n}>" for n in names)

    def sft_train(self, policy: Any, train_dataloader: Any, val_dataloader: Any, tokenizer: Any, loss_fn: Any,
                  master_config: Any, logger: Any, checkpointer: Any, sft_save_state: Any) -> None:
        self.record("sft_train", policy=policy, train_dataloader=train_dataloader, val_dataloader=val_dataloader,
                    tokenizer=tokenizer, loss_fn=loss_fn, master_config=master_config, logger=logger,
                    checkpointer=checkpointer, sft_save_state=sft_save_state)


def standin_api(recorder: StandinRecorder | None = None) -> tuple[NemoApi, StandinRecorder]:
    """A :class:`NemoApi` made of stand-ins, and the recorder holding their state."""
    rec = recorder or StandinRecorder()
    api = NemoApi(
        register_omegaconf_resolvers=lambda: None,
        load_config=rec.load_config,
        parse_hydra_overrides=rec.parse_hydra_overrides,
        to_container=copy.deepcopy,
        grpo_master_config=GRPOMasterConfig,
        grpo_setup=rec.grpo_setup,
        grpo_train=rec.grpo_train,
        sft_master_config=SFTMasterConfig,
        sft_setup=rec.sft_setup,
        sft_train=rec.sft_train,
        get_next_experiment_dir=rec.get_next_experiment_dir,
        init_ray=rec.init_ray,
        get_tokenizer=rec.get_tokenizer,
        configure_generation_config=rec.configure_generation_config,
        AllTaskProcessedDataset=AllTaskProcessedDataset,
        TaskDataSpec=TaskDataSpec,
        create_env=rec.create_env,
        register_env=rec.register_env,
        env_registry=rec.env_registry,
        actor_registry=rec.actor_registry,
        system_executable=sys.executable,
    )
    return api, rec
