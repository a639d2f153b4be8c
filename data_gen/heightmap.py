"""Height maps and blocks: the validated height-map array every data_gen module takes.

A structure is an integer height map ``H`` of shape (rows, cols): ``H[i, j]`` blocks stand in
row ``i``, column ``j``; block ``(i, j, k)`` is the one in layer ``k`` (0-based, ``k < H[i, j]``).
"""

from __future__ import annotations

import numpy as np

Block = tuple[int, int, int]


def as_height_map(height_map: np.ndarray, where: str) -> np.ndarray:
    """A validated int64 height map (2-D, non-empty, non-negative integers); ``where`` names the caller in errors."""
    h = np.asarray(height_map)
    if h.ndim != 2 or h.size == 0:
        raise ValueError(f"{where}: height_map must be a non-empty 2-D array, got shape {h.shape}")
    if not np.issubdtype(h.dtype, np.integer):
        if not np.all(np.equal(np.mod(h, 1), 0)):
            raise ValueError(f"{where}: height_map must hold integers, got {h.tolist()}")
        h = h.astype(np.int64)
    if (h < 0).any():
        raise ValueError(f"{where}: height_map must be non-negative, got {h.tolist()}")
    return h.astype(np.int64, copy=False)
