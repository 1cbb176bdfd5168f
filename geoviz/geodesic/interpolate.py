"""Samples of datasets along generalized geodesics and McCann interpolations.

* Generalized geodesic (paper Sec. 3.3)::

      P_a = (sum_i a_i T_i) # Q,    a in Delta_{m-1}

  Each target sample ``z = (x, y_Q)`` gives the sample
  ``(sum_i a_i x_i, sum_i a_i y~_i)`` where ``(x_i, y_i) = T_i(z)`` and
  ``y~_i`` is ``y_i`` zero-padded into the concatenated label space
  ``[P_1 | ... | P_m]`` (Sec. 3.2, :mod:`geoviz.geodesic.labels`).
* McCann interpolation between datasets (paper appendix "McCann's
  interpolation between datasets")::

      P^M_t = ((1 - t) Id + t T) # Q,   t in [0, 1]

  with samples ``((1-t) x + t x_1, (1-t) [y_Q; 0] + t [0; y_1])`` over the
  label space ``[Q classes | P classes]``.

Both return :class:`~geoviz.data.dataset.SoftLabeledDataset` with provenance
metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from geoviz.data.dataset import ImageShape, LabeledDataset, SoftLabeledDataset
from geoviz.errors import GeovizError, WeightsError, short_repr
from geoviz.geodesic.labels import LabelSpace, label_space
from geoviz.geodesic.weights import as_simplex_weights, check_weights, weights_tag

__all__ = [
    "check_t",
    "generalized_geodesic_dataset",
    "interpolate_features",
    "interpolate_labels",
    "mccann_dataset",
    "subsample_indices",
]


def check_t(t: Any) -> float:
    """Validate a McCann interpolation time ``t in [0, 1]`` (raises WeightsError)."""
    try:
        val = float(t)
    except (TypeError, ValueError) as err:
        raise WeightsError(
            f"interpolation time t must be a number in [0, 1], got {short_repr(t)}"
        ) from err
    if not np.isfinite(val) or val < 0.0 or val > 1.0:
        raise WeightsError(f"interpolation time t must lie in [0, 1], got {val}")
    return val


def subsample_indices(n_total: int, n: int | None, seed: int = 0) -> torch.Tensor | None:
    """``n`` distinct row indices out of ``n_total`` (seeded), or ``None`` for all rows.

    Indices are sorted so the subsample keeps the target's order. ``n`` larger
    than ``n_total`` raises :class:`~geoviz.errors.GeovizError`: ``P_a`` is the
    push-forward of the ``n_total`` target samples, so it has no more distinct
    points.
    """
    if n is None or n == n_total:
        return None
    if int(n) != n or n < 1:
        raise GeovizError(f"number of samples n must be a positive integer, got {n}")
    if n > n_total:
        raise GeovizError(
            f"cannot draw n={n} samples: the interpolated dataset is the push-forward of the "
            f"{n_total} target samples; use n <= {n_total} or fit with more target samples"
        )
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randperm(n_total, generator=gen)[: int(n)].sort().values


def interpolate_features(mapped_features: Sequence[torch.Tensor], weights: Any) -> torch.Tensor:
    """``sum_i a_i T_i(x)`` for every target sample.

    Parameters
    ----------
    mapped_features
        ``m`` tensors ``(N, D)``, the images ``T_i(x)``.
    weights
        ``(m,)`` simplex weights (validated).

    Returns
    -------
    torch.Tensor
        ``(N, D)`` float32 (accumulated in float64).
    """
    a = check_weights(weights, len(mapped_features))
    out = torch.zeros(mapped_features[0].shape, dtype=torch.float64)
    for w, feats in zip(a, mapped_features, strict=True):
        if feats.shape != out.shape:
            raise GeovizError(
                f"mapped features must all have shape {tuple(out.shape)}, got {tuple(feats.shape)}"
            )
        if w != 0.0:
            out += float(w) * feats.detach().to("cpu", torch.float64)
    return out.to(torch.float32)


def interpolate_labels(
    soft_labels: Sequence[torch.Tensor], weights: Any, space: LabelSpace
) -> torch.Tensor:
    """``y_a = sum_i a_i y~_i`` in the concatenated label space (paper Sec. 3.2).

    Returns ``(N, K)`` float32; block ``i`` holds ``a_i y_i`` and rows sum to 1
    when each ``y_i`` does.
    """
    a = check_weights(weights, len(soft_labels))
    labs = [s.detach().to("cpu", torch.float64) for s in soft_labels]
    return space.combine(labs, a.tolist()).to(torch.float32)


def _normalise_rows(labels: torch.Tensor) -> torch.Tensor:
    labels = labels.clamp_min(0.0)
    return labels / labels.sum(dim=1, keepdim=True).clamp_min(1e-30)


def generalized_geodesic_dataset(
    mapped_features: Sequence[torch.Tensor],
    soft_labels: Sequence[torch.Tensor],
    weights: Any,
    space: LabelSpace,
    *,
    n: int | None = None,
    seed: int = 0,
    image_shape: ImageShape | None = None,
    name: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> SoftLabeledDataset:
    """Samples of ``P_a = (sum_i a_i T_i) # Q`` (paper Sec. 3.3).

    Parameters
    ----------
    mapped_features
        ``m`` tensors ``(N, D)``: ``T_i(x)`` for the ``N`` target samples.
    soft_labels
        ``m`` tensors ``(N, C_i)``: the labels of ``T_i(z)``.
    weights
        ``(m,)`` point ``a`` of the simplex (validated by
        :func:`~geoviz.geodesic.weights.check_weights`).
    space
        The concatenated label space of the ``m`` references.
    n, seed
        Optional subsample of ``n`` of the ``N`` pushed-forward samples.
    image_shape, name, metadata
        Passed to the result; ``name`` defaults to ``"P_a(a_1,...,a_m)"``.
        ``kind``, ``weights``, ``n`` and ``subsample_seed`` are added to
        ``metadata``, and ``references`` (provenance read by
        :mod:`geoviz.export`) defaults to the dataset names of ``space``.

    Returns
    -------
    SoftLabeledDataset
        ``(n or N, D)`` features, ``(n or N, K)`` soft labels over ``space.class_names``.

    Examples
    --------
    Two affine maps of a 1-D target, ``T_1(x) = 2x + 1`` and ``T_2(x) = x - 3``: halfway,
    ``P_a`` is the target moved by ``(T_1 + T_2) / 2 = 1.5 x - 1``, and each label is
    split between the two blocks:

    >>> import torch
    >>> from geoviz.geodesic import generalized_geodesic_dataset, label_space
    >>> x = torch.tensor([[-1.0], [0.0], [1.0]])
    >>> space = label_space([("mnist", ["0", "1"]), ("usps", ["0", "1"])])
    >>> space.class_names
    ('mnist/0', 'mnist/1', 'usps/0', 'usps/1')
    >>> labels = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> p_a = generalized_geodesic_dataset([2 * x + 1, x - 3], [labels, labels], [0.5, 0.5], space)
    >>> p_a.name
    'P_a(0.5,0.5)'
    >>> p_a.features.ravel().tolist()
    [-2.5, -1.0, 0.5]
    >>> p_a.soft_labels[2].tolist()
    [0.0, 0.5, 0.0, 0.5]
    """
    m = len(mapped_features)
    if m != space.n_blocks or len(soft_labels) != m:
        raise GeovizError(
            f"got {m} mapped feature sets, {len(soft_labels)} soft-label sets and a label space "
            f"of {space.n_blocks} datasets: they must match"
        )
    # one check (a SimplexWeights passes through): the two calls below take it unchecked
    a = as_simplex_weights(weights, m)
    idx = subsample_indices(int(mapped_features[0].shape[0]), n, seed)
    if idx is not None:
        mapped_features = [t[idx] for t in mapped_features]
        soft_labels = [t[idx] for t in soft_labels]
    feats = interpolate_features(mapped_features, a)
    labels = _normalise_rows(interpolate_labels(soft_labels, a, space))
    meta = dict(metadata or {})
    meta.setdefault("references", list(space.dataset_names))
    meta.update(
        {
            "kind": "generalized_geodesic",
            "weights": a.tolist(),
            "n": int(feats.shape[0]),
            "subsample_seed": None if idx is None else int(seed),
        }
    )
    return SoftLabeledDataset(
        features=feats,
        soft_labels=labels,
        class_names=space.class_names,
        name=name or f"P_a({weights_tag(a.to_array())})",
        image_shape=image_shape,
        metadata=meta,
    )


def mccann_dataset(
    target: LabeledDataset,
    mapped_features: torch.Tensor,
    soft_labels: torch.Tensor,
    t: float,
    *,
    reference_name: str,
    reference_classes: Sequence[str],
    n: int | None = None,
    seed: int = 0,
    image_shape: ImageShape | None = None,
    name: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> SoftLabeledDataset:
    """Samples of McCann's interpolation ``((1 - t) Id + t T) # Q`` between datasets.

    Paper appendix "McCann's interpolation between datasets": a target sample
    ``(x, y_Q)`` with image ``(x_1, y_1) = T(x, y_Q)`` becomes
    ``((1-t) x + t x_1, (1-t) [y_Q; 0] + t [0; y_1])``.

    Parameters
    ----------
    target
        ``Q`` with ``N`` samples, ``C_Q`` classes.
    mapped_features
        ``(N, D)`` ``T(x)``.
    soft_labels
        ``(N, C_P)`` labels of ``T(z)``.
    t
        Interpolation time in ``[0, 1]``: ``t = 0`` gives ``Q`` (labels in the
        ``Q`` block), ``t = 1`` gives ``T # Q``.
    reference_name, reference_classes
        Name and ``C_P`` classes of the reference ``P``; the label space is
        ``["<Q name>/<class>"... | "<P name>/<class>"...]`` (names made unique).
    n, seed, image_shape, name, metadata
        As in :func:`generalized_geodesic_dataset`.
    """
    tt = check_t(t)
    n_q = target.n_samples
    if mapped_features.shape != target.features.shape:
        raise GeovizError(
            f"mapped features have shape {tuple(mapped_features.shape)}, expected "
            f"{tuple(target.features.shape)} (one image per target sample)"
        )
    classes = tuple(reference_classes)
    if soft_labels.ndim != 2 or soft_labels.shape != (n_q, len(classes)):
        raise GeovizError(
            f"soft labels have shape {tuple(soft_labels.shape)}, expected ({n_q}, {len(classes)})"
        )
    space = label_space([(target.name, target.classes), (reference_name, classes)])
    x0 = target.features.to(torch.float64)
    x1 = mapped_features.detach().to("cpu", torch.float64)
    y0 = target.one_hot(torch.float64)
    y1 = soft_labels.detach().to("cpu", torch.float64)
    idx = subsample_indices(n_q, n, seed)
    if idx is not None:
        x0, x1, y0, y1 = x0[idx], x1[idx], y0[idx], y1[idx]
    feats = ((1.0 - tt) * x0 + tt * x1).to(torch.float32)
    labels = _normalise_rows(space.combine([y0, y1], [1.0 - tt, tt])).to(torch.float32)
    meta = dict(metadata or {})
    meta.setdefault("target", {"name": space.dataset_names[0], "fingerprint": target.fingerprint})
    meta.setdefault("references", [space.dataset_names[1]])
    meta.update(
        {
            "kind": "mccann",
            "t": tt,
            "n": int(feats.shape[0]),
            "subsample_seed": None if idx is None else int(seed),
        }
    )
    return SoftLabeledDataset(
        features=feats,
        soft_labels=labels,
        class_names=space.class_names,
        name=name or f"McCann({space.dataset_names[0]}->{space.dataset_names[1]}, t={tt:.3g})",
        image_shape=image_shape,
        metadata=meta,
    )
