"""End-to-end projection of a target dataset onto the generalized geodesic of references.

:func:`fit_geodesic` runs the two steps of the paper (Sec. 3):

1. an OTDD barycentric map ``T_i`` from the target ``Q`` to every reference
   ``P_i`` (Sec. 3.1, eq. (bary_map); :class:`geoviz.maps.barycentric.BarycentricMap`);
2. the (2,Q)-dataset distances of Def. 2 between the mapped datasets and to
   ``Q``, the objective ``W^2(P_a, Q)`` of eq. (ds_eq) and its minimiser
   ``a_hat`` of eq. (hat_a) (:mod:`geoviz.geodesic.distances`).

The result, :class:`GeodesicResult`, keeps the ``m`` mapped copies of the target
so any point ``P_a = (sum_i a_i T_i)#Q`` (Sec. 3.2-3.3) or McCann
interpolation can be sampled instantly.

Sharpness of the maps: every map also reports how many reference points a
mapped point averages (``effective_neighbours``, the median plan-row
perplexity; 1 is a one-to-one map, ``N_P`` the mean image), how sure its soft
labels are (``label_confidence``) and, per target point, its largest plan
weights (``neighbour_index`` / ``neighbour_weight``). The relative ``epsilon``
of :class:`~geoviz.ot.otdd.OTDDConfig` (``eps_abs = epsilon * mean(C)``,
default :data:`~geoviz.ot.otdd.DEFAULT_EPSILON`) sets that trade-off: larger
epsilon blurs the maps (:attr:`GeodesicResult.blurry`).

Caching: every map (keyed by the target and reference fingerprints and the
OTDD configuration, by :class:`~geoviz.maps.barycentric.BarycentricMap`) and
every reference-reference label-distance matrix is stored in the on-disk cache
(:func:`geoviz.backend.get_cache` or the ``cache`` argument), so a second call
with the same inputs solves no coupling; adding a reference only fits the new map.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from geoviz import limits
from geoviz.backend import DiskCache, get_cache, jsonable
from geoviz.data.dataset import ImageShape, LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.geodesic.distances import (
    TwoQDistances,
    check_qp_solver,
    objective,
    optimal_weights,
    two_q_distances,
)
from geoviz.geodesic.interpolate import generalized_geodesic_dataset, mccann_dataset
from geoviz.geodesic.labels import LabelSpace, label_space
from geoviz.geodesic.weights import check_weights
from geoviz.maps.neural import NeuralMapConfig, get_neural_preset
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd import BLUR_NEIGHBOURS, OTDDConfig

__all__ = [
    "MAP_METHODS",
    "GeodesicConfig",
    "GeodesicResult",
    "MapMethod",
    "Progress",
    "fit_geodesic",
]

#: How the OTDD maps ``T_i`` are computed (paper Sec. 3.1): the barycentric
#: projection of the entropic plan, or the neural map of eq. (max-min).
MapMethod = Literal["barycentric", "neural"]
MAP_METHODS: tuple[MapMethod, ...] = ("barycentric", "neural")

Progress = Callable[[str, float], None]

#: Bumped when the cached payload of this module changes meaning.
PIPELINE_CACHE_VERSION = 2
_LABEL_NAMESPACE = "geodesic_label_distances"


@dataclass(frozen=True)
class GeodesicConfig:
    """Parameters of :func:`fit_geodesic`.

    Attributes
    ----------
    otdd
        OTDD / barycentric-map settings (entropic ``epsilon`` relative to the
        mean ground cost, ``lambda_x``/``lambda_y``, label method, device, ...).
        The (2,Q) distances use the same ``lambda_x``/``lambda_y`` weights and
        the same class-conditional label distances (``label_method``,
        ``max_per_class``, ``seed``) as the maps.
    n_target, n_reference
        Optional stratified subsample sizes of the target and of every
        reference (seed ``subsample_seed``), in ``[2, geoviz.limits.MAX_SAMPLES]``;
        ``None`` keeps all samples.
    subsample_seed
        Seed of those subsamples, in ``[0, geoviz.limits.MAX_SEED]``.
    qp_solver
        ``qpsolvers`` solver for ``a_hat`` (``None``: default; ``"enumerate"``:
        exact face enumeration), see :func:`~geoviz.geodesic.distances.optimal_weights`.
    method
        ``"barycentric"`` (entropic plan, :class:`~geoviz.maps.barycentric.BarycentricMap`)
        or ``"neural"`` (:class:`~geoviz.maps.neural.NeuralOTDDMap`, trained with
        the same cost: ``lambda_x``, ``lambda_y`` and label distances of ``otdd``).
    neural
        Budget of the neural maps (a :class:`~geoviz.maps.neural.NeuralMapConfig`
        or a preset name ``"tiny"``/``"cpu"``/``"paper"``); ignored for
        ``method="barycentric"`` (and left out of :meth:`to_dict`).
    """

    otdd: OTDDConfig = field(default_factory=OTDDConfig)
    n_target: int | None = None
    n_reference: int | None = None
    subsample_seed: int = 0
    qp_solver: str | None = None
    method: MapMethod = "barycentric"
    neural: NeuralMapConfig = field(default_factory=lambda: get_neural_preset("cpu"))

    def __post_init__(self) -> None:
        # OTDDConfig validates its own fields on construction (epsilon within
        # [limits.EPSILON_MIN, limits.EPSILON_MAX], lambdas, ...)
        if not isinstance(self.otdd, OTDDConfig):
            raise GeovizError(
                f"GeodesicConfig.otdd must be an OTDDConfig, got {type(self.otdd).__name__}"
            )
        for name in ("n_target", "n_reference"):
            val = getattr(self, name)
            if val is None:
                continue
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)):
                raise GeovizError(
                    f"GeodesicConfig.{name} must be an integer >= 2 or None, got {val!r}"
                )
            limits.check_int(
                val, f"GeodesicConfig.{name}", 2, limits.MAX_SAMPLES, why="samples of one dataset"
            )
            object.__setattr__(self, name, int(val))
        seed = self.subsample_seed
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise GeovizError(f"GeodesicConfig.subsample_seed must be an integer, got {seed!r}")
        limits.check_int(seed, "GeodesicConfig.subsample_seed", 0, limits.MAX_SEED)
        object.__setattr__(self, "subsample_seed", int(seed))
        check_qp_solver(self.qp_solver)  # an unknown solver fails here, not after the fit
        if self.method not in MAP_METHODS:
            raise GeovizError(
                f"GeodesicConfig.method must be one of {list(MAP_METHODS)}, got {self.method!r}"
            )
        if isinstance(self.neural, str):
            object.__setattr__(self, "neural", get_neural_preset(self.neural))
        if not isinstance(self.neural, NeuralMapConfig):
            raise GeovizError(
                "GeodesicConfig.neural must be a NeuralMapConfig or a preset name, got "
                f"{type(self.neural).__name__}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able parameters (for cache keys and metadata).

        The neural budget only appears for ``method="neural"``, so barycentric
        keys do not change when it does.
        """
        out = dataclasses.asdict(self)
        if self.method == "barycentric":
            out.pop("neural")
        return jsonable(out)


