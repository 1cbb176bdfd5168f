"""The OTDD's ground cost and its settings (paper Sec. 2.2, eq. (otdd)): :class:`OTDDConfig`
(the cost, its regularisation and the solver), the cost itself (:func:`ground_cost`, its
closed-form mean :func:`mean_ground_cost`) and the constants that go with them. The
computation is :func:`geoviz.ot.otdd.otdd`.

``epsilon`` is **relative** to the mean ground cost ``mean_{i,j} C_ij`` with
``C = lambda_x ||x - x'||^2 + lambda_y W_2^2(alpha_y, alpha_y')`` (squared Euclidean, no
1/2): ``epsilon_abs = epsilon * mean(C)``. It is checked once, here, where the value is made
(:meth:`OTDDConfig.__post_init__`); see the module docstring of :mod:`geoviz.ot.otdd` for why
the default is 1e-3.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from geoviz import limits
from geoviz.backend import available_memory_bytes, check_memory, resolve_device, resolve_dtype
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.ot.geometry import PointCloudCost
from geoviz.ot.sinkhorn import Sinkhorn
from geoviz.ot.strategies import KernelPolicy, SinkhornMode
from geoviz.tasks import BACKENDS, Backend, check_ray_address

# the default relative regularisation (eps_abs = DEFAULT_EPSILON * mean(C)): sharp maps, see
# the table in the module docstring; declared with the other choices in the vocabulary
from geoviz.vocabulary import DEFAULT_EPSILON, LabelMethod

__all__ = [
    "BLUR_NEIGHBOURS",
    "N_NEIGHBOURS",
    "OTDD_ALGO_VERSION",
    "OTDDConfig",
    "check_compatible",
    "ground_cost",
    "itemsize",
    "mean_ground_cost",
]

#: bump when the numbers produced by :func:`otdd` change (part of cache keys)
OTDD_ALGO_VERSION = "2"

#: a plan whose median row perplexity exceeds this is reported as blurry (:class:`BlurWarning`)
BLUR_NEIGHBOURS = 10.0

#: plan entries kept per target point for :attr:`OTDDResult.neighbour_index`
N_NEIGHBOURS = 8


@dataclass(frozen=True)
class OTDDConfig:
    """Parameters of :func:`otdd` (and of the maps built on it).

    Parameters
    ----------
    epsilon
        Entropic regularisation **relative to the mean of the ground-cost
        matrix** (``epsilon_abs = epsilon * mean(C)``, see module docstring), in
        ``[geoviz.limits.EPSILON_MIN, geoviz.limits.EPSILON_MAX]`` = ``[1e-4, 10]``
        (below 1e-4 the maps are already one-to-one and Sinkhorn stops converging,
        see :data:`geoviz.limits.EPSILON_MIN`).
        The default :data:`DEFAULT_EPSILON` (``1e-3``) gives sharp maps (a few
        reference points per mapped point); ``0.05`` averages about half the
        reference set (blur).
    lambda_x, lambda_y
        Weights of the feature and label terms of the ground cost (>= 0, not both 0).
    label_method
        ``"gaussian"`` or ``"exact"`` (see :func:`~geoviz.ot.labels.label_distances`).
    max_per_class
        Samples per class used by the label distances (``None``: all).
    tol
        Stop Sinkhorn when the L1 marginal error is ``<= tol``.
    max_iter
        Iteration budget of each Sinkhorn solve.
    batch_size
        ``None`` for the full problem, else the number ``B`` of target points
        per batch.
    stream_reference
        Never materialise the ``B x N_ref`` cost (recompute blocks each iteration).
    reference_subsample
        In batched mode, solve each batch against a fresh seeded random
        subsample of this many reference points (``None``: all). Ignored in
        full mode.
    debiased
        Report the Sinkhorn divergence instead of ``<pi, C>``.
    solver
        Sinkhorn kernel: ``"auto"`` (dense while the plan is dense, truncated
        sparse kernel once it is sparse), ``"dense"``, ``"sparse"`` or
        ``"online"`` (see :class:`geoviz.ot.strategies.KernelPolicy`).
    truncation
        Sparse kernel: drop plan entries below ``exp(-truncation)`` times their
        row's largest (the dropped mass is measured and reported).
    support_per_row
        Sparse kernel: keep at most this many entries per row (each row's largest;
        :class:`~geoviz.ot.strategies.KernelPolicy`). ``None``: no cap for one stored
        problem, :data:`~geoviz.limits.STREAMED_SUPPORT_PER_ROW` when streamed, where it bounds the
        one-problem solve at full size (60,000 x 60,000: ~1 GiB of support instead of
        the tens of GiB the truncation window alone would keep), and when batched,
        where the support is re-chosen among each row's candidates.
    dtype
        Compute dtype of the cost/kernel (potentials are always float64).
    device
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    seed
        Seeds the label-distance subsampling, the batch shuffling and the
        reference subsamples.
    backend
        How the batches of the batched mode run (:func:`geoviz.tasks.run_tasks`):
        ``"sequential"`` (default: one after another in this process), ``"ray"``
        (one Ray task per batch) or ``"auto"`` (Ray when installed). The values do
        not depend on it; a single problem always runs in this process.
    ray_address
        The Ray cluster of ``backend="ray"`` (``None``: a local cluster, or
        ``$RAY_ADDRESS``).
    """

    epsilon: float = DEFAULT_EPSILON
    lambda_x: float = 1.0
    lambda_y: float = 1.0
    label_method: LabelMethod = "gaussian"
    max_per_class: int | None = 200
    tol: float = 1e-4
    max_iter: int = 5000
    batch_size: int | None = None
    stream_reference: bool = False
    reference_subsample: int | None = None
    debiased: bool = False
    solver: SinkhornMode = "auto"
    truncation: float = 20.0
    support_per_row: int | None = None
    dtype: Literal["float32", "float64"] = "float32"
    device: str = "auto"
    seed: int = 0
    backend: Backend = "sequential"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        def bad(msg: str) -> GeovizError:
            return GeovizError(f"OTDDConfig: {msg}")

        for name in ("epsilon", "lambda_x", "lambda_y", "tol", "truncation"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise bad(f"{name} must be a finite number, got {value!r}")
        try:  # the one range of relative epsilons (geoviz.limits explains the floor)
            # kept as the checked RelativeEpsilon: the geometry and the solver never check again
            object.__setattr__(self, "epsilon", limits.check_epsilon(self.epsilon))
        except GeovizError as err:
            raise bad(str(err)) from None
        if self.lambda_x < 0 or self.lambda_y < 0:
            raise bad(
                f"lambda_x and lambda_y must be >= 0, got {self.lambda_x!r}, {self.lambda_y!r}"
            )
        if self.lambda_x == 0 and self.lambda_y == 0:
            raise bad("lambda_x and lambda_y cannot both be 0")
        if self.tol <= 0:
            raise bad(f"tol must be > 0, got {self.tol!r}")
        if self.truncation <= 0:
            raise bad(f"truncation must be > 0, got {self.truncation!r}")
        if self.solver not in ("auto", "dense", "sparse", "online"):
            raise bad(f"solver must be 'auto', 'dense', 'sparse' or 'online', got {self.solver!r}")
        if self.label_method not in ("exact", "gaussian"):
            raise bad(f"label_method must be 'exact' or 'gaussian', got {self.label_method!r}")
        for name in (
            "max_iter",
            "batch_size",
            "reference_subsample",
            "max_per_class",
            "support_per_row",
        ):
            value = getattr(self, name)
            if value is None and name != "max_iter":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, np.integer))
                or int(value) < 1
            ):
                raise bad(
                    f"{name} must be a positive integer{'' if name == 'max_iter' else ' or None'}, got {value!r}"
                )
            if name != "max_iter" and int(value) > limits.MAX_SAMPLES:
                raise bad(
                    f"{name} must be at most {limits.MAX_SAMPLES:,} (samples of one dataset), "
                    f"got {int(value):,}"
                )
        if self.dtype not in ("float32", "float64"):
            raise bad(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if str(self.device) not in ("auto", "cpu", "cuda") and not str(self.device).startswith(
            "cuda:"
        ):
            raise bad(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)):
            raise bad(f"seed must be an integer, got {self.seed!r}")
        if self.backend not in BACKENDS:
            raise bad(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.ray_address is not None:
            check_ray_address(self.ray_address, "OTDDConfig: ray_address")

    @property
    def batched(self) -> bool:
        """Whether the problem is split into target batches or streamed."""
        return self.batch_size is not None or self.stream_reference

    @property
    def max_support_per_row(self) -> int | None:
        """The sparse kernel's cap per row (:attr:`support_per_row`, its default resolved)."""
        if self.support_per_row is not None:
            return int(self.support_per_row)
        # streamed: bounds the support at full size; batched: lets every re-selection of
        # the support be made among candidates found in one pass (no full pass each time)
        full_size = self.stream_reference or self.batch_size is not None
        return limits.STREAMED_SUPPORT_PER_ROW if full_size else None

    def fits_stored(self, n_q: int, n_p: int) -> bool:
        """Whether one problem of ``n_q x n_p`` can store its cost (and a dense kernel
        buffer) on :attr:`device`; if not, ``stream_reference=True`` solves it in bounded
        memory (:func:`~geoviz.backend.check_memory`'s rule: twice the bytes must be free)."""
        free = available_memory_bytes(resolve_device(self.device))
        return free is None or 2 * 2 * n_q * n_p * itemsize(resolve_dtype(self.dtype)) <= free

    def sized_for(self, n_q: int, n_p: int) -> OTDDConfig:
        """This configuration for one ``n_q x n_p`` problem: streamed when its cost has more
        than :data:`~geoviz.limits.STREAM_ABOVE_ENTRIES` entries or does not fit
        (:meth:`fits_stored`), else unchanged (also when batched or already streamed).

        The CLI and the app both size their problems here, so a full-size fit computed by
        one is found in the disk cache by the other: the entry count decides on every
        machine; free memory only decides in between.
        """
        if self.batch_size is not None or self.stream_reference:
            return self
        if n_q * n_p > limits.STREAM_ABOVE_ENTRIES or not self.fits_stored(n_q, n_p):
            return dataclasses.replace(self, stream_reference=True)
        return self

    def cache_params(self) -> dict[str, Any]:
        """Parameters that determine the numbers (everything but where they run)."""
        params = dataclasses.asdict(self)
        for where in ("device", "backend", "ray_address"):
            params.pop(where)
        params["support_per_row"] = self.max_support_per_row  # its default resolved
        params["algo"] = OTDD_ALGO_VERSION
        return params

    def cost_geometry(
        self,
        target: LabeledDataset,
        reference: LabeledDataset,
        label_cost: torch.Tensor,
        *,
        mean: float | None = None,
        device: torch.device | str | None = None,
    ) -> PointCloudCost:
        """The OTDD ground cost between ``target`` and ``reference`` with this epsilon.

        A :class:`~geoviz.ot.geometry.PointCloudCost` (evaluated by row blocks, never
        stored) of ``lambda_x ||x - x'||^2 + lambda_y label_cost[y, y']`` (no 1/2) in
        :attr:`dtype` on ``device`` (default :attr:`device`), holding the relative
        :attr:`epsilon`: its ``epsilon_abs`` is ``epsilon * mean`` (``mean``: the
        closed form of :func:`mean_ground_cost`, computed when not given).
        """
        dev = resolve_device(self.device if device is None else device)
        n_points = target.n_samples + reference.n_samples
        item_bytes = itemsize(resolve_dtype(self.dtype))
        check_memory(n_points * target.n_features * item_bytes, dev, "the OTDD point clouds")
        if mean is None:
            mean = mean_ground_cost(
                target, reference, label_cost, lambda_x=self.lambda_x, lambda_y=self.lambda_y
            )
        return self.point_cloud(
            (target.features, target.labels),
            (reference.features, reference.labels),
            label_cost,
            dev,
            mean=mean,
            epsilon=self.epsilon,
            relative_epsilon=True,
        )

    def point_cloud(
        self,
        points: tuple[torch.Tensor, torch.Tensor],
        points_ref: tuple[torch.Tensor, torch.Tensor],
        label_cost: torch.Tensor,
        device: torch.device,
        *,
        epsilon: float,
        relative_epsilon: bool,
        mean: float | None = None,
    ) -> PointCloudCost:
        """The ground cost between ``(features, labels)`` pairs with this config's weights."""
        return PointCloudCost(
            points[0],
            points_ref[0],
            labels=points[1],
            labels_ref=points_ref[1],
            label_cost=label_cost,
            lambda_x=self.lambda_x,
            lambda_y=self.lambda_y,
            dtype=resolve_dtype(self.dtype),
            device=device,
            mean=mean,
            epsilon=epsilon,
            relative_epsilon=relative_epsilon,
        )

    def sinkhorn_solver(self, *, keep_plan: bool = False) -> Sinkhorn:
        """The :class:`~geoviz.ot.sinkhorn.Sinkhorn` settings of this configuration."""
        return Sinkhorn(
            tol=self.tol,
            max_iter=self.max_iter,
            kernel=KernelPolicy(
                mode=self.solver,
                truncation=self.truncation,
                max_per_row=self.max_support_per_row,
            ),
            keep_plan=keep_plan,
        )


