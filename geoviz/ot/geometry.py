"""Cost geometries: what the Sinkhorn solver needs to know about a cost matrix.

The solver (:class:`geoviz.ot.sinkhorn.Sinkhorn`) never asks for a whole
``(n, m)`` cost matrix. It reads the cost through a geometry, in the style of
OTT-JAX's ``Geometry``/``PointCloud``:

* :meth:`CostGeometry.row_blocks` yields ``(r0, r1, C[r0:r1])`` row blocks, which
  is all a log-domain pass, a support selection for the truncated (sparse)
  kernel or a measurement of the marginals of the dense plan needs;
* :attr:`CostGeometry.matrix` is the stored matrix when there is one (then the
  solver may keep a dense stabilised kernel beside it);
* the geometry holds the entropic regularisation (as OTT's ``relative_epsilon``):
  :attr:`CostGeometry.epsilon` and whether it is relative to the mean cost, and
  :attr:`CostGeometry.epsilon_abs` resolves the absolute value **once** (cached),
  ``eps_abs = epsilon * mean(C)`` for a relative epsilon (the convention of
  :class:`geoviz.ot.otdd_cost.OTDDConfig`), ``epsilon`` itself for an absolute one. The
  scale is that of the cost: ``C = ||x - x'||^2 + W_2^2`` with **no** factor 1/2,
  so ``eps_abs`` is in squared feature units. This is the only place where a
  relative epsilon becomes an absolute one and where an epsilon is validated
  (relative: :func:`geoviz.limits.check_epsilon`; absolute: finite, ``> 0`` and
  resolvable in the cost's floating-point type).

Two geometries are provided:

:class:`DenseCost`
    A stored matrix (any device, float32/float64).
:class:`PointCloudCost`
    The OTDD ground cost between two labelled point clouds, evaluated block by
    block and never stored (paper Sec. 2.2, eq. (otdd))::

        C_ij = lambda_x ||x_i - x'_j||^2 + lambda_y W[y_i, y'_j]

    (squared Euclidean, **no** factor 1/2; ``W`` the label-to-label ``W_2^2``).
    Each block is one GEMM, so a pass costs ``O(n m D)`` time and
    ``O(block * m)`` memory.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import TypeVar

import torch

from geoviz import limits
from geoviz.errors import GeovizError

__all__ = ["CostGeometry", "DenseCost", "PointCloudCost", "as_geometry", "check_epsilon_abs"]

#: bytes of one cost row block handed out by :meth:`CostGeometry.row_blocks`
_BLOCK_BYTES = 64 * 2**20

#: an absolute epsilon must be at least this many machine epsilons of the cost's dtype
#: times the mean cost (see :meth:`CostGeometry.epsilon_abs`)
_RESOLUTION_FACTOR = 4.0

_Geometry = TypeVar("_Geometry", bound="CostGeometry")


def check_epsilon_abs(value: object) -> float:
    """An absolute regularisation as a float: a finite number ``> 0``, else :class:`GeovizError`.

    (A relative one is checked by :func:`geoviz.limits.check_epsilon`, which adds its range.)
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise GeovizError(f"sinkhorn: epsilon_abs must be a finite number > 0, got {value!r}")
    return float(value)


