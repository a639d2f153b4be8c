"""The two GPU workers of NeMo-RL v0.7.0, replaced for a CPU, so that its own training loops run here.

v0.7.0's DTensor policy worker and its vLLM generation need CUDA (see ../shared/docs/notes/nemo-rl-cpu-loop.md).
Everything else in ``grpo_train`` and ``sft_train`` is v0.7.0's own code: data loaders, environment actors, reward
shaping, the advantage estimator, dynamic sampling, ``refit_policy_generation``, ``CheckpointManager``, the
``Logger``, ``validate``. These two classes stand where the GPU workers stood, behind the interfaces the loop calls:

* :class:`CpuPolicy` (``ColocatablePolicyInterface``): the model, optimizer and learning-rate schedule come from
  v0.7.0's ``setup_model_and_optimizer`` (the DTensor-v2 set-up) with the generated ``policy`` section as it is;
  only its model loader is swapped for transformers on the CPU (NeMo Automodel's loader places the model on CUDA).
  ``train`` walks global batches and micro-batches of the ``BatchedDataDict`` as the DTensor worker does and calls
  the real loss function (``ClippedPGLossFn``, ``NLLLossFn``) with its real arguments; it computes the next-token
  log-probabilities itself because v0.7.0's helper calls ``.cuda()`` unconditionally.
* :class:`CpuGeneration` (``GenerationInterface``): batched transformers ``generate`` with left padding, the stop
  tokens of the generation config, images from the batch's ``PackedTensor``; it starts from random weights as vLLM
  does under ``load_format: dummy``, so the first refit is observable.

A refit hands the policy's state dict to the generation through :data:`REFIT_CHANNEL` (what CUDA IPC carries on a
GPU), and each side returns ``[ray.put(True)]`` as the real workers' futures resolve.
"""

from __future__ import annotations

import os
import socket
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

REFIT_CHANNEL: dict[str, Any] = {}
"""The policy's weights on their way to the generation during one refit."""

LOG: dict[str, list[Any]] = defaultdict(list)
"""What the workers saw, for the tests: configs, refits, train results, generations."""

CONSOLIDATED = Path("model") / "consolidated"
"""Where the weights of a step go under ``policy/weights`` (the DTensor-v2 worker's ``save_consolidated`` copy)."""


def reset_log() -> None:
    LOG.clear()
    REFIT_CHANNEL.clear()


def _ensure_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo")


def cpu_distributed_context() -> Any:
    """The one-process CPU mesh and FSDP2 settings (gloo, float32) that v0.7.0's DTensor-v2 set-up is given here in
    place of the GPU ones (a gloo process group must exist)."""
    from nemo_automodel.components.distributed.config import FSDP2Config
    from nemo_automodel.components.moe.config import MoEParallelizerConfig
    from nemo_rl.models.automodel.config import DistributedContext
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mesh = init_device_mesh("cpu", (1, 1, 1), mesh_dim_names=("dp", "cp", "tp"))
    precision = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32, output_dtype=torch.float32)
    fsdp2 = FSDP2Config(sequence_parallel=False, tp_plan=None, mp_policy=precision, offload_policy=None,
                        activation_checkpointing=False, defer_fsdp_grad_sync=True, backend="gloo")
    return DistributedContext(device_mesh=mesh, moe_mesh=None, fsdp2_config=fsdp2,
                              moe_config=MoEParallelizerConfig(), dp_size=1, tp_size=1, cp_size=1)


class _CpuLoader:
    """In place of NeMo Automodel's GPU loader: the checkpoint, loaded by transformers on the CPU."""

    source: str | None = None

    @classmethod
    def from_pretrained(cls, name: str, **kwargs: Any) -> Any:
        from transformers import AutoModelForImageTextToText

        return AutoModelForImageTextToText.from_pretrained(cls.source or name, dtype=torch.float32)


MODEL_MEDIA = ("pixel_values", "image_grid_thw", "mm_token_type_ids")
"""What v0.7.0's DTensor policy passes the model from ``get_multimodal_dict``: the images and, per token, which
tokens are image tokens. Without ``mm_token_type_ids`` transformers >= 5.3 cannot build Qwen2.5-VL's 3-D rotary
positions and falls back to text positions for the image tokens (a model trained with them then writes the answer
format a quarter as often: measured 0.125 vs 0.53 on the same prompts)."""


