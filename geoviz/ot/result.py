"""The immutable output of the Sinkhorn solver: potentials, measured error, plan views."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from geoviz.backend import check_memory
from geoviz.errors import GeovizError
from geoviz.ot.geometry import CostGeometry, DenseCost
from geoviz.ot.kernels import exp_floored_

__all__ = ["SinkhornResult"]


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class SinkhornResult:
    """Outcome of :class:`Sinkhorn`: potentials, measured error and the plan's views.

    The (dense) plan is ``pi = (a (x) b) * exp((f (+) g - C) / epsilon_abs)``; in
    sparse mode the *truncated* plan (the same formula on the kept support,
    zero elsewhere) is what :meth:`apply`, :meth:`row_perplexity`,
    :meth:`top_neighbours` and :meth:`sparse_plan` read.

    Attributes
    ----------
    f, g
        ``(n,)``, ``(m,)`` float64 dual potentials (on the cost's device).
    a, b
        ``(n,)``, ``(m,)`` float64 marginals.
    epsilon_abs
        The absolute regularisation used.
    n_iter
        Iterations (row + column update pairs), summed over all stages.
    marginal_error
        L1 marginal error of the returned plan (sparse mode: the larger of the
        dense and the truncated plan's).
    converged
        ``marginal_error <= tol``.
    mode
        Kernel of the final stage: ``"dense"``, ``"sparse"`` or ``"online"``.
    truncated_mass
        Sparse mode: mass of the dense plan outside the kept support (0 otherwise).
    nnz
        Entries of the final support (``n * m`` for dense/online).
    geometry
        The cost geometry (a reference, not a copy).
    """

    f: torch.Tensor
    g: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    epsilon_abs: float
    n_iter: int
    marginal_error: float
    converged: bool
    mode: str = "dense"
    truncated_mass: float = 0.0
    nnz: int = 0
    geometry: CostGeometry | None = field(default=None, repr=False, compare=False)
    _plan: torch.Tensor | None = field(default=None, repr=False, compare=False)
    _sparse: torch.Tensor | None = field(default=None, repr=False, compare=False)
    _sparse_cost: float = field(default=math.nan, repr=False, compare=False)

    @property
    def cost(self) -> torch.Tensor | None:
        """The stored cost matrix, if the geometry has one."""
        return None if self.geometry is None else self.geometry.matrix

    # -- dense plan
    def plan(
        self, cost: torch.Tensor | None = None, *, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """Materialise the dense ``(n, m)`` plan of the potentials.

        Parameters
        ----------
        cost
            The cost matrix (default: the geometry's rows).
        dtype
            Output dtype (default: the cost's dtype).
        """
        if self._plan is not None and cost is None and (dtype is None or dtype == self._plan.dtype):
            return self._plan
        geom = self.geometry if cost is None else DenseCost(cost)
        if geom is None:
            raise GeovizError("SinkhornResult.plan: the cost was not kept; pass cost=")
        dtype = geom.dtype if dtype is None else dtype
        n, m = geom.shape
        check_memory(n * m * torch.empty((), dtype=dtype).element_size(), geom.device, "the plan")
        out = torch.empty((n, m), dtype=dtype, device=geom.device)
        for r0, r1, blk in self._plan_blocks(geom):
            out[r0:r1] = blk.to(dtype)
        return out

    def _plan_block(self, r0: int, r1: int, c: torch.Tensor) -> torch.Tensor:
        """Rows ``r0:r1`` of the dense plan, given the cost rows ``c``, float64."""
        eps = self.epsilon_abs
        # float64 exponents: (f + g - C)/eps is ~1/epsilon-relative large, float32 would
        # put ~1e-7/epsilon relative error on every entry
        row = self.f[r0:r1] / eps + self.a[r0:r1].log()
        col = self.g / eps + self.b.log()
        blk = torch.add(col[None, :], c.double(), alpha=-1.0 / eps)
        return exp_floored_(blk.add_(row[:, None]))

    def _plan_blocks(
        self, geom: CostGeometry | None = None
    ) -> Iterator[tuple[int, int, torch.Tensor]]:
        geom = self.geometry if geom is None else geom
        if geom is None:
            raise GeovizError("SinkhornResult: the cost was not kept")
        for r0, r1, c in geom.row_blocks():
            yield r0, r1, self._plan_block(r0, r1, c)

    def _dense_rows(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Row blocks of the dense plan: the kept buffer if any, else recomputed."""
        if self._plan is None:
            yield from self._plan_blocks()
            return
        n = self._plan.shape[0]
        for r0 in range(0, n, 1024):
            yield r0, min(n, r0 + 1024), self._plan[r0 : r0 + 1024]

    def _sparse_rows(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(row of every entry, cols, values, row sums)`` of the truncated plan (CSR order)."""
        p = self._sparse
        assert p is not None
        crow, cols, vals = p.crow_indices(), p.col_indices(), p.values()
        rows = torch.repeat_interleave(
            torch.arange(p.shape[0], device=vals.device), crow[1:] - crow[:-1]
        )
        total = torch.zeros(p.shape[0], dtype=torch.float64, device=vals.device).index_add_(
            0, rows, vals
        )
        return rows, cols, vals, total

    def sparse_plan(self) -> torch.Tensor | None:
        """The truncated plan as a ``(n, m)`` float64 CSR tensor (sparse mode), else ``None``."""
        return self._sparse

    # -- statistics of the plan rows (sparse: the truncated plan)
    def apply(self, values: torch.Tensor) -> torch.Tensor:
        """Row-normalised plan times ``values``: ``(n, k)`` float64 (barycentric projection).

        Row ``i`` is ``sum_j pi_ij values_j / sum_j pi_ij``.
        """
        if self._sparse is not None:
            # in the values' precision (float32 halves the time of the sparse product)
            dt = values.dtype if values.dtype in (torch.float32, torch.float64) else torch.float64
            p = self._sparse if dt == torch.float64 else self._sparse.to(dt)
            v = values.to(device=p.device, dtype=dt)
            out = (p @ v).double()
            rows = p @ torch.ones(v.shape[0], 1, dtype=dt, device=v.device)
            return out / rows.double()
        n = self.f.shape[0]
        out = torch.empty((n, values.shape[1]), dtype=torch.float64, device=self.f.device)
        vals = None
        for r0, r1, blk in self._dense_rows():
            if vals is None:
                vals = values.to(device=blk.device, dtype=blk.dtype)
            num = (blk @ vals).double()
            out[r0:r1] = num / blk.sum(1).double()[:, None]
        return out

    def row_perplexity(self) -> torch.Tensor:
        """``(n,)`` float64 ``exp(entropy)`` of each row of the plan, normalised to sum 1.

        The number of reference points each mapped point effectively averages:
        1 for a one-to-one (Monge) plan, ``m`` for the uniform plan.
        """
        if self._sparse is not None:
            rows, _, vals, total = self._sparse_rows()
            q = vals / total[rows]
            ent = torch.zeros_like(total).index_add_(0, rows, -q * torch.log(q.clamp_min(1e-300)))
            return ent.exp()
        out = torch.empty(self.f.shape[0], dtype=torch.float64, device=self.f.device)
        for r0, r1, blk in self._dense_rows():
            q = blk.double()
            q = q / q.sum(1, keepdim=True)
            out[r0:r1] = (-(q * torch.log(q.clamp_min(1e-300))).sum(1)).exp()
        return out

    def top_neighbours(self, k: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` largest entries of every plan row.

        Returns
        -------
        (torch.Tensor, torch.Tensor)
            ``(n, k)`` int64 column indices and ``(n, k)`` float64 weights (the
            row-normalised plan values, descending; rows with fewer than ``k``
            kept entries are padded with index ``-1`` and weight 0).
        """
        n, m = self.f.shape[0], self.g.shape[0]
        k = max(1, min(int(k), m))
        idx = torch.full((n, k), -1, dtype=torch.long)
        wts = torch.zeros((n, k), dtype=torch.float64)
        if self._sparse is not None:
            rows, cols, vals, total = self._sparse_rows()
            crow = self._sparse.crow_indices()
            # group by row, largest value first inside each row: one sort of row + (1 - v/max)
            rowmax = torch.zeros(n, dtype=torch.float64, device=vals.device).scatter_reduce_(
                0, rows, vals, reduce="amax", include_self=True
            )
            key = rows.double() + 0.5 * (1.0 - vals / rowmax[rows].clamp_min(1e-300))
            order = torch.argsort(key)
            rank = torch.arange(order.numel(), device=vals.device) - crow[rows[order]]
            top = rank < k
            sel = order[top]
            r, c = rows[sel].cpu(), rank[top].cpu()
            idx[r, c] = cols[sel].cpu()
            wts[r, c] = (vals[sel] / total[rows[sel]]).cpu()
            return idx, wts
        for r0, r1, blk in self._dense_rows():
            q = blk.double()
            q = q / q.sum(1, keepdim=True)
            w, j = torch.topk(q, k, dim=1)
            idx[r0:r1], wts[r0:r1] = j.cpu(), w.cpu()
        return idx, wts

    def dual_value(self) -> float:
        """``<f, a> + <g, b>``: the regularised cost ``OT_eps`` at convergence."""
        return float(self.f @ self.a + self.g @ self.b)

    def transport_cost(self, cost: torch.Tensor | None = None) -> float:
        """``<pi, C>`` of the plan (sparse mode: of the truncated plan)."""
        if cost is None and self._sparse is not None:
            return self._sparse_cost
        geom = self.geometry if cost is None else DenseCost(cost)
        if geom is None:
            raise GeovizError("SinkhornResult.transport_cost: the cost was not kept; pass cost=")
        kept = self._plan if cost is None else None
        total = 0.0
        for r0, r1, c in geom.row_blocks():
            p = kept[r0:r1] if kept is not None else self._plan_block(r0, r1, c)
            total += float((p * c).sum(1).double().sum())
        return total
