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
datasets and ``config.cache_params()``; pass ``DiskCache(enabled=False)`` to
switch caching off.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from geoviz.backend import DiskCache, get_cache, resolve_device, resolve_dtype
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.maps.base import apply_map, check_transform_inputs
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd import (
    OTDDConfig,
    OTDDResult,
    ProgressFn,
    check_compatible,
    ground_cost,
    otdd,
)

__all__ = ["BarycentricMap", "EntropicMap", "FittedBarycentricMap", "FittedEntropicMap"]


def _check_config(config: Any) -> OTDDConfig:
    if not isinstance(config, OTDDConfig):
        raise GeovizError(f"config must be an OTDDConfig, got {type(config).__name__}")
    return config


# --------------------------------------------------------------------------- barycentric


@dataclass(frozen=True, eq=False)
class FittedBarycentricMap:
    """A fitted OTDD barycentric projection of a target onto a reference.

    Attributes
    ----------
    mapped_features_
        ``(N_Q, D)`` float32 CPU: ``N_Q pi X_P`` (rows of ``pi`` renormalised).
    soft_labels_
        ``(N_Q, C_P)`` float32 CPU: ``N_Q pi Y_P``, rows sum to 1.
    otdd_
        The :class:`~geoviz.ot.otdd.OTDDResult` (coupling only if kept).
    config
        The configuration used.
    reference_classes, reference_name
        The reference's class names and name (soft-label columns).
    target_fingerprint_, reference_fingerprint_
        Fingerprints of the fitted datasets.
    """

    supports_out_of_sample: ClassVar[bool] = False

    mapped_features_: torch.Tensor
    soft_labels_: torch.Tensor
    otdd_: OTDDResult
    config: OTDDConfig
    reference_classes: tuple[str, ...]
    reference_name: str
    target_fingerprint_: str
    reference_fingerprint_: str
    _target_features: torch.Tensor = field(repr=False)
    _target_name: str = field(default="target", repr=False)
    _image_shape: tuple[int, int, int] | None = field(default=None, repr=False)

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

    def to_dataset(self, name: str | None = None) -> SoftLabeledDataset:
        """The pushed-forward target ``T_B # Q`` as a :class:`SoftLabeledDataset`."""
        return SoftLabeledDataset(
            features=self.mapped_features_,
            soft_labels=self.soft_labels_,
            class_names=tuple(f"{self.reference_name}/{c}" for c in self.reference_classes),
            name=name or f"T({self._target_name}->{self.reference_name})",
            image_shape=self._image_shape,
            metadata={
                "map": "barycentric",
                "target_fingerprint": self.target_fingerprint_,
                "reference_fingerprint": self.reference_fingerprint_,
                "otdd": self.otdd_.summary(),
            },
        )


class BarycentricMap:
    """Estimator of the OTDD barycentric projection (paper eq. (bary_map)).

    Parameters
    ----------
    config
        OTDD parameters (full or batched mode).
    cache
        Disk cache (default :func:`geoviz.backend.get_cache`; pass
        ``DiskCache(enabled=False)`` to disable).
    keep_coupling
        Keep the ``(N_Q, N_P)`` coupling in ``otdd_`` (full mode only; it is
        then also cached).

    Examples
    --------
    >>> fitted = BarycentricMap(OTDDConfig(epsilon=0.05)).fit(target, reference)  # doctest: +SKIP
    >>> fitted.mapped_features_.shape, fitted.soft_labels_.shape  # doctest: +SKIP
    """

    supports_out_of_sample: ClassVar[bool] = False

    def __init__(
        self,
        config: OTDDConfig = OTDDConfig(),  # noqa: B008 - immutable
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
            )
            return res.to_payload()

        res = OTDDResult.from_payload(cache.get_or_compute("barycentric_map", params, compute))
        assert res.mapped_features is not None and res.soft_labels is not None
        return FittedBarycentricMap(
            mapped_features_=res.mapped_features,
            soft_labels_=res.soft_labels,
            otdd_=res,
            config=self.config,
            reference_classes=reference.classes,
            reference_name=reference.name,
            target_fingerprint_=target.fingerprint,
            reference_fingerprint_=reference.fingerprint,
            _target_features=target.features,
            _target_name=target.name,
            _image_shape=reference.image_shape,
        )


# --------------------------------------------------------------------------- entropic


@dataclass(frozen=True, eq=False)
class FittedEntropicMap:
    """Entropic OTDD map, defined for any labelled point (out-of-sample).

    Attributes
    ----------
    reference_features_, reference_labels_
        ``(N_R, D)`` float32 and ``(N_R,)`` int64: the reference points used.
    g_
        ``(N_R,)`` float64 reference potential (convention of
        :class:`~geoviz.ot.sinkhorn.SinkhornResult`).
    label_cost_
        ``(C_Q, C_P)`` float64 label distances of the fit.
    epsilon_abs_
        Absolute regularisation of the fit.
    otdd_
        The fitting :class:`~geoviz.ot.otdd.OTDDResult` (barycentric outputs of
        the training points included, no coupling).
    train_index_, reference_index_
        Indices of the target / reference points used for fitting.
    """

    supports_out_of_sample: ClassVar[bool] = True

    reference_features_: torch.Tensor
    reference_labels_: torch.Tensor
    g_: torch.Tensor
    label_cost_: torch.Tensor
    epsilon_abs_: float
    otdd_: OTDDResult
    train_index_: torch.Tensor
    reference_index_: torch.Tensor
    config: OTDDConfig
    reference_classes: tuple[str, ...]
    reference_name: str
    target_classes: tuple[str, ...]

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

    def transform_dataset(
        self, dataset: LabeledDataset, name: str | None = None
    ) -> SoftLabeledDataset:
        """Push a labelled dataset (same classes as the fitted target) through the map."""
        if tuple(dataset.classes) != tuple(self.target_classes):
            raise DatasetError(
                f"dataset {dataset.name!r} has classes {list(dataset.classes)[:5]}..., but the map was "
                f"fitted on a target with classes {list(self.target_classes)[:5]}..."
            )
        return apply_map(self, dataset, name)


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
    """

    supports_out_of_sample: ClassVar[bool] = True

    def __init__(
        self,
        config: OTDDConfig = OTDDConfig(),  # noqa: B008 - immutable
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

        payload = cache.get_or_compute("entropic_map", params, compute)
        res = OTDDResult.from_payload(payload)
        assert res.potentials is not None
        ridx_t = payload["reference_index"].long()
        return FittedEntropicMap(
            reference_features_=reference.features[ridx_t],
            reference_labels_=reference.labels[ridx_t],
            g_=res.potentials[1].double(),
            label_cost_=res.label_distances.double(),
            epsilon_abs_=res.epsilon_abs,
            otdd_=res,
            train_index_=payload["train_index"].long(),
            reference_index_=ridx_t,
            config=cfg,
            reference_classes=reference.classes,
            reference_name=reference.name,
            target_classes=target.classes,
        )
