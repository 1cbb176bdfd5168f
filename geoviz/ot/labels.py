"""Label-to-label distances ``W_2^2(alpha_y, alpha_y')`` between class-conditional laws.

OTDD (paper Sec. 2.2, eq. (otdd)) treats a label ``y`` as the distribution
``alpha_y = P(x | y)`` of the features of its class and compares two labels by
the squared 2-Wasserstein distance between these distributions. This module
computes the full ``(C_a, C_b)`` matrix of those distances between the classes
of two datasets (or of one dataset with itself: ``label_distances(a, a)``).

Two estimators are offered (``method``):

``"gaussian"`` (default)
    Each class is summarised by its mean ``m`` and (unbiased, ``1/(n-1)``)
    sample covariance ``S`` and the Bures-Wasserstein closed form between
    Gaussians is used::

        W^2 = ||m1 - m2||^2 + tr(S1) + tr(S2) - 2 tr((S1^{1/2} S2 S1^{1/2})^{1/2})

    Everything is computed in float64. The cross term never forms a matrix
    square root of a ``D x D`` matrix per pair: with any factorisation
    ``S_c = F_c F_c^T`` (``F_c`` of shape ``(D, r_c)``),
    ``tr((S1^{1/2} S2 S1^{1/2})^{1/2}) = ||F_1^T F_2||_*`` (nuclear norm), because
    the non-zero eigenvalues of ``S1^{1/2} S2 S1^{1/2}`` are those of
    ``S1 S2 = F_1 F_1^T F_2 F_2^T``, i.e. the squared singular values of
    ``F_2^T F_1``. The factor is chosen once per class with the smaller rank
    ``r_c = min(n_c, D)``: the centred samples themselves when ``n_c <= D`` (the
    usual image case: ~200 samples in 784-d, covariance of rank <= 199) or the
    eigen-factor ``V diag(sqrt(max(lambda, 0)))`` of a symmetric ``eigh`` with
    negative eigenvalues clipped to 0 when ``n_c > D``. Rank-deficient
    covariances therefore need no regularisation and never produce NaN; the
    cross terms of all class pairs are obtained with one batched singular-value
    computation of small ``r_a x r_b`` matrices.

``"exact"``
    The exact (unregularised) OT cost between the two empirical class samples
    with uniform weights, solved by POT's network simplex :func:`ot.emd2` on the
    squared-Euclidean cost. No entropic bias exists to remove: the exact OT
    cost between a sample and itself is 0, and ``label_distances(a, a)`` uses
    the same per-class subsample on both sides, so its diagonal is ~0 and the
    matrix is exactly symmetric (only the upper triangle is solved).

In both methods each class is capped at ``max_per_class`` samples drawn without
replacement by a generator seeded with ``seed`` and the class's own member
indices (see :func:`class_samples`), so results are reproducible, independent of
the other dataset and invariant to renaming/reordering classes.

Classes listed in ``dataset.classes`` but absent from its labels (possible for
subsamples) have no class-conditional distribution: by default their rows /
columns are ``NaN`` (``missing="nan"``); no OT quantity of geoviz ever indexes
them because such classes carry no mass. ``missing="raise"`` raises a
:class:`~geoviz.errors.DatasetError` instead.
"""

from __future__ import annotations

import contextlib
from typing import Literal

import numpy as np
import torch

from geoviz.backend import resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, GeovizError

LabelMethod = Literal["exact", "gaussian"]

__all__ = ["LabelMethod", "class_samples", "gaussian_w2", "label_distances"]