class CostGeometry:
    """Base class: an ``(n, m)`` cost readable by row blocks, with its regularisation.

    Attributes
    ----------
    shape
        ``(n, m)``.
    device, dtype
        Where and in which precision blocks are produced.
    epsilon
        The entropic regularisation as given (``None``: not set yet, see
        :meth:`with_epsilon`).
    relative_epsilon
        Whether :attr:`epsilon` is relative to the mean cost.
    """

    shape: tuple[int, int]
    device: torch.device
    dtype: torch.dtype
    epsilon: float | None = None
    relative_epsilon: bool = False
    _mean: float | None = None
    _epsilon_abs: float | None = None

    def _set_epsilon(self, epsilon: float | None, relative: bool) -> None:
        """Validate and store the regularisation (constructors and :meth:`with_epsilon` only)."""
        if epsilon is None:
            self.epsilon, self.relative_epsilon = None, bool(relative)
        elif relative:
            self.epsilon, self.relative_epsilon = limits.check_epsilon(epsilon), True
        else:
            self.epsilon, self.relative_epsilon = check_epsilon_abs(epsilon), False
        self._epsilon_abs = None

    def with_epsilon(self: _Geometry, epsilon: float, *, relative: bool) -> _Geometry:
        """The same cost (tensors shared, not copied) with regularisation ``epsilon``.

        Parameters
        ----------
        epsilon
            Relative (``eps_abs = epsilon * mean(C)``, checked by
            :func:`geoviz.limits.check_epsilon`) or absolute (same units as the cost).
        relative
            Which of the two ``epsilon`` is.
        """
        out = copy.copy(self)
        out._set_epsilon(epsilon, relative)
        return out

    @property
    def epsilon_abs(self) -> float:
        """The absolute regularisation, resolved once and cached.

        ``epsilon * mean(C)`` for a relative epsilon, else ``epsilon``, where
        ``C = lambda_x ||x - x'||^2 + lambda_y W_2^2`` (no factor 1/2) for the OTDD
        cost. Raises :class:`~geoviz.errors.GeovizError` when no epsilon is set, when a
        relative one meets a zero mean cost, or when the value is below what the
        cost's dtype resolves: the kernel exponents ``(f + g - C) / eps`` carry the
        rounding error of ``C``, about ``machine_eps * |C|``, so below
        ``_RESOLUTION_FACTOR * machine_eps * mean(C)`` (about ``5e-7 mean(C)`` in
        float32, ``9e-16 mean(C)`` in float64) the plan is rounding noise and the
        iteration overflows (measured on 200 x 150 Gaussian clouds: a float32 cost at
        ``eps = 1e-12 mean(C)`` gave an infinite marginal error).
        """
        if self._epsilon_abs is None:
            if self.epsilon is None:
                raise GeovizError("the cost geometry has no epsilon; give one (with_epsilon) first")
            mean = self.mean()
            if self.relative_epsilon:
                if not mean > 0:
                    raise GeovizError(
                        "the mean ground cost is 0 (identical single-point datasets?), so a "
                        "relative epsilon is undefined; give an absolute one"
                    )
                eps = self.epsilon * mean
            else:
                eps = self.epsilon
            self._check_resolution(eps, mean)
            self._epsilon_abs = eps
        return self._epsilon_abs

    def _check_resolution(self, eps: float, mean: float) -> None:
        if not (math.isfinite(mean) and mean > 0):
            return
        machine = float(torch.finfo(self.dtype).eps)
        floor = _RESOLUTION_FACTOR * machine * mean
        if eps < floor:
            dtype = str(self.dtype).replace("torch.", "")
            raise GeovizError(
                f"sinkhorn: epsilon_abs {eps:.3g} is below what a {dtype} cost can resolve "
                f"({_RESOLUTION_FACTOR:g} x machine epsilon {machine:.2g} x mean cost {mean:.4g} = "
                f"{floor:.3g}), so exp(-C/epsilon_abs) would be rounding noise; use a larger "
                "epsilon_abs or a float64 cost"
            )

    def _carry_epsilon(self, sub: CostGeometry) -> None:
        """A part of this cost keeps the **absolute** value resolved on the whole.

        (Batches of an OTDD problem use the ``eps_abs`` of the full problem, whose
        mean is known in closed form, not ``epsilon`` times their own mean.)
        """
        if self.epsilon is None:
            sub._set_epsilon(None, False)
        else:
            sub._set_epsilon(self.epsilon_abs, False)

    @property
    def matrix(self) -> torch.Tensor | None:
        """The stored ``(n, m)`` matrix, or ``None`` for a geometry evaluated on the fly."""
        return None

    def block_rows(self) -> int:
        """Rows per block so that one block is about 64 MiB."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return max(1, min(self.shape[0], _BLOCK_BYTES // max(1, self.shape[1] * itemsize)))

    def row_block(self, r0: int, r1: int) -> torch.Tensor:
        """Rows ``r0:r1`` of the cost, ``(r1 - r0, m)``."""
        raise NotImplementedError

    def row_blocks(self, rows: int | None = None) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Yield ``(r0, r1, C[r0:r1])`` covering all rows in order."""
        step = self.block_rows() if rows is None else max(1, int(rows))
        n = self.shape[0]
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            yield r0, r1, self.row_block(r0, r1)

    def mean(self) -> float:
        """Mean of all entries (float64 accumulation), computed once."""
        if self._mean is None:
            total = 0.0
            for _, _, blk in self.row_blocks():
                total += float(blk.double().sum())
            self._mean = total / (self.shape[0] * self.shape[1])
        return self._mean

    def dense(self) -> torch.Tensor:
        """The whole ``(n, m)`` matrix (callers check memory first)."""
        return torch.cat([blk for _, _, blk in self.row_blocks()])

    def stored(self) -> DenseCost:
        """This cost as a :class:`DenseCost` (same mean and regularisation; memory checked by callers)."""
        self.check_finite()
        out = DenseCost(self.dense(), mean=self._mean, assume_finite=True)
        out._set_epsilon(self.epsilon, self.relative_epsilon)
        out._epsilon_abs = self._epsilon_abs
        return out

    def subset(self, rows: torch.Tensor | None, cols: torch.Tensor | None) -> CostGeometry:
        """The cost restricted to ``rows`` x ``cols`` (index tensors; ``None`` = all).

        The part has its own mean and the whole's absolute regularisation.
        """
        raise NotImplementedError

    def check_finite(self) -> None:
        """Raise :class:`~geoviz.errors.GeovizError` on NaN/inf entries."""
        for _, _, blk in self.row_blocks():
            if not bool(torch.isfinite(blk).all()):
                raise GeovizError("sinkhorn: cost contains NaN or infinite values")


