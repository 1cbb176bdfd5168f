"""OTDD barycentric projection and its entropic out-of-sample extension.

Barycentric projection (paper Sec. 3.1, eq. (bary_map))::

    T_B(Z_Q) = [N_Q pi* X_P, N_Q pi* Y_P]

with ``pi*`` the entropic OTDD coupling of :func:`geoviz.ot.otdd.otdd`. We use
the rows of ``pi*`` renormalised to sum exactly to ``1/N_Q`` (as described in
the caption of the paper's barycentric-projection figure), so every mapped
point is a convex combination of reference points and every soft label sums to
1; at convergence this differs from ``N_Q pi*`` by at most the marginal error.
In batched mode (``OTDDConfig.batch_size``) each target batch is projected with
its own batch coupling (paper appendix, "Complexity").

Entropic map (Pooladian & Niles-Weed 2021; POT's "continuous" entropic
mapping): with the reference potential ``g`` of the same problem, a new labelled
point ``(x, y)`` is mapped to the softmax-weighted average::

    w_j(x, y) = softmax_j((g_j - c((x, y), z_j)) / eps_abs)      (uniform b)
    T(x, y)   = (sum_j w_j x'_j, sum_j w_j onehot(y'_j))

For a training target point this is exactly the renormalised row of ``pi*``
(the row normalisation cancels ``f_i``), so both maps agree on the training set.
The label term ``c`` needs the label of the new point (an index into the
target's classes).

Caching: fitted maps are stored in a :class:`~geoviz.backend.DiskCache`
(default :func:`geoviz.backend.get_cache`) under the fingerprints of both
datasets and ``config.cache_params()``; in batched mode each batch is also stored
as it finishes (:mod:`geoviz.ot.otdd_batches`), so a fit killed mid-way solves only
the missing batches when it is run again. Pass ``DiskCache(enabled=False)`` to
switch caching off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from geoviz.backend import ArraySpec, DiskCache, get_cache, resolve_device, resolve_dtype
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.maps.base import (
    FittedMap,
    MapKind,
    PlanDiagnostics,
    PlanNeighbours,
    check_transform_inputs,
)
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd import ProgressFn, otdd
from geoviz.ot.otdd_cost import OTDDConfig, check_compatible, ground_cost
from geoviz.ot.otdd_result import OTDDResult

__all__ = ["BarycentricMap", "EntropicMap", "FittedBarycentricMap", "FittedEntropicMap"]


def _check_config(config: Any) -> OTDDConfig:
    if not isinstance(config, OTDDConfig):
        raise GeovizError(f"config must be an OTDDConfig, got {type(config).__name__}")
    return config


# --------------------------------------------------------------------------- barycentric


@dataclass(frozen=True, eq=False, kw_only=True)
class FittedBarycentricMap(FittedMap["BarycentricMap"]):
    """A fitted OTDD barycentric projection of a target onto a reference.

    Attributes
    ----------
    mapped_features_
        ``(N_Q, D)`` float32 CPU: ``N_Q pi X_P`` (rows of ``pi`` renormalised).
    soft_labels_
        ``(N_Q, C_P)`` float32 CPU: ``N_Q pi Y_P``, rows sum to 1.
    otdd_
        The :class:`~geoviz.ot.otdd_result.OTDDResult` (coupling only if kept).
    config
        The configuration used.

    The other attributes are those of :class:`~geoviz.maps.base.FittedMap`.
    """

    kind: ClassVar[MapKind] = "barycentric"
    supports_out_of_sample: ClassVar[bool] = False

    otdd_: OTDDResult
    config: OTDDConfig
    _target_features: torch.Tensor = field(repr=False)

    @property
    def coupling_(self) -> torch.Tensor | None:
        """``(N_Q, N_P)`` coupling when fitted with ``keep_coupling=True`` in full mode."""
        return self.otdd_.coupling

    def transform(
        self, features: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Images of the **training** target points (no out-of-sample mapping).

        ``features`` must be the fitted target's features (same rows, same
        order); ``labels`` are ignored. Use :class:`EntropicMap` for new points.
        See :meth:`FittedMap.transform <geoviz.maps.base.FittedMap.transform>`.
        """
        feats, _ = check_transform_inputs(features, None, self.mapped_features_.shape[1], None)
        if feats.shape != self._target_features.shape or not torch.equal(
            feats, self._target_features
        ):
            raise GeovizError(
                "a barycentric projection only maps the target points it was fitted on; "
                "use EntropicMap to map new points"
            )
        return self.mapped_features_, self.soft_labels_

    def diagnostics(self) -> PlanDiagnostics:
        """Sharpness and convergence of the plan (:class:`~geoviz.maps.base.PlanDiagnostics`)."""
        return plan_diagnostics(self.otdd_)

    def plan_neighbours(self) -> PlanNeighbours | None:
        """The largest plan entries of every row (``None`` when the solve kept none)."""
        return plan_neighbours_of(self.otdd_)

    def to_payload(self) -> dict[str, Any]:
        """The :class:`~geoviz.ot.otdd_result.OTDDResult` payload (what the disk cache stores)."""
        return self.otdd_.to_payload()

    @classmethod
    def from_payload(
        cls,
        payload: Mapping[str, Any],
        target: LabeledDataset,
        reference: LabeledDataset,
        estimator: BarycentricMap,
    ) -> FittedBarycentricMap:
        """Rebuild the map that ``estimator`` fitted on ``target -> reference``."""
        res = OTDDResult.from_payload(dict(payload))
        if res.mapped_features is None or res.soft_labels is None:
            raise GeovizError("this OTDD payload carries no barycentric projection")
        return cls(
            mapped_features_=torch.as_tensor(res.mapped_features).detach().to("cpu", torch.float32),
            soft_labels_=torch.as_tensor(res.soft_labels).detach().to("cpu", torch.float32),
            label_cost_=torch.as_tensor(res.label_distances).to("cpu", torch.float64),
            otdd_=res,
            config=estimator.config,
            **cls.fitted_on(target, reference),
            _target_features=target.features,
        )

    def _dataset_metadata(self) -> dict[str, Any]:
        return {"otdd": self.otdd_.summary()}


