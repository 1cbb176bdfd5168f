"""The optimal-transport dataset distance (OTDD) and its entropic coupling.

Paper Sec. 2.2, eq. (otdd): between a target ``Q = {(x_i, y_i)}`` (``N_Q``
points) and a reference ``P = {(x'_j, y'_j)}`` (``N_P`` points), both with
uniform weights, the ground cost is::

    c((x, y), (x', y')) = lambda_x ||x - x'||^2 + lambda_y W_2^2(alpha_y, alpha_y')

(squared Euclidean, **no** factor 1/2; the label term comes from
:func:`geoviz.ot.labels.label_distances`). We solve the entropic problem with
:class:`geoviz.ot.sinkhorn.Sinkhorn` on a :class:`~geoviz.ot.sinkhorn.TransportProblem`.

Relative epsilon, and why the default is 1e-3
---------------------------------------------
``OTDDConfig.epsilon`` is **relative to the mean of the ground-cost matrix**
over all target x reference pairs::

    epsilon_abs = epsilon * mean_{i,j} C_ij
                = epsilon * (lambda_x mean_{i,j} ||x_i - x'_j||^2 + lambda_y p_Q^T W p_P)

(``p_Q``, ``p_P`` class frequencies). The mean is computed in closed form in
float64 (``mean||x||^2 + mean||x'||^2 - 2 xbar . xbar'``) over the *full*
datasets, so it does not depend on the mode (full, batched, streamed) and
batched mode uses the same ``epsilon_abs`` as full mode: the whole problem's cost
(:meth:`OTDDConfig.cost_geometry`, a :class:`~geoviz.ot.geometry.PointCloudCost`
holding the relative epsilon) resolves it once, and every batch is a part of that
geometry that keeps its absolute value. A relative epsilon
keeps one default meaningful across datasets and image sizes; its value decides
how sharp the maps are. Measured on the bundled MNIST -> Fashion-MNIST pair
(N = 2000 per side): ``epsilon`` = 0.05 / 0.01 / 0.002 / **0.001** / 0.0005 gives a
median plan-row perplexity (:attr:`OTDDResult.effective_neighbours`, reference
points averaged per mapped point) of 1135 / 107 / 4.7 / **2.4** / 1.7 and a mean
largest soft label (:attr:`OTDDResult.label_confidence`) of 0.28 / 0.58 / 0.81 /
**0.87** / 0.91. :data:`DEFAULT_EPSILON` = 1e-3 is the largest of these values
with at most a few neighbours and confident labels (the paper's maps, Sec. 4
figures, are sharp); above :data:`BLUR_NEIGHBOURS` neighbours :func:`otdd` warns
(:class:`~geoviz.errors.BlurWarning`).

Modes and memory
----------------
The cost is a geometry (:mod:`geoviz.ot.geometry`) read by the one Sinkhorn
loop of :class:`geoviz.ot.sinkhorn.Sinkhorn`; ``OTDDConfig.solver`` picks its
kernel (``"auto"``: dense while the plan is dense, a truncated sparse kernel
once it is sparse, which at the default epsilon keeps ~150 entries per row).

* **full** (``batch_size=None``): the ``(N_Q, N_P)`` cost is built on the
  device (``||x||^2 + ||x'||^2 - 2 x.x'``, clamped at 0, in row chunks so
  temporaries stay small) and stored (:class:`~geoviz.ot.geometry.DenseCost`);
  the dense kernel needs one more buffer of that size, the sparse kernel
  ~72 bytes per kept entry. The returned coupling (``keep_coupling``) is the
  dense plan of the potentials.
* **batched** (``batch_size=B``, paper appendix "Complexity": batches of ``B``
  target points against the reference): the target is shuffled (seeded) and
  cut into batches; each batch is solved against the reference, or against a
  fresh seeded random subsample of ``reference_subsample`` reference points.
  Memory is bounded by ``~B N_ref * itemsize`` (``N_ref`` = reference size
  used per batch); the cost is the mass-weighted average of the batch costs
  (the minibatch-OT estimator); no global coupling is returned. A batch of
  ``B`` points against ``N_ref > B`` reference points must spread each point's
  mass over at least ``N_ref / B`` of them, so its maps are blurrier than the
  full problem's; ``reference_subsample = B`` keeps batches balanced.
* **streamed** (``stream_reference=True``, with or without batches): the
  ``B x N_ref`` matrix is never materialised
  (:class:`~geoviz.ot.geometry.PointCloudCost`): every pass over the cost
  (support selection, verification, and the iterations of the ``online``
  kernel when the plan is too dense to truncate) recomputes it by row blocks,
  one GEMM each. Memory is ``O(block + (B + N_ref) D)`` plus the sparse support.

The solver receives the class labels as ``groups`` (class-level coarse
correction, see :class:`geoviz.ot.sinkhorn.Sinkhorn`), which removes the slow
inter-class mode caused by unequal class proportions.

Every size is checked with :func:`geoviz.backend.check_memory` before any large
allocation, which raises :class:`~geoviz.errors.ResourceError`.

Debiasing
---------
With ``debiased=True`` the reported ``cost`` is the Sinkhorn divergence
``OT_eps(Q, P) - (OT_eps(Q, Q) + OT_eps(P, P)) / 2`` where ``OT_eps`` is the
regularised optimum ``<f, a> + <g, b>`` (all three with the same
``epsilon_abs``; the self terms use label distances of each dataset with
itself and the averaged symmetric solver). The self problems need an
``N_Q x N_Q`` and an ``N_P x N_P`` cost (per batch: ``B x B`` and
``N_ref x N_ref``; streamed: blocks only). Otherwise ``cost`` is ``<pi, C>``,
the transport cost of the entropic plan.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from geoviz import limits
from geoviz.backend import DiskCache, check_memory, resolve_device, resolve_dtype
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import BlurWarning, DatasetError, GeovizError
from geoviz.ot.geometry import CostGeometry, PointCloudCost
from geoviz.ot.labels import LabelMethod, label_distances
from geoviz.ot.sinkhorn import (
    KernelPolicy,
    Sinkhorn,
    SinkhornCallback,
    SinkhornMode,
    SinkhornResult,
    TransportProblem,
    uniform_measure,
)

__all__ = [
    "BLUR_NEIGHBOURS",
    "DEFAULT_EPSILON",
    "OTDDConfig",
    "OTDDResult",
    "ProgressFn",
    "check_compatible",
    "ground_cost",
    "mean_ground_cost",
    "otdd",
]

ProgressFn = Callable[[str, float], None]

#: bump when the numbers produced by :func:`otdd` change (part of cache keys)
OTDD_ALGO_VERSION = "2"

#: default relative regularisation (``eps_abs = DEFAULT_EPSILON * mean(C)``): sharp maps,
#: see the table in the module docstring
DEFAULT_EPSILON = 1e-3

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
        ``"online"`` (see :class:`geoviz.ot.sinkhorn.KernelPolicy`).
    truncation
        Sparse kernel: drop plan entries below ``exp(-truncation)`` times their
        row's largest (the dropped mass is measured and reported).
    dtype
        Compute dtype of the cost/kernel (potentials are always float64).
    device
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    seed
        Seeds the label-distance subsampling, the batch shuffling and the
        reference subsamples.
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
    dtype: Literal["float32", "float64"] = "float32"
    device: str = "auto"
    seed: int = 0

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
            limits.check_epsilon(self.epsilon)
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
        for name in ("max_iter", "batch_size", "reference_subsample", "max_per_class"):
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

    @property
    def batched(self) -> bool:
        """Whether the problem is split into target batches or streamed."""
        return self.batch_size is not None or self.stream_reference

    def cache_params(self) -> dict[str, Any]:
        """Parameters that determine the numbers (everything but the device)."""
        params = dataclasses.asdict(self)
        params.pop("device")
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
        itemsize = _itemsize(resolve_dtype(self.dtype))
        check_memory(n_points * target.n_features * itemsize, dev, "the OTDD point clouds")
        if mean is None:
            mean = mean_ground_cost(
                target, reference, label_cost, lambda_x=self.lambda_x, lambda_y=self.lambda_y
            )
        return self._cloud(
            (target.features, target.labels),
            (reference.features, reference.labels),
            label_cost,
            dev,
            mean=mean,
            epsilon=self.epsilon,
            relative_epsilon=True,
        )

    def _cloud(
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
            kernel=KernelPolicy(mode=self.solver, truncation=self.truncation),
            keep_plan=keep_plan,
        )


_SCALARS = (
    "effective_neighbours",
    "label_confidence",
    "truncated_mass",
    "cost",
    "marginal_error",
    "converged",
    "n_iter",
    "epsilon_abs",
    "transport_cost",
    "regularized_cost",
    "mean_ground_cost",
    "n_batches",
)


@dataclass(frozen=True)
class OTDDResult:
    """Outcome of :func:`otdd`.

    Attributes
    ----------
    cost
        ``<pi, C>`` of the entropic plan, or the Sinkhorn divergence when
        ``config.debiased`` (batched: mass-weighted mean over batches).
    marginal_error
        Largest L1 marginal error over the solves (``||pi 1 - a||_1 + ||pi^T 1 - b||_1``).
    converged
        Every solve reached ``tol``.
    n_iter
        Sinkhorn iterations, summed over batches.
    epsilon_abs
        Absolute regularisation ``epsilon * mean(C)``.
    label_distances
        ``(C_Q, C_P)`` float64 CPU ``W_2^2`` between target and reference classes.
    coupling
        ``(N_Q, N_P)`` float32 CPU plan (rows sum to ``1/N_Q``); ``None`` in
        batched/streamed mode or when not kept.
    transport_cost
        ``<pi, C>`` (equals ``cost`` unless debiased).
    regularized_cost
        ``OT_eps = <f, a> + <g, b>`` of the cross problem (batched: mean).
    mean_ground_cost
        ``mean(C)`` used for ``epsilon_abs``.
    mapped_features
        ``(N_Q, D)`` float32 CPU barycentric projection (paper eq. (bary_map)),
        when requested.
    soft_labels
        ``(N_Q, C_P)`` float32 CPU, rows sum to 1, when requested.
    potentials
        ``(f (N_Q,), g (N_P,))`` float64 CPU dual potentials when the problem was
        solved in one piece against the whole reference (full mode, or streamed
        / batched with a single batch and no reference subsample);
        ``pi = (a (x) b) exp((f (+) g - C)/epsilon_abs)``.
    n_batches
        Number of target batches (1 in full mode).
    effective_neighbours
        **Sharpness**: median over target points of the plan-row perplexity
        ``exp(H(pi_i. / sum_j pi_ij))``, the number of reference points a mapped
        point effectively averages (1: a one-to-one map; ``N_P``: the mean
        image). Above :data:`BLUR_NEIGHBOURS` the maps are blurry.
    label_confidence
        Mean over target points of the largest soft-label entry (1: every
        mapped point gets one reference class; ``1/C_P``: uniform soft labels);
        ``nan`` without barycentric outputs.
    row_perplexity
        ``(N_Q,)`` float32 CPU per-point perplexity (see ``effective_neighbours``).
    neighbour_index, neighbour_weight
        ``(N_Q, 8)`` int64 reference indices and float32 row-normalised plan
        weights of the largest entries of every plan row, descending (index
        ``-1``, weight 0 where a row has fewer entries): which reference points
        each mapped point is made of.
    truncated_mass
        Sparse solver: mass of the dense entropic plan outside the kept support
        (largest over batches; 0 for the dense solver).
    solver_mode
        Kernel of the final Sinkhorn stage (``"dense"``, ``"sparse"``, ``"online"``).
    """

    cost: float
    marginal_error: float
    converged: bool
    n_iter: int
    epsilon_abs: float
    label_distances: torch.Tensor
    coupling: torch.Tensor | None = None
    transport_cost: float = float("nan")
    regularized_cost: float = float("nan")
    mean_ground_cost: float = float("nan")
    mapped_features: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    soft_labels: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    potentials: tuple[torch.Tensor, torch.Tensor] | None = dataclasses.field(
        default=None, repr=False
    )
    n_batches: int = 1
    effective_neighbours: float = float("nan")
    label_confidence: float = float("nan")
    row_perplexity: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    neighbour_index: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    neighbour_weight: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    truncated_mass: float = 0.0
    solver_mode: str = "dense"

    @property
    def is_blurry(self) -> bool:
        """``effective_neighbours > BLUR_NEIGHBOURS``."""
        return bool(self.effective_neighbours > BLUR_NEIGHBOURS)

    def summary(self) -> dict[str, Any]:
        """Plain-Python scalars (for manifests, the CLI and the app)."""
        return {
            "cost": self.cost,
            "transport_cost": self.transport_cost,
            "regularized_cost": self.regularized_cost,
            "marginal_error": self.marginal_error,
            "converged": self.converged,
            "n_iter": self.n_iter,
            "epsilon_abs": self.epsilon_abs,
            "mean_ground_cost": self.mean_ground_cost,
            "n_batches": self.n_batches,
            "effective_neighbours": self.effective_neighbours,
            "label_confidence": self.label_confidence,
            "truncated_mass": self.truncated_mass,
            "solver_mode": self.solver_mode,
        }

    def without_coupling(self) -> OTDDResult:
        """A copy that drops the (large) coupling."""
        return dataclasses.replace(self, coupling=None)

    def to_payload(self) -> dict[str, Any]:
        """Tensors and scalars for :class:`~geoviz.backend.DiskCache` (inverse: :meth:`from_payload`)."""
        payload: dict[str, Any] = {k: getattr(self, k) for k in _SCALARS}
        payload["label_distances"] = self.label_distances
        payload["solver_mode"] = self.solver_mode
        for key in (
            "coupling",
            "mapped_features",
            "soft_labels",
            "row_perplexity",
            "neighbour_index",
            "neighbour_weight",
        ):
            value = getattr(self, key)
            if value is not None:
                payload[key] = value
        if self.potentials is not None:
            payload["f"], payload["g"] = self.potentials
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> OTDDResult:
        """Rebuild a result stored with :meth:`to_payload`."""
        pots = (payload["f"], payload["g"]) if "f" in payload else None
        return cls(
            cost=float(payload["cost"]),
            marginal_error=float(payload["marginal_error"]),
            converged=bool(payload["converged"]),
            n_iter=int(payload["n_iter"]),
            epsilon_abs=float(payload["epsilon_abs"]),
            label_distances=payload["label_distances"],
            coupling=payload.get("coupling"),
            transport_cost=float(payload["transport_cost"]),
            regularized_cost=float(payload["regularized_cost"]),
            mean_ground_cost=float(payload["mean_ground_cost"]),
            mapped_features=payload.get("mapped_features"),
            soft_labels=payload.get("soft_labels"),
            potentials=pots,
            n_batches=int(payload["n_batches"]),
            effective_neighbours=float(payload["effective_neighbours"]),
            label_confidence=float(payload["label_confidence"]),
            row_perplexity=payload.get("row_perplexity"),
            neighbour_index=payload.get("neighbour_index"),
            neighbour_weight=payload.get("neighbour_weight"),
            truncated_mass=float(payload["truncated_mass"]),
            solver_mode=str(payload["solver_mode"]),
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


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _block_cost(cloud: PointCloudCost, *, stream: bool, what: str) -> CostGeometry:
    """The OTDD cost of one block: ``cloud`` itself (streamed) or stored, memory checked first."""
    n, m = cloud.shape
    item = _itemsize(cloud.dtype)
    if stream:
        block = min(64 * 2**20, n * m * item)  # one row block of the cost
        check_memory(block, cloud.device, f"the streamed {what}")
        return cloud
    check_memory(n * m * item, cloud.device, f"the {what} ({n} x {m})")
    return cloud.stored()


class _Progress:
    """Forwards ``(stage, fraction)`` with fractions clipped to [0, 1] and monotone per stage."""

    def __init__(self, fn: ProgressFn | None) -> None:
        self.fn = fn
        self.last: dict[str, float] = {}

    def __call__(self, stage: str, fraction: float) -> None:
        if self.fn is not None:
            frac = max(self.last.get(stage, 0.0), float(min(1.0, max(0.0, fraction))))
            self.last[stage] = frac
            self.fn(stage, frac)

    def sinkhorn_callback(
        self, stage: str, lo: float, hi: float, tol: float
    ) -> SinkhornCallback | None:
        if self.fn is None:
            return None
        first: list[float] = []

        def cb(_it: int, err: float) -> None:
            if not first:
                first.append(max(err, tol * 1.0001))
            frac = (
                math.log(first[0] / max(err, tol)) / math.log(first[0] / tol)
                if first[0] > tol
                else 1.0
            )
            self(stage, lo + (hi - lo) * min(1.0, max(0.0, frac)))

        return cb


@dataclass(frozen=True)
class _BlockOut:
    """What one target batch contributes (every tensor on the CPU)."""

    transport: float
    regularized: float
    error: float
    converged: bool
    n_iter: int
    plan: torch.Tensor | None
    mapped: torch.Tensor | None
    soft: torch.Tensor | None
    f: torch.Tensor
    g: torch.Tensor
    perplexity: torch.Tensor
    neighbour_index: torch.Tensor
    neighbour_weight: torch.Tensor
    truncated_mass: float
    mode: str


def _solve_block(
    problem: TransportProblem,
    solver: Sinkhorn,
    callback: SinkhornCallback | None,
    *,
    map_onto: tuple[torch.Tensor, torch.Tensor, int] | None,
) -> _BlockOut:
    """Entropic OTDD of one target block against the reference (paper eq. (otdd)).

    ``map_onto``: ``(reference features (m, D), reference labels (m,), n_classes)`` for
    the barycentric outputs (eq. (bary_map)), or ``None``.
    """
    res = solver(problem, callback=callback)
    mapped = soft = None
    if map_onto is not None:
        # barycentric projection, eq. (bary_map): rows of the plan renormalised
        xp, yp, n_classes = map_onto
        geom = problem.geometry
        onehot = torch.nn.functional.one_hot(yp.to(geom.device), n_classes)
        values = torch.cat([xp.to(device=geom.device, dtype=geom.dtype), onehot.to(geom.dtype)], 1)
        bary = res.apply(values)
        d = xp.shape[1]
        mapped = bary[:, :d].float().cpu()
        soft = bary[:, d:]
        soft = (soft / soft.sum(1, keepdim=True)).float().cpu()
    idx, wts = res.top_neighbours(N_NEIGHBOURS)
    out_plan = res.plan().to(device="cpu", dtype=torch.float32) if solver.keep_plan else None
    return _BlockOut(
        transport=res.transport_cost(),
        regularized=res.dual_value(),
        error=res.marginal_error,
        converged=res.converged,
        n_iter=res.n_iter,
        plan=out_plan,
        mapped=mapped,
        soft=soft,
        f=res.f.cpu(),
        g=res.g.cpu(),
        perplexity=res.row_perplexity().float().cpu(),
        neighbour_index=idx,
        neighbour_weight=wts.float(),
        truncated_mass=res.truncated_mass,
        mode=res.mode,
    )


def _self_value(
    x: torch.Tensor,
    y: torch.Tensor,
    label_cost: torch.Tensor,
    config: OTDDConfig,
    epsilon_abs: float,
    device: torch.device,
) -> SinkhornResult:
    """``OT_eps`` of a point cloud with itself (debiasing term), averaged symmetric solver."""
    cloud = config._cloud(
        (x, y), (x, y), label_cost, device, epsilon=epsilon_abs, relative_epsilon=False
    )
    geom = _block_cost(
        cloud, stream=config.stream_reference, what="OTDD self-cost matrix for debiasing"
    )
    n = geom.shape[0]
    weights = uniform_measure(n, geom.device)
    problem = TransportProblem(geom, weights, weights, symmetric=True)
    return config.sinkhorn_solver()(problem)


# --------------------------------------------------------------------------- main entry


def otdd(
    target: LabeledDataset,
    reference: LabeledDataset,
    config: OTDDConfig = OTDDConfig(),
    progress: ProgressFn | None = None,
    *,
    barycentric: bool = False,
    keep_coupling: bool = True,
    label_cost: torch.Tensor | None = None,
    cache: DiskCache | None = None,
) -> OTDDResult:
    """Entropic OTDD between ``target`` (Q) and ``reference`` (P), paper eq. (otdd).

    Parameters
    ----------
    target, reference
        Labelled datasets with the same feature dimension; uniform weights.
    config
        See :class:`OTDDConfig` (``epsilon`` is relative to the mean ground cost).
    progress
        ``progress(stage, fraction)`` with stages ``"labels"``, ``"sinkhorn"``,
        ``"debias"``, ``"done"``; ``fraction`` in ``[0, 1]`` within the stage.
    barycentric
        Also compute the barycentric projection of every target point
        (``mapped_features``, ``soft_labels``; paper eq. (bary_map)).
    keep_coupling
        Return the ``(N_Q, N_P)`` coupling in full mode.
    label_cost
        Precomputed ``(C_Q, C_P)`` label distances (default: computed with
        ``config.label_method``).
    cache
        Optional :class:`~geoviz.backend.DiskCache`; the result is stored under
        the fingerprints of both datasets and ``config.cache_params()``.

    Returns
    -------
    OTDDResult

    Raises
    ------
    DatasetError
        Feature dimensions differ.
    ResourceError
        The cost matrix would not fit in memory (use ``batch_size``/``stream_reference``).
    GeovizError
        Invalid configuration.
    """
    if not isinstance(config, OTDDConfig):
        raise GeovizError(f"otdd: config must be an OTDDConfig, got {type(config).__name__}")
    check_compatible(target, reference)
    if cache is not None:
        params = {
            "target": target.fingerprint,
            "reference": reference.fingerprint,
            "config": config.cache_params(),
            "barycentric": bool(barycentric),
            "keep_coupling": bool(keep_coupling),
            "label_cost": label_cost,
        }
        payload = cache.get_or_compute(
            "otdd",
            params,
            lambda: _otdd(
                target,
                reference,
                config,
                progress,
                barycentric=barycentric,
                keep_coupling=keep_coupling,
                label_cost=label_cost,
            ).to_payload(),
        )
        return OTDDResult.from_payload(payload)
    return _otdd(
        target,
        reference,
        config,
        progress,
        barycentric=barycentric,
        keep_coupling=keep_coupling,
        label_cost=label_cost,
    )


def _otdd(
    target: LabeledDataset,
    reference: LabeledDataset,
    config: OTDDConfig,
    progress: ProgressFn | None,
    *,
    barycentric: bool,
    keep_coupling: bool,
    label_cost: torch.Tensor | None,
) -> OTDDResult:
    prog = _Progress(progress)
    dev = resolve_device(config.device)
    prog("labels", 0.0)
    if label_cost is None:
        lab = label_distances(
            target,
            reference,
            method=config.label_method,
            max_per_class=config.max_per_class,
            seed=config.seed,
            device=dev,
        )
    else:
        lab = torch.as_tensor(label_cost, dtype=torch.float64).cpu()
        if tuple(lab.shape) != (target.n_classes, reference.n_classes):
            raise GeovizError(
                f"otdd: label_cost has shape {tuple(lab.shape)}, expected "
                f"({target.n_classes}, {reference.n_classes})"
            )
    prog("labels", 1.0)
    mean_c = mean_ground_cost(
        target, reference, lab, lambda_x=config.lambda_x, lambda_y=config.lambda_y
    )
    # the whole problem's cost: epsilon is resolved on it once, with the closed-form mean,
    # and every batch (a part of it) solves at that absolute value
    whole = config.cost_geometry(target, reference, lab, mean=mean_c, device=dev)
    eps_abs = whole.epsilon_abs
    n_q, n_p = target.n_samples, reference.n_samples
    xq, yq, xp, yp = target.features, target.labels, reference.features, reference.labels
    n_classes_p = reference.n_classes

    if not config.batched:
        batches = [np.arange(n_q)]
    else:
        size = config.batch_size or n_q
        perm = (
            np.arange(n_q)
            if size >= n_q
            else np.random.default_rng((config.seed, 1)).permutation(n_q)
        )
        batches = [perm[i : i + size] for i in range(0, n_q, size)]
    n_b = len(batches)

    mapped = torch.empty((n_q, xq.shape[1]), dtype=torch.float32) if barycentric else None
    soft = torch.empty((n_q, n_classes_p), dtype=torch.float32) if barycentric else None
    transport = regularized = debias = 0.0
    max_err, all_conv, iters = 0.0, True, 0
    plan = pots = None
    perplexity = torch.empty(n_q, dtype=torch.float32)
    neighbour_index = torch.full((n_q, N_NEIGHBOURS), -1, dtype=torch.long)
    neighbour_weight = torch.zeros((n_q, N_NEIGHBOURS), dtype=torch.float32)
    truncated, modes = 0.0, set[str]()
    lab_qq = lab_pp = None
    if config.debiased:
        lab_qq, lab_pp = (
            label_distances(
                ds,
                ds,
                method=config.label_method,
                max_per_class=config.max_per_class,
                seed=config.seed,
                device=dev,
            )
            for ds in (target, reference)
        )

    solver = config.sinkhorn_solver(
        keep_plan=keep_coupling and not config.batched and not config.stream_reference
    )
    for bi, rows in enumerate(batches):
        rows_t = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        cols_t: torch.Tensor | None = None
        if (
            config.batched
            and config.reference_subsample is not None
            and config.reference_subsample < n_p
        ):
            cols = np.random.default_rng((config.seed, 2, bi)).choice(
                n_p, size=config.reference_subsample, replace=False
            )
            cols_t = torch.from_numpy(np.sort(cols))
        whole_target = n_b == 1 and len(rows) == n_q
        bxq, byq = (xq, yq) if whole_target else (xq[rows_t], yq[rows_t])
        bxp, byp = (xp, yp) if cols_t is None else (xp[cols_t], yp[cols_t])
        # a part has its own mean (for the schedule) and the whole's epsilon_abs
        part = (
            whole
            if whole_target and cols_t is None
            else whole.subset(None if whole_target else rows_t, cols_t)
        )
        geom = _block_cost(part, stream=config.stream_reference, what="OTDD cost matrix")
        problem = TransportProblem(
            geom,
            uniform_measure(geom.shape[0], geom.device),
            uniform_measure(geom.shape[1], geom.device),
            groups=(byq, byp),
        )
        cb = prog.sinkhorn_callback("sinkhorn", bi / n_b, (bi + 1) / n_b, config.tol)
        out = _solve_block(
            problem, solver, cb, map_onto=(bxp, byp, n_classes_p) if barycentric else None
        )
        prog("sinkhorn", (bi + 1) / n_b)
        weight = len(rows) / n_q
        transport += weight * out.transport
        regularized += weight * out.regularized
        max_err = max(max_err, out.error)
        all_conv = all_conv and out.converged
        iters += out.n_iter
        perplexity[rows_t] = out.perplexity
        k = out.neighbour_index.shape[1]
        nb = out.neighbour_index
        if cols_t is not None:  # indices into the subsample -> into the reference
            nb = torch.where(nb >= 0, cols_t[nb.clamp_min(0)], -1)
        neighbour_index[rows_t, :k] = nb
        neighbour_weight[rows_t, :k] = out.neighbour_weight
        truncated = max(truncated, out.truncated_mass)
        modes.add(out.mode)
        if out.mapped is not None and out.soft is not None:
            assert mapped is not None and soft is not None
            mapped[rows_t] = out.mapped
            soft[rows_t] = out.soft
        if n_b == 1 and cols_t is None:
            plan = out.plan
            pots = (out.f, out.g)
        if lab_qq is not None and lab_pp is not None:
            prog("debias", bi / n_b)
            self_q = _self_value(bxq, byq, lab_qq, config, eps_abs, dev)
            self_p = _self_value(bxp, byp, lab_pp, config, eps_abs, dev)
            debias += weight * 0.5 * (self_q.dual_value() + self_p.dual_value())
            max_err = max(max_err, self_q.marginal_error, self_p.marginal_error)
            all_conv = all_conv and self_q.converged and self_p.converged
            iters += self_q.n_iter + self_p.n_iter
        del out
    prog("done", 1.0)
    cost = regularized - debias if config.debiased else transport
    effective = float(perplexity.double().median())
    confidence = float(soft.max(1).values.double().mean()) if soft is not None else float("nan")
    if effective > BLUR_NEIGHBOURS:
        warnings.warn(
            f"OTDD {target.name!r} -> {reference.name!r}: each mapped point averages a median of "
            f"{effective:.0f} reference points (label confidence {confidence:.2f}) at epsilon = "
            f"{config.epsilon:g} x mean cost, so the maps are blurred averages; use a smaller "
            f"epsilon (default {DEFAULT_EPSILON:g}) for sharp maps",
            BlurWarning,
            stacklevel=3,
        )
    return OTDDResult(
        cost=float(cost),
        marginal_error=float(max_err),
        converged=bool(all_conv),
        n_iter=int(iters),
        epsilon_abs=float(eps_abs),
        label_distances=lab,
        coupling=plan,
        transport_cost=float(transport),
        regularized_cost=float(regularized),
        mean_ground_cost=float(mean_c),
        mapped_features=mapped,
        soft_labels=soft,
        potentials=pots,
        n_batches=n_b,
        effective_neighbours=effective,
        label_confidence=confidence,
        row_perplexity=perplexity,
        neighbour_index=neighbour_index,
        neighbour_weight=neighbour_weight,
        truncated_mass=float(truncated),
        solver_mode="+".join(sorted(modes)),
    )