def class_samples(
    dataset: LabeledDataset, max_per_class: int | None = 200, seed: int = 0
) -> list[torch.Tensor | None]:
    """Per-class feature samples used by the label distances.

    Parameters
    ----------
    dataset
        The labelled dataset.
    max_per_class
        Cap on the number of samples per class (``None``: all samples).
    seed
        Seed of the subsampling; a class with sample indices ``idx`` uses
        ``numpy.random.default_rng((seed, len(idx), idx[0]))``, so the draw does
        not depend on the class's index or name (relabelling-invariant).

    Returns
    -------
    list
        ``C`` entries: an ``(n_c, D)`` float32 CPU tensor, or ``None`` for a
        class without samples.
    """
    if max_per_class is not None and int(max_per_class) < 1:
        raise GeovizError(
            f"max_per_class must be a positive integer or None, got {max_per_class!r}"
        )
    labels = dataset.labels.numpy()
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=dataset.n_classes)
    starts = np.concatenate([[0], np.cumsum(counts)])
    out: list[torch.Tensor | None] = []
    for c in range(dataset.n_classes):
        idx = order[starts[c] : starts[c + 1]]
        if idx.size == 0:
            out.append(None)
            continue
        if max_per_class is not None and idx.size > max_per_class:
            # seeded by the class's own members (not its index or name), so
            # relabelling a dataset does not change which samples are drawn
            rng = np.random.default_rng((int(seed), int(idx.size), int(idx[0])))
            idx = np.sort(rng.choice(idx, size=int(max_per_class), replace=False))
        out.append(dataset.features[torch.from_numpy(idx)])
    return out


def _single_threaded_blas() -> contextlib.AbstractContextManager:
    """Limit NumPy's BLAS/LAPACK to one thread (when threadpoolctl is available).

    The small dense decompositions below gain nothing from threads, and a second
    spinning thread pool next to torch's OpenMP pool stalls badly on a loaded
    machine.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _svdvals(x: torch.Tensor) -> torch.Tensor:
    """Singular values of a batch of small matrices.

    On CPU this uses NumPy's LAPACK, single-threaded: torch's MKL path for
    batched small SVDs can stall for seconds when its OpenMP threads compete
    with other processes for the cores (observed 0.3 s -> 4-16 s on a loaded
    2-core machine).
    """
    if x.device.type == "cpu":
        with _single_threaded_blas():
            return torch.from_numpy(np.linalg.svd(x.numpy(), compute_uv=False))
    return torch.linalg.svdvals(x)


def _eigh(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric eigendecomposition (NumPy LAPACK on CPU, see :func:`_svdvals`)."""
    if x.device.type == "cpu":
        with _single_threaded_blas():
            w, v = np.linalg.eigh(x.numpy())
        return torch.from_numpy(w), torch.from_numpy(v)
    return torch.linalg.eigh(x)