def plan_diagnostics(res: OTDDResult) -> PlanDiagnostics:
    """:class:`~geoviz.maps.base.PlanDiagnostics` of an OTDD solve."""
    return PlanDiagnostics(
        otdd=float(res.cost),
        label_confidence=float(res.label_confidence),
        effective_neighbours=float(res.effective_neighbours),
        converged=bool(res.converged),
        iterations=int(res.n_iter),
        epsilon_abs=float(res.epsilon_abs),
        marginal_error=float(res.marginal_error),
    )


def plan_neighbours_of(res: OTDDResult) -> PlanNeighbours | None:
    """The plan neighbours an OTDD solve kept, as CPU tensors; ``None`` if it kept none."""
    if res.row_perplexity is None or res.neighbour_index is None or res.neighbour_weight is None:
        return None
    return PlanNeighbours(
        row_perplexity=torch.as_tensor(res.row_perplexity).to("cpu", torch.float32),
        index=torch.as_tensor(res.neighbour_index).to("cpu", torch.int64),
        weight=torch.as_tensor(res.neighbour_weight).to("cpu", torch.float32),
    )


class BarycentricMap:
    """Estimator of the OTDD barycentric projection (paper eq. (bary_map)).

    Parameters
    ----------
    config
        OTDD parameters (full or batched mode).
    cache
        Disk cache of the fitted map and, in batched mode, of each finished batch
        (default :func:`geoviz.backend.get_cache`; pass ``DiskCache(enabled=False)``
        to disable).
    keep_coupling
        Keep the ``(N_Q, N_P)`` coupling in ``otdd_`` (full mode only; it is
        then also cached).

    Examples
    --------
    An affine map ``x -> A x + b`` with ``A`` positive definite is the OT map between its
    ends (as between two Gaussians). Here the reference is the target moved by
    ``(x_1, x_2) -> (2 x_1 + 1, x_2 / 2 - 1)``, labels kept, and the fitted map (at the
    default, sharp epsilon) recovers it point by point:

    >>> import numpy as np, torch
    >>> from geoviz.backend import DiskCache
    >>> from geoviz.data.dataset import LabeledDataset
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(60, 2))
    >>> y = (x[:, 0] > 0).astype(int)
    >>> target = LabeledDataset(x, y, ("left", "right"), name="Q")
    >>> reference = LabeledDataset(x * [2.0, 0.5] + [1.0, -1.0], y, ("left", "right"), name="P")
    >>> from geoviz.maps import BarycentricMap
    >>> fitted = BarycentricMap(cache=DiskCache(enabled=False)).fit(target, reference)
    >>> fitted.mapped_features_.shape, fitted.soft_labels_.shape
    (torch.Size([60, 2]), torch.Size([60, 2]))
    >>> torch.allclose(fitted.mapped_features_, reference.features, atol=0.1)
    True
    >>> fitted.soft_labels_.argmax(1).tolist() == y.tolist()
    True
    """

    supports_out_of_sample: ClassVar[bool] = False

    def __init__(
        self,
        config: OTDDConfig = OTDDConfig(),
        *,
        cache: DiskCache | None = None,
        keep_coupling: bool = False,
    ) -> None:
        self.config = _check_config(config)
        self.cache = cache
        self.keep_coupling = bool(keep_coupling)

    def fit(
        self, target: LabeledDataset, reference: LabeledDataset, progress: ProgressFn | None = None
    ) -> FittedBarycentricMap:
        """Solve the OTDD problem Q -> P and project every target point."""
        check_compatible(target, reference)
        cache = self.cache if self.cache is not None else get_cache()
        params = {
            "target": target.fingerprint,
            "reference": reference.fingerprint,
            "config": self.config.cache_params(),
            "keep_coupling": self.keep_coupling,
        }

        def compute() -> dict[str, Any]:
            res = otdd(
                target,
                reference,
                self.config,
                progress,
                barycentric=True,
                keep_coupling=self.keep_coupling,
                # each finished batch too, so a killed --batch-size run resumes from them
                batch_cache=cache,
            )
            return res.to_payload()

        payload = cache.get_or_compute(
            "barycentric_map",
            params,
            compute,
            expect=OTDDResult.payload_spec(
                target.n_samples,
                reference.n_samples,
                target.n_classes,
                reference.n_classes,
                int(reference.features.shape[1]),
                barycentric=True,
            ),
            check=lambda p: FittedBarycentricMap.from_payload(p, target, reference, self),
        )
        return FittedBarycentricMap.from_payload(payload, target, reference, self)