def _mask_and_media(data: Any) -> tuple[Any, dict[str, Any]]:
    positions = torch.arange(data["input_ids"].shape[1])[None, :]
    attention = (positions < data["input_lengths"][:, None]).long()
    media = data.get_multimodal_dict(as_tensors=True)
    return attention, {k: media[k] for k in MODEL_MEDIA if k in media}


def next_token_logprobs(model: Any, data: Any, temperature: float = 1.0) -> Any:
    """log p(token t+1 | tokens <= t) for t in 0..S-2, shape (B, S-1): what the loss functions take."""
    attention, media = _mask_and_media(data)
    logits = model(input_ids=data["input_ids"], attention_mask=attention, **media).logits.float()
    logp = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
    return logp.gather(-1, data["input_ids"][:, 1:, None])[..., 0]


class CpuPolicy:
    """``ColocatablePolicyInterface`` on the CPU (see the module docstring)."""

    def __init__(self, cluster: Any, config: dict[str, Any], tokenizer: Any, processor: Any = None,
                 weights_path: str | None = None, optimizer_path: str | None = None, init_optimizer: bool = True,
                 init_reference_model: bool = True, **_: Any) -> None:
        from nemo_rl.models.automodel import setup as automodel_setup

        LOG["policy_config"].append(config)
        LOG["policy_init"].append({"weights_path": weights_path, "optimizer_path": optimizer_path})
        self.cfg, self.tokenizer, self.processor = config, tokenizer, processor
        _ensure_process_group()
        runtime = automodel_setup.validate_and_prepare_config(config, processor, 0)._replace(model_class=_CpuLoader)
        context = cpu_distributed_context()
        _CpuLoader.source = str(Path(weights_path) / CONSOLIDATED) if weights_path else None
        try:
            state = automodel_setup.setup_model_and_optimizer(
                config, tokenizer, runtime, context, checkpoint_manager=None, is_vlm=processor is not None,
                init_optimizer=init_optimizer)
        finally:
            _CpuLoader.source = None
        self.model, self.optimizer, self.scheduler = state.model, state.optimizer, state.scheduler
        if optimizer_path:
            saved = torch.load(Path(optimizer_path) / "optim.pt", weights_only=True)
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scheduler.load_state_dict(saved["scheduler"])
        self.reference = ({k: v.detach().clone() for k, v in self.model.state_dict().items()}
                          if init_reference_model else None)
        self.temperature = float((config.get("generation") or {}).get("temperature") or 1.0)

    # --- inference ----------------------------------------------------------------------------------------------

    def _logprobs(self, data: Any) -> Any:
        out = []
        mbs = self.cfg.get("logprob_batch_size") or data.size
        with torch.no_grad():
            for mb in data.make_microbatch_iterator(mbs):
                lp = next_token_logprobs(self.model, mb, self.temperature)
                out.append(torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1))
        width = max(t.shape[1] for t in out)
        return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in out])

    def get_logprobs(self, data: Any, timer: Any = None, micro_batch_size: int | None = None) -> dict[str, Any]:
        self.model.eval()
        return {"logprobs": self._logprobs(data)}

    def get_reference_policy_logprobs(self, data: Any, timer: Any = None,
                                      micro_batch_size: int | None = None) -> dict[str, Any]:
        assert self.reference is not None, "the reference model was not requested"
        current = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.model.load_state_dict(self.reference)
        try:
            return {"reference_logprobs": self.get_logprobs(data)["logprobs"]}
        finally:
            self.model.load_state_dict(current)

    # --- training -----------------------------------------------------------------------------------------------

    def train(self, data: Any, loss_fn: Any, eval_mode: bool = False, gbs: int | None = None,
              mbs: int | None = None, timer: Any = None, **_: Any) -> dict[str, Any]:
        gbs = gbs or self.cfg["train_global_batch_size"]
        mbs = mbs or self.cfg["train_micro_batch_size"]
        self.model.train(not eval_mode)
        losses: list[float] = []
        all_mb: list[dict[str, Any]] = []
        grad_norm = None
        for gb in range(data.size // gbs):
            batch = data.get_batch(batch_idx=gb, batch_size=gbs)
            valid_seqs = batch["sample_mask"].sum()
            valid_toks = (batch["token_mask"][:, 1:] * batch["sample_mask"].unsqueeze(-1)).sum()
            self.optimizer.zero_grad()
            gb_loss = 0.0
            for mb in batch.make_microbatch_iterator(mbs):
                with torch.set_grad_enabled(not eval_mode):
                    lp = next_token_logprobs(self.model, mb, self.temperature)
                    loss, metrics = loss_fn(next_token_logprobs=lp, data=mb, global_valid_seqs=valid_seqs,
                                            global_valid_toks=valid_toks)
                    if not eval_mode:
                        loss.backward()
                metrics = {k: (v.item() if torch.is_tensor(v) else v) for k, v in metrics.items()}
                metrics.update(lr=self.optimizer.param_groups[0]["lr"], global_valid_seqs=valid_seqs.item(),
                               global_valid_toks=valid_toks.item())
                all_mb.append(metrics)
                gb_loss += float(loss.item())
            if not eval_mode:
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), self.cfg.get("max_grad_norm") or float("inf")).detach().float()
                self.optimizer.step()
            losses.append(gb_loss)
        self.optimizer.zero_grad()
        if not eval_mode:
            self.scheduler.step()
        merged: dict[str, list[Any]] = defaultdict(list)
        for m in all_mb:
            for k, v in m.items():
                merged[k].append(v)
        result = {"loss": torch.tensor(losses), "grad_norm": grad_norm, "all_mb_metrics": dict(merged)}
        LOG["train"].append({"eval_mode": eval_mode, "rows": data.size, **result})
        return result

    def prepare_for_training(self, *args: Any, **kwargs: Any) -> None:
        self.model.train()

    def prepare_for_lp_inference(self) -> None:
        self.model.eval()

    def finish_training(self, *args: Any, **kwargs: Any) -> None:
        pass

    # --- refit --------------------------------------------------------------------------------------------------

    def prepare_refit_info(self) -> dict[str, Any]:
        return {k: (tuple(v.shape), v.dtype) for k, v in self.model.state_dict().items()}

    def offload_before_refit(self) -> None:
        pass

    def offload_after_refit(self) -> None:
        pass

    def get_free_memory_bytes(self) -> int:
        return 1 << 30

    def stream_weights_via_ipc_zmq(self, buffer_size_bytes: int = 0, **_: Any) -> list[Any]:
        import ray

        REFIT_CHANNEL.clear()
        REFIT_CHANNEL.update({k: v.detach().clone() for k, v in self.model.state_dict().items()})
        return [ray.put(True)]

    # --- checkpoints --------------------------------------------------------------------------------------------

    def save_checkpoint(self, weights_path: str, optimizer_path: str | None = None,
                        tokenizer_path: str | None = None, checkpointing_cfg: Any = None) -> None:
        self.model.save_pretrained(Path(weights_path) / CONSOLIDATED, safe_serialization=True)
        if optimizer_path:
            Path(optimizer_path).mkdir(parents=True, exist_ok=True)
            torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
                       Path(optimizer_path) / "optim.pt")
        if tokenizer_path:
            (self.processor or self.tokenizer).save_pretrained(tokenizer_path)
        LOG["saved"].append(weights_path)

    # --- not on a CPU -------------------------------------------------------------------------------------------

    def print_node_ip_and_gpu_id(self) -> None:
        pass

    def shutdown(self) -> bool:
        return True

    def get_topk_logits(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("top-k logits (distillation) are not part of the CPU loop")

    def calibrate_qkv_fp8_scales(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("FP8 needs a GPU")

    def init_collective(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("collectives need GPUs (non-colocated generation)")

    def broadcast_weights_for_collective(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("collectives need GPUs (non-colocated generation)")


class CpuGeneration:
    """``GenerationInterface`` on the CPU (see the module docstring)."""

    inject: int | None = None
    """When set, a sampled (not greedy) batch's first sample gets this token id as its first generated token: what a
    policy sampling at temperature 1 can draw from vLLM, which has no bad-words list in v0.7.0's sampling params."""

    def __init__(self, cluster: Any, config: dict[str, Any], **_: Any) -> None:
        from transformers import AutoConfig, AutoModelForImageTextToText

        LOG["generation_config"].append(config)
        self.cfg = config
        model_config = AutoConfig.from_pretrained(config["model_name"])
        # vLLM's load_format "dummy": random weights until the first refit, drawn from a generator of their own, so the
        # run's seed (grpo.seed, set by v0.7.0's set-up before the workers start) still decides the sampling
        with torch.random.fork_rng():
            torch.manual_seed(12345)
            self.model = AutoModelForImageTextToText.from_config(model_config).eval()
        self.dummy = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.refit_info: dict[str, Any] | None = None

    # --- weights ------------------------------------------------------------------------------------------------

    def prepare_refit_info(self, state_dict_info: dict[str, Any]) -> None:
        mine = {k: (tuple(v.shape), v.dtype) for k, v in self.model.state_dict().items()}
        assert state_dict_info == mine, "the policy's weights do not match the generation model's"
        self.refit_info = state_dict_info

    def update_weights_via_ipc_zmq(self) -> list[Any]:
        import ray

        assert self.refit_info is not None, "prepare_refit_info was not called"
        self.model.load_state_dict(REFIT_CHANNEL, strict=True)
        LOG["refits"].append({k: v.clone() for k, v in self.model.state_dict().items()})
        return [ray.put(True)]

    def prepare_for_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def finish_generation(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def clear_logger_metrics(self) -> None:
        pass

    def get_logger_metrics(self) -> dict[str, Any]:
        return {}

    def shutdown(self) -> bool:
        return True

    def invalidate_kv_cache(self) -> bool:
        return True

    @property
    def requires_kv_scale_sync(self) -> bool:
        return False

    # --- generation ---------------------------------------------------------------------------------------------

    def generate(self, data: Any, greedy: bool = False) -> Any:
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        cfg = self.cfg
        ids, lengths = data["input_ids"], data["input_lengths"]
        pad = cfg.get("_pad_token_id")
        if pad is None:
            pad = int(ids[0, -1]) if ids.shape[1] > int(lengths[0]) else 0
        width = int(lengths.max())
        media = data.get_multimodal_dict(as_tensors=True)
        left = torch.full((ids.shape[0], width), pad, dtype=ids.dtype)
        mask = torch.zeros_like(left)
        types = media.get("mm_token_type_ids")
        left_types = None if types is None else torch.zeros((ids.shape[0], width), dtype=types.dtype)
        for i, n in enumerate(lengths.tolist()):
            left[i, width - n:] = ids[i, :n]
            mask[i, width - n:] = 1
            if left_types is not None:
                left_types[i, width - n:] = types[i, :n]
        if left_types is not None:
            media = {**media, "mm_token_type_ids": left_types}
        stop = list(cfg.get("stop_token_ids") or [])
        sampling = {"do_sample": False} if greedy else {
            "do_sample": True, "temperature": cfg["temperature"], "top_p": cfg.get("top_p") or 1.0,
            "top_k": cfg.get("top_k") or 0}
        with torch.no_grad():
            out = self.model.generate(
                input_ids=left, attention_mask=mask, max_new_tokens=cfg["max_new_tokens"], eos_token_id=stop or None,
                pad_token_id=pad, output_logits=True, return_dict_in_generate=True,
                **{k: media[k] for k in MODEL_MEDIA if k in media}, **sampling)
        new = out.sequences[:, width:]
        if CpuGeneration.inject is not None and not greedy:  # as if the first sample had drawn this token first
            new = new.clone()
            new[0, 0] = CpuGeneration.inject
        logp = torch.stack([torch.log_softmax(step.float(), -1) for step in out.logits], dim=1)
        new_logp = logp.gather(-1, new[..., None])[..., 0]
        total = int((lengths + new.shape[1]).max())
        output_ids = torch.full((ids.shape[0], total), pad, dtype=ids.dtype)
        logprobs = torch.zeros((ids.shape[0], total))
        gen_lengths = torch.zeros_like(lengths)
        truncated = torch.zeros(ids.shape[0], dtype=torch.bool)
        for i, n in enumerate(lengths.tolist()):
            row = new[i].tolist()
            cut = next((j + 1 for j, t in enumerate(row) if t in stop), None)
            k = cut if cut is not None else len(row)
            truncated[i] = cut is None
            output_ids[i, :n] = ids[i, :n]
            output_ids[i, n:n + k] = new[i, :k]
            logprobs[i, n:n + k] = new_logp[i, :k]
            gen_lengths[i] = k
        LOG["generations"].append({"greedy": greedy, "rows": ids.shape[0]})
        return BatchedDataDict({"output_ids": output_ids, "logprobs": logprobs, "generation_lengths": gen_lengths,
                                "unpadded_sequence_lengths": lengths + gen_lengths, "truncated": truncated})
