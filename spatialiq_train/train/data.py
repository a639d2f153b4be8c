"""Trace JSONL (read by :mod:`spatialiq_train.core.traces`) -> TRL datasets for SFT and GRPO.

Both trainers get conversational rows whose contents are the trace's typed parts, each image part a placeholder
that TRL fills, in order, from the `images` column (``trl.data_utils.prepare_multimodal_messages``). Images are
referenced by path and decoded lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from spatialiq_train.core.traces import Mode, load_examples

if TYPE_CHECKING:
    from spatialiq_train.core.plan import PhasePlan


def load_split(
    traces_dir: str | Path, split: str, data_root: str | Path, mode: Mode, limit: int | None = None
) -> Any:
    """Read `<traces_dir>/<split>.jsonl` into a `datasets.Dataset` for the given trainer."""
    return examples_to_dataset(load_examples(traces_dir, split, data_root, mode, limit))


def training_examples(plan: PhasePlan) -> list[dict[str, Any]]:
    """The phase's training rows: ``data.traces_dir``'s split, or with ``data.sources`` the replay mix, global batch
    after global batch in the order of ``core.mixing.mixed_order`` (read in that order: the mapper's sequential
    sampler), as many batches as a step budget of ``max_steps`` trains when that is more than one pass."""
    d = plan.data
    if not d.sources:
        return load_examples(d.traces_dir, d.train_split, d.data_root, plan.phase, d.max_examples)
    from spatialiq_train.core.mixing import TraceSource, mixed_examples

    batch = plan.batch.global_batch if plan.phase == "sft" else plan.batch.prompts_per_step
    return mixed_examples([TraceSource(**s) for s in d.sources], d.train_split, d.data_root, plan.phase, batch or 1,
                          plan.logging.seed, d.max_examples, min_batches=max(plan.optimizer.max_steps, 0))


def load_training_split(plan: PhasePlan) -> Any:
    """:func:`training_examples` as a `datasets.Dataset`."""
    return examples_to_dataset(training_examples(plan))


def examples_to_dataset(examples: list[dict[str, Any]]) -> Any:
    """Build a `datasets.Dataset`; the `images` column holds paths that decode to PIL images on access."""
    import datasets

    ds = datasets.Dataset.from_list(examples)
    if "images" in ds.column_names:
        list_type = getattr(datasets, "List", None) or datasets.Sequence
        ds = ds.cast_column("images", list_type(datasets.Image()))
    return ds


def with_pixel_budget(dataset: Any, min_pixels: int, max_pixels: int) -> Any:
    """``dataset`` whose images come out already resized to the processor's target size for this budget.

    GRPO's colocated vLLM re-processes raw images with the checkpoint's own preprocessor defaults, while the
    trainer tokenises with the recipe's budget; a 512x512 view is 256 image tokens on one side and 324 on the other.
    An image already at the target size (sides multiples of 28 inside the budget) is left as it is by both, so both
    count the same tokens. Lazy (``with_transform``): nothing is decoded or stored until a row is read.
    """
    if not hasattr(dataset, "with_transform") or "images" not in getattr(dataset, "column_names", ()):
        return dataset
    from spatialiq_train.core.processor import check_budget, resize_to_budget

    check_budget(min_pixels, max_pixels)

    def fit(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        batch["images"] = [[resize_to_budget(im, min_pixels, max_pixels) for im in ims] if ims else ims
                           for ims in batch["images"]]
        return batch

    return dataset.with_transform(fit)