class DenseCost(CostGeometry):
    """A stored cost matrix.

    Parameters
    ----------
    matrix
        ``(n, m)`` float32 or float64 tensor on any device (not copied, not modified).
    mean
        Optional known mean (skips a pass).
    assume_finite
        Skip the NaN/inf check (the caller built the matrix from validated data).
    epsilon, relative_epsilon
        Optional regularisation (see :class:`CostGeometry`).
    """

    def __init__(
        self,
        matrix: torch.Tensor,
        *,
        mean: float | None = None,
        assume_finite: bool = False,
        epsilon: float | None = None,
        relative_epsilon: bool = False,
    ) -> None:
        if (
            not isinstance(matrix, torch.Tensor)
            or matrix.ndim != 2
            or matrix.shape[0] == 0
            or matrix.shape[1] == 0
        ):
            shape = (
                tuple(matrix.shape) if isinstance(matrix, torch.Tensor) else type(matrix).__name__
            )
            raise GeovizError(f"sinkhorn: cost must be a non-empty 2-D tensor, got {shape}")
        if matrix.dtype not in (torch.float32, torch.float64):
            raise GeovizError(f"sinkhorn: cost must be float32 or float64, got {matrix.dtype}")
        self._matrix = matrix
        self._assume_finite = bool(assume_finite)
        self.shape = (int(matrix.shape[0]), int(matrix.shape[1]))
        self.device = matrix.device
        self.dtype = matrix.dtype
        self._mean = mean
        self._set_epsilon(epsilon, relative_epsilon)

    @property
    def matrix(self) -> torch.Tensor:
        return self._matrix

    def row_block(self, r0: int, r1: int) -> torch.Tensor:
        return self._matrix[r0:r1]

    def dense(self) -> torch.Tensor:
        return self._matrix

    def stored(self) -> DenseCost:
        return self

    def check_finite(self) -> None:
        if not self._assume_finite:
            super().check_finite()

    def subset(self, rows: torch.Tensor | None, cols: torch.Tensor | None) -> DenseCost:
        sub = self._matrix
        if rows is not None:
            sub = sub[rows.to(sub.device)]
        if cols is not None:
            sub = sub[:, cols.to(sub.device)]
        out = DenseCost(sub, assume_finite=self._assume_finite)
        self._carry_epsilon(out)
        return out


