"""The ``pt`` format (``torch.load(weights_only=True)`` dict, lossless).

Writer, reader, embedded manifest and stored hard labels.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError
from geoviz.export.datasets import _dataset
from geoviz.export.manifest import _base_manifest
from geoviz.export.registry import BuiltExport, ExportFormatSpec


def _pt_bytes(ds: SoftLabeledDataset, manifest: dict[str, Any], labels: np.ndarray) -> bytes:
    obj = {
        "features": ds.features.clone(),
        "soft_labels": ds.soft_labels.clone(),
        "labels": torch.from_numpy(labels.astype(np.int64)),
        "class_names": list(ds.class_names),
        "image_shape": list(ds.image_shape) if ds.image_shape else None,
        "name": ds.name,
        "metadata": ds.metadata,
        "manifest": manifest,
    }
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _load_pt(path: Path) -> SoftLabeledDataset:
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # unpickling errors come in many types
        raise DatasetFormatError(f"corrupt or unsafe .pt export: {err}", path) from err
    if not isinstance(obj, dict) or not {"features", "soft_labels", "class_names"} <= set(obj):
        raise DatasetFormatError(
            "a .pt export must be a dict with features, soft_labels, class_names", path
        )
    return _dataset(
        obj["features"],
        obj["soft_labels"],
        list(obj["class_names"]),
        obj.get("image_shape"),
        obj.get("name"),
        obj.get("metadata"),
        path,
    )


def _pt_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest embedded in a .pt export (``manifest``), or ``None``."""
    obj = torch.load(path, weights_only=True, map_location="cpu")
    return obj.get("manifest") if isinstance(obj, dict) else None


def _pt_labels(path: Path) -> np.ndarray | None:
    """The hard labels stored in a .pt export (``labels``), or ``None``."""
    obj = torch.load(path, weights_only=True, map_location="cpu")
    labels = obj.get("labels") if isinstance(obj, dict) else None
    return None if labels is None else labels.numpy()


def _build_pt(
    ds: SoftLabeledDataset, filename: str, created: str, labels: np.ndarray, hard: dict[str, Any]
) -> BuiltExport:
    manifest = _base_manifest(ds, "pt", created, hard)
    return BuiltExport({filename: _pt_bytes(ds, manifest, labels)}, manifest)


def _pt_snippet(filename: str) -> str:
    name = json.dumps(str(filename), ensure_ascii=False)
    return (
        f"import torch; d = torch.load({name}, weights_only=True); "
        'X, Y = d["features"], d["soft_labels"]'
    )


#: the ``pt`` format (registered by :mod:`geoviz.export.formats`)
SPEC = ExportFormatSpec(
    name="pt",
    extension=".pt",
    suffixes=(".pt", ".pth"),
    description="pt — torch.load(weights_only=True) dict of tensors, lossless",
    mime="application/octet-stream",
    build=_build_pt,
    read=lambda path, _container: _load_pt(path),
    sniff=lambda _head, names: names is not None and any(n.endswith("data.pkl") for n in names),
    manifest=_pt_manifest,
    hard_labels=lambda path, _container: (_pt_labels(path), None),
    snippet=_pt_snippet,
)
