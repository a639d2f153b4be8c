"""Writers for both output forms: the per-view folder layout and parquet shards with an HF schema.

Every file goes through ``spatialiq_train.core.io`` (temp file, then rename), and nothing written
carries a timestamp or an absolute path, so the same arguments always give the same bytes.
The parquet schema embeds the Hugging Face ``datasets`` features (``image`` as an ``Image``
feature), so ``datasets.load_dataset("parquet", data_files=...)`` decodes images without any
extra code; ``datasets`` itself is not needed to write.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spatialiq_train.core.dataset import GT_FILE, GT_INT_FIELDS, IMAGE_FILE, SCENE_FILE
from spatialiq_train.core.io import atomic_write_bytes, dumps_json
from spatialiq_train.core.views import LEVEL, LeafView, sample_relpath, view_relpath

_V = {"_type": "Value"}
_INT_LIST_LIST = {"feature": {"feature": {"dtype": "int64", **_V}, "_type": "Sequence"}, "_type": "Sequence"}
# (column, HF feature) in row order; the HF "Sequence" spelling is read by datasets 3.x and later.
COLUMNS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("view", {"dtype": "string", **_V}),
    ("structure_id", {"dtype": "string", **_V}),
    ("split", {"dtype": "string", **_V}),
    ("trainval", {"dtype": "string", **_V}),
    ("dapo", {"dtype": "string", **_V}),
    ("sample_idx", {"dtype": "int64", **_V}),
    ("seed", {"dtype": "int64", **_V}),
    ("index", {"dtype": "int64", **_V}),
    ("view_idx", {"dtype": "int64", **_V}),
    ("offset", {"dtype": "float64", **_V}),
    ("fov", {"dtype": "float64", **_V}),
    ("dist", {"dtype": "float64", **_V}),
    ("object_type", {"dtype": "string", **_V}),
    ("task1", {"dtype": "string", **_V}),
    *((name, {"dtype": "int64", **_V}) for name in GT_INT_FIELDS),
    ("visible_blocks", _INT_LIST_LIST),
    ("height_map", _INT_LIST_LIST),
    ("camera", {"dtype": "string", **_V}),
)
IMAGE_COLUMN = ("image", {"_type": "Image"})


def scene_record(
    hmap: np.ndarray, *, sample_idx: int, structure_id: str, seed: int, index: int, object_type: str,
    visible_count: int,
) -> dict[str, Any]:
    """scene.json: the keys of spec 4.1 in order, then ``structure_id``, ``seed``, ``index``, ``object_type``."""
    h = np.asarray(hmap, dtype=np.int64)
    total = int(h.sum())
    return {
        "height_map": h.tolist(),
        "rows": int(h.shape[0]),
        "cols": int(h.shape[1]),
        "total_blocks": total,
        "visible_blocks": int(visible_count),
        "non_visible_blocks": total - int(visible_count),
        "level": LEVEL,
        "sample_idx": int(sample_idx),
        "structure_id": structure_id,
        "seed": int(seed),
        "index": int(index),
        "object_type": object_type,
    }


def encode_png(rgb: np.ndarray) -> bytes:
    """Deterministic RGB PNG bytes (no metadata chunks) of an (H, W, 3) uint8 image."""
    from PIL import Image

    arr = np.asarray(rgb)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 image, got shape {arr.shape} dtype {arr.dtype}")
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def write_sample(
    out: Path, split: str, scene: Mapping[str, Any], gts: Mapping[LeafView, Mapping[str, Any]],
    images: Mapping[LeafView, bytes] | None = None,
) -> dict[str, str]:
    """Write one structure's ``scene.json`` and, per leaf, ``gt.json`` (and ``view.png``), each atomically.

    Returns ``{path relative to out: sha256}`` of the bytes written, in writing order.
    """
    sample_idx = int(scene["sample_idx"])
    written: dict[str, str] = {}

    def put(rel: str, data: bytes) -> None:
        atomic_write_bytes(out / rel, data)
        written[rel] = sha256_bytes(data)

    for leaf, gt in gts.items():
        leaf_rel = view_relpath(split, sample_idx, leaf)
        if images is not None:
            put(f"{leaf_rel}/{IMAGE_FILE}", images[leaf])
        put(f"{leaf_rel}/{GT_FILE}", json_bytes(gt))
    # scene.json last: a sample folder with a scene.json has all its views
    put(f"{sample_relpath(split, sample_idx)}/{SCENE_FILE}", json_bytes(dict(scene)))
    return written


def json_bytes(obj: Any) -> bytes:
    """The bytes ``spatialiq_train.core.io.atomic_write_json`` writes for ``obj``."""
    return dumps_json(obj).encode("utf-8")


def view_row(
    scene: Mapping[str, Any], gt: Mapping[str, Any], *, view: str, split: str, partitions: Mapping[str, str | None],
    image: bytes | None = None,
) -> dict[str, Any]:
    """One parquet row for a leaf view; ``view`` is its folder relative to the dataset root."""
    row: dict[str, Any] = {
        "view": view,
        "structure_id": scene["structure_id"],
        "split": split,
        "trainval": partitions.get("trainval"),
        "dapo": partitions.get("dapo"),
        "sample_idx": scene["sample_idx"],
        "seed": scene["seed"],
        "index": scene["index"],
        "view_idx": gt["view_idx"],
        "offset": float(gt["offset"]),
        "fov": float(gt["fov"]),
        "dist": float(gt["dist"]),
        "object_type": gt["object_type"],
        "task1": gt["task1"],
        **{name: int(gt[name]) for name in GT_INT_FIELDS},
        "visible_blocks": [list(map(int, b)) for b in gt["visible_blocks"]],
        "height_map": scene["height_map"],
        "camera": json.dumps(gt["camera"], sort_keys=True) if "camera" in gt else None,
    }
    if image is not None:
        row["image"] = {"bytes": image, "path": f"{view}/{IMAGE_FILE}"}
    return row


def hf_features(with_image: bool) -> dict[str, Any]:
    """The ``datasets`` features dict of a shard (what ``Features.to_dict()`` would give)."""
    cols = COLUMNS + ((IMAGE_COLUMN,) if with_image else ())
    return {name: feature for name, feature in cols}


def arrow_schema(with_image: bool) -> Any:
    """The pyarrow schema of a shard, with the HF features embedded under the ``huggingface`` key."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
    fields = []
    for name, feature in hf_features(with_image).items():
        if feature["_type"] == "Value":
            fields.append(pa.field(name, types[feature["dtype"]]))
        elif feature["_type"] == "Image":
            fields.append(pa.field(name, pa.struct([("bytes", pa.binary()), ("path", pa.string())])))
        else:
            fields.append(pa.field(name, pa.list_(pa.list_(pa.int64()))))
    meta = {"huggingface": json.dumps({"info": {"features": hf_features(with_image)}})}
    return pa.schema(fields, metadata=meta)


def parquet_bytes(rows: Sequence[Mapping[str, Any]], with_image: bool) -> bytes:
    """Deterministic parquet bytes for ``rows`` (same rows -> same bytes for one pyarrow version)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(list(rows), schema=arrow_schema(with_image))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", row_group_size=4096, write_statistics=True)
    return buf.getvalue()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