# --------------------------------------------------------------------------- helpers


def check_compatible(target: LabeledDataset, reference: LabeledDataset) -> None:
    """Raise :class:`~geoviz.errors.DatasetError` unless both are datasets of equal dimension."""
    for role, ds in (("target", target), ("reference", reference)):
        if not isinstance(ds, LabeledDataset):
            raise GeovizError(f"otdd: {role} must be a LabeledDataset, got {type(ds).__name__}")
    if target.n_features != reference.n_features:
        raise DatasetError(
            f"feature dimensions differ: target {target.name!r} has {target.n_features} features per "
            f"sample, reference {reference.name!r} has {reference.n_features}; harmonize them "
            "(same image size/channels or feature extractor) first"
        )


def _moments(x: torch.Tensor, chunk: int = 8192) -> tuple[float, torch.Tensor]:
    """``mean ||x||^2`` and ``mean x`` in float64, in row chunks (no full float64 copy)."""
    total_sq = 0.0
    total = torch.zeros(x.shape[1], dtype=torch.float64)
    for r0 in range(0, x.shape[0], chunk):
        blk = x[r0 : r0 + chunk].double()
        total_sq += float(blk.square().sum())
        total += blk.sum(0)
    return total_sq / x.shape[0], total / x.shape[0]


def mean_ground_cost(
    target: LabeledDataset,
    reference: LabeledDataset,
    label_cost: torch.Tensor,
    *,
    lambda_x: float = 1.0,
    lambda_y: float = 1.0,
) -> float:
    """Exact mean of the OTDD ground cost over all target x reference pairs (float64).

    ``mean ||x - x'||^2 = mean||x||^2 + mean||x'||^2 - 2 xbar . xbar'`` and the
    label part is ``p_Q^T W p_P`` with class frequencies ``p``.
    """
    sq_q, mean_q = _moments(target.features)
    sq_p, mean_p = _moments(reference.features)
    feat = float(sq_q + sq_p - 2.0 * mean_q @ mean_p)
    pq = torch.from_numpy(target.class_counts() / target.n_samples)
    pp = torch.from_numpy(reference.class_counts() / reference.n_samples)
    w = label_cost.double().cpu()
    iq, ip = pq > 0, pp > 0
    lab = float(pq[iq] @ w[iq][:, ip] @ pp[ip])
    return lambda_x * max(feat, 0.0) + lambda_y * lab


