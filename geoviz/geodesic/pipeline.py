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
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from geoviz import limits
from geoviz.backend import ArraySpec, DiskCache, get_cache, jsonable
from geoviz.data.dataset import ImageShape, LabeledDataset, SoftLabeledDataset
from geoviz.data.preprocess import stratified_subsample
from geoviz.errors import DatasetError, GeovizError
from geoviz.features import (
    AUTO,
    BUILTIN_SPACES,
    ENCODER_PRESET_NAMES,
    FeatureSpace,
    FittedFeatures,
    SpaceChoice,
    choose_space,
    make_space,
)
from geoviz.geodesic.distances import (
    TwoQDistances,
    check_qp_solver,
    objective,
    optimal_weights,
    two_q_distances,
)
from geoviz.geodesic.interpolate import generalized_geodesic_dataset, mccann_dataset
from geoviz.geodesic.labels import LabelSpace, label_space
from geoviz.geodesic.uncertainty import DEFAULT_LEVEL, GeodesicBootstrap, bootstrap_q
from geoviz.geodesic.weights import as_simplex_weights
from geoviz.maps.base import FittedMap, MapDiagnostics, PlanNeighbours
from geoviz.maps.methods import (
    MAP_METHODS,
    TRAINED_MAP_METHODS,
    MapMethod,
    map_estimator,
    map_method_label,
)
from geoviz.maps.neural import NeuralMapConfig, get_neural_preset
from geoviz.memory import memory_budget_bytes
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd import BLUR_NEIGHBOURS, OTDDConfig
from geoviz.tasks import resolve_backend, run_in_threads

if TYPE_CHECKING:  # a higher layer, opened by explore() (tests/test_layers.py FRONT_DOORS)
    from geoviz.explorer.widget import GeodesicExplorer

__all__ = [
    "MAP_METHODS",
    "GeodesicConfig",
    "GeodesicResult",
    "MapMethod",
    "Progress",
    "fit_geodesic",
]

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
    features
        The feature space the costs live in (paper Sec. 5.3): ``"auto"`` (default: chosen
        from the data by :func:`geoviz.features.choose_space`, the digit box for grey
        glyphs, the pretrained encoder for other images, raw features for vectors; pixel
        space for neural maps), ``"pixels"``, ``"pca"``, ``"box"``, ``"encoder"`` or a
        registered ``"model:<name>"`` (:func:`geoviz.features.make_space`); left out of
        :meth:`to_dict` for pixels, so pixel-space keys are those of before feature spaces
        existed.
    encoder
        The ``"encoder"`` space's weights: ``"pretrained"`` (default, the shipped ones) or
        a training budget here (``"cpu"``, ``"tiny"``; :data:`geoviz.features.ENCODER_PRESETS`).
    """

    otdd: OTDDConfig = field(default_factory=OTDDConfig)
    n_target: int | None = None
    n_reference: int | None = None
    subsample_seed: int = 0
    qp_solver: str | None = None
    method: MapMethod = "barycentric"
    neural: NeuralMapConfig = field(default_factory=lambda: get_neural_preset("cpu"))
    features: str = AUTO
    encoder: str = "pretrained"

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
        if not isinstance(self.features, str) or not (
            self.features in BUILTIN_SPACES or self.features.startswith("model:")
        ):
            raise GeovizError(
                f"GeodesicConfig.features must be one of {', '.join(BUILTIN_SPACES)} or "
                f"'model:<name>', got {str(self.features)[:40]!r}"
            )
        if self.encoder not in ENCODER_PRESET_NAMES:
            raise GeovizError(
                f"GeodesicConfig.encoder must be one of {', '.join(ENCODER_PRESET_NAMES)}, "
                f"got {str(self.encoder)[:40]!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able parameters (for cache keys and metadata).

        The neural budget only appears for methods that train networks
        (:data:`~geoviz.maps.methods.TRAINED_MAP_METHODS`), so barycentric keys
        do not change when it does.
        """
        out = dataclasses.asdict(self)
        if self.method not in TRAINED_MAP_METHODS:
            out.pop("neural")
        if self.features == "pixels":
            out.pop("features")
        if self.features != "encoder":
            out.pop("encoder")
        plain: dict[str, Any] = jsonable(out)
        return plain