@dataclass(frozen=True, eq=False)
class GeodesicResult:
    """Target ``Q`` projected onto the generalized geodesic of ``m`` references.

    Attributes
    ----------
    target
        ``Q`` as used (after the optional subsample), ``N_Q`` samples.
    references
        The ``m`` references ``P_i`` as used.
    config
        The configuration.
    mapped_features
        ``m`` tensors ``(N_Q, D)``: ``T_i(x)`` for every target sample.
    soft_labels
        ``m`` tensors ``(N_Q, C_i)``: labels of ``T_i(z)`` (rows sum to 1).
    otdd
        ``(m,)`` OTDD ``d^2(Q, P_i)`` (entropic cost of the fitted coupling).
    marginal_errors
        ``(m,)`` Sinkhorn marginal violations.
    converged
        ``m`` flags.
    w_to_target
        ``(m,)`` ``W_i = W^2_{2,Q}(P_i, Q)`` (Def. 2; shown as
        :data:`geoviz.glossary.W_TARGET`).
    w_between
        ``(m, m)`` ``W_ij = W^2_{2,Q}(P_i, P_j)``, symmetric, zero diagonal
        (:data:`geoviz.glossary.W_BETWEEN`).
    a_hat
        ``(m,)`` minimiser of :meth:`objective` on the simplex (eq. (hat_a)).
    class_names
        ``K = sum_i C_i`` names ``"ref_name/class"`` (names made unique).
    block_slices
        ``m`` slices: reference ``i``'s classes are ``class_names[block_slices[i]]``.
    reference_names
        The ``m`` unique reference names used as prefixes.
    distances
        The (2,Q) distances split into feature and label terms.
    label_distances_to_target
        ``m`` tensors ``(C_Q, C_i)`` class-conditional ``W_2^2``.
    effective_neighbours
        ``(m,)`` sharpness of each map: median over the target points of the
        plan-row perplexity ``exp(H(pi_i. / sum_j pi_ij))``, i.e. how many
        reference points a mapped point averages (1: one-to-one; ``N_i``: every
        point maps to the mean of ``P_i``). Above
        :data:`~geoviz.ot.otdd.BLUR_NEIGHBOURS` the map is blurry (:attr:`blurry`).
    label_confidence
        ``(m,)`` mean over the target points of the largest soft-label entry
        (1: every ``T_i(x)`` gets a single class of ``P_i``; ``1/C_i``: uniform).
    epsilon_abs
        ``(m,)`` absolute entropic regularisation of each coupling,
        ``config.otdd.epsilon * mean(C_i)`` (cost ``||x - x'||^2 + W_2^2``, no 1/2).
    row_perplexity
        ``m`` float32 tensors ``(N_Q,)``: the per-point perplexity behind
        ``effective_neighbours`` (in ``[1, N_i]``).
    neighbour_index
        ``m`` int64 tensors ``(N_Q, k)`` (``k = 8``): indices into
        ``references[i]`` of the largest plan entries of every row, by
        decreasing weight; ``-1`` pads rows with fewer entries.
    neighbour_weight
        ``m`` float32 tensors ``(N_Q, k)``: those plan entries divided by their
        row sum (descending, each row sums to ``<= 1``; 0 where padded), so
        ``T_i(x_n) ~ sum_j neighbour_weight[n, j] * X_i[neighbour_index[n, j]]``.
    method
        ``"barycentric"`` or ``"neural"`` (:attr:`GeodesicConfig.method`). Neural
        maps have no plan: ``effective_neighbours``, ``epsilon_abs`` and
        ``marginal_errors`` are NaN, the plan-neighbour tuples are empty, and
        ``converged`` says whether the held-out OT cost stopped improving
        (early stopping) within the budget.
    map_details
        ``m`` dicts of method-specific fit diagnostics (for neural maps: the
        Monge ``transport_cost`` and ``label_term``, ``heldout_ot`` vs
        ``heldout_ot_identity``, ``nearest_reference``, ``classifier_accuracy``,
        iterations and ``fit_seconds``; see :class:`~geoviz.maps.neural.FittedNeuralMap`).
    """

    target: LabeledDataset
    references: tuple[LabeledDataset, ...]
    config: GeodesicConfig
    mapped_features: tuple[torch.Tensor, ...]
    soft_labels: tuple[torch.Tensor, ...]
    otdd: np.ndarray
    marginal_errors: np.ndarray
    converged: tuple[bool, ...]
    w_to_target: np.ndarray
    w_between: np.ndarray
    a_hat: np.ndarray
    class_names: tuple[str, ...]
    block_slices: tuple[slice, ...]
    reference_names: tuple[str, ...] = ()
    distances: TwoQDistances | None = None
    label_distances_to_target: tuple[torch.Tensor, ...] = ()
    effective_neighbours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    label_confidence: np.ndarray = field(default_factory=lambda: np.zeros(0))
    epsilon_abs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    row_perplexity: tuple[torch.Tensor, ...] = ()
    neighbour_index: tuple[torch.Tensor, ...] = ()
    neighbour_weight: tuple[torch.Tensor, ...] = ()
    method: MapMethod = "barycentric"
    map_details: tuple[dict[str, Any], ...] = ()

    # ------------------------------------------------------------------ derived
    @property
    def m(self) -> int:
        """Number of references."""
        return len(self.references)

    @property
    def label_space(self) -> LabelSpace:
        names = self.reference_names or tuple(ref.name for ref in self.references)
        return LabelSpace(tuple(names), self.class_names, self.block_slices)

    @property
    def image_shape(self) -> ImageShape | None:
        """Image shape of generated samples: shared by target and references, else ``None``."""
        shapes = {self.target.image_shape, *(ref.image_shape for ref in self.references)}
        return self.target.image_shape if len(shapes) == 1 else None

    @property
    def blurry(self) -> np.ndarray:
        """``(m,)`` bool: ``effective_neighbours > BLUR_NEIGHBOURS`` (the map averages many points)."""
        return np.asarray(self.effective_neighbours, dtype=float) > BLUR_NEIGHBOURS

    def neighbours(self, i: int, indices: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The reference points that map ``i`` averages for some target points.

        Parameters
        ----------
        i
            Reference index in ``0..m-1``.
        indices
            ``(n,)`` target sample indices (default: all ``N_Q``).

        Returns
        -------
        index : np.ndarray
            ``(n, k)`` int64 indices into ``references[i]`` (``-1``: padding).
        weight : np.ndarray
            ``(n, k)`` float32 row-normalised plan weights, descending.
        perplexity : np.ndarray
            ``(n,)`` float32 effective number of neighbours of each point.
        """
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= int(i) < self.m:
            raise GeovizError(f"reference index must be an integer in 0..{self.m - 1}, got {i!r}")
        if self.method == "neural":
            raise GeovizError(
                "neural maps generate their points instead of averaging reference points, so "
                "they have no plan neighbours; use nearest_references(i) to compare a mapped "
                "point with the closest reference samples"
            )
        if len(self.neighbour_index) != self.m:
            raise GeovizError("this result carries no plan neighbours (fitted by an older geoviz)")
        i = int(i)
        n_q = self.target.n_samples
        rows = np.arange(n_q) if indices is None else np.asarray(indices, dtype=np.int64).ravel()
        if rows.size and (rows.min() < 0 or rows.max() >= n_q):
            raise GeovizError(f"target indices must be in 0..{n_q - 1}, got {rows.tolist()}")
        t = torch.from_numpy(rows)
        return (
            self.neighbour_index[i][t].numpy(),
            self.neighbour_weight[i][t].numpy(),
            self.row_perplexity[i][t].numpy(),
        )

    def nearest_references(
        self, i: int, indices: Any = None, k: int = 4
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` reference samples closest to some mapped points ``T_i(x)``.

        Works for both methods (for a neural map it shows whether a generated
        point looks like real reference data).

        Returns
        -------
        index : np.ndarray
            ``(n, k)`` int64 indices into ``references[i]``, nearest first.
        distance : np.ndarray
            ``(n, k)`` float32 Euclidean distances ``||T_i(x) - x'||``.
        """
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= int(i) < self.m:
            raise GeovizError(f"reference index must be an integer in 0..{self.m - 1}, got {i!r}")
        n_q = self.target.n_samples
        rows = np.arange(n_q) if indices is None else np.asarray(indices, dtype=np.int64).ravel()
        if rows.size and (rows.min() < 0 or rows.max() >= n_q):
            raise GeovizError(f"target indices must be in 0..{n_q - 1}, got {rows.tolist()}")
        ref = self.references[int(i)].features
        k = max(1, min(int(k), ref.shape[0]))
        dist = torch.cdist(self.mapped_features[int(i)][torch.from_numpy(rows)], ref)
        val, idx = torch.topk(dist, k, dim=1, largest=False)
        return idx.numpy(), val.float().numpy()

    @property
    def w2_hat(self) -> float:
        """``W^2(P_a_hat, Q)``, the objective at ``a_hat``."""
        return float(self.objective(self.a_hat))

    # ------------------------------------------------------------------ API
    def objective(self, weights: Any) -> np.ndarray:
        """``W^2(P_a, Q)`` of eq. (ds_eq) for weights ``(..., m)``; returns ``(...)``."""
        return objective(weights, self.w_to_target, self.w_between)

    def map_summaries(self) -> list[dict[str, Any]]:
        """One plain dict per map: OTDD, ``epsilon_abs``, effective neighbours, label confidence."""
        out = []
        for i, name in enumerate(self.label_space.dataset_names):
            entry: dict[str, Any] = {
                "reference": name,
                "method": self.method,
                "otdd": float(self.otdd[i]),
            }
            if len(self.map_details) == self.m:
                entry.update(self.map_details[i])
            if len(self.effective_neighbours) == self.m:
                entry.update(
                    epsilon_abs=float(self.epsilon_abs[i]),
                    effective_neighbours=float(self.effective_neighbours[i]),
                    label_confidence=float(self.label_confidence[i]),
                    blurry=bool(self.blurry[i]),
                )
            out.append(entry)
        return out

    def _provenance(self) -> dict[str, Any]:
        return {
            "target": {"name": self.target.name, "fingerprint": self.target.fingerprint},
            "references": [
                {"name": name, "fingerprint": ref.fingerprint}
                for name, ref in zip(self.label_space.dataset_names, self.references, strict=True)
            ],
            "config": self.config.to_dict(),
            "maps": self.map_summaries(),
        }

    def interpolate(self, weights: Any, n: int | None = None, seed: int = 0) -> SoftLabeledDataset:
        """Samples of ``P_a = (sum_i a_i T_i)#Q`` (paper Sec. 3.2-3.3).

        Parameters
        ----------
        weights
            ``(m,)`` point of the simplex (:class:`~geoviz.errors.WeightsError` otherwise).
        n, seed
            Optional seeded subsample of ``n <= N_Q`` samples.

        Returns
        -------
        SoftLabeledDataset
            Features ``sum_i a_i T_i(x)``, soft labels ``sum_i a_i y~_i`` over
            :attr:`class_names`; ``metadata`` holds the weights, ``W^2(P_a, Q)``
            and the provenance (target/reference names and fingerprints, config).
        """
        meta = self._provenance()
        a = check_weights(weights, self.m)
        meta["objective"] = float(self.objective(a))
        meta["a_hat"] = self.a_hat.tolist()
        return generalized_geodesic_dataset(
            self.mapped_features,
            self.soft_labels,
            a,
            self.label_space,
            n=n,
            seed=seed,
            image_shape=self.image_shape,
            metadata=meta,
        )

    def mccann(self, i: int, t: float, n: int | None = None, seed: int = 0) -> SoftLabeledDataset:
        """Samples of McCann's interpolation ``((1-t) Id + t T_i)#Q``.

        Labels live in ``[Q classes | P_i classes]`` (paper appendix, McCann's
        interpolation between datasets); ``t = 0`` is ``Q``, ``t = 1`` is ``T_i#Q``.
        """
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= int(i) < self.m:
            raise GeovizError(f"reference index must be an integer in 0..{self.m - 1}, got {i!r}")
        i = int(i)
        meta = self._provenance()
        meta["references"] = [meta["references"][i]]
        meta["maps"] = [meta["maps"][i]]
        return mccann_dataset(
            self.target,
            self.mapped_features[i],
            self.soft_labels[i],
            t,
            reference_name=self.label_space.dataset_names[i],
            reference_classes=self.references[i].classes,
            n=n,
            seed=seed,
            image_shape=self.image_shape,
            metadata=meta,
        )

    def summary(self) -> dict[str, Any]:
        """Plain-Python description (for the CLI, the app and manifests)."""
        return {
            "target": self.target.name,
            "method": self.method,
            "n_target": self.target.n_samples,
            "references": list(self.label_space.dataset_names),
            "otdd": self.otdd.tolist(),
            "marginal_errors": self.marginal_errors.tolist(),
            "converged": list(self.converged),
            "w_to_target": self.w_to_target.tolist(),
            "w_between": self.w_between.tolist(),
            "a_hat": self.a_hat.tolist(),
            "w2_hat": self.w2_hat,
            "epsilon": float(self.config.otdd.epsilon),
            "epsilon_abs": np.asarray(self.epsilon_abs, dtype=float).tolist(),
            "effective_neighbours": np.asarray(self.effective_neighbours, dtype=float).tolist(),
            "label_confidence": np.asarray(self.label_confidence, dtype=float).tolist(),
            "blurry": self.blurry.tolist(),
        }

    def __repr__(self) -> str:
        return (
            f"GeodesicResult(target={self.target.name!r}, references={list(self.label_space.dataset_names)}, "
            f"a_hat={np.round(self.a_hat, 4).tolist()})"
        )


# --------------------------------------------------------------------------- fitting


def _validate_inputs(
    target: Any, references: Any
) -> tuple[LabeledDataset, tuple[LabeledDataset, ...]]:
    if not isinstance(target, LabeledDataset):
        raise DatasetError(f"the target must be a LabeledDataset, got {type(target).__name__}")
    if isinstance(references, LabeledDataset):
        raise DatasetError(
            "references must be a sequence of at least 2 datasets, got a single dataset "
            f"({references.name!r})"
        )
    refs = tuple(references)
    if len(refs) < 2:
        raise DatasetError(
            f"a generalized geodesic needs at least 2 reference datasets (m >= 2), got {len(refs)}"
        )
    if len(refs) > limits.MAX_REFERENCES:
        raise DatasetError(
            f"a generalized geodesic takes at most {limits.MAX_REFERENCES} reference datasets, "
            f"got {len(refs)} (one OTDD map and m(m-1)/2 label-distance matrices are fitted "
            "for m references)"
        )
    for k, ref in enumerate(refs):
        if not isinstance(ref, LabeledDataset):
            raise DatasetError(f"reference {k} must be a LabeledDataset, got {type(ref).__name__}")
    bad = [ref for ref in refs if ref.n_features != target.n_features]
    if bad:
        detail = ", ".join(f"{ref.name!r} has {ref.n_features}" for ref in bad)
        raise DatasetError(
            f"all datasets must have the same feature dimension: target {target.name!r} has "
            f"{target.n_features} features per sample but {detail}; bring them to one size with "
            f"geoviz.data.preprocess.harmonize"
        )
    return target, refs


def _subsample(ds: LabeledDataset, n: int | None, seed: int) -> LabeledDataset:
    if n is None or n >= ds.n_samples:
        return ds
    from geoviz.data.preprocess import stratified_subsample

    return stratified_subsample(ds, int(n), seed=seed)


_MAP_STAGES = {
    "labels": (0.0, 0.1),
    "sinkhorn": (0.1, 0.9),
    "debias": (0.9, 1.0),
    # neural maps: label distances, the classifier l, the optional warm start, the max-min training
    "classifier": (0.1, 0.3),
    "warm start": (0.3, 0.4),
    "adversarial": (0.4, 1.0),
    "done": (1.0, 1.0),
}


def _fit_map(
    target: LabeledDataset,
    reference: LabeledDataset,
    config: GeodesicConfig,
    cache: DiskCache,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Fit (or read from ``cache``) one barycentric OTDD map; plain payload.

    Returns
    -------
    dict
        ``mapped_features`` ``(N_Q, D)`` float32, ``soft_labels`` ``(N_Q, C_P)``
        float32, ``otdd``, ``marginal_error``, ``converged``, ``epsilon_abs``,
        ``effective_neighbours``, ``label_confidence`` (Python scalars),
        ``label_distances`` ``(C_Q, C_P)`` float64, ``row_perplexity``
        ``(N_Q,)`` float32, ``neighbour_index`` ``(N_Q, k)`` int64 and
        ``neighbour_weight`` ``(N_Q, k)`` float32 (all CPU tensors).
    """
    if config.method == "neural":
        return _fit_neural_map(target, reference, config, cache, progress)
    from geoviz.maps.barycentric import BarycentricMap

    fitted = BarycentricMap(config.otdd, cache=cache).fit(target, reference, progress=progress)
    res = fitted.otdd_
    if res.row_perplexity is None or res.neighbour_index is None or res.neighbour_weight is None:
        raise GeovizError(
            f"the OTDD map {target.name!r} -> {reference.name!r} carries no plan neighbours"
        )
    return {
        "mapped_features": torch.as_tensor(fitted.mapped_features_)
        .detach()
        .to("cpu", torch.float32),
        "soft_labels": torch.as_tensor(fitted.soft_labels_).detach().to("cpu", torch.float32),
        "otdd": float(res.cost),
        "marginal_error": float(res.marginal_error),
        "converged": bool(res.converged),
        "label_distances": torch.as_tensor(res.label_distances).to("cpu", torch.float64),
        "epsilon_abs": float(res.epsilon_abs),
        "effective_neighbours": float(res.effective_neighbours),
        "label_confidence": float(res.label_confidence),
        "row_perplexity": torch.as_tensor(res.row_perplexity).to("cpu", torch.float32),
        "neighbour_index": torch.as_tensor(res.neighbour_index).to("cpu", torch.int64),
        "neighbour_weight": torch.as_tensor(res.neighbour_weight).to("cpu", torch.float32),
    }


def _fit_neural_map(
    target: LabeledDataset,
    reference: LabeledDataset,
    config: GeodesicConfig,
    cache: DiskCache,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Fit (or read from ``cache``) one neural OTDD map; the payload of :func:`_fit_map`.

    No plan: ``epsilon_abs``, ``effective_neighbours`` and ``marginal_error``
    are NaN and the neighbour entries are ``None``; ``details`` carries the
    neural diagnostics.
    """
    from geoviz.maps.neural import NeuralOTDDMap

    fitted = NeuralOTDDMap(config.neural, config.otdd, cache=cache).fit(
        target, reference, progress=progress
    )
    nan = float("nan")
    return {
        "mapped_features": fitted.mapped_features_.to("cpu", torch.float32),
        "soft_labels": fitted.soft_labels_.to("cpu", torch.float32),
        "otdd": float(fitted.otdd_),
        "marginal_error": nan,
        "converged": bool(fitted.stopped_early_),
        "label_distances": fitted.label_cost_.to("cpu", torch.float64),
        "epsilon_abs": nan,
        "effective_neighbours": nan,
        "label_confidence": float(fitted.label_confidence_),
        "row_perplexity": None,
        "neighbour_index": None,
        "neighbour_weight": None,
        "details": fitted.summary(),
    }


def fit_geodesic(
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    config: GeodesicConfig | None = None,
    *,
    progress: Progress | None = None,
    cache: DiskCache | None = None,
) -> GeodesicResult:
    """Project ``target`` onto the generalized geodesic of ``references`` (paper Sec. 3).

    Parameters
    ----------
    target
        ``Q`` (``N_Q`` samples, ``D`` features).
    references
        ``m >= 2`` datasets ``P_i`` with the same ``D`` (use
        :func:`geoviz.data.preprocess.harmonize` first for images of different sizes).
    config
        :class:`GeodesicConfig` (default settings when ``None``).
    progress
        Optional ``progress(stage, fraction)`` callback; ``fraction`` is the
        overall progress in ``[0, 1]`` and reaches 1.0 at the end.
    cache
        Where maps and label distances are cached; default :func:`get_cache`.

    Returns
    -------
    GeodesicResult

    Raises
    ------
    DatasetError
        Fewer than 2 or more than :data:`geoviz.limits.MAX_REFERENCES` references
        (refused before anything is fitted), non-dataset inputs, different feature
        dimensions, or subsample sizes too small.
    GeovizError
        Invalid configuration (e.g. ``epsilon <= 0``).
    """
    config = GeodesicConfig() if config is None else config
    if not isinstance(config, GeodesicConfig):
        raise GeovizError(f"config must be a GeodesicConfig, got {type(config).__name__}")
    target, refs = _validate_inputs(target, references)
    cache = get_cache() if cache is None else cache
    reached = [0.0]

    def report(stage: str, fraction: float) -> None:
        # overall progress never goes back, whatever the inner solvers report
        reached[0] = max(reached[0], min(float(fraction), 1.0))
        if progress is not None:
            progress(stage, reached[0])

    target = _subsample(target, config.n_target, config.subsample_seed)
    refs = tuple(_subsample(ref, config.n_reference, config.subsample_seed) for ref in refs)
    m = len(refs)
    space = label_space(refs)
    otdd_cfg = config.otdd
    n_pairs = m * (m - 1) // 2
    map_share = 0.85

    # 1. one OTDD map per reference (paper Sec. 3.1), barycentric or neural; both
    #    estimators cache every fitted map in `cache` under both fingerprints + config
    payloads = []
    for i, ref in enumerate(refs):
        kind = "neural OTDD map" if config.method == "neural" else "OTDD map"
        stage = f"{kind} {i + 1}/{m}: {target.name} -> {space.dataset_names[i]}"
        report(stage, map_share * i / m)

        def sub_progress(sub: str, fraction: float, i: int = i, stage: str = stage) -> None:
            lo, hi = _MAP_STAGES.get(sub, (0.0, 1.0))
            within = lo + (hi - lo) * min(max(float(fraction), 0.0), 1.0)
            report(f"{stage} ({sub})", map_share * (i + within) / m)

        payloads.append(_fit_map(target, ref, config, cache, sub_progress))
    report("OTDD maps done", map_share)

    # 2. class-conditional label distances, target-reference and reference-reference
    def labels_between(a: LabeledDataset, b: LabeledDataset) -> torch.Tensor:
        # label_distances(a, b) == label_distances(b, a).T (per-class subsamples do not
        # depend on the other dataset): one cache entry per unordered pair
        if a.fingerprint > b.fingerprint:
            return labels_between(b, a).T
        params = {
            "v": PIPELINE_CACHE_VERSION,
            "a": a.fingerprint,
            "b": b.fingerprint,
            "method": otdd_cfg.label_method,
            "max_per_class": otdd_cfg.max_per_class,
            "seed": int(otdd_cfg.seed),
        }
        payload = cache.get_or_compute(
            _LABEL_NAMESPACE,
            params,
            lambda: {
                "distances": label_distances(
                    a,
                    b,
                    method=otdd_cfg.label_method,
                    max_per_class=otdd_cfg.max_per_class,
                    seed=int(otdd_cfg.seed),
                    device=otdd_cfg.device,
                )
            },
        )
        return payload["distances"].to(torch.float64)

    to_target = []
    for i, ref in enumerate(refs):
        lab = payloads[i]["label_distances"]
        if lab is None or tuple(lab.shape) != (target.n_classes, ref.n_classes):
            lab = labels_between(target, ref)
        to_target.append(lab.to(torch.float64))
    between: dict[tuple[int, int], torch.Tensor] = {}
    done = 0
    for i in range(m):
        for j in range(i + 1, m):
            report(
                f"label distances {space.dataset_names[i]} <-> {space.dataset_names[j]}",
                map_share + (1 - map_share) * 0.9 * done / max(n_pairs, 1),
            )
            between[(i, j)] = labels_between(refs[i], refs[j])
            done += 1

    # 3. (2,Q) distances (Def. 2), objective (ds_eq) and a_hat (hat_a)
    report("(2,Q) distances and a_hat", map_share + (1 - map_share) * 0.9)
    dist = two_q_distances(
        target.features,
        target.labels,
        [p["mapped_features"] for p in payloads],
        [p["soft_labels"] for p in payloads],
        to_target,
        between,
        lambda_x=float(otdd_cfg.lambda_x),
        lambda_y=float(otdd_cfg.lambda_y),
    )
    a_hat = optimal_weights(dist.w_to_target, dist.w_between, solver=config.qp_solver)
    result = GeodesicResult(
        target=target,
        references=refs,
        config=config,
        mapped_features=tuple(p["mapped_features"].to(torch.float32) for p in payloads),
        soft_labels=tuple(p["soft_labels"].to(torch.float32) for p in payloads),
        otdd=np.array([float(p["otdd"]) for p in payloads]),
        marginal_errors=np.array([float(p["marginal_error"]) for p in payloads]),
        converged=tuple(bool(p["converged"]) for p in payloads),
        w_to_target=dist.w_to_target,
        w_between=dist.w_between,
        a_hat=a_hat,
        class_names=space.class_names,
        block_slices=space.block_slices,
        reference_names=space.dataset_names,
        distances=dist,
        label_distances_to_target=tuple(to_target),
        effective_neighbours=np.array([float(p["effective_neighbours"]) for p in payloads]),
        label_confidence=np.array([float(p["label_confidence"]) for p in payloads]),
        epsilon_abs=np.array([float(p["epsilon_abs"]) for p in payloads]),
        row_perplexity=_plan_tuple(payloads, "row_perplexity"),
        neighbour_index=_plan_tuple(payloads, "neighbour_index"),
        neighbour_weight=_plan_tuple(payloads, "neighbour_weight"),
        method=config.method,
        map_details=tuple(dict(p.get("details") or {}) for p in payloads),
    )
    report("done", 1.0)
    return result


def _plan_tuple(payloads: list[dict[str, Any]], key: str) -> tuple[torch.Tensor, ...]:
    """Per-map plan arrays, or ``()`` when the maps have none (neural maps)."""
    values = [p[key] for p in payloads]
    return () if any(v is None for v in values) else tuple(values)
