"""The arguments of a generation run (``spatialiq gen``) and the constants that fix a dataset's layout."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spatialiq_train.core.errors import JobFailure
from spatialiq_train.core.views import LEAF_VIEWS

STRUCTURES_PER_SHARD = 64
"""Default shard size when ``--num-shards`` is not given."""
MAX_HEIGHT = 4
"""Stack limit of the 4x4x4 grid (block ids are ``(i*cols+j)*MAX_HEIGHT+k``)."""
VIEWS_PER_STRUCTURE = len(LEAF_VIEWS)


class GenerationError(JobFailure, RuntimeError):
    """Generation failed; the message names the argument, view or shard (exit 1 unless raised with exit_code=2)."""


MAX_STRUCTURES = 1_000_000
"""Most structures one ``spatialiq gen`` run takes (16 million views): the plan is held in memory."""


class GenConfig(BaseModel):
    """Arguments of ``spatialiq gen``."""

    model_config = ConfigDict(extra="forbid")

    out: Path
    structures: int = Field(gt=0, le=MAX_STRUCTURES, description="number of structures (16 views each); at most "
                            "MAX_STRUCTURES, so an exponent typed by mistake fails here, before anything is written")
    seed: int = Field(ge=0, description="master seed")
    split: Literal["train", "benchmark"]
    workers: int = Field(1, ge=1)
    renderer: Literal["none", "mitsuba", "isaacsim"] = "none"
    object_type: Literal["cube", "can"] = "cube"
    shard: int | None = Field(None, ge=0, description="only this shard (a Slurm array task)")
    num_shards: int | None = Field(None, ge=1)
    resolution: int = Field(512, ge=8, le=4096, description="image side; 512 is the benchmark's")
    render_variant: Literal["auto", "scalar_rgb", "llvm_ad_rgb", "cuda_ad_rgb"] = "auto"
    parts: dict[Literal["val", "warmup", "rl"], int] | None = Field(
        None, description="train split only: how many structures of each part (spatialiq_train.core.splits.part_of) "
                          "the run holds, the first ones in candidate order; the counts sum to structures")

    @model_validator(mode="after")
    def _consistent(self) -> GenConfig:
        if self.num_shards is not None and self.num_shards > self.structures:
            raise ValueError(f"num_shards ({self.num_shards}) must be at most structures ({self.structures})")
        if self.shard is not None:
            if self.num_shards is None:
                raise ValueError("shard needs num_shards (the total number of shards of the run)")
            if self.shard >= self.num_shards:
                raise ValueError(f"shard must be in 0..{self.num_shards - 1} (num_shards={self.num_shards}), "
                                 f"got {self.shard}")
        if self.object_type != "cube" and self.renderer == "none":
            raise ValueError(f"object_type {self.object_type!r} takes its visibility from the renderer's instance "
                             "buffer; choose renderer mitsuba or isaacsim (renderer none works for cube only)")
        if self.parts is not None:
            if self.split != "train":
                raise ValueError(f"parts (--parts) divide the train split; split is {self.split!r}")
            if any(n < 1 for n in self.parts.values()) or sum(self.parts.values()) != self.structures:
                raise ValueError(f"parts (--parts) {self.parts} must be positive counts summing to structures "
                                 f"({self.structures})")
        if self.render_variant != "auto" and self.renderer != "mitsuba":
            raise ValueError(f"render_variant (--render-variant) {self.render_variant!r} is a Mitsuba variant; "
                             f"it needs renderer mitsuba (got renderer {self.renderer!r})")
        return self

    @property
    def shard_count(self) -> int:
        return self.num_shards or math.ceil(self.structures / STRUCTURES_PER_SHARD)

    def identity(self, render_backend: dict[str, Any] | None = None) -> dict[str, Any]:
        """The arguments that decide the output bytes (recorded in gen_config.json and the manifest).

        ``render_backend`` (from :func:`data_gen.generation_run.render_backend`) is added when given: the
        resolved backend decides the image bytes too, while ``render_variant`` is only a request (``auto``
        resolves per machine).
        """
        ident: dict[str, Any] = {
            "structures": self.structures, "seed": self.seed, "split": self.split, "renderer": self.renderer,
            "object_type": self.object_type, "num_shards": self.shard_count, "resolution": self.resolution,
        }
        if self.parts is not None:  # absent otherwise, so records written before parts existed still match
            ident["parts"] = dict(self.parts)
        if render_backend is not None:
            ident["render_backend"] = render_backend
        return ident
