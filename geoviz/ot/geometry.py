"""Cost geometries: what the Sinkhorn solver needs to know about a cost matrix.

The solver (:func:`geoviz.ot.sinkhorn.sinkhorn`) never asks for a whole
``(n, m)`` cost matrix. It reads the cost through a geometry, in the style of
OTT-JAX's ``Geometry``/``PointCloud``:

* :meth:`CostGeometry.row_blocks` yields ``(r0, r1, C[r0:r1])`` row blocks, which
  is all a log-domain pass, a support selection for the truncated (sparse)
  kernel or a measurement of the marginals of the dense plan needs;
* :attr:`CostGeometry.matrix` is the stored matrix when there is one (then the
  solver may keep a dense stabilised kernel beside it);
* :meth:`CostGeometry.epsilon_abs` turns a **relative** regularisation into an
  absolute one, ``eps_abs = epsilon * mean(C)`` (the convention of
  :class:`geoviz.ot.otdd.OTDDConfig`).

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

import math
from collections.abc import Iterator

import torch

from geoviz.errors import GeovizError

__all__ = ["CostGeometry", "DenseCost", "PointCloudCost", "as_geometry"]

#: bytes of one cost row block handed out by :meth:`CostGeometry.row_blocks`
_BLOCK_BYTES = 64 * 2**20


class CostGeometry:
    """Base class: an ``(n, m)`` cost readable by row blocks.

    Attributes
    ----------
    shape
        ``(n, m)``.
    device, dtype
        Where and in which precision blocks are produced.
    """

    shape: tuple[int, int]
    device: torch.device
    dtype: torch.dtype

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
        """Mean of all entries (float64 accumulation)."""
        total = 0.0
        for _, _, blk in self.row_blocks():
            total += float(blk.double().sum())
        return total / (self.shape[0] * self.shape[1])

    def epsilon_abs(self, epsilon: float, *, relative: bool = True) -> float:
        """Absolute regularisation: ``epsilon * mean(C)`` if ``relative`` else ``epsilon``."""
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise GeovizError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        if not relative:
            return float(epsilon)
        mean = self.mean()
        if not mean > 0:
            raise GeovizError(
                "the mean cost is 0, so a relative epsilon is undefined; give an absolute one"
            )
        return float(epsilon) * mean

    def dense(self) -> torch.Tensor:
        """The whole ``(n, m)`` matrix (callers check memory first)."""
        return torch.cat([blk for _, _, blk in self.row_blocks()])

    def subset(self, rows: torch.Tensor | None, cols: torch.Tensor | None) -> CostGeometry:
        """The cost restricted to ``rows`` x ``cols`` (index tensors; ``None`` = all)."""
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
    """

    def __init__(
        self, matrix: torch.Tensor, *, mean: float | None = None, assume_finite: bool = False
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

    @property
    def matrix(self) -> torch.Tensor:
        return self._matrix

    def row_block(self, r0: int, r1: int) -> torch.Tensor:
        return self._matrix[r0:r1]

    def mean(self) -> float:
        if self._mean is None:
            self._mean = super().mean()
        return self._mean

    def dense(self) -> torch.Tensor:
        return self._matrix

    def check_finite(self) -> None:
        if not self._assume_finite:
            super().check_finite()

    def subset(self, rows, cols) -> DenseCost:
        sub = self._matrix
        if rows is not None:
            sub = sub[rows.to(sub.device)]
        if cols is not None:
            sub = sub[:, cols.to(sub.device)]
        return DenseCost(sub, assume_finite=self._assume_finite)


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
        :func:`geoviz.ot.otdd.mean_ground_cost`).
    block_bytes
        Size of one row block (default 64 MiB).
    """

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

    def block_rows(self) -> int:
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return max(1, min(self.shape[0], self._block_bytes // max(1, self.shape[1] * itemsize)))

    def row_block(
        self, r0: int, r1: int, cols: slice | None = None, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        cols = slice(None) if cols is None else cols
        xr = self.x_ref[cols]
        blk = torch.addmm(
            self.sq_ref[cols][None, :], self.x[r0:r1], xr.T, beta=1.0, alpha=-2.0, out=out
        )
        blk.add_(self.sq[r0:r1, None]).clamp_min_(0.0)
        if self.lambda_x != 1.0:
            blk.mul_(self.lambda_x)
        if self.use_labels:
            blk.add_(self.label_rows[self.labels[r0:r1]][:, cols])
        return blk

    def mean(self) -> float:
        if self._mean is None:
            self._mean = super().mean()
        return self._mean

    def check_finite(self) -> None:
        """Finite features and label costs give a finite cost: check those (cheap)."""
        parts = [self.x, self.x_ref] + ([self.label_rows] if self.use_labels else [])
        if not all(bool(torch.isfinite(t).all()) for t in parts):
            raise GeovizError("sinkhorn: cost contains NaN or infinite values")

    def subset(self, rows, cols) -> PointCloudCost:
        rows = slice(None) if rows is None else rows.to(self.device)
        cols = slice(None) if cols is None else cols.to(self.device)
        out = PointCloudCost.__new__(PointCloudCost)
        out.x, out.x_ref = self.x[rows], self.x_ref[cols]
        out.sq, out.sq_ref = self.sq[rows], self.sq_ref[cols]
        out.lambda_x, out.lambda_y, out.use_labels = self.lambda_x, self.lambda_y, self.use_labels
        if self.use_labels:
            out.labels, out.labels_ref = self.labels[rows], self.labels_ref[cols]
            out.label_rows = self.label_rows[:, cols]
        out.shape = (int(out.x.shape[0]), int(out.x_ref.shape[0]))
        out.device, out.dtype = self.device, self.dtype
        out._mean, out._block_bytes = None, self._block_bytes
        return out

    def dense(self) -> torch.Tensor:
        """Materialise the whole ``(n, m)`` matrix (callers check memory first)."""
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
