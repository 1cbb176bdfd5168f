"""Baselines of the transfer experiments (paper Sec. 5.2, Table 1).

* :func:`one_nn_accuracy` — "1-NN on few-shot dataset": classify every test
  sample by the label of its nearest labelled few-shot sample (no training).
* :func:`mixup_pretraining_set` — "Mixup with weights a_hat": a pretraining
  set built like ``P_a`` but with *random* pairs of reference samples instead
  of OTDD maps (:func:`geoviz.geodesic.mixup.mixup_interpolation`).

The third baseline, "Train on few-shot dataset", is
:func:`geoviz.nn.training.train_from_scratch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError
from geoviz.geodesic.mixup import mixup_interpolation

__all__ = ["mixup_pretraining_set", "one_nn_accuracy", "one_nn_predict"]

#: Max entries of one block of the test-by-train distance matrix.
_BLOCK_ELEMENTS = 4_000_000


def _as_float64(x: Any, what: str) -> np.ndarray:
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DatasetError(f"{what} must be a non-empty (N, D) array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise DatasetError(f"{what} contain NaN or infinite values")
    return arr


def one_nn_predict(train_features: Any, test_features: Any) -> np.ndarray:
    """Index of the nearest training sample of every test sample (exact, Euclidean).

    Distances are computed in float64 by ``|x|^2 + |y|^2 - 2 x.y`` blockwise;
    every training sample within rounding error of the minimum is then
    re-checked with the direct ``sum (x - y)^2``, so the result is the exact
    arg-min, ties going to the lowest training index.

    Parameters
    ----------
    train_features
        ``(N, D)`` array or tensor.
    test_features
        ``(M, D)``.

    Returns
    -------
    numpy.ndarray
        ``(M,)`` int64 indices into ``train_features``.
    """
    train = _as_float64(train_features, "training features")
    test = _as_float64(test_features, "test features")
    if train.shape[1] != test.shape[1]:
        raise DatasetError(
            f"training samples have {train.shape[1]} features but test samples {test.shape[1]}"
        )
    sq_train = np.einsum("ij,ij->i", train, train)
    sq_test = np.einsum("ij,ij->i", test, test)
    out = np.empty(test.shape[0], dtype=np.int64)
    rows = max(1, _BLOCK_ELEMENTS // train.shape[0])
    for start in range(0, test.shape[0], rows):
        block = test[start : start + rows]
        d2 = sq_test[start : start + rows, None] + sq_train[None, :] - 2.0 * (block @ train.T)
        best = d2.min(axis=1)
        # the expansion loses ~1e-16 relative to |x|^2 + |y|^2: re-check every near-minimum
        tol = 1e-10 * (sq_test[start : start + rows] + sq_train.max()) + 1e-300
        near = d2 <= (best + tol)[:, None]
        for r in range(block.shape[0]):
            cand = np.flatnonzero(near[r])
            if cand.size == 1:
                out[start + r] = cand[0]
            else:
                exact = ((train[cand] - block[r]) ** 2).sum(axis=1)
                out[start + r] = cand[int(np.argmin(exact))]  # argmin: first, i.e. lowest index
    return out


def one_nn_accuracy(train: LabeledDataset, test: LabeledDataset) -> float:
    """Accuracy of the 1-nearest-neighbour classifier ("1-NN on few-shot dataset", Table 1).

    Every test sample gets the label of its nearest training sample
    (Euclidean distance on the features, exact; ties go to the lowest
    training index, see :func:`one_nn_predict`).

    Parameters
    ----------
    train
        The labelled few-shot target.
    test
        The target's test split, with the same classes (names and order) and
        the same feature dimension.

    Returns
    -------
    float
        Fraction of correctly classified test samples, in ``[0, 1]``.

    Raises
    ------
    DatasetError
        Non-dataset inputs, different feature dimensions, or different class lists.
    """
    for what, ds in (("train", train), ("test", test)):
        if not isinstance(ds, LabeledDataset):
            raise DatasetError(f"1-NN {what} set must be a LabeledDataset, got {type(ds).__name__}")
    if train.classes != test.classes:
        raise DatasetError(
            f"1-NN needs the same classes in train and test, got {list(train.classes)} and "
            f"{list(test.classes)}"
        )
    if train.n_features != test.n_features:
        raise DatasetError(
            f"1-NN: the training set {train.name!r} has {train.n_features} features but the "
            f"test set {test.name!r} has {test.n_features}; harmonize them first"
        )
    nearest = one_nn_predict(train.features, test.features)
    predicted = train.labels.numpy()[nearest]
    return float(np.mean(predicted == test.labels.numpy()))


def mixup_pretraining_set(
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    weights: Any,
    *,
    seed: int,
) -> SoftLabeledDataset:
    """The "Mixup with weights a_hat" pretraining set of Table 1.

    "For Mixup, we randomly sample data from each training dataset, and do the
    convex combination of them with weight a_hat ... this Mixup baseline is
    equivalent to our framework with suboptimal OTDD maps" (paper Sec. 5.2):
    a thin wrapper over :func:`geoviz.geodesic.mixup.mixup_interpolation`.

    Parameters
    ----------
    target
        The (pseudo-labelled) target pool; only its size ``N`` is used, so the
        Mixup set has as many samples as ``P_a``.
    references
        The ``m`` pretraining datasets, in one feature space.
    weights
        ``(m,)`` point of the simplex (usually ``a_hat``).
    seed
        Seed of the random pairs.

    Returns
    -------
    SoftLabeledDataset
        ``N`` samples; block ``i`` of every soft label sums to ``weights[i]``.

    Raises
    ------
    WeightsError
        Weights off the simplex.
    DatasetError
        No references, or references in different feature spaces.
    """
    return mixup_interpolation(target, references, weights, seed=seed)
