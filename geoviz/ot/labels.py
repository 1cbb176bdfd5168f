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
    cross terms of all class pairs are obtained with batched singular-value
    computations of small ``r_a x r_b`` matrices.

    The products (means, covariances, Gram matrices ``F_a^T F_b``) are formed on
    ``device``; the small eigen / singular-value decompositions always run in
    float64 with NumPy's LAPACK on the CPU, whatever ``device`` is, so every
    device uses the same algorithm and results differ between devices only by
    the rounding of the matrix products (relative ~1e-12).

``"exact"``
    The exact (unregularised) OT cost ``W_2^2`` between the two empirical class
    samples with uniform weights, on the squared-Euclidean cost: the value of
    the linear program, solved by POT's network simplex :func:`ot.emd2` (a
    solver that stops at its iteration cap issues a
    :class:`~geoviz.errors.ConvergenceWarning`). The per-pair cost matrices are
    built in float64 on ``device`` (one GEMM per row class against a block of
    columns); the network-simplex solves themselves run on the CPU, since no
    exact GPU solver exists, concurrently over class pairs in a thread pool
    (POT releases the GIL) while the device builds the next cost matrices. No
    entropic or other approximation is involved on any device.

Self-distances: when ``a`` and ``b`` are the same dataset (``a is b`` or equal
:attr:`~geoviz.data.dataset.LabeledDataset.fingerprint`) both sides use the same
per-class samples, only the upper triangle ``i < j`` is computed and mirrored,
and the diagonal is set to exactly 0 (the OT cost between a law and itself), so
``label_distances(a, a)`` is exactly symmetric with an exactly zero diagonal on
every device and for both methods.

Devices and returned tensors (project rule, see ``docs/architecture.md``):
functions that return results to the user return CPU tensors (label distances,
couplings, maps, potentials); intermediate device tensors (e.g.
``ground_cost(..., device=...)``) stay on the requested device and callers/tests
move them with ``.cpu()``. :func:`label_distances` therefore always returns a
``(C_a, C_b)`` float64 CPU tensor, whatever ``device`` it computed on.

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
import warnings
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

import numpy as np
import torch

from geoviz.backend import available_memory_bytes, resolve_device, usable_cores
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import ConvergenceWarning, DatasetError, GeovizError
from geoviz.vocabulary import LabelMethod

__all__ = [
    "class_samples",
    "gaussian_w2",
    "label_distances",
]

# device temporaries (Gram / cost blocks) are kept below this size
_BLOCK_BYTES = 256 * 2**20


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


def _single_threaded_blas() -> contextlib.AbstractContextManager[object]:
    """Limit NumPy's BLAS/LAPACK to one thread (when threadpoolctl is available).

    The small dense decompositions below gain nothing from threads, and a second
    spinning thread pool next to torch's OpenMP pool stalls badly on a loaded
    machine.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        return contextlib.nullcontext()
    limits: contextlib.AbstractContextManager[object] = threadpool_limits(1, user_api="blas")
    return limits


# The three decompositions below always run in float64 with NumPy's LAPACK on the
# CPU, whatever device their input lives on, and return on the input's device:
# the same algorithm on every device (cuSOLVER's batched routines pick other
# algorithms and are no faster for these small matrices). Callers run them inside
# one ``_single_threaded_blas()`` block (entering it costs ~10 ms): torch's MKL
# path for batched small SVDs can stall for seconds when its OpenMP threads
# compete with other processes for the cores (observed 0.3 s -> 4-16 s on a
# loaded 2-core machine).


def _to_numpy64(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(device="cpu", dtype=torch.float64).numpy()


def _svdvals(x: torch.Tensor) -> torch.Tensor:
    """Singular values of a batch of small matrices (float64 CPU LAPACK, see above)."""
    s = np.linalg.svd(_to_numpy64(x), compute_uv=False)
    return torch.from_numpy(s).to(x.device)


def _eigh(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric eigendecomposition (float64 CPU LAPACK, see above)."""
    w, v = np.linalg.eigh(_to_numpy64(x))
    return torch.from_numpy(w).to(x.device), torch.from_numpy(v).to(x.device)


