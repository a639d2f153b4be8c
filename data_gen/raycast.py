"""The exact voxel ray caster and instance-id helpers; they live in :mod:`data_gen.visibility` (this path stays
importable)."""

from data_gen.heightmap import Block  # noqa: F401
from data_gen.visibility import (  # noqa: F401
    NO_BLOCK,
    Components,
    block_id,
    block_of,
    cast,
    cast_rays,
    grid_box,
    pixel_window,
    visible_set,
    window_rays,
)
