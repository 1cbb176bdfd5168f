"""The ``parquet`` format (one row per sample, Hugging Face ``datasets`` layout).

Writer, reader, the manifest in the schema metadata and the stored hard labels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError
from geoviz.export.datasets import _dataset
from geoviz.export.manifest import _base_manifest
from geoviz.export.png import _decode_png, _png_payload, _stack_images
from geoviz.export.registry import BuiltExport, ExportFormatSpec


def _list_array(matrix: np.ndarray) -> Any:
    """``(N, K)`` float32 -> Arrow ``list<float32>`` with N rows."""
    import pyarrow as pa

    n, k = matrix.shape
    offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32)[: n + 1])
    return pa.ListArray.from_arrays(
        offsets, pa.array(np.ascontiguousarray(matrix, np.float32).reshape(-1))
    )


def _parquet_bytes(
    ds: SoftLabeledDataset, manifest: dict[str, Any], labels: np.ndarray, pngs: list[bytes] | None
) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns: dict[str, Any] = {}
    hf_features: dict[str, Any] = {}
    if pngs is not None:
        width = len(str(max(ds.n_samples - 1, 0)))
        columns["image"] = pa.StructArray.from_arrays(
            [
                pa.array(pngs, type=pa.binary()),
                pa.array([f"{i:0{width}d}.png" for i in range(len(pngs))]),
            ],
            names=["bytes", "path"],
        )
        hf_features["image"] = {"_type": "Image"}
    else:
        columns["features"] = _list_array(ds.features.numpy())
    columns["label"] = pa.array(labels.astype(np.int64), type=pa.int64())
    columns["soft_labels"] = _list_array(ds.soft_labels.numpy())
    if len(set(ds.class_names)) == len(ds.class_names):
        hf_features["label"] = {"_type": "ClassLabel", "names": list(ds.class_names)}
    table = pa.table(columns).replace_schema_metadata(
        {
            "class_names": json.dumps(list(ds.class_names), ensure_ascii=False),
            "geoviz_manifest": json.dumps(manifest, ensure_ascii=False),
            "huggingface": json.dumps({"info": {"features": hf_features}}, ensure_ascii=False),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _list_column(table: Any, column: str, path: Path) -> np.ndarray:
    import pyarrow as pa

    col = table.column(column).combine_chunks()
    if col.null_count:
        raise DatasetFormatError(f"column {column!r} has missing values", path)
    if pa.types.is_fixed_size_list(col.type):
        width = col.type.list_size
    else:
        lengths = np.diff(np.asarray(col.offsets))
        if lengths.size and (lengths != lengths[0]).any():
            raise DatasetFormatError(f"rows of column {column!r} have different lengths", path)
        width = int(lengths[0]) if lengths.size else 0
    flat = np.array(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32, copy=True)
    return flat.reshape(len(col), width)


def _load_parquet(path: Path) -> SoftLabeledDataset:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise DatasetFormatError(f"corrupt Parquet export: {err}", path) from err
    meta = table.schema.metadata or {}
    manifest = json.loads(meta[b"geoviz_manifest"]) if b"geoviz_manifest" in meta else {}
    if b"class_names" in meta:
        class_names = json.loads(meta[b"class_names"])
    elif "class_names" in manifest:
        class_names = manifest["class_names"]
    else:
        raise DatasetFormatError("Parquet export has no class_names schema metadata", path)
    if "soft_labels" not in table.column_names:
        raise DatasetFormatError("Parquet export has no 'soft_labels' column", path)
    soft = _list_column(table, "soft_labels", path)
    image_shape = manifest.get("image_shape")
    if "image" in table.column_names:
        cells = table.column("image").to_pylist()
        channels = int(image_shape[0]) if image_shape else None
        images = [
            _decode_png(cell["bytes"], channels, f"{path} row {i}") for i, cell in enumerate(cells)
        ]
        features, shape = _stack_images(images, image_shape, path)
        image_shape = shape
    elif "features" in table.column_names:
        features = _list_column(table, "features", path)
    else:
        raise DatasetFormatError(
            "Parquet export has neither an 'image' nor a 'features' column", path
        )
    return _dataset(
        features,
        soft,
        class_names,
        image_shape,
        manifest.get("name"),
        manifest.get("metadata"),
        path,
    )


def _parquet_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest in a Parquet export's schema metadata (``geoviz_manifest``), or ``None``."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[b"geoviz_manifest"]) if b"geoviz_manifest" in meta else None


def _parquet_labels(path: Path) -> np.ndarray | None:
    """The hard labels stored in a Parquet export (``label`` column), or ``None``."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=None)
    return table.column("label").to_numpy() if "label" in table.column_names else None


def _build_parquet(
    ds: SoftLabeledDataset, filename: str, created: str, labels: np.ndarray, hard: dict[str, Any]
) -> BuiltExport:
    pngs, quant = _png_payload(ds, "parquet") if ds.image_shape is not None else (None, None)
    manifest = _base_manifest(ds, "parquet", created, hard, quant)
    return BuiltExport({filename: _parquet_bytes(ds, manifest, labels, pngs)}, manifest)


def _parquet_snippet(filename: str) -> str:
    name = json.dumps(str(filename), ensure_ascii=False)
    return f'from datasets import load_dataset; ds = load_dataset("parquet", data_files={name}, split="train")'


#: the ``parquet`` format (registered by :mod:`geoviz.export.formats`)
SPEC = ExportFormatSpec(
    name="parquet",
    extension=".parquet",
    description="Parquet — one row per sample, Hugging Face datasets compatible",
    mime="application/vnd.apache.parquet",
    build=_build_parquet,
    read=lambda path, _container: _load_parquet(path),
    image_fidelity=("lossy (uint8) for images", "lossless for vectors"),
    sniff=lambda head, _names: head == b"PAR1",
    manifest=_parquet_manifest,
    hard_labels=lambda path, _container: (_parquet_labels(path), None),
    snippet=_parquet_snippet,
)
