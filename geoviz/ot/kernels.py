"""The kernels of the Sinkhorn loop: how its two log-sum-exps are evaluated.

For a cost ``C`` ``(n, m)`` (a :class:`~geoviz.ot.geometry.CostGeometry`), potentials
``(F, G)`` and a regularisation ``eps``, a kernel evaluates ``LSE_j((G_j - C_ij)/eps)`` and
``LSE_i((F_i - C_ij)/eps)`` (module docstring of :mod:`geoviz.ot.sinkhorn`, "One loop"):

``dense`` (:class:`DenseKernel`)
    A stabilised kernel ``K = exp((F0 (+) G0 - C)/eps)`` is stored beside the
    cost; each LSE is one matrix-vector product with the scalings
    ``exp((G - G0)/eps)``, and the kernel is rebuilt by an exact log-domain pass
    (absorbing the scalings into ``F0, G0``) whenever a scaling leaves
    ``[e^-30, e^30]`` (Schmitzer 2019). Memory: one more ``(n, m)`` buffer.
``sparse`` (:class:`SparseKernel`, support by :func:`~geoviz.ot.support.select_support`)
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
``online`` (:class:`OnlineKernel`)
    Nothing of size ``n x m`` is stored: each LSE is one pass over row blocks
    of the cost (for :class:`~geoviz.ot.geometry.PointCloudCost`: one GEMM per
    block). For problems whose dense kernel is too dense to truncate and too
    large to store.

The loop (:class:`geoviz.ot.loop.Loop`) receives one of them and never asks which.
"""

from __future__ import annotations

import math
import warnings

import torch

from geoviz.backend import check_memory
from geoviz.ot.geometry import CostGeometry
from geoviz.ot.support import Support

__all__ = [
    "EXP_FLOOR",
    "AbsorbedKernel",
    "DenseKernel",
    "DensePool",
    "Kernel",
    "OnlineKernel",
    "SparseKernel",
    "check_sparse_memory",
    "exp_floored_",
]

#: exp() of float32 arguments below about -87 gives subnormals and runs ~6x slower on
#: x86; such entries are < 1e-35 of the largest, so passes clamp there first
EXP_FLOOR = {torch.float32: -80.0, torch.float64: -700.0}


def exp_floored_(t: torch.Tensor) -> torch.Tensor:
    """In-place ``exp`` of log-values, clamped at :data:`EXP_FLOOR` (no subnormals)."""
    return t.clamp_min_(EXP_FLOOR.get(t.dtype, -80.0)).exp_()


# --------------------------------------------------------------------------- kernels


class Kernel:
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


class OnlineKernel(Kernel):
    """Exact log-domain passes over row blocks of the geometry; stores nothing ``n x m``."""

    mode = "online"

    def row_lse(self, G: torch.Tensor) -> torch.Tensor:
        eps, geom = self.eps, self.geom
        out = torch.empty(geom.shape[0], dtype=torch.float64, device=G.device)
        g_s = (G / eps).to(geom.dtype)
        for r0, r1, c in geom.row_blocks():
            z = torch.add(g_s[None, :], c, alpha=-1.0 / eps)
            mx = z.amax(1, keepdim=True)
            out[r0:r1] = (
                (mx + exp_floored_(z.sub_(mx)).sum(1, keepdim=True).log()).squeeze(1).double()
            )
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
                + exp_floored_(z.sub_(new[None, :].to(z.dtype))).sum(0).double()
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
            exp_floored_(z.add_((F[r0:r1] / eps).to(z.dtype)[:, None]))
            out[r0:r1] = (z @ oh).double()
        return out


class AbsorbedKernel(Kernel):
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


class DenseKernel(AbsorbedKernel):
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
            exp_floored_(blk.sub_(mx))
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
            exp_floored_(blk.sub_(mx))
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
                exact = OnlineKernel(self.geom, self.log_a, self.log_b, self.tau)
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
                exp_floored_(blk.add_((F[r0 : r0 + 1024] / eps).to(dt)[:, None]))
            return self.kernel
        return self.kernel.mul_(u.to(dt)[:, None]).mul_(v.to(dt)[None, :])


class SparseKernel(AbsorbedKernel):
    """Absorbed kernel on a truncated support, in CSR form (float64 values)."""

    mode = "sparse"

    def __init__(
        self,
        geom: CostGeometry,
        log_a: torch.Tensor,
        log_b: torch.Tensor,
        tau: float,
        support: Support,
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


class DensePool:
    """At most one dense kernel buffer per solve, allocated on first use."""

    def __init__(
        self, geom: CostGeometry, log_a: torch.Tensor, log_b: torch.Tensor, tau: float
    ) -> None:
        self.geom, self.log_a, self.log_b, self.tau = geom, log_a, log_b, tau
        self.kernel: DenseKernel | None = None

    def get(self) -> DenseKernel:
        if self.kernel is None:
            n, m = self.geom.shape
            itemsize = torch.empty((), dtype=self.geom.dtype).element_size()
            check_memory(n * m * itemsize, self.geom.device, "the Sinkhorn kernel buffer")
            buffer = torch.empty((n, m), dtype=self.geom.dtype, device=self.geom.device)
            self.kernel = DenseKernel(self.geom, self.log_a, self.log_b, self.tau, buffer)
        return self.kernel


def check_sparse_memory(nnz: int, dev: torch.device) -> None:
    """Refuse a truncated kernel of ``nnz`` entries that does not fit on ``dev``."""
    # rows, cols, perm, csr/csc indices (int64) + cost, values x3 (float64)
    check_memory(nnz * 8 * 9, dev, f"the truncated Sinkhorn kernel ({nnz} entries)")
