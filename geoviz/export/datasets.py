"""Datasets in and out of an export: what the writers accept, what the readers build."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, DatasetFormatError, ExportError


def _as_soft(ds: SoftLabeledDataset | LabeledDataset) -> SoftLabeledDataset:
    """Accept a hard-labelled dataset too (one-hot labels, names ``"name/class"``)."""
    if isinstance(ds, SoftLabeledDataset):
        return ds
    if isinstance(ds, LabeledDataset):
        return SoftLabeledDataset(
            features=ds.features,
            soft_labels=ds.one_hot(),
            class_names=tuple(f"{ds.name}/{c}" for c in ds.classes),
            name=ds.name,
            image_shape=ds.image_shape,
            metadata={
                "datasets": [{"role": "dataset", "name": ds.name, "fingerprint": ds.fingerprint}],
                "source": ds.source,
            },
        )
    raise ExportError(
        f"can only export a SoftLabeledDataset or LabeledDataset, got {type(ds).__name__}"
    )


def _dataset(
    features: np.ndarray | torch.Tensor,
    soft: np.ndarray | torch.Tensor,
    class_names: list[str],
    image_shape: Any,
    name: Any,
    metadata: Any,
    where: Path,
) -> SoftLabeledDataset:
    try:
        return SoftLabeledDataset(
            features=torch.as_tensor(features),
            soft_labels=torch.as_tensor(soft),
            class_names=tuple(str(c) for c in class_names),
            name=str(name) if name is not None else where.stem,
            image_shape=cast(
                "tuple[int, int, int] | None",
                tuple(int(s) for s in image_shape) if image_shape else None,
            ),
            metadata=metadata if isinstance(metadata, dict) else {},
        )
    except DatasetError as err:
        raise DatasetFormatError(err.problem, where) from err
