"""The end of a training phase: the trained policy saved as a plain safetensors checkpoint with its processor.

Full fine-tuning: `trainer.save_model` (which gathers ZeRO-3 shards on every rank) writes the weights. LoRA: the
adapter is saved the same way (gathered, adapter weights only), and then merged into its base model in one
process on the main rank, from the files just written. Partitioned parameters are never merged in place: under
ZeRO-3 each rank holds only a shard, and `merge_and_unload` on rank 0 would merge empty tensors.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from spatialiq_train.errors import UserError

log = logging.getLogger(__name__)


class ExportError(UserError):
    """An adapter folder that cannot be merged; the message names the file."""


def is_adapter_model(model: Any) -> bool:
    """True for a peft model (LoRA adapters on a base model)."""
    return hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")


def merge_adapter(adapter_dir: str | Path, dst: str | Path, base_path: str | None = None) -> Path:
    """Load the base model and the adapter saved in `adapter_dir` in this process, merge, save safetensors to `dst`.

    `base_path` defaults to the adapter's `base_model_name_or_path`."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    src, out = Path(adapter_dir), Path(dst)
    config = src / "adapter_config.json"
    if not config.is_file():
        raise ExportError(f"{src}: no adapter_config.json (not a saved LoRA adapter)")
    base_path = base_path or json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path")
    if not base_path:
        raise ExportError(f"{config}: no base_model_name_or_path to merge the adapter into")
    base = AutoModelForImageTextToText.from_pretrained(base_path, use_safetensors=True)
    merged = PeftModel.from_pretrained(base, str(src)).merge_and_unload()
    merged.save_pretrained(str(out), safe_serialization=True)
    log.info("merged the LoRA adapter of %s into %s -> %s", src, base_path, out)
    return out


def _replace_dir(tmp: Path, out_dir: Path) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)


def export_final(trainer: Any, processor: Any, out_dir: str | Path, adapter_dir: str | Path | None = None) -> Path:
    """Save the trained policy (LoRA: adapter to `adapter_dir`, then merged) and its processor under `out_dir`.

    Every rank must call it (saving gathers shards); only the main process writes `out_dir`."""
    from spatialiq_train.processor import save_processor

    out_dir = Path(out_dir)
    accelerator = trainer.accelerator
    tmp = out_dir.with_name(out_dir.name + ".partial")
    if is_adapter_model(accelerator.unwrap_model(trainer.model)):
        adapter = Path(adapter_dir) if adapter_dir is not None else out_dir.with_name(out_dir.name + ".adapter")
        trainer.save_model(str(adapter))  # all ranks: ZeRO-3 gathers; peft writes the adapter weights only
        if accelerator.is_main_process:
            save_processor(processor, adapter)
            merge_adapter(adapter, tmp)
    else:
        trainer.save_model(str(tmp))  # gathers ZeRO-3 shards; safetensors by default
    if accelerator.is_main_process:
        save_processor(processor, tmp)  # the standard Qwen2_5_VLProcessor files stock AutoProcessor and vLLM load
        (tmp / "training_args.bin").unlink(missing_ok=True)
        _replace_dir(tmp, out_dir)
        log.info("final model saved to %s", out_dir)
    accelerator.wait_for_everyone()
    return out_dir
