"""The end of a training phase: the trained policy saved as a plain safetensors checkpoint with its processor.

Full fine-tuning: `trainer.save_model` (which gathers ZeRO-3 shards on every rank, in step) writes the weights;
under ZeRO-3 that needs DeepSpeed's consolidated 16-bit weights on save, checked when the trainer is built
(`check_exportable`). LoRA: the adapter is saved the same way (gathered on every rank, adapter weights only), and
then merged into its base model in one process on the main rank, from the files just written, while the other
ranks wait. Partitioned parameters are never merged in place: under ZeRO-3 each rank holds only a shard.

The merge must also load the base model *outside* `deepspeed.zero.Init`: while a ZeRO-3 trainer lives,
transformers builds every `from_pretrained` model partitioned (empty tensors on each rank, gathered
collectively), so a merge on rank 0 alone either fails (`The size of tensor a (0) must match ...`) or waits
forever for the other ranks. `outside_zero3_init` hides the trainer's DeepSpeed config for the duration.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spatialiq_train.hf_export import ExportError, merge_adapter

log = logging.getLogger(__name__)


def is_adapter_model(model: Any) -> bool:
    """True for a peft model (LoRA adapters on a base model)."""
    return hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")


def _zero3_config(trainer: Any) -> dict[str, Any] | None:
    """The trainer's DeepSpeed `zero_optimization` section when it runs ZeRO stage 3, else None."""
    if not getattr(trainer, "is_deepspeed_enabled", False):
        return None
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    zero = dict((getattr(plugin, "deepspeed_config", None) or {}).get("zero_optimization") or {})
    return zero if zero.get("stage") == 3 else None


def check_exportable(trainer: Any) -> None:
    """Refuse, before training, a full fine-tuning run under ZeRO-3 whose weights could not be exported.

    Without `stage3_gather_16bit_weights_on_model_save`, `save_model` writes a DeepSpeed checkpoint and no
    weights, so the final folder would not load. LoRA exports gather the adapter weights either way."""
    zero = _zero3_config(trainer)
    if zero is None or is_adapter_model(trainer.accelerator.unwrap_model(trainer.model)):
        return
    if not zero.get("stage3_gather_16bit_weights_on_model_save"):
        raise ExportError("DeepSpeed ZeRO-3 without stage3_gather_16bit_weights_on_model_save: the trained weights "
                          "could not be exported; set zero3_save_16bit_model: true under deepspeed_config in the "
                          "accelerate config (recipes/accelerate/zero3_*.yaml do), or "
                          "zero_optimization.stage3_gather_16bit_weights_on_model_save: true in a DeepSpeed JSON")


@contextlib.contextmanager
def outside_zero3_init() -> Iterator[None]:
    """Within the block, `from_pretrained` loads whole models in this process even while a ZeRO-3 trainer lives.

    transformers enters `deepspeed.zero.Init` whenever an `HfDeepSpeedConfig` with stage 3 is registered (accelerate
    registers one for the trainer); the registration is lifted here and restored on exit. Enter it on every rank so
    that a transformers release that keeps the registration elsewhere fails on all of them, not in a hang."""
    try:
        from transformers.integrations import deepspeed as hf_ds
    except ImportError:  # no DeepSpeed integration in this transformers: nothing is registered
        yield
        return
    ref = getattr(hf_ds, "_hf_deepspeed_config_weak_ref", None)
    registered = ref() if ref is not None else None
    if registered is not None:
        hf_ds.unset_hf_deepspeed_config()
    try:
        if hf_ds.is_deepspeed_zero3_enabled():
            raise ExportError("transformers still reports DeepSpeed ZeRO-3 after its HfDeepSpeedConfig was unset "
                              "(transformers.integrations.deepspeed changed): the LoRA merge would load a "
                              "partitioned base model; export the adapter and merge it in a separate process")
        yield
    finally:
        if registered is not None:
            hf_ds.set_hf_deepspeed_config(registered)


def _replace_dir(tmp: Path, out_dir: Path) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)


def _on_main_process(accelerator: Any, what: str, work: Callable[[], object]) -> None:
    """Run `work` on the main process while the others wait; every rank raises when it failed (no rank hangs)."""
    from spatialiq_train.train.distributed import sum_over_ranks

    error: BaseException | None = None
    if accelerator.is_main_process:
        try:
            work()
        except Exception as exc:  # re-raised below, after the other ranks have heard of it
            error = exc
    failed = sum_over_ranks(accelerator, [float(error is not None)])[0]
    if error is not None:
        raise error
    if failed:
        raise ExportError(f"{what} failed on the main process (its error is in that process's log)")


def export_final(trainer: Any, processor: Any, out_dir: str | Path, adapter_dir: str | Path | None = None) -> Path:
    """Save the trained policy (LoRA: adapter to `adapter_dir`, then merged) and its processor under `out_dir`.

    Every rank must call it, in step (saving gathers shards); only the main process writes `out_dir`."""
    from spatialiq_train.core.processor import save_processor

    out_dir = Path(out_dir)
    accelerator = trainer.accelerator
    tmp = out_dir.with_name(out_dir.name + ".partial")
    if is_adapter_model(accelerator.unwrap_model(trainer.model)):
        adapter = Path(adapter_dir) if adapter_dir is not None else out_dir.with_name(out_dir.name + ".adapter")
        trainer.save_model(str(adapter))  # all ranks: ZeRO-3 gathers; peft writes the adapter weights only

        def merge() -> None:
            save_processor(processor, adapter)
            merge_adapter(adapter, tmp)

        with outside_zero3_init():  # every rank, in step
            _on_main_process(accelerator, f"merging the LoRA adapter {adapter}", merge)
    else:
        check_exportable(trainer)
        trainer.save_model(str(tmp))  # gathers ZeRO-3 shards (consolidated 16-bit weights); safetensors
    if accelerator.is_main_process:
        save_processor(processor, tmp)  # the standard Qwen2_5_VLProcessor files stock AutoProcessor and vLLM load
        (tmp / "training_args.bin").unlink(missing_ok=True)
        _replace_dir(tmp, out_dir)
        log.info("final model saved to %s", out_dir)
    accelerator.wait_for_everyone()
    return out_dir
