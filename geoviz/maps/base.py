"""The interface every OTDD map implements (paper Sec. 3.1).

An OTDD map ``T: (x, y) -> (x', soft label over the reference classes)`` pushes
the target dataset Q towards a reference dataset P. Barycentric projections
(:mod:`geoviz.maps.barycentric`) only know the images of the training target
points; entropic maps and neural maps (:mod:`geoviz.maps.neural`, paper Sec. 3.1, "OTDD neural
map") can map new points. Code that consumes maps (the generalized geodesic,
the app) relies only on :class:`FittedMap` (or the smaller :class:`DatasetMap`
protocol).

:class:`FittedMap` is the one base of every fitted map: it owns what all maps
share (the images of the fitted target points, :meth:`~FittedMap.to_dataset`,
:meth:`~FittedMap.transform_dataset`, the input checks and the contract of
:meth:`~FittedMap.transform`) and asks each map for its own
:meth:`~FittedMap.diagnostics` (a typed :class:`PlanDiagnostics` or
:class:`NeuralDiagnostics`), its disk-cache payload (:meth:`~FittedMap.to_payload`
/ ``from_payload``) and, where it has one, its plan (:meth:`~FittedMap.plan_neighbours`).
A new map method subclasses :class:`FittedMap`; nothing outside
:mod:`geoviz.maps` branches on the kind of a map.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np
import torch

from geoviz.data.dataset import ImageShape, LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError

__all__ = [
    "DatasetMap",
    "FittedMap",
    "MapDiagnostics",
    "MapKind",
    "NeuralDiagnostics",
    "PlanDiagnostics",
    "PlanNeighbours",
    "apply_map",
    "check_transform_inputs",
    "nearest_reference_ratio",
]

#: What a fitted map is: the barycentric projection of an entropic plan (eq.
#: (bary_map)), its entropic out-of-sample extension, or the neural map of eq. (max-min).
MapKind = Literal["barycentric", "entropic", "neural"]


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

    @property
    def supports_out_of_sample(self) -> bool: ...

    @property
    def reference_classes(self) -> tuple[str, ...]: ...

    @property
    def reference_name(self) -> str: ...

    def transform(
        self, features: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Map target points; the contract is :meth:`FittedMap.transform`."""
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


# --------------------------------------------------------------------------- diagnostics