def _eigvalsh(x: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of symmetric matrices (NumPy LAPACK on CPU, see :func:`_svdvals`)."""
    if x.device.type == "cpu":
        with _single_threaded_blas():
            return torch.from_numpy(np.linalg.eigvalsh(x.numpy()))
    return torch.linalg.eigvalsh(x)


def _gaussian_factors(
    samples: list[torch.Tensor | None], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor | None]]:
    """Means ``(C, D)``, traces ``(C,)`` and covariance factors ``F_c`` ``(D, r_c)``."""
    dim = next(s for s in samples if s is not None).shape[1]
    means = torch.full((len(samples), dim), float("nan"), dtype=torch.float64, device=device)
    traces = torch.full((len(samples),), float("nan"), dtype=torch.float64, device=device)
    factors: list[torch.Tensor | None] = []
    for c, x in enumerate(samples):
        if x is None:
            factors.append(None)
            continue
        x = x.to(device=device, dtype=torch.float64)
        n = x.shape[0]
        mean = x.mean(dim=0)
        centred = (x - mean) / np.sqrt(max(n - 1, 1))  # S = centred^T centred (unbiased)
        if n <= dim:
            factor = centred.T  # (D, n), exact, PSD by construction
        else:
            cov = centred.T @ centred
            cov = 0.5 * (cov + cov.T)
            evals, evecs = _eigh(cov)
            factor = evecs * evals.clamp_min(0.0).sqrt()  # (D, D), negatives clipped
        means[c] = mean
        traces[c] = (factor * factor).sum()
        factors.append(factor)
    return means, traces, factors


def _nuclear_cross(
    fa: list[torch.Tensor | None], fb: list[torch.Tensor | None], symmetric: bool
) -> torch.Tensor:
    """``(C_a, C_b)`` matrix of ``||F_a^T F_b||_*`` (NaN where a class is missing)."""
    device = next(f for f in fa if f is not None).device
    out = torch.full((len(fa), len(fb)), float("nan"), dtype=torch.float64, device=device)
    ia = [i for i, f in enumerate(fa) if f is not None]
    ib = [j for j, f in enumerate(fb) if f is not None]
    ra = max(fa[i].shape[1] for i in ia)  # type: ignore[union-attr]
    rb = max(fb[j].shape[1] for j in ib)  # type: ignore[union-attr]
    dim = fa[ia[0]].shape[0]  # type: ignore[union-attr]
    # zero-padded stacks: extra zero columns leave the non-zero singular values unchanged
    pa = torch.zeros((len(ia), dim, ra), dtype=torch.float64, device=device)
    pb = torch.zeros((len(ib), dim, rb), dtype=torch.float64, device=device)
    for k, i in enumerate(ia):
        pa[k, :, : fa[i].shape[1]] = fa[i]  # type: ignore[index,union-attr]
    for k, j in enumerate(ib):
        pb[k, :, : fb[j].shape[1]] = fb[j]  # type: ignore[index,union-attr]
    # bound the (pairs, ra, rb) temporary to ~256 MiB
    per_row = max(1, len(ib) * ra * rb * 8)
    chunk = max(1, (256 * 2**20) // per_row)
    for k0 in range(0, len(ia), chunk):
        grams = torch.einsum("adr,bds->abrs", pa[k0 : k0 + chunk], pb)
        nuc = _svdvals(grams).sum(dim=-1)  # (chunk, |ib|)
        for k in range(nuc.shape[0]):
            out[ia[k0 + k], ib] = nuc[k]
    if symmetric:
        out = 0.5 * (out + out.T)
    return out


def gaussian_w2(
    means_a: torch.Tensor,
    covs_a: torch.Tensor,
    means_b: torch.Tensor,
    covs_b: torch.Tensor,
) -> torch.Tensor:
    """Bures-Wasserstein ``W_2^2`` between Gaussians given explicit covariances.

    A reference implementation for small ``D`` (used by tests and by callers that
    already hold covariances): symmetric ``eigh`` square roots with negative
    eigenvalues clipped to 0, float64.

    Parameters
    ----------
    means_a, covs_a
        ``(A, D)`` and ``(A, D, D)``.
    means_b, covs_b
        ``(B, D)`` and ``(B, D, D)``.

    Returns
    -------
    torch.Tensor
        ``(A, B)`` float64.
    """
    ma, mb = means_a.double(), means_b.double()
    sa, sb = covs_a.double(), covs_b.double()
    sa = 0.5 * (sa + sa.transpose(-1, -2))
    sb = 0.5 * (sb + sb.transpose(-1, -2))
    evals, evecs = _eigh(sa)
    root_a = (evecs * evals.clamp_min(0).sqrt()[..., None, :]) @ evecs.transpose(-1, -2)
    mid = root_a[:, None] @ sb[None] @ root_a[:, None]  # (A, B, D, D)
    mid = 0.5 * (mid + mid.transpose(-1, -2))
    cross = _eigvalsh(mid).clamp_min(0).sqrt().sum(-1)
    tr_a = torch.diagonal(sa, dim1=-2, dim2=-1).sum(-1)
    tr_b = torch.diagonal(sb, dim1=-2, dim2=-1).sum(-1)
    dm = torch.cdist(ma, mb).square()
    return (dm + tr_a[:, None] + tr_b[None, :] - 2.0 * cross).clamp_min(0.0)


def _exact_w2(
    sa: list[torch.Tensor | None],
    sb: list[torch.Tensor | None],
    symmetric: bool,
    device: torch.device,
) -> torch.Tensor:
    import ot  # POT, imported lazily (heavy)

    out = torch.full((len(sa), len(sb)), float("nan"), dtype=torch.float64)
    dev_a = [None if x is None else x.to(device=device, dtype=torch.float64) for x in sa]
    dev_b = (
        dev_a
        if symmetric
        else [None if x is None else x.to(device=device, dtype=torch.float64) for x in sb]
    )
    for i, xa in enumerate(dev_a):
        if xa is None:
            continue
        for j, xb in enumerate(dev_b):
            if xb is None or (symmetric and j < i):
                continue
            if symmetric and i == j:
                out[i, j] = 0.0  # exact OT of a sample with itself
                continue
            sq = (
                (xa * xa).sum(1)[:, None] + (xb * xb).sum(1)[None, :] - 2.0 * xa @ xb.T
            ).clamp_min(0.0)
            wa = np.full(xa.shape[0], 1.0 / xa.shape[0])
            wb = np.full(xb.shape[0], 1.0 / xb.shape[0])
            value = float(ot.emd2(wa, wb, sq.cpu().numpy(), numItermax=10_000_000))
            out[i, j] = max(value, 0.0)
            if symmetric:
                out[j, i] = out[i, j]
    return out


def label_distances(
    a: LabeledDataset,
    b: LabeledDataset,
    *,
    method: LabelMethod = "gaussian",
    max_per_class: int | None = 200,
    seed: int = 0,
    device: str | torch.device | None = None,
    missing: Literal["nan", "raise"] = "nan",
) -> torch.Tensor:
    """Squared 2-Wasserstein distances between the classes of ``a`` and ``b``.

    Entry ``[i, j]`` is ``W_2^2(alpha_i, beta_j)`` where ``alpha_i`` is the
    distribution of the features of class ``i`` of ``a`` and ``beta_j`` that of
    class ``j`` of ``b`` (paper Sec. 2.2, the label term of eq. (otdd)); squared
    Euclidean ground cost without a factor 1/2. See the module docstring for the
    two estimators.

    Parameters
    ----------
    a, b
        Datasets with the same feature dimension ``D`` (``b`` may be ``a``).
    method
        ``"gaussian"`` (Bures-Wasserstein closed form) or ``"exact"`` (network
        simplex between the class samples).
    max_per_class
        Cap on samples per class (``None``: all); subsampling seeded by ``seed``.
    seed
        Seed of the per-class subsampling.
    device
        Where to compute (``None``/``"auto"`` -> :func:`geoviz.backend.get_device`).
    missing
        What to do with classes without samples: ``"nan"`` fills their row /
        column with NaN, ``"raise"`` raises :class:`~geoviz.errors.DatasetError`.

    Returns
    -------
    torch.Tensor
        ``(C_a, C_b)`` float64 CPU tensor, non-negative (NaN only for absent
        classes). ``label_distances(a, a)`` is symmetric with a ~0 diagonal.

    Raises
    ------
    GeovizError
        Unknown ``method`` or bad ``max_per_class``.
    DatasetError
        Feature dimensions differ, or (``missing="raise"``) a class is absent.
    """
    if method not in ("exact", "gaussian"):
        raise GeovizError(f"label_distances: unknown method {method!r}; use 'exact' or 'gaussian'")
    if missing not in ("nan", "raise"):
        raise GeovizError(f"label_distances: missing must be 'nan' or 'raise', got {missing!r}")
    if a.n_features != b.n_features:
        raise DatasetError(
            f"label_distances: feature dimensions differ: {a.name!r} has {a.n_features} features "
            f"per sample but {b.name!r} has {b.n_features}; harmonize the datasets first"
        )
    dev = resolve_device(device)
    symmetric = a is b or a.fingerprint == b.fingerprint
    sa = class_samples(a, max_per_class, seed)
    sb = sa if symmetric else class_samples(b, max_per_class, seed)
    if missing == "raise":
        for ds, samples in ((a, sa), (b, sb)):
            absent = [ds.classes[c] for c, s in enumerate(samples) if s is None]
            if absent:
                raise DatasetError(
                    f"classes {absent} have no samples, so their label distances are undefined",
                    ds.source or ds.name,
                )
    if method == "exact":
        return _exact_w2(sa, sb, symmetric, dev)

    means_a, tr_a, fa = _gaussian_factors(sa, dev)
    if symmetric:
        means_b, tr_b, fb = means_a, tr_a, fa
    else:
        means_b, tr_b, fb = _gaussian_factors(sb, dev)
    cross = _nuclear_cross(fa, fb, symmetric)
    # ||m1 - m2||^2 by direct differences (C_a x C_b x D is small; no cancellation)
    dm = (means_a[:, None, :] - means_b[None, :, :]).square().sum(-1)
    ok_a = torch.isfinite(means_a).all(1)
    ok_b = torch.isfinite(means_b).all(1)
    out = (dm + tr_a[:, None] + tr_b[None, :] - 2.0 * cross).clamp_min(0.0)
    if symmetric:
        out.fill_diagonal_(0.0)
        out[~ok_a, :] = float("nan")
        out[:, ~ok_b] = float("nan")
    return out.cpu()
