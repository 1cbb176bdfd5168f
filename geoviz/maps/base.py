"""The interface every OTDD map implements (paper Sec. 3.1).

An OTDD map ``T: (x, y) -> (x', soft label over the reference classes)`` pushes
the target dataset Q towards a reference dataset P. Barycentric projections
(:mod:`geoviz.maps.barycentric`) only know the images of the training target
points; entropic maps and neural maps (:mod:`geoviz.maps.neural`, paper Sec. 3.1, "OTDD neural
map") can map new points. Code that consumes maps (the generalized geodesic,
the app) relies only on :class:`DatasetMap`.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError

__all__ = ["DatasetMap", "apply_map", "check_transform_inputs", "nearest_reference_ratio"]


@runtime_checkable
class DatasetMap(Protocol):
    """A fitted map from the target's ``(features, labels)`` to the reference space.

    Attributes
    ----------
    supports_out_of_sample
        ``True`` if :meth:`transform` accepts points other than the training
        target points.
    reference_classes
        Names of the reference classes, i.e. the ``C_P`` columns of the soft labels.
    reference_name
        Name of the reference dataset (used to prefix class names).
    """

    supports_out_of_sample: bool

    @property
    def reference_classes(self) -> tuple[str, ...]: ...

    @property
    def reference_name(self) -> str: ...

    def transform(
        self, features: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Map target points.

        Parameters
        ----------
        features
            ``(n, D)`` target features.
        labels
            ``(n,)`` target label indices (into the target's classes), or
            ``None`` where the map does not need them.

        Returns
        -------
        (torch.Tensor, torch.Tensor)
            Mapped features ``(n, D)`` float32 CPU and soft labels ``(n, C_P)``
            float32 CPU with rows summing to 1.
        """
        ...


def check_transform_inputs(
    features: torch.Tensor, labels: torch.Tensor | None, n_features: int, n_classes: int | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Validate/convert ``transform`` inputs; raises :class:`~geoviz.errors.DatasetError`."""
    feats = torch.as_tensor(features)
    if feats.ndim != 2 or feats.shape[1] != n_features:
        raise DatasetError(
            f"transform: features must have shape (n, {n_features}), got {tuple(feats.shape)}"
        )
    feats = feats.detach().to(device="cpu", dtype=torch.float32)
    if not bool(torch.isfinite(feats).all()):
        raise DatasetError("transform: features contain NaN or infinite values")
    if labels is None:
        return feats, None
    labs = torch.as_tensor(labels)
    if labs.ndim != 1 or labs.shape[0] != feats.shape[0]:
        raise DatasetError(
            f"transform: labels must have shape ({feats.shape[0]},), got {tuple(labs.shape)}"
        )
    if labs.is_floating_point() and not bool((labs == labs.round()).all()):
        raise DatasetError("transform: labels must be integers")
    labs = labs.detach().to(device="cpu", dtype=torch.int64)
    if (
        n_classes is not None
        and labs.numel()
        and (int(labs.min()) < 0 or int(labs.max()) >= n_classes)
    ):
        raise DatasetError(f"transform: labels must lie in 0..{n_classes - 1}")
    return feats, labs


def apply_map(
    dataset_map: DatasetMap, dataset: LabeledDataset, name: str | None = None
) -> SoftLabeledDataset:
    """Push ``dataset`` through ``dataset_map`` into a :class:`SoftLabeledDataset`.

    Class names are prefixed by the reference name (``"fashion_mnist/Sneaker"``).
    """
    feats, soft = dataset_map.transform(dataset.features, dataset.labels)
    prefix = dataset_map.reference_name
    return SoftLabeledDataset(
        features=feats,
        soft_labels=soft,
        class_names=tuple(f"{prefix}/{c}" for c in dataset_map.reference_classes),
        name=name or f"T({dataset.name}->{prefix})",
        image_shape=dataset.image_shape,
        metadata={"source": dataset.name, "reference": prefix, "map": type(dataset_map).__name__},
    )


def nearest_reference_ratio(
    mapped: torch.Tensor,
    reference: torch.Tensor,
    rng: np.random.Generator,
    *,
    max_mapped: int = 1000,
    max_reference: int = 2000,
) -> float:
    """Does a map's output look like reference data? A distance ratio, for any map.

    ``median_x min_j ||T(x) - x'_j||`` divided by the median nearest-neighbour
    distance inside the reference: about 1 when mapped points sit among the
    reference samples, much larger when they lie off the data (blurred averages,
    under-trained generators), below 1 when they sit on reference samples.

    Parameters
    ----------
    mapped
        ``(n, D)`` images ``T(x)``.
    reference
        ``(N_P, D)`` reference features.
    rng
        Draws the subsamples: first ``max_reference`` reference rows (used for
        both distances), then ``max_mapped`` mapped rows, each only when larger.

    Returns
    -------
    float
        The ratio (``inf`` when the reference has duplicate-only neighbours).
    """
    ref = reference
    if ref.shape[0] > max_reference:
        ref = ref[torch.from_numpy(rng.choice(ref.shape[0], max_reference, replace=False))]
    pts = mapped
    if pts.shape[0] > max_mapped:
        pts = pts[torch.from_numpy(rng.choice(pts.shape[0], max_mapped, replace=False))]
    d_map = torch.cdist(pts.double(), ref.double()).min(dim=1).values
    within = torch.cdist(ref.double(), ref.double())
    within.fill_diagonal_(math.inf)
    base = float(within.min(dim=1).values.median())
    return float(d_map.median()) / base if base > 0 else math.inf
