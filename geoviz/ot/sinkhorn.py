"""Stabilised entropic optimal transport (Sinkhorn) in torch: one loop, three kernels.

Problem and conventions
-----------------------
For a cost ``C`` ``(n, m)`` (a tensor or a :class:`~geoviz.ot.geometry.CostGeometry`),
positive weights ``a`` ``(n,)`` and ``b`` ``(m,)`` of equal mass and an
**absolute** regularisation ``epsilon_abs > 0`` this solves::

    min_{pi >= 0, pi 1 = a, pi^T 1 = b}  <pi, C> + eps * KL(pi | a (x) b)

whose solution is ``pi = (a (x) b) * exp((f (+) g - C) / eps)`` with dual
potentials ``f`` ``(n,)`` and ``g`` ``(m,)`` (the convention of
:class:`SinkhornResult`: potentials *relative to* ``a (x) b``, as in Feydy et
al. and Pooladian & Niles-Weed). The plan is that of POT's
``ot.sinkhorn(a, b, C, reg=eps)``.

Stopping rule: the L1 marginal error ``||pi 1 - a||_1 + ||pi^T 1 - b||_1`` of
the returned plan, measured, never assumed; the solver stops as soon as it is
``<= tol``. If ``max_iter`` is reached first, a
:class:`~geoviz.errors.ConvergenceWarning` is issued and ``converged=False``.

One loop
--------
Every mode runs the same log-domain iteration on potentials ``(F, G)`` (float64,
``pi = exp((F (+) G - C)/eps)``)::

    F <- (1 - w) F + w eps (log a - LSE_j((G_j - C_ij)/eps))
    G <- (1 - w) G + w eps (log b - LSE_i((F_i - C_ij)/eps))

with epsilon scaling (a geometric schedule of regularisations from the mean
cost down to ``eps``, ratio ``eps_scaling``), adaptive over-relaxation ``w``
(Thibault et al. 2021; ``w = 1`` until the error is small and its linear rate
``rho`` is known, then ``2 / (1 + sqrt(1 - rho))``, halved back on any
increase), and an optional class-level coarse correction (``groups``). What
changes between modes is only how the two log-sum-exps are evaluated (a
"kernel"):

``dense``
    A stabilised kernel ``K = exp((F0 (+) G0 - C)/eps)`` is stored beside the
    cost; each LSE is one matrix-vector product with the scalings
    ``exp((G - G0)/eps)``, and the kernel is rebuilt by an exact log-domain pass
    (absorbing the scalings into ``F0, G0``) whenever a scaling leaves
    ``[e^-30, e^30]`` (Schmitzer 2019). Memory: one more ``(n, m)`` buffer.
``sparse``
    **Kernel truncation** (Schmitzer 2019, Sec. 3.3): at small ``eps`` the plan is
    extremely sparse, so only the entries with
    ``(G_j - C_ij)/eps >= max_j' (G_j' - C_ij')/eps - truncation`` (each
    dropped entry carries less than ``e^-truncation`` of its row's mass) are kept,
    with their cost values, in CSR form, and the same absorbed iteration runs
    on that support (``O(nnz)`` per iteration instead of ``O(n m)``). The support
    is chosen by one pass over the cost per epsilon stage; at the end a
    verification pass measures the marginals of the **dense** plan of the
    returned potentials (every entry, none dropped) and, if they miss ``tol``,
    re-selects the support around the current potentials and goes on. The
    reported ``marginal_error`` is the larger of the dense plan's and the
    truncated plan's, and ``truncated_mass`` is the dense plan's mass outside
    the support.
``online``
    Nothing of size ``n x m`` is stored: each LSE is one pass over row blocks
    of the cost (for :class:`~geoviz.ot.geometry.PointCloudCost`: one GEMM per
    block). For problems whose dense kernel is too dense to truncate and too
    large to store.

``mode="auto"`` uses the dense kernel while the regularisation is large (the
plan is dense), and the sparse kernel once a support selection keeps at most
``max_density`` of the entries; without a stored matrix it uses the sparse
kernel when it fits, else ``online``.

Symmetric problems (``symmetric=True``) use the averaged update
``f <- (f + T(f)) / 2`` of Feydy et al. (2019) over row blocks.

Problem -> solver -> output
---------------------------
As in OTT-JAX and GeomLoss, the pieces are separate values:

* :class:`TransportProblem` (frozen): the cost geometry, which holds epsilon and
  resolves the absolute value once (:attr:`~geoviz.ot.geometry.CostGeometry.epsilon_abs`),
  the marginals and optional class groups; validated at construction;
* :class:`Sinkhorn` (frozen settings) with its strategies :class:`KernelPolicy`,
  :class:`EpsilonScaling` and :class:`MultiscaleStart`, called as
  ``Sinkhorn(...)(problem, init=(f, g))`` (``init``: warm-start potentials);
* :class:`SinkhornResult` (frozen): potentials, measured error, iterations, and
  views of the plan.

:func:`sinkhorn` is the functional convenience entry (like POT's ``ot.sinkhorn``)
that builds the problem and the solver from keyword options.

Limits: a regularisation far below the cost gaps on a near-degenerate problem
can still need many iterations; the error is always measured, never assumed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from geoviz.backend import check_memory
from geoviz.errors import ConvergenceWarning, GeovizError
from geoviz.ot.geometry import CostGeometry, DenseCost, as_geometry

__all__ = [
    "EpsilonScaling",
    "KernelPolicy",
    "MultiscaleStart",
    "Sinkhorn",
    "SinkhornCallback",
    "SinkhornMode",
    "SinkhornResult",
    "TransportProblem",
    "sinkhorn",
    "uniform_measure",
]

SinkhornMode = Literal["auto", "dense", "sparse", "online"]

#: ``callback(iteration, marginal_error)``, called at every check of the final stage
SinkhornCallback = Callable[[int, float], None]

_RELAX_BELOW = 0.05
_GRACE = 30
_STAGE_TOL = 1e-2
_COARSE_RATIO = 0.8
#: auto mode tries the sparse kernel once eps is below this fraction of the mean cost
_SPARSE_BELOW = 0.03
#: at most this many verification passes (each may re-select the support)
_MAX_VERIFY = 6
#: truncation of the intermediate (warm-start) stages of the sparse kernel
_STAGE_TRUNCATION = 10.0
#: the final sparse stage iterates to this fraction of tol, so that the dense plan
#: (whose error adds the truncated mass) meets tol at the first verification
_SPARSE_TOL_FRACTION = 0.5
#: the final sparse stage re-selects its support once the error is below this
_RESELECT_TOL = 1e-3
#: iterations without the error halving after which the support is re-selected
_STALL = 50
#: stages solved on the full problem after a multiscale start
_FULL_STAGES = 2


#: exp() of float32 arguments below about -87 gives subnormals and runs ~6x slower on
#: x86; such entries are < 1e-35 of the largest, so passes clamp there first
_EXP_FLOOR = {torch.float32: -80.0, torch.float64: -700.0}


def _exp_(t: torch.Tensor) -> torch.Tensor:
    """In-place ``exp`` of log-values, clamped at :data:`_EXP_FLOOR` (no subnormals)."""
    return t.clamp_min_(_EXP_FLOOR.get(t.dtype, -80.0)).exp_()


def uniform_measure(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(n,)`` float64 vector of ``1/n``: the uniform measure on ``n`` points.

    The default marginal of :func:`sinkhorn`. (Not interpolation weights: the
    uniform point of the weight simplex is
    :func:`geoviz.geodesic.weights.uniform_weights`.)
    """
    return torch.full((n,), 1.0 / n, dtype=torch.float64, device=device)


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
        return _exp_(blk.add_(row[:, None]))

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


# --------------------------------------------------------------------------- kernels