def ground_cost(
    xq: torch.Tensor,
    yq: torch.Tensor,
    xp: torch.Tensor,
    yp: torch.Tensor,
    label_cost: torch.Tensor,
    *,
    lambda_x: float = 1.0,
    lambda_y: float = 1.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """OTDD ground-cost matrix ``lambda_x ||x_i - x'_j||^2 + lambda_y W[y_i, y'_j]``.

    Built on ``device`` in ``dtype`` via ``||x||^2 + ||x'||^2 - 2 x.x'`` (one
    GEMM per row chunk), clamped at 0; row chunks keep the temporaries below
    ~64 MiB.

    Parameters
    ----------
    xq, yq
        ``(n, D)`` features and ``(n,)`` label indices into the rows of ``label_cost``.
    xp, yp
        ``(m, D)`` and ``(m,)`` (label indices into its columns).
    label_cost
        ``(C_Q, C_P)`` label distances (entries of absent classes are never read).
    out
        Optional preallocated ``(n, m)`` output.

    Returns
    -------
    torch.Tensor
        ``(n, m)``.
    """
    cloud = PointCloudCost(
        xq,
        xp,
        labels=yq,
        labels_ref=yp,
        label_cost=label_cost,
        lambda_x=lambda_x,
        lambda_y=lambda_y,
        dtype=dtype,
        device=resolve_device(device),
    )
    return cloud.dense(out)


def itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of ``dtype``."""
    return torch.empty((), dtype=dtype).element_size()