@dataclass(frozen=True, eq=False)
class GeodesicResult:
    """Target ``Q`` projected onto the generalized geodesic of ``m`` references.

    The result is the ``m`` fitted maps ``T_i: Q -> P_i`` (Sec. 3.1), the (2,Q)
    distances between their pushforwards (Def. 2, Sec. 3.3) and the minimiser
    ``a_hat`` of eq. (hat_a). Every per-map number (OTDD, sharpness,
    convergence, ...) is read off the maps' own
    :meth:`~geoviz.maps.base.FittedMap.diagnostics`: see :attr:`diagnostics` and
    the per-map column properties below.

    Attributes
    ----------
    target
        ``Q`` as used (after the optional subsample), ``N_Q`` samples.
    references
        The ``m`` references ``P_i`` as used.
    config
        The configuration.
    maps
        The ``m`` fitted maps ``T_i`` (:class:`~geoviz.maps.base.FittedMap`; one
        kind per result, :attr:`GeodesicConfig.method`).
    distances
        The (2,Q) distances ``W_i = W^2_{2,Q}(P_i, Q)`` and
        ``W_ij = W^2_{2,Q}(P_i, P_j)``, split into feature and label terms.
    a_hat
        ``(m,)`` minimiser of :meth:`objective` on the simplex (eq. (hat_a)).
    label_space
        The joint label space: unique reference names (prefixes), the ``K =
        sum_i C_i`` class names ``"ref_name/class"`` and reference ``i``'s block
        of columns.
    feature_space
        The fitted feature space the costs live in (``None``: pixels / raw features).
    mapped_images
        With a feature space, the maps' images lifted back through the plans.
    space_choice
        With ``features="auto"``, what :func:`~geoviz.features.choose_space` picked and why
        (``None`` when the space was named).
    """

    target: LabeledDataset
    references: tuple[LabeledDataset, ...]
    config: GeodesicConfig
    maps: tuple[FittedMap[Any], ...]
    distances: TwoQDistances
    a_hat: np.ndarray
    label_space: LabelSpace
    feature_space: FittedFeatures | None = None
    mapped_images: tuple[torch.Tensor, ...] | None = field(default=None, repr=False)
    space_choice: SpaceChoice | None = None

    # ------------------------------------------------------------------ derived
    @property
    def m(self) -> int:
        """Number of references."""
        return len(self.references)

    @property
    def method(self) -> MapMethod:
        """How the maps were computed (:attr:`GeodesicConfig.method`)."""
        return self.config.method

    @property
    def reference_names(self) -> tuple[str, ...]:
        """The ``m`` unique reference names used as prefixes."""
        return self.label_space.dataset_names

    @property
    def class_names(self) -> tuple[str, ...]:
        """``K = sum_i C_i`` names ``"ref_name/class"`` (names made unique)."""
        return self.label_space.class_names

    @property
    def block_slices(self) -> tuple[slice, ...]:
        """``m`` slices: reference ``i``'s classes are ``class_names[block_slices[i]]``."""
        return self.label_space.block_slices

    @property
    def mapped_features(self) -> tuple[torch.Tensor, ...]:
        """``m`` tensors ``(N_Q, D)`` float32: ``T_i(x)`` for every target sample, in the
        datasets' own space (images). With a feature space, the maps' plans were computed on
        features and these are the references' own images under each plan
        (:func:`lift_through_plan`); the maps' feature-space images are
        ``maps[i].mapped_features_``."""
        if self.mapped_images is not None:
            return self.mapped_images
        return tuple(t.mapped_features_ for t in self.maps)

    @property
    def features_name(self) -> str:
        """The feature space the costs live in (``"pixels"`` when none was fitted)."""
        return "pixels" if self.feature_space is None else self.feature_space.name

    @property
    def space_sentence(self) -> str:
        """One sentence: the space the costs live in and, when it was chosen, why."""
        return space_sentence(self.space_choice, self.features_name)

    def bootstrap(
        self,
        replicates: int = 200,
        *,
        seed: int = 0,
        level: float = DEFAULT_LEVEL,
        progress: Callable[[str, float], None] | None = None,
    ) -> GeodesicBootstrap:
        """Q-resampling bootstrap of ``W_i``, ``W_ij``, ``W^2(P_a, Q)`` and ``a_hat``.

        The maps stay fixed and ``Q``'s samples are drawn again with replacement
        (:func:`geoviz.geodesic.uncertainty.bootstrap_q`); refits of the maps are
        :func:`geoviz.geodesic.refit.bootstrap_refit`.
        """
        return bootstrap_q(
            self.distances,
            replicates,
            seed=seed,
            level=level,
            qp_solver=self.config.qp_solver,
            a_hat=self.a_hat,
            progress=progress,
        )

    @property
    def soft_labels(self) -> tuple[torch.Tensor, ...]:
        """``m`` tensors ``(N_Q, C_i)`` float32: labels of ``T_i(z)`` (rows sum to 1)."""
        return tuple(t.soft_labels_ for t in self.maps)

    @property
    def label_distances_to_target(self) -> tuple[torch.Tensor, ...]:
        """``m`` tensors ``(C_Q, C_i)`` float64 class-conditional ``W_2^2`` of the maps' fits."""
        return tuple(t.label_cost_ for t in self.maps)

    @property
    def w_to_target(self) -> np.ndarray:
        """``(m,)`` ``W_i = W^2_{2,Q}(P_i, Q)`` (Def. 2; :data:`geoviz.glossary.W_TARGET`)."""
        return self.distances.w_to_target

    @property
    def w_between(self) -> np.ndarray:
        """``(m, m)`` ``W_ij = W^2_{2,Q}(P_i, P_j)``, symmetric, zero diagonal."""
        return self.distances.w_between

    @property
    def diagnostics(self) -> tuple[MapDiagnostics, ...]:
        """The ``m`` maps' typed diagnostics (:class:`~geoviz.maps.base.PlanDiagnostics`
        or :class:`~geoviz.maps.base.NeuralDiagnostics`)."""
        return tuple(t.diagnostics() for t in self.maps)

    def _column(self, name: str) -> np.ndarray:
        """``(m,)`` float column of one diagnostic; NaN for maps that do not have it.

        The NaN only exists in these array views (kept for the app's tables);
        the diagnostics themselves say ``None`` or lack the field.
        """
        values = [getattr(d, name, None) for d in self.diagnostics]
        return np.array([np.nan if v is None else float(v) for v in values])

    @property
    def otdd(self) -> np.ndarray:
        """``(m,)`` each map's estimate of ``d^2(Q, P_i)`` (plan cost or Monge cost)."""
        return self._column("otdd")

    @property
    def marginal_errors(self) -> np.ndarray:
        """``(m,)`` Sinkhorn marginal violations (NaN for maps without a plan)."""
        return self._column("marginal_error")

    @property
    def converged(self) -> tuple[bool, ...]:
        """``m`` flags: Sinkhorn converged, or a neural fit stopped early on its own."""
        return tuple(d.converged for d in self.diagnostics)

    @property
    def effective_neighbours(self) -> np.ndarray:
        """``(m,)`` median plan-row perplexity of each map (NaN: no plan).

        How many reference points a mapped point averages (1: one-to-one;
        ``N_i``: every point maps to the mean of ``P_i``). Above
        :data:`~geoviz.ot.otdd.BLUR_NEIGHBOURS` the map is blurry (:attr:`blurry`).
        """
        return self._column("effective_neighbours")

    @property
    def label_confidence(self) -> np.ndarray:
        """``(m,)`` mean largest soft-label entry of each map (1: one class; ``1/C_i``: uniform)."""
        return self._column("label_confidence")

    @property
    def epsilon_abs(self) -> np.ndarray:
        """``(m,)`` absolute entropic regularisation ``epsilon * mean(C_i)`` (NaN: no plan)."""
        return self._column("epsilon_abs")

    def _plans(self) -> tuple[PlanNeighbours, ...]:
        plans = tuple(t.plan_neighbours() for t in self.maps)
        return tuple(p for p in plans if p is not None) if all(plans) else ()

    @property
    def row_perplexity(self) -> tuple[torch.Tensor, ...]:
        """``m`` float32 ``(N_Q,)`` per-point perplexities, or ``()`` without plans."""
        return tuple(p.row_perplexity for p in self._plans())

    @property
    def neighbour_index(self) -> tuple[torch.Tensor, ...]:
        """``m`` int64 ``(N_Q, k)`` largest-plan-entry indices, or ``()`` without plans."""
        return tuple(p.index for p in self._plans())

    @property
    def neighbour_weight(self) -> tuple[torch.Tensor, ...]:
        """``m`` float32 ``(N_Q, k)`` row-normalised plan weights, or ``()`` without plans."""
        return tuple(p.weight for p in self._plans())

    @property
    def map_details(self) -> tuple[dict[str, Any], ...]:
        """``m`` dicts: each map's :meth:`~geoviz.maps.base.FittedMap.summary`."""
        return tuple(t.summary() for t in self.maps)

    @property
    def image_shape(self) -> ImageShape | None:
        """Image shape of generated samples: shared by target and references, else ``None``."""
        shapes = {self.target.image_shape, *(ref.image_shape for ref in self.references)}
        return self.target.image_shape if len(shapes) == 1 else None

    @property
    def blurry(self) -> np.ndarray:
        """``(m,)`` bool: ``effective_neighbours > BLUR_NEIGHBOURS`` (averages many points)."""
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
        plan = self.maps[int(i)].check_plan_neighbours()
        n_q = self.target.n_samples
        rows = np.arange(n_q) if indices is None else np.asarray(indices, dtype=np.int64).ravel()
        if rows.size and (rows.min() < 0 or rows.max() >= n_q):
            raise GeovizError(f"target indices must be in 0..{n_q - 1}, got {rows.tolist()}")
        t = torch.from_numpy(rows)
        return plan.index[t].numpy(), plan.weight[t].numpy(), plan.row_perplexity[t].numpy()

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
        """One plain dict per map: reference, method, OTDD, the map's summary and ``blurry``."""
        blurry = self.blurry
        return [
            {
                "reference": name,
                "method": self.method,
                "otdd": float(self.otdd[i]),
                **fitted.summary(),
                "blurry": bool(blurry[i]),
            }
            for i, (name, fitted) in enumerate(
                zip(self.label_space.dataset_names, self.maps, strict=True)
            )
        ]

    def space_record(self) -> dict[str, Any]:
        """The feature space for manifests: name, digest, facts and, when chosen, why."""
        record = (
            {"name": "pixels", "digest": "pixels"}
            if self.feature_space is None
            else self.feature_space.manifest()
        )
        record["sentence"] = self.space_sentence
        if self.space_choice is not None:
            record.update(self.space_choice.as_dict())
        return record

    def _provenance(self) -> dict[str, Any]:
        return {
            "target": {"name": self.target.name, "fingerprint": self.target.fingerprint},
            "references": [
                {"name": name, "fingerprint": ref.fingerprint}
                for name, ref in zip(self.label_space.dataset_names, self.references, strict=True)
            ],
            "config": self.config.to_dict(),
            "maps": self.map_summaries(),
            "features": self.space_record(),
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
        # checked once here (a SimplexWeights passes through): the objective and the
        # interpolation below take it without checking it again
        a = as_simplex_weights(weights, self.m)
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

    def explore(self, **kwargs: Any) -> GeodesicExplorer:
        """The app's live explorer of this geodesic as a Jupyter widget.

        Parameters
        ----------
        **kwargs
            Passed to :class:`geoviz.explorer.widget.GeodesicExplorer` (``weights``: the
            first pick, default ``a_hat``; ``bootstrap``: replicates of the intervals;
            ``embedding``; ``seed``).

        Returns
        -------
        GeodesicExplorer
            Display it (the last expression of a cell); ``.weights`` is the pick (assign
            it to move the pick), ``.value`` is ``W^2(P_a, Q)`` there and ``.dataset()``
            is ``P_a``.

        Notes
        -----
        A view of a higher layer (:mod:`geoviz.explorer`) opened from the result, as
        ``pandas.DataFrame.plot`` opens matplotlib: imported here, on first use, so that
        :mod:`geoviz.geodesic` never needs the widget's dependencies to load.
        """
        from geoviz.explorer.widget import GeodesicExplorer

        return GeodesicExplorer(self, **kwargs)

    def summary(self) -> dict[str, Any]:
        """Plain-Python description (for the CLI, the app and manifests)."""
        return {
            "target": self.target.name,
            "method": self.method,
            "features": self.features_name,
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


def space_sentence(choice: SpaceChoice | None, named: str) -> str:
    """``"space: digit box (chosen: ...)"``, or ``"space: pca50 (named)"`` without a choice."""
    if choice is not None:
        return f"space: {choice.label} (chosen automatically: {choice.reason})"
    words = {"box": "digit box", "pixels": "pixels"}.get(named, named)
    return f"space: {words} (named, not chosen automatically)"


def space_choice_for(
    config: GeodesicConfig, datasets: Sequence[LabeledDataset]
) -> SpaceChoice | None:
    """What ``"auto"`` picks for ``datasets`` (Q first) under ``config``; ``None`` when
    ``config.features`` names a space. Neural maps generate images, so for them ``"auto"``
    is pixel space."""
    if config.features != AUTO:
        return None
    if config.method != "barycentric":
        return SpaceChoice(
            "pixels",
            "pretrained",
            "neural maps generate images, so their costs are on pixels",
            "images" if datasets and datasets[0].image_shape is not None else "vectors",
        )
    return choose_space(datasets)


def space_of(
    config: GeodesicConfig,
    cache: DiskCache,
    datasets: Sequence[LabeledDataset] = (),
) -> tuple[FeatureSpace, SpaceChoice | None]:
    """The feature space of ``config`` for ``datasets`` (the encoder caches in ``cache``).

    Returns the space and, for ``"auto"``, the choice (:func:`space_choice_for`).
    """
    choice = space_choice_for(config, datasets)
    name = config.features if choice is None else choice.name
    preset = config.encoder if choice is None else choice.encoder_preset
    space = make_space(name, encoder_preset=preset, cache=cache, device=config.otdd.device)
    return space, choice


def lift_through_plan(fitted: FittedMap[Any], reference_images: torch.Tensor) -> torch.Tensor:
    """The references' own images under a plan computed in a feature space.

    ``T_i(x_n) = sum_j w_nj X_j / sum_j w_nj`` over the plan's largest entries of row ``n``
    (:class:`~geoviz.maps.base.PlanNeighbours`, :data:`geoviz.ot.otdd.N_NEIGHBOURS` per row),
    with ``X_j`` the reference's images: the barycentric projection (paper eq. (bary_map))
    of the images instead of the features. At the sharp default epsilon a row has about
    two effective neighbours, so its largest entries hold nearly all its mass and the
    mapped image is a blend of a few real reference images.

    Returns
    -------
    torch.Tensor
        ``(N_Q, D_images)`` float32.

    Raises
    ------
    GeovizError
        The map has no plan (a neural map).
    """
    plan = fitted.plan_neighbours()
    if plan is None:
        raise GeovizError(
            "this map keeps no plan, so its images cannot come back from a feature space"
        )
    weight = plan.weight.clamp_min(0.0) * (plan.index >= 0)
    weight = weight / weight.sum(dim=1, keepdim=True).clamp_min(1e-30)
    index = plan.index.clamp_min(0)
    images = reference_images.to(torch.float32)
    out = torch.zeros(index.shape[0], images.shape[1], dtype=torch.float32)
    for j in range(index.shape[1]):
        out += weight[:, j : j + 1] * images[index[:, j]]
    return out


def _labels_between(
    a: LabeledDataset, b: LabeledDataset, otdd_cfg: OTDDConfig, cache: DiskCache
) -> torch.Tensor:
    """Class-conditional label distances ``(C_a, C_b)`` float64, cached per unordered pair."""
    # label_distances(a, b) == label_distances(b, a).T (per-class subsamples do not
    # depend on the other dataset): one cache entry per unordered pair
    if a.fingerprint > b.fingerprint:
        return _labels_between(b, a, otdd_cfg, cache).T
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
        expect={"distances": ArraySpec((a.n_classes, b.n_classes), finite=False)},
    )
    distances: torch.Tensor = payload["distances"]
    return distances.to(torch.float64)


class _PartsProgress:
    """Overall progress of the maps and label pairs, which may run on several threads.

    The maps take ``map_share`` of the bar (each ``1/m`` of it, split by its own stages,
    :data:`_MAP_STAGES`), the pairs 90 % of the rest; the stage text is the latest any part
    reported.
    """

    def __init__(
        self, m: int, n_pairs: int, map_share: float, report: Callable[[str, float], None]
    ) -> None:
        self._lock = threading.Lock()
        self._maps = [0.0] * m
        self._pairs_done = 0
        self._n_pairs = n_pairs
        self._map_share = map_share
        self._report = report

    def _fraction(self) -> float:
        maps = self._map_share * sum(self._maps) / len(self._maps)
        return maps + (1 - self._map_share) * 0.9 * self._pairs_done / max(self._n_pairs, 1)

    def map_stage(self, k: int, stage: str, sub: str | None, fraction: float) -> None:
        # "sinkhorn: batch 3/6" is a part of the "sinkhorn" stage
        lo, hi = _MAP_STAGES.get((sub or "").split(":")[0], (0.0, 1.0))
        within = lo + (hi - lo) * min(max(float(fraction), 0.0), 1.0)
        with self._lock:
            self._maps[k] = max(self._maps[k], within)
            text = stage if sub is None or sub == "done" else f"{stage} ({sub})"
            self._report(text, self._fraction())

    def pair_started(self, stage: str) -> None:
        with self._lock:
            self._report(stage, self._fraction())

    def pair_done(self) -> None:
        with self._lock:
            self._pairs_done += 1
            self._report(f"label distances ({self._pairs_done}/{self._n_pairs})", self._fraction())


#: working memory of one barycentric map per target-reference sample pair, bytes: the dense
#: cost, the kernel or plan, and the returned coupling (float64), with room for temporaries
_MAP_BYTES_PER_PAIR = 4 * 8


def _part_workers(
    workers: int,
    n_parts: int,
    n_target: int,
    refs: Sequence[LabeledDataset],
    otdd_cfg: OTDDConfig | None = None,
) -> int:
    """Threads for the maps and pairs: ``workers``, at most one per part, and no more maps
    at once than the memory budget holds (each holds its own ``N_Q x N_P`` matrices).

    Batches that run as Ray tasks hold nothing that large in this process: every map then
    submits its batches at once, so each (reference, batch) pair is a task of its own."""
    if (
        otdd_cfg is not None
        and otdd_cfg.batch_size is not None
        and resolve_backend(otdd_cfg.backend) == "ray"
    ):
        return n_parts
    used = max(1, min(int(workers), n_parts))
    budget = memory_budget_bytes()
    if used > 1 and budget is not None:
        largest = max(n_target * ref.n_samples for ref in refs) * _MAP_BYTES_PER_PAIR
        used = max(1, min(used, budget // max(largest, 1)))
    return used


def fit_geodesic(
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    config: GeodesicConfig | None = None,
    *,
    progress: Progress | None = None,
    cache: DiskCache | None = None,
    features: FeatureSpace | None = None,
    workers: int = 1,
) -> GeodesicResult:
    """Project ``target`` onto the generalized geodesic of ``references`` (paper Sec. 3).

    With a feature space (``config.features`` other than ``"pixels"``, or ``features``
    given), the space is fitted on the union of the (subsampled) target and references, and
    every cost, coupling, map diagnostic, (2,Q) distance and ``a_hat`` lives in it (paper
    Sec. 5.3); ``P_a``'s images come back through the couplings
    (:func:`lift_through_plan`), so the result's datasets and mapped features stay images.

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
    features
        A :class:`~geoviz.features.FeatureSpace` to use instead of ``config.features``
        (e.g. a :class:`~geoviz.features.ModelSpace` of the user's model).
    workers
        Threads for the independent parts: the ``m`` maps and the ``m(m-1)/2`` label
        distances between references (:func:`geoviz.tasks.run_in_threads`; fewer when the
        memory budget cannot hold that many maps at once). ``1`` (default) runs them one
        after another. The values do not depend on it; each part still uses torch's own
        threads, so ``workers`` above ``cores / torch.get_num_threads()`` mostly pays off
        on a machine whose cores would otherwise idle in the single-threaded parts (the
        label distances' LAPACK calls, the solver's small steps).

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
    images = (target, refs)
    choice: SpaceChoice | None = None
    if features is not None:
        space = features
    else:
        space, choice = space_of(config, cache, [target, *refs])
    fitted_space: FittedFeatures | None = None
    if not isinstance(space, FeatureSpace):
        raise GeovizError(f"features must be a FeatureSpace, got {type(space).__name__}")
    if space.name != "pixels":
        if config.method != "barycentric":
            raise GeovizError(
                f"maps in the {space.name} feature space are barycentric: a neural map there "
                "would generate features, not images (use method='barycentric')"
            )
        report(f"feature space {space.name}", 0.0)
        fitted_space = space.fit(
            [target, *refs], lambda stage, f: report(f"{space.name}: {stage}", 0.3 * f)
        )
        target = fitted_space.transform(target)
        refs = tuple(fitted_space.transform(ref) for ref in refs)
    m = len(refs)
    labels_space = label_space(refs)
    otdd_cfg = config.otdd
    map_share = 0.85

    # 1-2. one OTDD map per reference (paper Sec. 3.1) and the label distances between
    #      references: independent parts, run one after another or on `workers` threads
    estimator = map_estimator(config.method, otdd_cfg, config.neural, cache)
    kind = map_method_label(config.method)
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    names = labels_space.dataset_names
    progress_of_parts = _PartsProgress(m, len(pairs), map_share, report)

    def run_part(part: tuple[str, int]) -> Any:
        what, k = part
        if what == "map":
            stage = f"{kind} {k + 1}/{m}: {target.name} -> {names[k]}"
            progress_of_parts.map_stage(k, stage, None, 0.0)
            fitted = estimator.fit(
                target,
                refs[k],
                lambda sub, fraction: progress_of_parts.map_stage(k, stage, sub, fraction),
            )
            progress_of_parts.map_stage(k, stage, "done", 1.0)
            return fitted
        i, j = pairs[k]
        progress_of_parts.pair_started(f"label distances {names[i]} <-> {names[j]}")
        between_ij = _labels_between(refs[i], refs[j], otdd_cfg, cache)
        progress_of_parts.pair_done()
        return between_ij

    # the maps first: they are the long parts, so the pairs fill the gaps at the end
    parts = [("map", k) for k in range(m)] + [("pair", k) for k in range(len(pairs))]
    workers_used = _part_workers(workers, len(parts), target.n_samples, refs, otdd_cfg)
    outputs = run_in_threads(run_part, parts, workers_used)
    maps: list[FittedMap[Any]] = outputs[:m]
    between: dict[tuple[int, int], torch.Tensor] = dict(zip(pairs, outputs[m:], strict=True))

    # the maps' own label distances (same datasets, method and seed as _labels_between)
    to_target = [fitted.label_cost_.to(torch.float64) for fitted in maps]
    for lab, ref in zip(to_target, refs, strict=True):
        if tuple(lab.shape) != (target.n_classes, ref.n_classes):
            raise GeovizError(
                f"the map {target.name!r} -> {ref.name!r} has label distances of shape "
                f"{tuple(lab.shape)}, expected {(target.n_classes, ref.n_classes)}"
            )

    # 3. (2,Q) distances (Def. 2), objective (ds_eq) and a_hat (hat_a)
    report("(2,Q) distances and a_hat", map_share + (1 - map_share) * 0.9)
    dist = two_q_distances(
        target.features,
        target.labels,
        [fitted.mapped_features_ for fitted in maps],
        [fitted.soft_labels_ for fitted in maps],
        to_target,
        between,
        lambda_x=float(otdd_cfg.lambda_x),
        lambda_y=float(otdd_cfg.lambda_y),
    )
    a_hat = optimal_weights(dist.w_to_target, dist.w_between, solver=config.qp_solver)
    lifted = None
    if fitted_space is not None:
        lifted = tuple(
            lift_through_plan(fitted, ref.features)
            for fitted, ref in zip(maps, images[1], strict=True)
        )
    result = GeodesicResult(
        target=images[0],
        references=images[1],
        config=config,
        maps=tuple(maps),
        distances=dist,
        a_hat=a_hat,
        label_space=labels_space,
        feature_space=fitted_space,
        mapped_images=lifted,
        space_choice=choice,
    )
    report("done", 1.0)
    return result