class PointCloudCost(CostGeometry):
    """OTDD ground cost between labelled point clouds, evaluated by blocks.

    ``C_ij = lambda_x ||x_i - x'_j||^2 + lambda_y W[y_i, y'_j]`` (no factor 1/2).

    Parameters
    ----------
    x, x_ref
        ``(n, D)`` and ``(m, D)`` features (moved to ``device`` in ``dtype`` once).
    labels, labels_ref
        ``(n,)`` and ``(m,)`` class indices into the rows / columns of
        ``label_cost`` (both ``None`` for a feature-only cost).
    label_cost
        ``(C_Q, C_P)`` label-to-label ``W_2^2`` (NaN entries of absent classes are never read).
    lambda_x, lambda_y
        Weights of the two terms.
    mean
        Optional known mean of the cost (e.g. the closed form of
        :func:`geoviz.ot.otdd_cost.mean_ground_cost`).
    block_bytes
        Size of one row block (default 64 MiB).
    epsilon, relative_epsilon
        Optional regularisation (see :class:`CostGeometry`).

    Examples
    --------
    >>> import torch
    >>> from geoviz.ot import PointCloudCost
    >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    >>> x_ref = torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    >>> PointCloudCost(x, x_ref).dense()  # ||x_i - x'_j||^2
    tensor([[1., 4., 0.],
            [2., 1., 1.]])

    With labels, the label-to-label ``W_2^2`` (5 between the two classes) is added:

    >>> label_cost = torch.tensor([[0.0, 5.0], [5.0, 0.0]], dtype=torch.float64)
    >>> PointCloudCost(
    ...     x, x_ref, labels=torch.tensor([0, 1]), labels_ref=torch.tensor([0, 1, 1]),
    ...     label_cost=label_cost,
    ... ).dense()
    tensor([[1., 9., 5.],
            [7., 1., 1.]])
    """

    labels: torch.Tensor
    labels_ref: torch.Tensor
    label_rows: torch.Tensor

    def __init__(
        self,
        x: torch.Tensor,
        x_ref: torch.Tensor,
        *,
        labels: torch.Tensor | None = None,
        labels_ref: torch.Tensor | None = None,
        label_cost: torch.Tensor | None = None,
        lambda_x: float = 1.0,
        lambda_y: float = 1.0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        mean: float | None = None,
        block_bytes: int = _BLOCK_BYTES,
        epsilon: float | None = None,
        relative_epsilon: bool = False,
    ) -> None:
        dev = torch.device(device)
        if x.ndim != 2 or x_ref.ndim != 2 or x.shape[1] != x_ref.shape[1]:
            raise GeovizError(
                f"PointCloudCost: need (n, D) and (m, D) features, got {tuple(x.shape)} and "
                f"{tuple(x_ref.shape)}"
            )
        if x.shape[0] == 0 or x_ref.shape[0] == 0:
            raise GeovizError("PointCloudCost: both point clouds must be non-empty")
        self.x = x.to(device=dev, dtype=dtype)
        self.x_ref = x_ref.to(device=dev, dtype=dtype)
        self.sq = self.x.square().sum(1)
        self.sq_ref = self.x_ref.square().sum(1)
        self.lambda_x = float(lambda_x)
        self.lambda_y = float(lambda_y)
        self.use_labels = label_cost is not None and self.lambda_y != 0.0
        if self.use_labels:
            if labels is None or labels_ref is None:
                raise GeovizError("PointCloudCost: label_cost needs labels and labels_ref")
            self.labels = torch.as_tensor(labels).to(dev).long()
            self.labels_ref = torch.as_tensor(labels_ref).to(dev).long()
            lab = torch.nan_to_num(torch.as_tensor(label_cost).double(), nan=0.0)
            # one (C_Q, m) table: row y of it is the label term of every reference point
            self.label_rows = (self.lambda_y * lab.to(dev))[:, self.labels_ref].to(dtype)
        self.shape = (int(x.shape[0]), int(x_ref.shape[0]))
        self.device = dev
        self.dtype = dtype
        self._mean = mean
        self._block_bytes = int(block_bytes)
        self._set_epsilon(epsilon, relative_epsilon)

    def block_rows(self) -> int:
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return max(1, min(self.shape[0], self._block_bytes // max(1, self.shape[1] * itemsize)))

    def row_block(self, r0: int, r1: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``r0:r1`` of the cost, one GEMM: ``||x||^2 + ||x'||^2 - 2 x.x'`` clamped at 0."""
        blk = torch.addmm(
            self.sq_ref[None, :], self.x[r0:r1], self.x_ref.T, beta=1.0, alpha=-2.0, out=out
        )
        blk.add_(self.sq[r0:r1, None]).clamp_min_(0.0)
        if self.lambda_x != 1.0:
            blk.mul_(self.lambda_x)
        if self.use_labels:
            blk.add_(self.label_rows[self.labels[r0:r1]])
        return blk

    def check_finite(self) -> None:
        """Finite features and label costs give a finite cost: check those (cheap)."""
        parts = [self.x, self.x_ref] + ([self.label_rows] if self.use_labels else [])
        if not all(bool(torch.isfinite(t).all()) for t in parts):
            raise GeovizError("sinkhorn: cost contains NaN or infinite values")

    def subset(self, rows: torch.Tensor | None, cols: torch.Tensor | None) -> PointCloudCost:
        out = copy.copy(self)
        if rows is not None:
            r = rows.to(self.device)
            out.x, out.sq = self.x[r], self.sq[r]
            if self.use_labels:
                out.labels = self.labels[r]
        if cols is not None:
            c = cols.to(self.device)
            out.x_ref, out.sq_ref = self.x_ref[c], self.sq_ref[c]
            if self.use_labels:
                out.labels_ref, out.label_rows = self.labels_ref[c], self.label_rows[:, c]
        out.shape = (int(out.x.shape[0]), int(out.x_ref.shape[0]))
        out._mean = self._mean if rows is None and cols is None else None
        self._carry_epsilon(out)
        return out

    def dense(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """Materialise the whole ``(n, m)`` matrix (into ``out`` if given; memory checked by callers)."""
        if out is None:
            out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        step = self.block_rows()
        for r0 in range(0, self.shape[0], step):
            r1 = min(self.shape[0], r0 + step)
            self.row_block(r0, r1, out=out[r0:r1])
        return out


def as_geometry(cost: torch.Tensor | CostGeometry) -> CostGeometry:
    """Wrap a tensor in :class:`DenseCost`; pass a geometry through."""
    if isinstance(cost, CostGeometry):
        return cost
    return DenseCost(cost)
