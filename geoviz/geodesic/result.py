"""The outcome of :func:`~geoviz.geodesic.pipeline.fit_geodesic`: :class:`GeodesicResult`.

An immutable record of one projection of a target ``Q`` onto the generalized geodesic of
``m`` references (paper Sec. 3): the fitted maps ``T_i: Q -> P_i``, the (2,Q) distances
between their pushforwards and ``a_hat``. Everything else is read off them: the maps'
diagnostics (per-map columns, sharpness, plan neighbours), samples of any ``P_a`` or of
McCann's interpolation, the Q-resampling bootstrap, summaries for the CLI, the app and
manifests, and the live explorer (:meth:`GeodesicResult.explore`).

Split out of :mod:`geoviz.geodesic.pipeline` (import it from here), as
:mod:`geoviz.ot.otdd_result` holds :class:`~geoviz.ot.otdd_result.OTDDResult`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from geoviz.data.dataset import ImageShape, LabeledDataset, SoftLabeledDataset
from geoviz.errors import GeovizError
from geoviz.features import FittedFeatures, SpaceChoice
from geoviz.geodesic.config import GeodesicConfig, caution_line, space_sentence
from geoviz.geodesic.distances import TwoQDistances, objective
from geoviz.geodesic.interpolate import generalized_geodesic_dataset, mccann_dataset
from geoviz.geodesic.labels import LabelSpace
from geoviz.geodesic.uncertainty import DEFAULT_LEVEL, GeodesicBootstrap, bootstrap_q
from geoviz.geodesic.weights import as_simplex_weights
from geoviz.maps.base import FittedMap, MapDiagnostics, PlanNeighbours
from geoviz.ot.otdd_cost import BLUR_NEIGHBOURS
from geoviz.vocabulary import MapMethod

if TYPE_CHECKING:  # a higher layer, opened by explore() (tests/test_layers.py FRONT_DOORS)
    from geoviz.explorer.widget import GeodesicExplorer

__all__ = ["GeodesicResult"]


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
        (:func:`~geoviz.geodesic.pipeline.lift_through_plan`); the maps' feature-space
        images are ``maps[i].mapped_features_``."""
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

    @property
    def space_caution(self) -> str | None:
        """``"caution: ..."`` when the chosen space measured no class structure in Q or
        references unrelated to it (:attr:`~geoviz.features.choice.SpaceChoice.caveat`)."""
        return caution_line(self.space_choice)

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
        :data:`~geoviz.ot.otdd_cost.BLUR_NEIGHBOURS` the map is blurry (:attr:`blurry`).
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
    def grey_note(self) -> str | None:
        """Why ``P_a`` is grey for a colour target (one sentence), else ``None``: ``P_a`` is
        made of the references' images (``sum_i a_i T_i(x)``, each ``T_i(x)`` a point of
        ``P_i``), so grey references give a grey ``P_a`` whatever the target's colours."""
        if (
            self.image_shape is None
            or self.target.is_grey
            or not all(ref.is_grey for ref in self.references)
        ):
            return None
        names = ", ".join(self.reference_names)
        return (
            f"P_a is grey because it is made of the references' images (Σ a_i T_i(x)) and the "
            f"references ({names}) are grey; the target's colours are not in it."
        )

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
            and the provenance (target/reference names and fingerprints, config), and
            :attr:`grey_note` as ``grey_note`` for a colour target of grey references.
        """
        meta = self._provenance()
        # checked once here (a SimplexWeights passes through): the objective and the
        # interpolation below take it without checking it again
        a = as_simplex_weights(weights, self.m)
        meta["objective"] = float(self.objective(a))
        meta["a_hat"] = self.a_hat.tolist()
        grey = self.grey_note
        if grey is not None:  # in every manifest of P_a (issue 45)
            meta["grey_note"] = grey
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
