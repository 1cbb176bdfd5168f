"""The ``pt`` format (``torch.load(weights_only=True)`` dict, lossless).

Writer, reader, embedded manifest and stored hard labels.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import DatasetFormatError
from geoviz.export.datasets import _dataset


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
