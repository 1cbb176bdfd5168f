"""The Mixup baseline: datasets mixed with weights ``a`` along *random* pairings.

Paper Sec. "Transfer learning on *NIST datasets" (Table "Pretraining on
synthetic data", row "Mixup with weights a_hat"): "we randomly sample data from
each training dataset, and do the convex combination of them with weight
a_hat ... this Mixup baseline is equivalent to our framework with suboptimal
OTDD maps". Fig. "Visualization and comparison of dataset interpolation
methods" (b) shows it as ``(sum_i a_i T_i)#Q`` with *randomly generated* maps
``T_i``: the class structure that the OTDD maps keep is lost.

So the rule is that of :func:`geoviz.geodesic.interpolate.generalized_geodesic_dataset`
(features ``sum_i a_i x_i``, labels ``sum_i a_i y~_i`` in the concatenated label
space of Sec. "Convex combination in dataset space"), with the OTDD image
``T_i(z)`` of a target sample replaced by a uniformly drawn sample of ``P_i``,
drawn independently for every reference: the *independent* (product) coupling
instead of the optimal one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError
from geoviz.geodesic.labels import label_space
from geoviz.geodesic.weights import check_weights, weights_tag

__all__ = ["mixup_interpolation", "mixup_pairs"]


def mixup_pairs(n: int, reference_sizes: Sequence[int], seed: int = 0) -> np.ndarray:
    """Random partners of ``n`` output samples in each reference.

    Parameters
    ----------
    n
        Number of output samples ``N`` (the target size).
    reference_sizes
        ``m`` sizes ``N_i`` of the references.
    seed
        Seed of ``numpy.random.default_rng``; the same seed gives the same pairs.

    Returns
    -------
    np.ndarray
        ``(m, N)`` int64: row ``i`` holds the index ``j_i(n)`` into ``P_i`` of
        the sample mixed into output ``n``. Indices are uniform over
        ``0..N_i-1`` and independent across references; within a reference
        they are drawn *without* replacement when ``N_i >= N`` (every sample
        used at most once) and with replacement otherwise.
    """
    if int(n) != n or n < 1:
        raise DatasetError(f"Mixup needs a positive number of samples, got n={n!r}")
    rng = np.random.default_rng(int(seed))
    rows = []
    for size in reference_sizes:
        size = int(size)
        if size < 1:
            raise DatasetError("Mixup: a reference dataset has no samples")
        if size >= n:
            rows.append(rng.permutation(size)[: int(n)])
        else:
            rows.append(rng.integers(0, size, size=int(n)))
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), int(n))


def mixup_interpolation(
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    weights: Any,
    *,
    seed: int = 0,
    name: str | None = None,
) -> SoftLabeledDataset:
    """The Mixup baseline ``(sum_i a_i T_i)#Q`` with random maps ``T_i``.

    Output sample ``n`` (one per target sample) mixes, with the weights ``a``,
    one random sample ``(x_i, y_i) = P_i[j_i(n)]`` of every reference
    (:func:`mixup_pairs`)::

        x_n = sum_i a_i x_i[j_i(n)]
        y_n = [a_1 onehot(y_1[j_1(n)]) | ... | a_m onehot(y_m[j_m(n)])]

    The pairs are random and independent of the target's features and labels,
    unlike the OTDD maps of :meth:`~geoviz.geodesic.result.GeodesicResult.interpolate`,
    so comparing the two at the same ``a`` isolates the role of the coupling
    (paper Fig. "Visualization and comparison of dataset interpolation methods" (b)).

    Parameters
    ----------
    target
        ``Q`` with ``N`` samples; only ``N`` (and its name, for provenance) is used.
    references
        ``m >= 1`` datasets ``P_i`` with ``N_i`` samples and ``C_i`` classes,
        all with the same number ``D`` of features.
    weights
        ``(m,)`` point ``a`` of the simplex (validated by
        :func:`~geoviz.geodesic.weights.check_weights`).
    seed
        Seed of the random pairs: the same seed gives the same dataset.
    name
        Name of the result; default ``"Mixup(a_1,...,a_m)"``.

    Returns
    -------
    SoftLabeledDataset
        ``(N, D)`` float32 features and ``(N, K)`` soft labels over the
        concatenated label space ``"<reference>/<class>"`` (``K = sum_i C_i``,
        the same class names as ``P_a``); block ``i`` of every row sums to
        ``a_i``. ``metadata`` holds ``kind="mixup"``, the weights, the seed and
        the target/reference names.

    Raises
    ------
    WeightsError
        ``weights`` off the simplex, with NaN, or not one per reference.
    DatasetError
        No reference, non-dataset inputs or references of different ``D``.
    """
    if not isinstance(target, LabeledDataset):
        raise DatasetError(f"the target must be a LabeledDataset, got {type(target).__name__}")
    refs = tuple(references)
    if not refs:
        raise DatasetError("Mixup needs at least one reference dataset")
    for k, ref in enumerate(refs):
        if not isinstance(ref, LabeledDataset):
            raise DatasetError(f"reference {k} must be a LabeledDataset, got {type(ref).__name__}")
    a = check_weights(weights, len(refs))
    dims = sorted({ref.n_features for ref in refs})
    if len(dims) != 1:
        raise DatasetError(
            f"Mixup needs references in one feature space, got D = {dims}; bring them to one "
            f"size with geoviz.data.preprocess.harmonize"
        )
    space = label_space(refs)
    n = target.n_samples
    pairs = mixup_pairs(n, [ref.n_samples for ref in refs], seed)
    feats = torch.zeros(n, dims[0], dtype=torch.float64)
    blocks = []
    for a_i, ref, idx in zip(a, refs, pairs, strict=True):
        rows = torch.from_numpy(idx)
        feats += float(a_i) * ref.features[rows].to(torch.float64)
        blocks.append(ref.one_hot(torch.float64)[rows])
    labels = space.combine(blocks, a.tolist())
    shapes = {ref.image_shape for ref in refs}
    return SoftLabeledDataset(
        features=feats.to(torch.float32),
        soft_labels=labels.to(torch.float32),
        class_names=space.class_names,
        name=name or f"Mixup({weights_tag(a)})",
        image_shape=refs[0].image_shape if len(shapes) == 1 else None,
        metadata={
            "kind": "mixup",
            "coupling": "random",
            "weights": a.tolist(),
            "seed": int(seed),
            "n": int(n),
            "target": {"name": target.name, "fingerprint": target.fingerprint},
            "references": list(space.dataset_names),
        },
    )