def _eigvalsh(x: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of symmetric matrices (float64 CPU LAPACK, see above)."""
    w = np.linalg.eigvalsh(_to_numpy64(x))
    return torch.from_numpy(w).to(x.device)


def _pairs(present_a: list[int], present_b: list[int], symmetric: bool) -> dict[int, list[int]]:
    """Class pairs to compute, grouped by row: all pairs, or ``i < j`` when symmetric."""
    return {
        i: [j for j in present_b if not symmetric or j > i]
        for i in present_a
        if any(not symmetric or j > i for j in present_b)
    }


def _finish(out: torch.Tensor, symmetric: bool, present: list[int]) -> torch.Tensor:
    """Clamp at 0; for a self-distance mirror the upper triangle and zero the diagonal."""
    out = out.clamp_min(0.0)
    if symmetric:
        low = torch.tril_indices(out.shape[0], out.shape[1], offset=-1)
        out[low[0], low[1]] = out[low[1], low[0]]
        idx = torch.tensor(present, dtype=torch.long)
        out[idx, idx] = 0.0
    return out


def _gaussian_factors(
    samples: list[torch.Tensor | None], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor | None]]:
    """Means ``(C, D)``, traces ``(C,)`` and covariance factors ``F_c`` ``(D, r_c)`` on ``device``."""
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
    fa: list[torch.Tensor | None],
    fb: list[torch.Tensor | None],
    pairs: dict[int, list[int]],
    device: torch.device,
) -> torch.Tensor:
    """``(C_a, C_b)`` float64 CPU matrix of ``||F_a^T F_b||_*`` for ``pairs`` (NaN elsewhere)."""
    out = torch.full((len(fa), len(fb)), float("nan"), dtype=torch.float64)
    if not pairs:
        return out
    ib = sorted({j for cols in pairs.values() for j in cols})
    rb = max(fb[j].shape[1] for j in ib)  # type: ignore[union-attr]
    dim = fb[ib[0]].shape[0]  # type: ignore[union-attr]
    # the column factors side by side, each zero-padded to rb columns (extra zero columns
    # leave the non-zero singular values unchanged): one GEMM per row class and block of
    # columns, ~30 % faster than a batched product of the same size
    pos = {j: k for k, j in enumerate(ib)}
    wide = torch.zeros((dim, len(ib) * rb), dtype=torch.float64, device=device)
    for j in ib:
        factor = fb[j]
        assert factor is not None  # every class in pairs has samples
        wide[:, pos[j] * rb : pos[j] * rb + factor.shape[1]] = factor
    for i, cols in pairs.items():
        left = fa[i].T  # type: ignore[union-attr]  # (r_i, D)
        chunk = max(1, _BLOCK_BYTES // max(1, left.shape[0] * rb * 8))
        for c0 in range(0, len(cols), chunk):
            part = cols[c0 : c0 + chunk]
            # a row's columns are a run of ib (all of it, or the j > i of a self-distance)
            first, last = pos[part[0]], pos[part[-1]]
            assert last - first + 1 == len(part)
            right = wide[:, first * rb : (last + 1) * rb]
            grams = (left @ right).view(left.shape[0], len(part), rb).permute(1, 0, 2)
            out[i, part] = _svdvals(grams).sum(dim=-1).cpu()
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
    eigenvalues clipped to 0, float64. Products run on the inputs' device, the
    eigendecompositions in float64 on the CPU (see the module docstring).

    Parameters
    ----------
    means_a, covs_a
        ``(A, D)`` and ``(A, D, D)``.
    means_b, covs_b
        ``(B, D)`` and ``(B, D, D)``.

    Returns
    -------
    torch.Tensor
        ``(A, B)`` float64, on the inputs' device.

    Examples
    --------
    The closed form ``W_2^2 = |m_a - m_b|^2 + tr(S_a + S_b - 2 (S_a^1/2 S_b S_a^1/2)^1/2)``;
    in one dimension ``(m_a - m_b)^2 + (s_a - s_b)^2``, so ``N(0, 1)`` to ``N(1, 4)`` is
    ``1 + 1 = 2``:

    >>> import torch
    >>> from geoviz.ot import gaussian_w2
    >>> means = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    >>> covs = torch.tensor([[[1.0]], [[4.0]]], dtype=torch.float64)
    >>> gaussian_w2(means, covs, means, covs)
    tensor([[0., 2.],
            [2., 0.]], dtype=torch.float64)
    """
    with _single_threaded_blas():
        return _gaussian_w2(means_a, covs_a, means_b, covs_b)


def _gaussian_w2(
    means_a: torch.Tensor,
    covs_a: torch.Tensor,
    means_b: torch.Tensor,
    covs_b: torch.Tensor,
) -> torch.Tensor:
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


def _gaussian_w2_matrix(
    sa: list[torch.Tensor | None],
    sb: list[torch.Tensor | None],
    symmetric: bool,
    device: torch.device,
) -> torch.Tensor:
    present_a = [i for i, x in enumerate(sa) if x is not None]
    present_b = [j for j, x in enumerate(sb) if x is not None]
    means_a, tr_a, fa = _gaussian_factors(sa, device)
    if symmetric:
        means_b, tr_b, fb = means_a, tr_a, fa
    else:
        means_b, tr_b, fb = _gaussian_factors(sb, device)
    cross = _nuclear_cross(fa, fb, _pairs(present_a, present_b, symmetric), device)
    # ||m1 - m2||^2 by direct differences (C_a x C_b x D is small; no cancellation)
    dm = (means_a[:, None, :] - means_b[None, :, :]).square().sum(-1)
    base = (dm + tr_a[:, None] + tr_b[None, :]).cpu()
    return _finish(base - 2.0 * cross, symmetric, present_a)


def _sq_dists(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(n, m)`` squared Euclidean distances ``||x||^2 + ||y||^2 - 2 x.y``, clamped at 0."""
    return ((x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * x @ y.T).clamp_min_(0.0)


def _emd2_uniform(cost: np.ndarray) -> tuple[float, str | None]:
    """Exact OT cost between uniform weights on the rows and columns of ``cost``."""
    import ot  # POT, imported lazily (heavy)

    n, m = cost.shape
    value, log = ot.emd2(
        np.full(n, 1.0 / n),
        np.full(m, 1.0 / m),
        cost,
        numItermax=max(10_000_000, 100 * n * m),
        log=True,
    )
    return max(float(value), 0.0), log.get("warning")


def _cpu_workers(n_jobs: int, job_bytes: int) -> int:
    """Threads for the network-simplex solves: cores, jobs and memory permitting."""
    cores = usable_cores()
    free = available_memory_bytes(torch.device("cpu"))
    # a dense network simplex holds ~8 doubles per arc (cost, flow, plan, graph)
    by_memory = cores if free is None else max(1, free // (2 * 8 * max(1, job_bytes)))
    return int(max(1, min(n_jobs, cores, by_memory)))


def _exact_w2(
    sa: list[torch.Tensor | None],
    sb: list[torch.Tensor | None],
    symmetric: bool,
    device: torch.device,
    workers: int | None = None,
) -> torch.Tensor:
    """Exact ``W_2^2`` matrix: cost matrices on ``device``, network simplex on CPU threads."""
    present_a = [i for i, x in enumerate(sa) if x is not None]
    present_b = [j for j, x in enumerate(sb) if x is not None]
    out = torch.full((len(sa), len(sb)), float("nan"), dtype=torch.float64)
    pairs = _pairs(present_a, present_b, symmetric)
    n_jobs = sum(len(cols) for cols in pairs.values())
    if n_jobs == 0:
        return _finish(out, symmetric, present_a)
    dev_a = [None if x is None else x.to(device=device, dtype=torch.float64) for x in sa]
    dev_b = (
        dev_a
        if symmetric
        else [None if x is None else x.to(device=device, dtype=torch.float64) for x in sb]
    )
    largest = max(
        dev_a[i].shape[0] * dev_b[j].shape[0] * 8  # type: ignore[union-attr]
        for i, cols in pairs.items()
        for j in cols
    )
    if workers is None:
        workers = _cpu_workers(n_jobs, largest)
    pending: deque[tuple[int, int, Future[tuple[float, str | None]]]] = deque()
    problems: list[tuple[int, int, str]] = []

    def collect(i: int, j: int, fut: Future[tuple[float, str | None]]) -> None:
        value, warning = fut.result()
        out[i, j] = value
        if warning is not None:
            problems.append((i, j, str(warning)))

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="geoviz-emd") as pool:
        for i, cols in pairs.items():
            xa = dev_a[i]
            n_i = xa.shape[0]  # type: ignore[union-attr]
            # one GEMM per block of columns, kept below _BLOCK_BYTES on the device
            block: list[int] = []
            width = 0
            blocks: list[list[int]] = []
            for j in cols:
                n_j = dev_b[j].shape[0]  # type: ignore[union-attr]
                if block and (width + n_j) * n_i * 8 > _BLOCK_BYTES:
                    blocks.append(block)
                    block, width = [], 0
                block.append(j)
                width += n_j
            blocks.append(block)
            for part in blocks:
                xb = torch.cat([dev_b[j] for j in part])  # type: ignore[misc]
                cost = _sq_dists(xa, xb).cpu().numpy()  # type: ignore[arg-type]
                start = 0
                for j in part:
                    n_j = dev_b[j].shape[0]  # type: ignore[union-attr]
                    piece = np.ascontiguousarray(cost[:, start : start + n_j])
                    start += n_j
                    pending.append((i, j, pool.submit(_emd2_uniform, piece)))
                del cost
                # bound the cost matrices waiting on the CPU to ~2 per worker
                while len(pending) > 2 * workers:
                    collect(*pending.popleft())
        while pending:
            collect(*pending.popleft())
    if problems:
        i, j, msg = problems[0]
        warnings.warn(
            f"label_distances(method='exact'): the network simplex stopped before optimality "
            f"for {len(problems)} class pair(s), e.g. ({i}, {j}): {msg}",
            ConvergenceWarning,
            stacklevel=3,
        )
    return _finish(out, symmetric, present_a)


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
        ``"gaussian"`` (Bures-Wasserstein closed form) or ``"exact"`` (exact,
        unregularised OT between the class samples by network simplex).
    max_per_class
        Cap on samples per class (``None``: all); subsampling seeded by ``seed``.
    seed
        Seed of the per-class subsampling.
    device
        Where the heavy products run (``None``/``"auto"`` ->
        :func:`geoviz.backend.get_device`): the Gaussian moments and Gram
        matrices, and the exact method's per-pair cost matrices. The small
        eigen/singular-value decompositions and the exact method's
        network-simplex solves always run on the CPU (float64), so the result
        has the same meaning on every device.
    missing
        What to do with classes without samples: ``"nan"`` fills their row /
        column with NaN, ``"raise"`` raises :class:`~geoviz.errors.DatasetError`.

    Returns
    -------
    torch.Tensor
        ``(C_a, C_b)`` float64 **CPU** tensor whatever ``device`` is, non-negative
        (NaN only for absent classes). When ``a`` and ``b`` are the same dataset
        (same fingerprint) it is exactly symmetric with an exactly zero diagonal.

    Raises
    ------
    GeovizError
        Unknown ``method`` or bad ``max_per_class``.
    DatasetError
        Feature dimensions differ, or (``missing="raise"``) a class is absent.

    Warns
    -----
    ConvergenceWarning
        ``method="exact"``: a network simplex stopped at its iteration cap.

    Examples
    --------
    A translation by ``t`` moves every class by ``|t|^2`` (both estimators are exact for
    it), and a dataset is at distance exactly 0 from itself, class by class:

    >>> import numpy as np
    >>> from geoviz.data.dataset import LabeledDataset
    >>> from geoviz.ot import label_distances
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(100, 2)), np.arange(100) % 2
    >>> q = LabeledDataset(x + 4 * y[:, None], y, ("a", "b"), name="Q")
    >>> p = LabeledDataset(x + 4 * y[:, None] + [3.0, 0.0], y, ("a", "b"), name="P")
    >>> label_distances(q, p).diagonal().round(decimals=4)
    tensor([9., 9.], dtype=torch.float64)
    >>> label_distances(q, p, method="exact").diagonal().round(decimals=4)
    tensor([9., 9.], dtype=torch.float64)
    >>> d = label_distances(q, q)
    >>> d.diagonal().tolist(), bool((d == d.T).all())
    ([0.0, 0.0], True)
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
    with _single_threaded_blas():
        return _gaussian_w2_matrix(sa, sb, symmetric, dev)
