"""A toy export format for the tests: one JSON file (issue 24: a new format is this module
plus one ``register_format(SPEC)``; the dispatcher, the CLI and the app then offer it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from geoviz.data.dataset import SoftLabeledDataset
from geoviz.export.manifest import _base_manifest
from geoviz.export.registry import BuiltExport, ExportFormatSpec

NAME = "toyjson"


def _build(
    ds: SoftLabeledDataset, filename: str, created: str, labels: np.ndarray, hard: dict[str, Any]
) -> BuiltExport:
    manifest = _base_manifest(ds, NAME, created, hard)
    doc = {
        # float32 -> float64 -> text -> float64 -> float32 is exact
        "features": ds.features.numpy().astype(np.float64).tolist(),
        "soft_labels": ds.soft_labels.numpy().astype(np.float64).tolist(),
        "labels": labels.astype(int).tolist(),
        "class_names": list(ds.class_names),
        "image_shape": list(ds.image_shape) if ds.image_shape else None,
        "name": ds.name,
        "metadata": ds.metadata,
        "manifest": manifest,
    }
    return BuiltExport({filename: json.dumps(doc).encode()}, manifest)


def _doc(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _read(path: Path, _container: str) -> SoftLabeledDataset:
    doc = _doc(path)
    return SoftLabeledDataset(
        features=np.asarray(doc["features"], dtype=np.float32),
        soft_labels=np.asarray(doc["soft_labels"], dtype=np.float32),
        class_names=tuple(doc["class_names"]),
        name=doc["name"],
        image_shape=tuple(doc["image_shape"]) if doc["image_shape"] else None,
        metadata=doc["metadata"],
    )


SPEC = ExportFormatSpec(
    name=NAME,
    extension=".toyjson",
    description="toyjson — a test's JSON file, lossless",
    mime="application/json",
    build=_build,
    read=_read,
    sniff=lambda head, _names: head.startswith(b'{"fe'),
    manifest=lambda path: _doc(path)["manifest"],
    hard_labels=lambda path, _container: (np.asarray(_doc(path)["labels"]), None),
    snippet=lambda filename: f"import json; d = json.load(open({filename!r}))",
)
