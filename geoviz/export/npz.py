"""The ``npz`` format (NumPy archive, lossless): writer, reader, manifest, hard labels."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError
from geoviz.export.datasets import _dataset
from geoviz.export.manifest import _base_manifest
from geoviz.export.png import _quantise
from geoviz.export.registry import BuiltExport, ExportFormatSpec


def _npz_bytes(ds: SoftLabeledDataset, manifest: dict[str, Any], labels: np.ndarray) -> bytes:
    arrays: dict[str, np.ndarray] = {
        "features": ds.features.numpy(),
        "soft_labels": ds.soft_labels.numpy(),
        "labels": labels.astype(np.int64),
        "class_names": np.array(list(ds.class_names), dtype=np.str_)
        if ds.class_names
        else np.zeros(0, dtype="<U1"),
        "image_shape": np.array(list(ds.image_shape or ()), dtype=np.int64),
        "metadata_json": np.array(json.dumps(ds.metadata, ensure_ascii=False)),
        "manifest_json": np.array(json.dumps(manifest, ensure_ascii=False)),
    }
    if ds.image_shape is not None:
        arrays["images"] = _quantise(ds).images
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub: **kwds arrays
    return buf.getvalue()


def _load_npz(path: Path) -> SoftLabeledDataset:
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = {"features", "soft_labels", "class_names"} - set(data.files)
            if missing:
                raise DatasetFormatError(f"npz export lacks key(s) {sorted(missing)}", path)
            manifest = (
                json.loads(str(data["manifest_json"])) if "manifest_json" in data.files else {}
            )
            metadata = (
                json.loads(str(data["metadata_json"])) if "metadata_json" in data.files else {}
            )
            shape = data["image_shape"].tolist() if "image_shape" in data.files else []
            return _dataset(
                data["features"],
                data["soft_labels"],
                [str(c) for c in data["class_names"]],
                shape,
                manifest.get("name"),
                metadata,
                path,
            )
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        if isinstance(err, DatasetFormatError):
            raise
        raise DatasetFormatError(f"corrupt npz export: {err}", path) from err


def _npz_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest embedded in an npz export (``manifest_json``), or ``None``."""
    with np.load(path, allow_pickle=False) as data:
        return json.loads(str(data["manifest_json"])) if "manifest_json" in data.files else None


def _npz_labels(path: Path) -> np.ndarray | None:
    """The hard labels stored in an npz export (``labels``), or ``None``."""
    with np.load(path, allow_pickle=False) as data:
        return data["labels"] if "labels" in data.files else None


def _build_npz(
    ds: SoftLabeledDataset, filename: str, created: str, labels: np.ndarray, hard: dict[str, Any]
) -> BuiltExport:
    manifest = _base_manifest(ds, "npz", created, hard)
    return BuiltExport({filename: _npz_bytes(ds, manifest, labels)}, manifest)


def _npz_snippet(filename: str) -> str:
    name = json.dumps(str(filename), ensure_ascii=False)
    return f'import numpy as np; d = np.load({name}); X, Y = d["features"], d["soft_labels"]'


#: the ``npz`` format (registered by :mod:`geoviz.export.formats`)
SPEC = ExportFormatSpec(
    name="npz",
    extension=".npz",
    description="npz — NumPy archive (features, soft_labels, labels, class_names), lossless",
    mime="application/octet-stream",
    build=_build_npz,
    read=lambda path, _container: _load_npz(path),
    sniff=lambda _head, names: names is not None and "features.npy" in names,
    manifest=_npz_manifest,
    hard_labels=lambda path, _container: (_npz_labels(path), None),
    snippet=_npz_snippet,
)