class _Kernel:
    """Evaluates ``LSE_j((G_j - C_ij)/eps)`` and ``LSE_i((F_i - C_ij)/eps)`` for one regularisation."""

    mode = "base"

    def __init__(
        self, geom: CostGeometry, log_a: torch.Tensor, log_b: torch.Tensor, tau: float
    ) -> None:
        self.geom, self.log_a, self.log_b, self.tau = geom, log_a, log_b, float(tau)
        self.eps = math.nan

    def set_eps(self, eps: float) -> None:
        self.eps = float(eps)

    def row_lse(self, G: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def col_lse(self, F: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def aggregate(
        self, F: torch.Tensor, G: torch.Tensor, onehot_cols: torch.Tensor
    ) -> torch.Tensor:
        """``(n, G_cols)``: ``sum_j pi_ij onehot_cols[j]`` for the plan of ``(F, G)``."""
        raise NotImplementedError


class _OnlineKernel(_Kernel):
    """Exact log-domain passes over row blocks of the geometry; stores nothing ``n x m``."""

    mode = "online"

    def row_lse(self, G: torch.Tensor) -> torch.Tensor:
        eps, geom = self.eps, self.geom
        out = torch.empty(geom.shape[0], dtype=torch.float64, device=G.device)
        g_s = (G / eps).to(geom.dtype)
        for r0, r1, c in geom.row_blocks():
            z = torch.add(g_s[None, :], c, alpha=-1.0 / eps)
            mx = z.amax(1, keepdim=True)
            out[r0:r1] = (mx + _exp_(z.sub_(mx)).sum(1, keepdim=True).log()).squeeze(1).double()
        return out

    def col_lse(self, F: torch.Tensor) -> torch.Tensor:
        eps, geom = self.eps, self.geom
        m = geom.shape[1]
        run_max = torch.full((m,), -math.inf, dtype=torch.float64, device=F.device)
        run_sum = torch.zeros(m, dtype=torch.float64, device=F.device)
        f_s = (F / eps).to(geom.dtype)
        for r0, r1, c in geom.row_blocks():
            z = torch.add(f_s[r0:r1, None], c, alpha=-1.0 / eps)
            bm = z.amax(0).double()
            new = torch.maximum(run_max, bm)
            run_sum = (
                run_sum * torch.exp(run_max - new)
                + _exp_(z.sub_(new[None, :].to(z.dtype))).sum(0).double()
            )
            run_max = new
        return run_max + run_sum.log()

    def aggregate(
        self, F: torch.Tensor, G: torch.Tensor, onehot_cols: torch.Tensor
    ) -> torch.Tensor:
        eps, geom = self.eps, self.geom
        out = torch.empty(
            (geom.shape[0], onehot_cols.shape[1]), dtype=torch.float64, device=F.device
        )
        g_s = (G / eps).to(geom.dtype)
        oh = onehot_cols.to(geom.dtype)
        for r0, r1, c in geom.row_blocks():
            z = torch.add(g_s[None, :], c, alpha=-1.0 / eps)
            _exp_(z.add_((F[r0:r1] / eps).to(z.dtype)[:, None]))
            out[r0:r1] = (z @ oh).double()
        return out


class _AbsorbedKernel(_Kernel):
    """Stabilised kernel ``K = exp((F0 (+) G0 - C)/eps)`` with scalings absorbed on demand.

    ``LSE_j((G_j - C_ij)/eps) = log (K v)_i - F0_i/eps`` with ``v = exp((G - G0)/eps)``;
    when a scaling leaves ``[e^-tau, e^tau]`` or a product under/overflows, the
    kernel is rebuilt by an exact log-domain update (subclasses: ``_rebuild_rows``,
    ``_rebuild_cols``, and the products ``_mv``, ``_mv_t``).
    """

    F0: torch.Tensor | None = None
    G0: torch.Tensor | None = None

    def _rebuild_rows(self, G: torch.Tensor) -> torch.Tensor:
        """Exact row LSE at ``G``; rebuild the kernel around it."""
        raise NotImplementedError

    def _rebuild_cols(self, F: torch.Tensor) -> torch.Tensor:
        """Exact column LSE at ``F``; rebuild the kernel around it."""
        raise NotImplementedError

    def _mv(self, v: torch.Tensor) -> torch.Tensor:
        """``K v`` in float64."""
        raise NotImplementedError

    def _mv_t(self, u: torch.Tensor) -> torch.Tensor:
        """``K^T u`` in float64."""
        raise NotImplementedError

    def set_eps(self, eps: float) -> None:
        super().set_eps(eps)
        self.F0 = self.G0 = None  # kernel invalid at a new regularisation

    def _scaling(self, P: torch.Tensor, P0: torch.Tensor | None) -> torch.Tensor | None:
        if P0 is None:
            return None
        d = (P - P0) / self.eps
        if float(d.abs().max()) > self.tau:
            return None
        return d.exp()

    def row_lse(self, G: torch.Tensor) -> torch.Tensor:
        v = self._scaling(G, self.G0)
        if v is not None and self.F0 is not None:
            kv = self._mv(v)
            if bool((kv > 0).all()) and bool(torch.isfinite(kv).all()):
                return kv.log() - self.F0 / self.eps
        return self._rebuild_rows(G)

    def col_lse(self, F: torch.Tensor) -> torch.Tensor:
        u = self._scaling(F, self.F0)
        if u is not None and self.G0 is not None:
            ktu = self._mv_t(u)
            if bool((ktu > 0).all()) and bool(torch.isfinite(ktu).all()):
                return ktu.log() - self.G0 / self.eps
        return self._rebuild_cols(F)


class _DenseKernel(_AbsorbedKernel):
    """Stored stabilised kernel ``K = exp((F0 (+) G0 - C)/eps)``; LSEs are mat-vecs."""

    mode = "dense"

    def __init__(
        self,
        geom: CostGeometry,
        log_a: torch.Tensor,
        log_b: torch.Tensor,
        tau: float,
        buffer: torch.Tensor,
    ) -> None:
        super().__init__(geom, log_a, log_b, tau)
        assert geom.matrix is not None
        self.cost = geom.matrix
        self.kernel = buffer
        self.F0: torch.Tensor | None = None
        self.G0: torch.Tensor | None = None

    def _rebuild_rows(self, G: torch.Tensor) -> torch.Tensor:
        """Exact row LSE at ``G`` and a kernel whose rows then sum to ``a``."""
        cost, eps, kernel, dt = self.cost, self.eps, self.kernel, self.cost.dtype
        g_s = (G / eps).to(dt)
        lse = torch.empty_like(self.log_a)
        step = 64
        for r0 in range(0, cost.shape[0], step):
            r1 = min(r0 + step, cost.shape[0])
            blk = kernel[r0:r1]
            torch.add(g_s, cost[r0:r1], alpha=-1.0 / eps, out=blk)
            mx = blk.amax(dim=1, keepdim=True)
            _exp_(blk.sub_(mx))
            s = blk.sum(dim=1, keepdim=True)
            la = self.log_a[r0:r1, None]
            blk.mul_(la.exp().to(dt) / s)
            lse[r0:r1] = (mx.double() + s.double().log()).squeeze(1)
        self.G0 = G.clone()
        self.F0 = eps * (self.log_a - lse)
        return lse

    def _rebuild_cols(self, F: torch.Tensor) -> torch.Tensor:
        cost, eps, kernel, dt = self.cost, self.eps, self.kernel, self.cost.dtype
        f_s = (F / eps).to(dt)[:, None]
        lse = torch.empty_like(self.log_b)
        step = 256
        tmp = torch.empty((cost.shape[0], min(step, cost.shape[1])), dtype=dt, device=cost.device)
        for c0 in range(0, cost.shape[1], step):
            c1 = min(c0 + step, cost.shape[1])
            blk = tmp[:, : c1 - c0]
            torch.add(f_s, cost[:, c0:c1], alpha=-1.0 / eps, out=blk)
            mx = blk.amax(dim=0, keepdim=True)
            _exp_(blk.sub_(mx))
            s = blk.sum(dim=0, keepdim=True)
            lb = self.log_b[None, c0:c1]
            blk.mul_(lb.exp().to(dt) / s)
            kernel[:, c0:c1] = blk
            lse[c0:c1] = (mx.double() + s.double().log()).squeeze(0)
        self.F0 = F.clone()
        self.G0 = eps * (self.log_b - lse)
        return lse

    def _mv(self, v: torch.Tensor) -> torch.Tensor:
        return (self.kernel @ v.to(self.kernel.dtype)).double()

    def _mv_t(self, u: torch.Tensor) -> torch.Tensor:
        return (u.to(self.kernel.dtype) @ self.kernel).double()

    def aggregate(
        self, F: torch.Tensor, G: torch.Tensor, onehot_cols: torch.Tensor
    ) -> torch.Tensor:
        v = self._scaling(G, self.G0)
        u = self._scaling(F, self.F0)
        if u is None or v is None:
            self._rebuild_rows(G)
            u, v = self._scaling(F, self.F0), self._scaling(G, self.G0)
            if u is None or v is None:  # F far from a row update of G: exact pass
                exact = _OnlineKernel(self.geom, self.log_a, self.log_b, self.tau)
                exact.set_eps(self.eps)
                return exact.aggregate(F, G, onehot_cols)
        dt = self.kernel.dtype
        kv = (self.kernel @ (v[:, None] * onehot_cols).to(dt)).double()
        return u[:, None] * kv

    def plan_inplace(self, F: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        """Turn the kernel buffer into the plan of ``(F, G)``."""
        u, v = self._scaling(F, self.F0), self._scaling(G, self.G0)
        dt = self.kernel.dtype
        if u is None or v is None:
            eps = self.eps
            for r0 in range(0, self.cost.shape[0], 1024):
                blk = self.kernel[r0 : r0 + 1024]
                torch.add(
                    (G / eps).to(dt)[None, :], self.cost[r0 : r0 + 1024], alpha=-1.0 / eps, out=blk
                )
                _exp_(blk.add_((F[r0 : r0 + 1024] / eps).to(dt)[:, None]))
            return self.kernel
        return self.kernel.mul_(u.to(dt)[:, None]).mul_(v.to(dt)[None, :])


@dataclass
class _Support:
    """Kept entries, sorted by row then column: ``rows``, ``cols`` (int64), ``cost`` values."""

    rows: torch.Tensor
    cols: torch.Tensor
    cost: torch.Tensor
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.rows.numel())

    def union(self, other: _Support) -> _Support:
        m = self.shape[1]
        key = torch.cat([self.rows * m + self.cols, other.rows * m + other.cols])
        cost = torch.cat([self.cost, other.cost])
        uniq, inv = torch.unique(key, sorted=True, return_inverse=True)
        first = torch.empty_like(uniq).scatter_(
            0, inv, torch.arange(key.numel(), device=key.device)
        )
        return _Support(uniq // m, uniq % m, cost[first], self.shape)


class _SparseKernel(_AbsorbedKernel):
    """Absorbed kernel on a truncated support, in CSR form (float64 values)."""

    mode = "sparse"

    def __init__(
        self,
        geom: CostGeometry,
        log_a: torch.Tensor,
        log_b: torch.Tensor,
        tau: float,
        support: _Support,
    ) -> None:
        super().__init__(geom, log_a, log_b, tau)
        n, m = support.shape
        dev = support.rows.device
        self.support = support
        self.rows, self.cols = support.rows, support.cols
        self.cvals = support.cost.double()
        counts = torch.bincount(self.rows, minlength=n)
        crow = torch.zeros(n + 1, dtype=torch.long, device=dev)
        crow[1:] = torch.cumsum(counts, 0)
        self.perm = torch.argsort(self.cols, stable=True)  # CSR order -> CSC order
        ccounts = torch.bincount(self.cols, minlength=m)
        ccol = torch.zeros(m + 1, dtype=torch.long, device=dev)
        ccol[1:] = torch.cumsum(ccounts, 0)
        self.vals = torch.zeros(support.nnz, dtype=torch.float64, device=dev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            self.csr = torch.sparse_csr_tensor(crow, self.cols, self.vals.clone(), (n, m))
            self.csc_t = torch.sparse_csr_tensor(
                ccol, self.rows[self.perm], self.vals[self.perm], (m, n)
            )
        self.F0: torch.Tensor | None = None
        self.G0: torch.Tensor | None = None

    def _store(self, logk: torch.Tensor) -> None:
        k = logk.exp()
        self.csr.values().copy_(k)
        self.csc_t.values().copy_(k[self.perm])

    def _segment_lse(self, z: torch.Tensor, seg: torch.Tensor, size: int) -> torch.Tensor:
        mx = torch.full((size,), -math.inf, dtype=torch.float64, device=z.device)
        mx.scatter_reduce_(0, seg, z, reduce="amax", include_self=True)
        s = torch.zeros(size, dtype=torch.float64, device=z.device).index_add_(
            0, seg, torch.exp(z - mx[seg])
        )
        return mx + s.log()

    def _rebuild_rows(self, G: torch.Tensor) -> torch.Tensor:
        z = (G[self.cols] - self.cvals) / self.eps
        lse = self._segment_lse(z, self.rows, self.support.shape[0])
        self.F0 = self.eps * (self.log_a - lse)
        self.G0 = G.clone()
        self._store(z + self.F0[self.rows] / self.eps)
        return lse

    def _rebuild_cols(self, F: torch.Tensor) -> torch.Tensor:
        z = (F[self.rows] - self.cvals) / self.eps
        lse = self._segment_lse(z, self.cols, self.support.shape[1])
        self.G0 = self.eps * (self.log_b - lse)
        self.F0 = F.clone()
        self._store(z + self.G0[self.cols] / self.eps)
        return lse

    def _mv(self, v: torch.Tensor) -> torch.Tensor:
        return self.csr @ v

    def _mv_t(self, u: torch.Tensor) -> torch.Tensor:
        return self.csc_t @ u

    def aggregate(
        self, F: torch.Tensor, G: torch.Tensor, onehot_cols: torch.Tensor
    ) -> torch.Tensor:
        logp = (F[self.rows] + G[self.cols] - self.cvals) / self.eps
        out = torch.zeros(
            (self.support.shape[0], onehot_cols.shape[1]), dtype=torch.float64, device=F.device
        )
        return out.index_add_(0, self.rows, logp.exp()[:, None] * onehot_cols[self.cols])

    def plan_values(self, F: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        """Entries ``exp((F_i + G_j - C_ij)/eps)`` of the truncated plan, CSR order."""
        return ((F[self.rows] + G[self.cols] - self.cvals) / self.eps).exp()

    def plan_csr(self, F: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(
                self.csr.crow_indices(), self.cols, self.plan_values(F, G), self.support.shape
            )


# --------------------------------------------------------------------------- support scans


def _select_support(
    geom: CostGeometry,
    G: torch.Tensor,
    eps: float,
    truncation: float,
    max_nnz: int,
    F: torch.Tensor | None = None,
    log_a: torch.Tensor | None = None,
    log_b: torch.Tensor | None = None,
    measure: bool = False,
) -> tuple[_Support | None, dict[str, torch.Tensor] | None]:
    """One pass over the cost choosing the entries of the truncated kernel.

    Without ``F`` (start of a stage, only ``G`` known) an entry is kept when
    ``(G_j - C_ij)/eps >= max_j' (G_j' - C_ij')/eps - truncation`` (within
    ``e^-truncation`` of its row's largest). With balanced potentials ``(F, G)``
    it is kept when the plan value ``w_ij = (F_i + G_j - C_ij)/eps`` satisfies
    ``w_ij >= min(log a_i, log b_j) - truncation``: significant for its row *or*
    its column. Every column keeps at least its best entry. With ``measure``
    the pass also returns the marginals of the dense plan ``exp(w)``
    (``{"rows": (n,), "cols": (m,)}``). Returns ``(None, None)`` as soon as
    more than ``max_nnz`` entries would be kept.
    """
    n, m = geom.shape
    dev = G.device
    dt = geom.dtype
    g_s = (G / eps).to(dt)
    balanced = F is not None
    f_s: torch.Tensor | None = None
    if F is not None:
        assert log_a is not None and log_b is not None
        f_s = (F / eps).to(dt)
        uniform = bool((log_a == log_a[0]).all()) and bool((log_b == log_b[0]).all())
        if uniform:
            thr = min(float(log_a[0]), float(log_b[0])) - truncation
        else:
            la, lb = (log_a - truncation).to(dt), (log_b - truncation).to(dt)
    if measure:
        assert balanced
        row_mass = torch.empty(n, dtype=torch.float64, device=dev)
        col_mass = torch.zeros(m, dtype=torch.float64, device=dev)
    rows_l, cols_l, cost_l = [], [], []
    total = 0
    if measure:  # the measured error must not carry float32 rounding of (F + G - C)/eps
        assert F is not None
        g_s, f_s = G / eps, F / eps
        if not uniform:
            la, lb = la.double(), lb.double()
    for r0, r1, c in geom.row_blocks(_PASS_ROWS(geom)):
        z = torch.add(g_s[None, :], c.to(g_s.dtype), alpha=-1.0 / eps)
        if f_s is not None:
            z.add_(f_s[r0:r1, None])
            keep = z >= thr if uniform else z >= torch.minimum(la[r0:r1, None], lb[None, :])
        else:
            keep = z >= (z.amax(1, keepdim=True) - truncation)
        idx = keep.nonzero()
        total += idx.shape[0]
        if total > max_nnz:
            return None, None
        rr, cc = idx[:, 0], idx[:, 1]
        rows_l.append(rr + r0)
        cols_l.append(cc)
        cost_l.append(c[rr, cc])
        if measure:
            p = _exp_(z)
            row_mass[r0:r1] = p.sum(1).double()
            col_mass += p.sum(0).double()
    rows = torch.cat(rows_l)
    cols = torch.cat(cols_l)
    cost = torch.cat(cost_l)
    covered = torch.bincount(cols, minlength=m) > 0
    if not bool(covered.all()):
        # every column needs an entry: its best row (smallest cost, or largest (F_i - C_ij)/eps)
        missing = (~covered).nonzero().squeeze(1)
        cm = geom.subset(None, missing).dense()  # (n, k)
        score = -cm if F is None else (F / eps)[:, None].to(dt) - cm / eps
        best = score.argmax(0)
        rows = torch.cat([rows, best])
        cols = torch.cat([cols, missing])
        cost = torch.cat([cost, cm[best, torch.arange(missing.numel(), device=dev)]])
        order = torch.argsort(rows * m + cols)
        rows, cols, cost = rows[order], cols[order], cost[order]
    support = _Support(rows, cols, cost, (n, m))
    stats = {"rows": row_mass, "cols": col_mass} if measure else None
    return support, stats


def _PASS_ROWS(geom: CostGeometry) -> int:
    """Rows per block of a selection pass: ~8 MiB blocks stay in cache across its 4 sweeps."""
    itemsize = torch.empty((), dtype=geom.dtype).element_size()
    return max(1, min(geom.shape[0], (8 * 2**20) // max(1, geom.shape[1] * itemsize)))


# --------------------------------------------------------------------------- inputs


def _check_weights(
    geom: CostGeometry, a: torch.Tensor | None, b: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    n, m = geom.shape
    dev = geom.device
    out = []
    for name, w, size in (("a", a, n), ("b", b, m)):
        if w is None:
            out.append(uniform_measure(size, dev))
            continue
        w = torch.as_tensor(w).to(device=dev, dtype=torch.float64).reshape(-1)
        if w.numel() != size:
            raise GeovizError(
                f"sinkhorn: weights {name} have {w.numel()} entries but the cost has {size} along that axis"
            )
        if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
            raise GeovizError(f"sinkhorn: weights {name} must be finite and strictly positive")
        out.append(w)
    ma, mb = float(out[0].sum()), float(out[1].sum())
    if abs(ma - mb) > 1e-6 * max(ma, mb):
        raise GeovizError(
            f"sinkhorn: marginals must have equal mass, got sum(a)={ma:.6g}, sum(b)={mb:.6g}"
        )
    return out[0], out[1]


# --------------------------------------------------------------------------- the loop


@dataclass
class _Groups:
    rows: torch.Tensor  # (n,) dense group ids
    cols: torch.Tensor  # (m,)
    onehot_rows: torch.Tensor  # (n, G_rows) float64
    onehot_cols: torch.Tensor  # (m, G_cols) float64
    every: int


def _make_groups(
    groups: tuple[torch.Tensor, torch.Tensor] | None,
    n: int,
    m: int,
    dev: torch.device,
    every: int,
) -> _Groups | None:
    if groups is None:
        return None
    rows = torch.as_tensor(groups[0]).to(dev).long().reshape(-1)
    cols = torch.as_tensor(groups[1]).to(dev).long().reshape(-1)
    if rows.numel() != n or cols.numel() != m:
        raise GeovizError(
            "sinkhorn: groups must have one id per row and one per column of the cost"
        )
    _, rows = torch.unique(rows, return_inverse=True)
    _, cols = torch.unique(cols, return_inverse=True)
    gq = torch.nn.functional.one_hot(rows).double()
    gp = torch.nn.functional.one_hot(cols).double()
    if gq.shape[1] < 2 and gp.shape[1] < 2:
        return None
    return _Groups(rows, cols, gq, gp, max(1, int(every)))


class _Loop:
    """State of the one Sinkhorn loop: potentials ``(F, G)`` and the current kernel."""

    def __init__(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        F: torch.Tensor,
        G: torch.Tensor,
        groups: _Groups | None,
        callback: SinkhornCallback | None,
        check_every: int,
    ) -> None:
        self.a, self.b = a, b
        self.log_a, self.log_b = a.log(), b.log()
        self.F, self.G = F, G
        self.groups = groups
        self.callback = callback
        self.check_every = check_every
        self.n_iter = 0
        self.Lc: torch.Tensor | None = None  # col LSE at the current F

    def error(self, kernel: _Kernel) -> tuple[float, torch.Tensor]:
        eps = kernel.eps
        Lr = kernel.row_lse(self.G)
        if self.Lc is None:
            self.Lc = kernel.col_lse(self.F)
        err = float(
            (torch.exp(self.F / eps + Lr) - self.a).abs().sum()
            + (torch.exp(self.G / eps + self.Lc) - self.b).abs().sum()
        )
        return err, Lr

    def run(
        self,
        kernel: _Kernel,
        tol: float,
        budget: int,
        overrelax: bool,
        omega_max: float,
        report: bool,
        stall: int | None = None,
    ) -> float:
        """Iterate with ``kernel`` until the error is ``<= tol`` or ``budget`` iterations are used.

        With ``stall``, also stop when the error has not halved in the last ``stall`` iterations.
        """
        eps = kernel.eps
        log_a, log_b = self.log_a, self.log_b
        # start with exact rows and columns at this regularisation
        self.F = eps * (log_a - kernel.row_lse(self.G))
        self.Lc = kernel.col_lse(self.F)
        self.G = eps * (log_b - self.Lc)
        used = 1
        omega = 1.0
        history: list[float] = []
        best, since_best = math.inf, 0
        relaxed_at: int | None = None
        last_coarse = 0
        err = math.inf
        prev: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None
        prev_err = math.inf
        while True:
            err, Lr = self.error(kernel)
            due = used % self.check_every == 0 or used >= budget
            if report and due and self.callback is not None:
                self.callback(self.n_iter + used, err)
            if not math.isfinite(err) and prev is not None:
                self.F, self.G, self.Lc = prev  # keep the last iterate whose error was measured
                err = prev_err
                break
            if (err <= tol and due) or used >= budget or not math.isfinite(err):
                break
            prev, prev_err = (self.F, self.G, self.Lc), err
            gr = self.groups
            if gr is not None and used - last_coarse >= gr.every:
                row_res = torch.exp(self.F / eps + Lr) - self.a
                col_res = torch.exp(self.G / eps + self.Lc) - self.b
                agg_err = float(
                    (gr.onehot_rows.T @ row_res).abs().sum()
                    + (gr.onehot_cols.T @ col_res).abs().sum()
                )
                if agg_err > _COARSE_RATIO * err:
                    per_row = kernel.aggregate(self.F, self.G, gr.onehot_cols)
                    agg = gr.onehot_rows.T @ per_row
                    s, t = _coarse_newton(
                        agg.cpu(),
                        (gr.onehot_rows.T @ self.a).cpu(),
                        (gr.onehot_cols.T @ self.b).cpu(),
                    )
                    self.F = self.F + eps * s.to(self.F.device)[gr.rows]
                    self.G = self.G + eps * t.to(self.G.device)[gr.cols]
                    self.Lc = kernel.col_lse(self.F)
                    last_coarse = used
                    used += 1
                    continue
            history.append(err)
            if stall is not None and len(history) > stall and err > 0.5 * history[-stall - 1]:
                break
            if err < best * 0.999:
                best, since_best = err, 0
            else:
                since_best += 1
            if (
                overrelax
                and omega == 1.0
                and relaxed_at is None
                and len(history) >= 20
                and err < _RELAX_BELOW
            ):
                rho = (history[-1] / history[-11]) ** 0.1
                if 0.0 < rho < 1.0:
                    omega = min(omega_max, 2.0 / (1.0 + math.sqrt(1.0 - rho)))
                    relaxed_at = len(history)
                    best, since_best = err, 0
            elif (
                omega > 1.0
                and relaxed_at is not None
                and len(history) - relaxed_at > _GRACE
                and (err > 5.0 * best or since_best > 100)
            ):
                omega = 1.0 + 0.5 * (omega - 1.0)
                if omega < 1.05:
                    omega = 1.0
                best, since_best = err, 0
                relaxed_at = len(history)
            target = eps * (log_a - Lr)
            self.F = target if omega == 1.0 else (1.0 - omega) * self.F + omega * target
            self.Lc = kernel.col_lse(self.F)
            target = eps * (log_b - self.Lc)
            self.G = target if omega == 1.0 else (1.0 - omega) * self.G + omega * target
            used += 1
        self.n_iter += used
        return err


# --------------------------------------------------------------------------- problem


@dataclass(frozen=True)
class TransportProblem:
    """An entropic OT problem: cost geometry (holding epsilon) and marginals.

    Solves ``min <pi, C> + eps KL(pi | a (x) b)`` over ``pi 1 = a``, ``pi^T 1 = b``
    with ``eps = geometry.epsilon_abs`` (module docstring). Validated once, at
    construction: equal-mass positive weights, a finite cost, a resolvable epsilon.

    Attributes
    ----------
    geometry
        The cost (:class:`~geoviz.ot.geometry.CostGeometry`) with its regularisation
        set (:meth:`~geoviz.ot.geometry.CostGeometry.with_epsilon`).
    a, b
        ``(n,)``, ``(m,)`` positive weights of equal mass; stored as float64 on the
        geometry's device (see :func:`uniform_measure` for uniform ones).
    groups
        Optional ``(row_groups (n,), col_groups (m,))`` integer group ids (for OTDD:
        the class labels), used by the class-level coarse correction.
    symmetric
        ``C = C^T`` and ``a = b``: solved with the averaged update of Feydy et al.
    """

    geometry: CostGeometry
    a: torch.Tensor
    b: torch.Tensor
    groups: tuple[torch.Tensor, torch.Tensor] | None = None
    symmetric: bool = False

    def __post_init__(self) -> None:
        geom = self.geometry
        if not isinstance(geom, CostGeometry):
            raise GeovizError(
                f"sinkhorn: the problem needs a CostGeometry, got {type(geom).__name__}"
            )
        a, b = _check_weights(geom, self.a, self.b)
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)
        geom.check_finite()
        _ = geom.epsilon_abs  # resolved (and checked) once, here
        if self.symmetric:
            if geom.shape[0] != geom.shape[1] or not torch.allclose(a, b):
                raise GeovizError("sinkhorn: symmetric=True needs a square cost and a == b")
            _check_symmetric(geom)

    @property
    def epsilon_abs(self) -> float:
        """The absolute regularisation (resolved on the geometry)."""
        return self.geometry.epsilon_abs


# --------------------------------------------------------------------------- strategies


@dataclass(frozen=True)
class KernelPolicy:
    """Which kernel evaluates the log-sum-exps (module docstring, "One loop").

    Attributes
    ----------
    mode
        ``"auto"``, ``"dense"``, ``"sparse"`` or ``"online"``.
    truncation
        Sparse kernel: keep entries within ``truncation`` (in units of ``eps``) of
        their row's best, i.e. drop entries carrying less than ``exp(-truncation)``
        of the row's largest entry.
    max_density
        Auto mode: use the sparse kernel when the support keeps at most this
        fraction of the ``n m`` entries.
    absorb_threshold
        Absorb scalings into the kernel when ``|log u|`` or ``|log v|`` exceeds it.
    """

    mode: SinkhornMode = "auto"
    truncation: float = 20.0
    max_density: float = 0.1
    absorb_threshold: float = 30.0

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "dense", "sparse", "online"):
            raise GeovizError(
                f"sinkhorn: mode must be 'auto', 'dense', 'sparse' or 'online', got {self.mode!r}"
            )
        if not (self.truncation > 0):
            raise GeovizError(f"sinkhorn: truncation must be > 0, got {self.truncation!r}")
        if not (0.0 < self.max_density <= 1.0):
            raise GeovizError(f"sinkhorn: max_density must be in (0, 1], got {self.max_density!r}")


@dataclass(frozen=True)
class EpsilonScaling:
    """Annealing: a geometric schedule of regularisations down to ``eps``.

    Attributes
    ----------
    ratio
        Ratio in ``(0, 1)`` between successive regularisations.
    start
        First regularisation (default: the mean cost).
    stage_iter
        Iteration budget of each intermediate regularisation.
    """

    ratio: float = 0.25
    start: float | None = None
    stage_iter: int = 30

    def __post_init__(self) -> None:
        if not (0.0 < self.ratio < 1.0):
            raise GeovizError(
                f"sinkhorn: eps_scaling must be in (0, 1) or None, got {self.ratio!r}"
            )
        if int(self.stage_iter) < 1:
            raise GeovizError(f"sinkhorn: stage_iter must be >= 1, got {self.stage_iter!r}")

    def stages(self, eps: float, geom: CostGeometry, max_iter: int) -> list[float]:
        """``[start, ..., eps]`` with ratio :attr:`ratio`; ``[eps]`` if ``max_iter`` is too small."""
        start = float(self.start) if self.start is not None else geom.mean()
        schedule = [eps]
        e = eps
        while e / self.ratio < start:
            e = e / self.ratio
            schedule.append(e)
        schedule = schedule[::-1]
        if max_iter < 2 * len(schedule):
            schedule = [eps]  # too small a budget to anneal: every stage but the last would eat it
        return schedule


@dataclass(frozen=True)
class MultiscaleStart:
    """Coarse-to-fine start (auto and sparse modes, with epsilon scaling).

    When both sides have more than twice :attr:`size` points, all but the last
    two regularisations of the schedule are solved on a seeded random subsample
    of :attr:`size` points per side, and the full problem starts from the
    c-transform of its potentials (one pass over :attr:`size` rows of the cost).
    """

    size: int = 2000

    def applies(self, problem: TransportProblem, mode: SinkhornMode, n_stages: int) -> bool:
        n, m = problem.geometry.shape
        return mode in ("auto", "sparse") and n_stages > _FULL_STAGES and min(n, m) > 2 * self.size

    def start(
        self,
        problem: TransportProblem,
        schedule: list[float],
        stage_iter: int,
        absorb_threshold: float,
    ) -> torch.Tensor:
        """Solve ``schedule`` on the subsample; return a full column potential ``G`` (m,).

        The subsample's row potential is extended to every column by the
        c-transform ``G_j = eps (log b_j - LSE_{i in I}((F_i - C_ij)/eps))`` at the
        last coarse regularisation (with the subsample's normalised row weights).
        """
        geom, a, b = problem.geometry, problem.a, problem.b
        n, m = geom.shape
        gen = torch.Generator().manual_seed(0)
        rows = torch.randperm(n, generator=gen)[: self.size].sort().values.to(geom.device)
        cols = torch.randperm(m, generator=gen)[: self.size].sort().values.to(geom.device)
        a_sub, b_sub = a[rows] / a[rows].sum(), b[cols] / b[cols].sum()
        eps = schedule[-1]
        coarse = Sinkhorn(
            tol=_STAGE_TOL,
            max_iter=max(2, stage_iter * len(schedule)),
            kernel=KernelPolicy(mode="dense" if geom.matrix is not None else "online"),
            scaling=(
                EpsilonScaling(schedule[-1] / schedule[-2], schedule[0], stage_iter)
                if len(schedule) > 1
                else None
            ),
            multiscale=None,
        )
        sub_problem = TransportProblem(
            geom.subset(rows, cols).with_epsilon(eps, relative=False), a_sub, b_sub
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a warm start only
            sub = coarse(sub_problem)
        F_sub = sub.f + eps * a_sub.log()
        extend = _OnlineKernel(geom.subset(rows, None), a_sub.log(), b.log(), absorb_threshold)
        extend.set_eps(eps)
        return eps * (b.log() - extend.col_lse(F_sub))


class _DensePool:
    """At most one dense kernel buffer per solve, allocated on first use."""

    def __init__(
        self, geom: CostGeometry, log_a: torch.Tensor, log_b: torch.Tensor, tau: float
    ) -> None:
        self.geom, self.log_a, self.log_b, self.tau = geom, log_a, log_b, tau
        self.kernel: _DenseKernel | None = None

    def get(self) -> _DenseKernel:
        if self.kernel is None:
            n, m = self.geom.shape
            itemsize = torch.empty((), dtype=self.geom.dtype).element_size()
            check_memory(n * m * itemsize, self.geom.device, "the Sinkhorn kernel buffer")
            buffer = torch.empty((n, m), dtype=self.geom.dtype, device=self.geom.device)
            self.kernel = _DenseKernel(self.geom, self.log_a, self.log_b, self.tau, buffer)
        return self.kernel


# --------------------------------------------------------------------------- solver


@dataclass(frozen=True)
class Sinkhorn:
    """Settings of the stabilised Sinkhorn solver; call it on a :class:`TransportProblem`.

    ``Sinkhorn(tol=1e-6)(problem, init=(f, g))`` returns a :class:`SinkhornResult`
    (problem -> solver -> output, as OTT-JAX's ``Sinkhorn`` on a ``LinearProblem``).

    Attributes
    ----------
    tol
        Stop when the L1 marginal error of the returned plan is ``<= tol``.
    max_iter
        Iteration budget (all stages together); exceeding it warns with
        :class:`~geoviz.errors.ConvergenceWarning` and sets ``converged=False``.
    kernel
        :class:`KernelPolicy` (mode, truncation, density, absorption).
    scaling
        :class:`EpsilonScaling`, or ``None`` for none.
    multiscale
        :class:`MultiscaleStart`, or ``None`` for none.
    overrelax, omega_max
        Adaptive over-relaxation and its upper bound (``< 2``).
    check_every
        Evaluate the stopping rule every ``check_every`` iterations.
    coarse_every
        Minimum number of iterations between two group corrections (problems with
        ``groups``: when the group-aggregated marginal error makes up more than 80%
        of the error, the potentials are shifted by one constant per group so that
        the aggregated marginals match exactly, by damped Newton on the small
        aggregated dual; this removes the slow inter-class mode of Sinkhorn on
        label-structured costs with unequal class proportions).
    keep_plan
        Dense kernel: build the plan in place of the kernel buffer at the end
        (no extra memory); :meth:`SinkhornResult.plan` then returns it.
    """

    tol: float = 1e-4
    max_iter: int = 5000
    kernel: KernelPolicy = KernelPolicy()
    scaling: EpsilonScaling | None = EpsilonScaling()
    multiscale: MultiscaleStart | None = MultiscaleStart()
    overrelax: bool = True
    omega_max: float = 1.9
    check_every: int = 1
    coarse_every: int = 10
    keep_plan: bool = False

    def __post_init__(self) -> None:
        if not (self.tol > 0):
            raise GeovizError(f"sinkhorn: tol must be > 0, got {self.tol!r}")
        if int(self.max_iter) < 1:
            raise GeovizError(f"sinkhorn: max_iter must be >= 1, got {self.max_iter!r}")
        if not (1.0 <= self.omega_max < 2.0):
            raise GeovizError(f"sinkhorn: omega_max must be in [1, 2), got {self.omega_max!r}")

    def __call__(
        self,
        problem: TransportProblem,
        init: tuple[torch.Tensor, torch.Tensor] | None = None,
        callback: SinkhornCallback | None = None,
    ) -> SinkhornResult:
        """Solve ``problem``.

        Parameters
        ----------
        problem
            The validated problem (cost geometry with epsilon, marginals).
        init
            Warm start ``(f, g)`` in the convention of :class:`SinkhornResult`
            (disables epsilon scaling).
        callback
            ``callback(iteration, marginal_error)`` at every check of the final stage.
        """
        geom, eps = problem.geometry, problem.epsilon_abs
        log_a, log_b = problem.a.log(), problem.b.log()
        if init is not None:
            F = torch.as_tensor(init[0]).to(device=geom.device, dtype=torch.float64) + eps * log_a
            G = torch.as_tensor(init[1]).to(device=geom.device, dtype=torch.float64) + eps * log_b
        else:
            F, G = torch.zeros_like(log_a), torch.zeros_like(log_b)
        if problem.symmetric:
            return self._solve_symmetric(problem, F, callback)
        if self.kernel.mode == "dense" and geom.matrix is None:
            raise GeovizError(
                "sinkhorn: mode='dense' needs a stored cost matrix (use 'sparse' or 'online')"
            )
        n, m = geom.shape
        groups = _make_groups(problem.groups, n, m, geom.device, self.coarse_every)
        loop = _Loop(problem.a, problem.b, F, G, groups, callback, max(1, int(self.check_every)))
        kernel, err = self._anneal(problem, loop, init is None)
        truncated_mass, sparse_plan = 0.0, None
        if isinstance(kernel, _SparseKernel):
            kernel, err, truncated_mass = self._verify_sparse(problem, kernel, loop, err)
            sparse_plan = kernel.plan_csr(loop.F, loop.G)
        converged = err <= self.tol
        if not converged:
            warnings.warn(
                f"Sinkhorn stopped after {loop.n_iter} iterations (max_iter={self.max_iter}) "
                f"with marginal error {err:.3g} > tol={self.tol:g}; increase max_iter or epsilon",
                ConvergenceWarning,
                stacklevel=3,
            )
        plan = None
        if self.keep_plan and isinstance(kernel, _DenseKernel):
            plan = kernel.plan_inplace(loop.F, loop.G)
        nnz, sparse_cost = n * m, math.nan
        if isinstance(kernel, _SparseKernel) and sparse_plan is not None:
            nnz = kernel.support.nnz
            sparse_cost = float((sparse_plan.values() * kernel.cvals).sum())
        return SinkhornResult(
            f=loop.F - eps * log_a,
            g=loop.G - eps * log_b,
            a=problem.a,
            b=problem.b,
            epsilon_abs=eps,
            n_iter=loop.n_iter,
            marginal_error=float(err),
            converged=bool(converged),
            mode=kernel.mode,
            truncated_mass=float(truncated_mass),
            nnz=int(nnz),
            geometry=geom,
            _plan=plan,
            _sparse=sparse_plan,
            _sparse_cost=sparse_cost,
        )

    # -- stages
    def _anneal(self, problem: TransportProblem, loop: _Loop, cold: bool) -> tuple[_Kernel, float]:
        """Run the epsilon schedule down to ``eps``; return the last kernel and its error."""
        geom, eps, policy = problem.geometry, problem.epsilon_abs, self.kernel
        n, m = geom.shape
        max_iter = int(self.max_iter)
        scaling = self.scaling if cold else None
        schedule = [eps] if scaling is None else scaling.stages(eps, geom, max_iter)
        # without scaling the schedule is [eps]: no intermediate stage needs a budget
        stage_iter = 0 if scaling is None else int(scaling.stage_iter)
        cost_mean = geom.mean() if policy.mode == "auto" else math.nan
        if policy.mode == "sparse":
            max_nnz = n * m + m
        else:
            max_nnz = int(max(n, m) + policy.max_density * n * m)
        pool = _DensePool(geom, loop.log_a, loop.log_b, policy.absorb_threshold)
        if self.multiscale is not None and self.multiscale.applies(
            problem, policy.mode, len(schedule)
        ):
            # coarse-to-fine: the blurry stages on a random subsample, then one c-transform
            loop.G = self.multiscale.start(
                problem, schedule[:-_FULL_STAGES], stage_iter, policy.absorb_threshold
            )
            schedule = schedule[-_FULL_STAGES:]
        kernel: _Kernel | None = None
        err = math.inf
        for stage, e in enumerate(schedule):
            final = stage == len(schedule) - 1
            left = max_iter - loop.n_iter
            budget = left if final else min(stage_iter, left - 1)
            if budget <= 0:
                continue
            kernel = None
            want_sparse = policy.mode == "sparse" or (
                policy.mode == "auto" and (geom.matrix is None or e <= _SPARSE_BELOW * cost_mean)
            )
            if want_sparse:
                # intermediate stages only warm-start the next: a thinner support is enough
                trunc = policy.truncation if final else min(policy.truncation, _STAGE_TRUNCATION)
                support, _ = _select_support(geom, loop.G, e, trunc, max_nnz)
                if support is not None:
                    _check_sparse_memory(support.nnz, geom.device)
                    kernel = _SparseKernel(
                        geom, loop.log_a, loop.log_b, policy.absorb_threshold, support
                    )
            if kernel is None:  # too dense to truncate (or asked for)
                kernel = (
                    pool.get()
                    if geom.matrix is not None and policy.mode != "online"
                    else _OnlineKernel(geom, loop.log_a, loop.log_b, policy.absorb_threshold)
                )
            kernel.set_eps(e)
            if not final:
                err = loop.run(kernel, max(self.tol, _STAGE_TOL), budget, False, 1.0, False)
            elif isinstance(kernel, _SparseKernel):
                # leave room for the dense plan's extra error, measured at verification
                kernel, err = self._final_sparse_stage(
                    kernel, loop, geom, e, self.tol * _SPARSE_TOL_FRACTION, budget
                )
            else:
                err = loop.run(kernel, self.tol, budget, self.overrelax, self.omega_max, True)
        assert kernel is not None
        return kernel, err

    def _verify_sparse(
        self, problem: TransportProblem, kernel: _SparseKernel, loop: _Loop, err: float
    ) -> tuple[_SparseKernel, float, float]:
        """Measure the dense plan of the returned potentials; re-select the support if needed.

        Returns the final kernel, the error (the larger of the dense and the
        truncated plan's) and the dense plan's mass outside the support.
        """
        geom, eps, policy = problem.geometry, problem.epsilon_abs, self.kernel
        n, m = geom.shape
        truncated_mass = 0.0
        for _ in range(_MAX_VERIFY):
            new_support, stats = _select_support(
                geom,
                loop.G,
                eps,
                policy.truncation,
                n * m + m,
                F=loop.F,
                log_a=loop.log_a,
                log_b=loop.log_b,
                measure=True,
            )
            assert stats is not None and new_support is not None
            dense_err = float(
                (stats["rows"] - problem.a).abs().sum() + (stats["cols"] - problem.b).abs().sum()
            )
            inside = float(kernel.plan_values(loop.F, loop.G).sum())
            truncated_mass = max(0.0, float(stats["rows"].sum()) - inside)
            err = max(err, dense_err)
            left = int(self.max_iter) - loop.n_iter
            if err <= self.tol or left <= 0:
                break
            support = kernel.support.union(new_support)
            _check_sparse_memory(support.nnz, geom.device)
            kernel = _SparseKernel(geom, loop.log_a, loop.log_b, policy.absorb_threshold, support)
            kernel.set_eps(eps)
            kernel, err = self._final_sparse_stage(
                kernel, loop, geom, eps, self.tol * _SPARSE_TOL_FRACTION, left
            )
        return kernel, err, truncated_mass

    def _final_sparse_stage(
        self,
        kernel: _SparseKernel,
        loop: _Loop,
        geom: CostGeometry,
        eps: float,
        stage_tol: float,
        budget: int,
    ) -> tuple[_SparseKernel, float]:
        """Iterate on the truncated kernel, re-selecting its support when it is stale or too thin.

        The support was chosen with the previous stage's potentials: once the error is
        below ``_RESELECT_TOL`` it is chosen again around the balanced potentials. A
        support too thin to carry the marginals shows as a stall (the error does not
        halve in ``_STALL`` iterations): it is then grown the same way; when it did not
        grow (the problem is merely slow) the stall window doubles.
        """
        phase_tol = max(stage_tol, _RESELECT_TOL)
        window = _STALL
        err = math.inf
        while budget > 0:
            used0 = loop.n_iter
            err = loop.run(
                kernel, phase_tol, budget, self.overrelax, self.omega_max, True, stall=window
            )
            budget -= loop.n_iter - used0
            if budget <= 0 or err <= stage_tol:
                break
            grown = self._resupport(kernel, geom, loop, eps)
            if err <= phase_tol:
                phase_tol = stage_tol  # the planned re-selection
            elif grown.support.nnz == kernel.support.nnz:
                window *= 2  # complete support, slow convergence: check less often
            kernel = grown
        return kernel, err

    def _resupport(
        self, kernel: _SparseKernel, geom: CostGeometry, loop: _Loop, eps: float
    ) -> _SparseKernel:
        """A sparse kernel on the old support plus the entries significant for ``(F, G)``."""
        n, m = geom.shape
        support, _ = _select_support(
            geom,
            loop.G,
            eps,
            self.kernel.truncation,
            n * m + m,
            F=loop.F,
            log_a=loop.log_a,
            log_b=loop.log_b,
        )
        assert support is not None
        merged = kernel.support.union(support)
        _check_sparse_memory(merged.nnz, merged.rows.device)
        out = _SparseKernel(geom, loop.log_a, loop.log_b, self.kernel.absorb_threshold, merged)
        out.set_eps(eps)
        return out

    def _solve_symmetric(
        self, problem: TransportProblem, f0: torch.Tensor, callback: SinkhornCallback | None
    ) -> SinkhornResult:
        """Averaged log-domain iterations for a symmetric problem (potential ``f = g``)."""
        geom, a, eps, tol = problem.geometry, problem.a, problem.epsilon_abs, self.tol
        log_a = a.log()
        kernel = _OnlineKernel(geom, log_a, log_a, 30.0)
        kernel.set_eps(eps)
        f = f0.clone()  # internal convention: pi = exp((F_i + F_j - C_ij)/eps)
        err = math.inf
        n_iter = 0
        for n_iter in range(1, int(self.max_iter) + 1):
            t = eps * log_a - eps * kernel.row_lse(f)
            # row marginal of the current plan: a * exp((F - T(F))/eps)
            err = 2.0 * float((a * torch.expm1((f - t) / eps)).abs().sum())
            if callback is not None:
                callback(n_iter, err)
            if err <= tol:
                break
            f = 0.5 * (f + t)
        converged = err <= tol
        if not converged:
            warnings.warn(
                f"symmetric Sinkhorn stopped after {n_iter} iterations with marginal error "
                f"{err:.3g} > tol={tol:g}",
                ConvergenceWarning,
                stacklevel=4,
            )
        g = f - eps * log_a
        return SinkhornResult(
            f=g,
            g=g.clone(),
            a=a,
            b=a.clone(),
            epsilon_abs=eps,
            n_iter=n_iter,
            marginal_error=float(err),
            converged=bool(converged),
            mode="online",
            nnz=geom.shape[0] ** 2,
            geometry=geom,
        )


def sinkhorn(
    cost: torch.Tensor | CostGeometry,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    epsilon_abs: float,
    tol: float = 1e-4,
    max_iter: int = 5000,
    mode: SinkhornMode = "auto",
    truncation: float = 20.0,
    eps_scaling: float | None = 0.25,
    overrelax: bool = True,
    multiscale: int | None = 2000,
    keep_plan: bool = False,
    symmetric: bool = False,
    groups: tuple[torch.Tensor, torch.Tensor] | None = None,
    init: tuple[torch.Tensor, torch.Tensor] | None = None,
    callback: SinkhornCallback | None = None,
) -> SinkhornResult:
    """Convenience entry (as POT's ``ot.sinkhorn``): build the problem and the solver, solve.

    ``sinkhorn(C, a, b, epsilon_abs=eps, **options)`` is
    ``Sinkhorn(...)(TransportProblem(as_geometry(C).with_epsilon(eps, relative=False), a, b))``;
    build :class:`Sinkhorn` directly for the settings not listed here.

    Parameters
    ----------
    cost
        ``(n, m)`` float32/float64 tensor (any device; not modified) or a
        :class:`~geoviz.ot.geometry.CostGeometry` (e.g. a
        :class:`~geoviz.ot.geometry.PointCloudCost` that is never stored).
    a, b
        ``(n,)``, ``(m,)`` positive weights of equal mass (default uniform).
    epsilon_abs
        Absolute entropic regularisation ``eps > 0`` (same units as ``cost``; a
        relative one: ``geometry.with_epsilon(epsilon, relative=True)``).
    tol, max_iter, keep_plan
        See :class:`Sinkhorn`.
    mode, truncation
        See :class:`KernelPolicy`.
    eps_scaling
        :attr:`EpsilonScaling.ratio`, or ``None`` for no annealing.
    overrelax
        Adaptive over-relaxation.
    multiscale
        :attr:`MultiscaleStart.size`, or ``None`` for no multiscale start.
    symmetric, groups
        See :class:`TransportProblem`.
    init, callback
        See :meth:`Sinkhorn.__call__`.

    Returns
    -------
    SinkhornResult
    """
    geom = as_geometry(cost).with_epsilon(epsilon_abs, relative=False)
    solver = Sinkhorn(
        tol=tol,
        max_iter=max_iter,
        kernel=KernelPolicy(mode=mode, truncation=truncation),
        scaling=None if eps_scaling is None else EpsilonScaling(ratio=eps_scaling),
        multiscale=None if multiscale is None else MultiscaleStart(int(multiscale)),
        overrelax=overrelax,
        keep_plan=keep_plan,
    )
    n, m = geom.shape
    problem = TransportProblem(
        geom,
        uniform_measure(n, geom.device) if a is None else a,
        uniform_measure(m, geom.device) if b is None else b,
        groups=groups,
        symmetric=symmetric,
    )
    return solver(problem, init=init, callback=callback)


def _check_sparse_memory(nnz: int, dev: torch.device) -> None:
    # rows, cols, perm, csr/csc indices (int64) + cost, values x3 (float64)
    check_memory(nnz * 8 * 9, dev, f"the truncated Sinkhorn kernel ({nnz} entries)")


def _check_symmetric(geom: CostGeometry) -> None:
    n = geom.shape[0]
    gen = torch.Generator().manual_seed(0)
    k = min(4096, n * n)
    ii = torch.randint(0, n, (k,), generator=gen)
    jj = torch.randint(0, n, (k,), generator=gen)
    if geom.matrix is not None:
        c = geom.matrix
        cij = c[ii.to(c.device), jj.to(c.device)]
        cji = c[jj.to(c.device), ii.to(c.device)]
    else:
        pick = torch.unique(ii)[:64]
        rows = torch.stack([geom.row_block(int(i), int(i) + 1)[0] for i in pick])
        cij = rows[:, pick]
        cji = rows[:, pick].T
    scale = float(cij.abs().max()) + 1e-30
    if float((cij - cji).abs().max()) > 1e-4 * scale:
        raise GeovizError("sinkhorn: symmetric=True needs a symmetric cost (C = C^T)")


def _coarse_newton(
    agg: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, max_iter: int = 60
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shifts ``(s, t)`` with ``agg * exp(s (+) t)`` having marginals ``(alpha, beta)``.

    Damped Newton ascent on the concave dual
    ``alpha.s + beta.t - sum(agg * exp(s (+) t))`` in float64 (tiny system, NumPy).
    """
    agg_np = np.clip(agg.double().cpu().numpy(), 0.0, None)
    al = alpha.double().cpu().numpy()
    be = beta.double().cpu().numpy()
    gq, gp = agg_np.shape
    s = np.zeros(gq)
    t = np.zeros(gp)

    def value(s_: np.ndarray, t_: np.ndarray) -> float:
        with np.errstate(over="ignore", invalid="ignore"):  # a too-long step is rejected below
            return float(al @ s_ + be @ t_ - (agg_np * np.exp(s_[:, None] + t_[None, :])).sum())

    current = value(s, t)
    scale = float(al.sum())
    hess = np.zeros((gq + gp, gq + gp))
    for _ in range(max_iter):
        m = agg_np * np.exp(s[:, None] + t[None, :])
        r, q = al - m.sum(1), be - m.sum(0)
        if float(np.abs(r).sum() + np.abs(q).sum()) <= 1e-14 * scale:
            break
        hess[:] = 0.0
        hess[np.arange(gq), np.arange(gq)] = m.sum(1)
        hess[gq + np.arange(gp), gq + np.arange(gp)] = m.sum(0)
        hess[:gq, gq:] = m
        hess[gq:, :gq] = m.T
        step = np.linalg.lstsq(hess, np.concatenate([r, q]), rcond=None)[0]
        if not np.all(np.isfinite(step)):
            break
        lam = 1.0
        while lam > 1e-6:
            s_new, t_new = s + lam * step[:gq], t + lam * step[gq:]
            new = value(s_new, t_new)
            if math.isfinite(new) and new >= current:
                break
            lam *= 0.5
        else:
            break
        s, t, current = s_new, t_new, new
    centre = 0.5 * (float(s.mean()) - float(t.mean()))  # split the free constant evenly
    return torch.from_numpy(s - centre), torch.from_numpy(t + centre)