@dataclass(frozen=True)
class MapDiagnostics:
    """What every fitted map reports about its fit (paper Sec. 3.1; "sharp before fast").

    Attributes
    ----------
    otdd
        Estimate of ``OTDD^2(Q, P)`` by the map: the entropic cost of the plan
        (barycentric/entropic maps) or the Monge cost
        ``mean lambda_x ||x - T(x)||^2 + lambda_y y^T M l(T(x))`` (neural maps).
        Units: squared feature units (cost ``||x - x'||^2 + W_2^2``, no 1/2).
    label_confidence
        Mean over the fitted target points of the largest soft-label entry, in
        ``[1/C_P, 1]`` (1: every ``T(x)`` gets a single class of P).
    effective_neighbours
        Median plan-row perplexity ``exp(H(pi_i. / sum_j pi_ij))``: how many
        reference points a mapped point averages (1: one-to-one, ``N_P``: the
        mean of P). ``None`` for maps that generate their points (no plan).
    converged
        Whether the fit ended on its own criterion: Sinkhorn's marginal tolerance
        (plans) or early stopping on the held-out OT cost (neural maps).
    iterations
        Sinkhorn iterations (plans) or max-min iterations run (neural maps).
    """

    otdd: float
    label_confidence: float
    effective_neighbours: float | None
    converged: bool
    iterations: int

    def as_dict(self) -> dict[str, Any]:
        """Plain-Python scalars, leaving out what the map does not have (``None``)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class PlanDiagnostics(MapDiagnostics):
    """Diagnostics of a map read off an entropic OTDD plan (barycentric, entropic).

    Attributes
    ----------
    effective_neighbours
        Always a number here (see :class:`MapDiagnostics`).
    epsilon_abs
        Absolute entropic regularisation ``epsilon * mean(C)`` of the plan.
    marginal_error
        Sinkhorn's marginal violation at the end of the solve.
    """

    epsilon_abs: float
    marginal_error: float


@dataclass(frozen=True)
class NeuralDiagnostics(MapDiagnostics):
    """Diagnostics of a neural OTDD map (paper eq. (max-min), appendix B).

    ``effective_neighbours`` is ``None`` (a generated point averages no reference
    points); :attr:`nearest_reference` plays its part. ``converged`` says whether
    early stopping ended training, ``iterations`` how many iterations ran.

    Attributes
    ----------
    transport_cost, label_term
        The two terms of :attr:`otdd`: mean ``lambda_x ||x - G(z)||^2`` and mean
        ``lambda_y y^T M l(G(z))``.
    heldout_ot, heldout_ot_identity
        ``W_2^2(G#Q_held, P_held)`` of the kept weights, and of the identity map.
    classifier_accuracy
        Accuracy of the label model ``l`` on the held-out part of P.
    nearest_reference
        Median distance from ``T(x)`` to its nearest reference point over the
        median nearest-neighbour distance inside P (about 1: looks like P).
    best_iteration
        Iteration of the kept weights.
    fit_seconds
        Training time of the original fit.
    """

    transport_cost: float
    label_term: float
    heldout_ot: float
    heldout_ot_identity: float
    classifier_accuracy: float
    nearest_reference: float
    best_iteration: int
    fit_seconds: float


@dataclass(frozen=True, eq=False)
class PlanNeighbours:
    """The largest plan entries behind every mapped point of a plan-based map.

    Attributes
    ----------
    row_perplexity
        ``(N_Q,)`` float32 per-point perplexity (in ``[1, N_P]``); its median is
        ``effective_neighbours``.
    index
        ``(N_Q, k)`` int64 indices into the reference of the largest entries of
        every plan row, by decreasing weight; ``-1`` pads rows with fewer entries.
    weight
        ``(N_Q, k)`` float32 entries divided by their row sum (each row sums to
        ``<= 1``; 0 where padded), so ``T(x_n) ~ sum_j weight[n, j] X_P[index[n, j]]``.
    """

    row_perplexity: torch.Tensor
    index: torch.Tensor
    weight: torch.Tensor


# --------------------------------------------------------------------------- the base

EstimatorT = TypeVar("EstimatorT")


@dataclass(frozen=True, eq=False, kw_only=True)
class FittedMap(ABC, Generic[EstimatorT]):
    """A fitted OTDD map ``T: (x, y) -> (x', soft label over P's classes)`` (paper Sec. 3.1).

    The base of every fitted map; it satisfies :class:`DatasetMap`. Subclasses
    (frozen dataclasses) add their fitted state and implement :meth:`transform`,
    :meth:`diagnostics`, :meth:`to_payload` and :meth:`from_payload`;
    ``EstimatorT`` is the estimator whose settings :meth:`from_payload` needs.

    Attributes
    ----------
    mapped_features_
        ``(N, D)`` float32 CPU images ``T(x)`` of the fitted target points.
    soft_labels_
        ``(N, C_P)`` float32 CPU soft labels of those images, rows sum to 1.
    label_cost_
        ``(C_Q, C_P)`` float64 class-conditional label distances ``W_2^2`` of the
        fit (NaN rows/columns: classes without samples).
    reference_classes, reference_name
        The reference's class names (the soft-label columns) and name.
    target_classes, target_name
        The fitted target's class names (``transform`` labels index them) and name.
    image_shape
        ``(C, H, W)`` of the reference's images, ``None`` for vectors.
    target_fingerprint_, reference_fingerprint_
        Fingerprints of the fitted datasets.
    """

    kind: ClassVar[MapKind]
    supports_out_of_sample: ClassVar[bool]
    #: Prefix of the pushed-forward dataset's name (``"T"`` -> ``"T(Q->P)"``).
    symbol: ClassVar[str] = "T"

    mapped_features_: torch.Tensor
    soft_labels_: torch.Tensor
    label_cost_: torch.Tensor
    reference_classes: tuple[str, ...]
    reference_name: str
    target_classes: tuple[str, ...]
    target_name: str = "target"
    image_shape: ImageShape | None = None
    target_fingerprint_: str = ""
    reference_fingerprint_: str = ""

    @abstractmethod
    def transform(
        self, features: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Map target points ``(x, y)`` to ``(T(x, y), soft label)``.

        Parameters
        ----------
        features
            ``(n, D)`` features in the target's space.
        labels
            ``(n,)`` indices into :attr:`target_classes`; ``None`` only where the
            map does not need them.

        Returns
        -------
        (torch.Tensor, torch.Tensor)
            ``(n, D)`` mapped features and ``(n, C_P)`` soft labels, float32 CPU,
            rows of the soft labels summing to 1.

        Raises
        ------
        DatasetError
            Wrong shapes, NaN/inf features, labels outside the target's classes.
        GeovizError
            The map cannot map these points (e.g. a barycentric projection and
            new points, or missing labels where the map needs them).
        """

    @abstractmethod
    def diagnostics(self) -> MapDiagnostics:
        """The fit's typed diagnostics (:class:`PlanDiagnostics` or :class:`NeuralDiagnostics`)."""

    @abstractmethod
    def to_payload(self) -> dict[str, Any]:
        """Tensors and plain scalars for :class:`~geoviz.backend.DiskCache`.

        The inverse is :meth:`from_payload`; what the disk cache stores for the map.
        """

    @classmethod
    @abstractmethod
    def from_payload(
        cls,
        payload: Mapping[str, Any],
        target: LabeledDataset,
        reference: LabeledDataset,
        estimator: EstimatorT,
    ) -> FittedMap[EstimatorT]:
        """Rebuild a map stored with :meth:`to_payload`, fitted by ``estimator`` on these data."""

    @staticmethod
    def fitted_on(target: LabeledDataset, reference: LabeledDataset) -> dict[str, Any]:
        """The base's dataset fields (names, classes, image shape, fingerprints) of a fit."""
        return {
            "reference_classes": reference.classes,
            "reference_name": reference.name,
            "target_classes": target.classes,
            "target_name": target.name,
            "image_shape": reference.image_shape,
            "target_fingerprint_": target.fingerprint,
            "reference_fingerprint_": reference.fingerprint,
        }

    def plan_neighbours(self) -> PlanNeighbours | None:
        """The plan entries behind every mapped point; ``None`` for maps without a plan."""
        return None

    def summary(self) -> dict[str, Any]:
        """Plain-Python scalars of the fit (for the CLI, the app and manifests)."""
        return self.diagnostics().as_dict()

    def check_plan_neighbours(self) -> PlanNeighbours:
        """:meth:`plan_neighbours`, or a :class:`~geoviz.errors.GeovizError` saying why none."""
        plan = self.plan_neighbours()
        if plan is None:
            raise GeovizError(
                f"the {self.kind} map {self.target_name!r} -> {self.reference_name!r} has no plan "
                "neighbours (neural maps generate their points instead of averaging reference "
                "points); use nearest_references(i) to compare a mapped point with the closest "
                "reference samples"
            )
        return plan

    def to_dataset(self, name: str | None = None) -> SoftLabeledDataset:
        """The pushed-forward fitted target ``T # Q`` as a :class:`SoftLabeledDataset`.

        Class names are prefixed by the reference name (``"P/class"``); the
        metadata holds the map kind, both fingerprints and :meth:`summary`.
        """
        return SoftLabeledDataset(
            features=self.mapped_features_,
            soft_labels=self.soft_labels_,
            class_names=tuple(f"{self.reference_name}/{c}" for c in self.reference_classes),
            name=name or f"{self.symbol}({self.target_name}->{self.reference_name})",
            image_shape=self.image_shape,
            metadata={
                "map": self.kind,
                "target_fingerprint": self.target_fingerprint_,
                "reference_fingerprint": self.reference_fingerprint_,
                **self._dataset_metadata(),
            },
        )

    def _dataset_metadata(self) -> dict[str, Any]:
        return self.summary()

    def transform_dataset(
        self, dataset: LabeledDataset, name: str | None = None
    ) -> SoftLabeledDataset:
        """Push a labelled dataset (same classes as the fitted target) through the map."""
        if tuple(dataset.classes) != tuple(self.target_classes):
            raise DatasetError(
                f"dataset {dataset.name!r} has classes {list(dataset.classes)[:5]}..., but the map "
                f"was fitted on a target with classes {list(self.target_classes)[:5]}..."
            )
        return apply_map(self, dataset, name)


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