# --------------------------------------------------------------------------- entropic


@dataclass(frozen=True, eq=False, kw_only=True)
class FittedEntropicMap(FittedMap["EntropicMap"]):
    """Entropic OTDD map, defined for any labelled point (out-of-sample).

    Attributes
    ----------
    mapped_features_, soft_labels_
        Images of the target points the map was fitted on (``train_index_``).
    reference_features_, reference_labels_
        ``(N_R, D)`` float32 and ``(N_R,)`` int64: the reference points used.
    g_
        ``(N_R,)`` float64 reference potential (convention of
        :class:`~geoviz.ot.result.SinkhornResult`).
    label_cost_
        ``(C_Q, C_P)`` float64 label distances of the fit.
    epsilon_abs_
        Absolute regularisation of the fit.
    otdd_
        The fitting :class:`~geoviz.ot.otdd_result.OTDDResult` (barycentric outputs of
        the training points included, no coupling).
    train_index_, reference_index_
        Indices of the target / reference points used for fitting.

    The other attributes are those of :class:`~geoviz.maps.base.FittedMap`.
    """

    kind: ClassVar[MapKind] = "entropic"
    supports_out_of_sample: ClassVar[bool] = True

    reference_features_: torch.Tensor
    reference_labels_: torch.Tensor
    g_: torch.Tensor
    epsilon_abs_: float
    otdd_: OTDDResult
    train_index_: torch.Tensor
    reference_index_: torch.Tensor
    config: OTDDConfig

    def transform(
        self, features: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Map labelled points ``(features (n, D), labels (n,))`` (labels required).

        Returns
        -------
        (torch.Tensor, torch.Tensor)
            ``(n, D)`` mapped features and ``(n, C_P)`` soft labels (float32 CPU).
        """
        d = self.reference_features_.shape[1]
        feats, labs = check_transform_inputs(features, labels, d, len(self.target_classes))
        if labs is None:
            raise GeovizError(
                "EntropicMap.transform needs the labels of the points: the OTDD cost has a label term"
            )
        missing = torch.isnan(self.label_cost_).any(dim=1)
        if labs.numel() and bool(missing[labs].any()):
            bad = sorted({self.target_classes[int(c)] for c in labs[missing[labs]]})
            raise DatasetError(f"transform: classes {bad} had no samples when the map was fitted")
        cfg = self.config
        dev = resolve_device(cfg.device)
        dt = resolve_dtype(cfg.dtype)
        xr = self.reference_features_.to(device=dev, dtype=dt)
        yr = self.reference_labels_.to(dev)
        logit_g = (self.g_ / self.epsilon_abs_).to(device=dev, dtype=torch.float64)
        onehot = torch.nn.functional.one_hot(yr, len(self.reference_classes)).to(dt)
        n = feats.shape[0]
        out_x = torch.empty((n, d), dtype=torch.float32)
        out_y = torch.empty((n, len(self.reference_classes)), dtype=torch.float32)
        rows = max(1, (16 * 2**20) // max(1, xr.shape[0]))
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            cost = ground_cost(
                feats[r0:r1],
                labs[r0:r1],
                xr,
                yr,
                self.label_cost_,
                lambda_x=cfg.lambda_x,
                lambda_y=cfg.lambda_y,
                dtype=dt,
                device=dev,
            )
            # float64 logits: (g - C)/eps is ~1/epsilon-relative large at sharp epsilon
            w = torch.softmax(logit_g[None, :] - cost.double() / self.epsilon_abs_, dim=1)
            out_x[r0:r1] = (w.to(dt) @ xr).float().cpu()
            soft = w @ onehot.double()
            out_y[r0:r1] = (soft / soft.sum(1, keepdim=True)).float().cpu()
        return out_x, out_y

    def diagnostics(self) -> PlanDiagnostics:
        """Sharpness and convergence of the fitting plan (training points only)."""
        return plan_diagnostics(self.otdd_)

    def plan_neighbours(self) -> PlanNeighbours | None:
        """The fitting plan's largest entries, rows of ``train_index_`` (``None`` if none kept)."""
        return plan_neighbours_of(self.otdd_)

    def to_payload(self) -> dict[str, Any]:
        """The fitting OTDD payload plus ``train_index`` and ``reference_index``."""
        payload = self.otdd_.to_payload()
        payload["train_index"] = self.train_index_
        payload["reference_index"] = self.reference_index_
        return payload

    @classmethod
    def from_payload(
        cls,
        payload: Mapping[str, Any],
        target: LabeledDataset,
        reference: LabeledDataset,
        estimator: EntropicMap,
    ) -> FittedEntropicMap:
        """Rebuild the map that ``estimator`` fitted on ``target -> reference``."""
        res = OTDDResult.from_payload(dict(payload))
        if res.potentials is None or res.mapped_features is None or res.soft_labels is None:
            raise GeovizError("this OTDD payload carries no potentials or barycentric projection")
        ridx = torch.as_tensor(payload["reference_index"]).long()
        return cls(
            mapped_features_=torch.as_tensor(res.mapped_features).detach().to("cpu", torch.float32),
            soft_labels_=torch.as_tensor(res.soft_labels).detach().to("cpu", torch.float32),
            label_cost_=res.label_distances.double(),
            reference_features_=reference.features[ridx],
            reference_labels_=reference.labels[ridx],
            g_=res.potentials[1].double(),
            epsilon_abs_=res.epsilon_abs,
            otdd_=res,
            train_index_=torch.as_tensor(payload["train_index"]).long(),
            reference_index_=ridx,
            config=estimator.config,
            **cls.fitted_on(target, reference),
        )

    def _dataset_metadata(self) -> dict[str, Any]:
        return {"otdd": self.otdd_.summary()}


class EntropicMap:
    """Estimator of the entropic (out-of-sample) OTDD map.

    The potentials come from one un-batched OTDD solve. When
    ``config.batch_size`` is set and the target is larger, the map is fitted on
    a seeded random subsample of ``batch_size`` target points; when
    ``config.reference_subsample`` is set, on that many reference points, so
    memory stays bounded by ``batch_size x reference_subsample`` (label
    distances always use the full datasets). ``config.stream_reference`` is
    honoured.

    Parameters
    ----------
    config
        OTDD parameters.
    cache
        Disk cache (default :func:`geoviz.backend.get_cache`).

    Examples
    --------
    The affine example of :class:`BarycentricMap`, now mapping points that were not in the
    fit: their images lie near ``(2 x_1 + 1, x_2 / 2 - 1)`` (an entropic estimate from 60
    points) and keep their class:

    >>> import numpy as np, torch
    >>> from geoviz.backend import DiskCache
    >>> from geoviz.data.dataset import LabeledDataset
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(60, 2))
    >>> y = (x[:, 0] > 0).astype(int)
    >>> target = LabeledDataset(x, y, ("left", "right"), name="Q")
    >>> reference = LabeledDataset(x * [2.0, 0.5] + [1.0, -1.0], y, ("left", "right"), name="P")
    >>> from geoviz.maps import EntropicMap
    >>> fitted = EntropicMap(cache=DiskCache(enabled=False)).fit(target, reference)
    >>> new = torch.tensor([[0.5, 0.5], [-0.5, -0.5]])
    >>> mapped, soft = fitted.transform(new, torch.tensor([1, 0]))
    >>> bool((mapped - (new * torch.tensor([2.0, 0.5]) + torch.tensor([1.0, -1.0]))).abs().max() < 0.2)
    True
    >>> soft.argmax(1).tolist()
    [1, 0]
    """

    supports_out_of_sample: ClassVar[bool] = True

    def __init__(
        self,
        config: OTDDConfig = OTDDConfig(),
        *,
        cache: DiskCache | None = None,
    ) -> None:
        self.config = _check_config(config)
        self.cache = cache

    def fit(
        self, target: LabeledDataset, reference: LabeledDataset, progress: ProgressFn | None = None
    ) -> FittedEntropicMap:
        """Solve OTDD on (a subsample of) Q vs P and keep the reference potential."""
        check_compatible(target, reference)
        cfg = self.config
        cache = self.cache if self.cache is not None else get_cache()
        n_q, n_p = target.n_samples, reference.n_samples
        if cfg.batch_size is not None and cfg.batch_size < n_q:
            tidx = np.sort(
                np.random.default_rng((cfg.seed, 3)).choice(n_q, cfg.batch_size, replace=False)
            )
        else:
            tidx = np.arange(n_q)
        if cfg.reference_subsample is not None and cfg.reference_subsample < n_p:
            ridx = np.sort(
                np.random.default_rng((cfg.seed, 4)).choice(
                    n_p, cfg.reference_subsample, replace=False
                )
            )
        else:
            ridx = np.arange(n_p)
        params = {
            "target": target.fingerprint,
            "reference": reference.fingerprint,
            "config": cfg.cache_params(),
        }
        solve_cfg = dataclasses.replace(cfg, batch_size=None, reference_subsample=None)

        def compute() -> dict[str, Any]:
            lab = label_distances(
                target,
                reference,
                method=cfg.label_method,
                max_per_class=cfg.max_per_class,
                seed=cfg.seed,
                device=resolve_device(cfg.device),
            )
            t_sub = target if tidx.size == n_q else target.subset(tidx)
            r_sub = reference if ridx.size == n_p else reference.subset(ridx)
            res = otdd(
                t_sub,
                r_sub,
                solve_cfg,
                progress,
                barycentric=True,
                keep_coupling=False,
                label_cost=lab,
            )
            payload = res.to_payload()
            payload["train_index"] = torch.from_numpy(tidx)
            payload["reference_index"] = torch.from_numpy(ridx)
            return payload

        # the map is fitted on k target and m reference points (subsamples by their indices)
        expect = OTDDResult.payload_spec(
            "k",
            "m",
            target.n_classes,
            reference.n_classes,
            int(reference.features.shape[1]),
            barycentric=True,
        )
        expect["train_index"] = ArraySpec(("k",))
        expect["reference_index"] = ArraySpec(("m",))

        def rebuild(payload: dict[str, Any]) -> None:
            # indices outside the datasets would select wrong points (or raise later)
            for name, n in (
                ("train_index", target.n_samples),
                ("reference_index", reference.n_samples),
            ):
                index = payload[name]
                if index.numel() and (int(index.min()) < 0 or int(index.max()) >= n):
                    raise GeovizError(f"{name} is outside the {n} points")
            FittedEntropicMap.from_payload(payload, target, reference, self)

        payload = cache.get_or_compute(
            "entropic_map", params, compute, expect=expect, check=rebuild
        )
        return FittedEntropicMap.from_payload(payload, target, reference, self)
