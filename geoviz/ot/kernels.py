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
``sparse`` (:class:`SparseKernel`, support by :func:`select_support`)
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
from dataclasses import dataclass

import torch

from geoviz.backend import check_memory
from geoviz.ot.geometry import CostGeometry

__all__ = [
    "EXP_FLOOR",
    "AbsorbedKernel",
    "Candidates",
    "DenseKernel",
    "DensePool",
    "Kernel",
    "OnlineKernel",
    "SparseKernel",
    "Support",
    "check_sparse_memory",
    "exp_floored_",
    "pass_rows",
    "select_support",
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


@dataclass
class Support:
    """Kept entries, sorted by row then column: ``rows``, ``cols`` (int64), ``cost`` values."""

    rows: torch.Tensor
    cols: torch.Tensor
    cost: torch.Tensor
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.rows.numel())

    def union(self, other: Support) -> Support:
        m = self.shape[1]
        key = torch.cat([self.rows * m + self.cols, other.rows * m + other.cols])
        cost = torch.cat([self.cost, other.cost])
        uniq, inv = torch.unique(key, sorted=True, return_inverse=True)
        first = torch.empty_like(uniq).scatter_(
            0, inv, torch.arange(key.numel(), device=key.device)
        )
        return Support(uniq // m, uniq % m, cost[first], self.shape)


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


# --------------------------------------------------------------------------- support scans

#: a verification pass sums, in float64, the plan entries within this many nats of their
#: row's mass (``w_ij >= log a_i - 45``): a row of 60,000 entries below that holds less
#: than 60,000 e^-45 ~ 2e-15 of its mass
_MEASURE_WINDOW = 45.0


def select_support(
    geom: CostGeometry,
    G: torch.Tensor,
    eps: float,
    truncation: float,
    max_nnz: int,
    F: torch.Tensor | None = None,
    log_a: torch.Tensor | None = None,
    log_b: torch.Tensor | None = None,
    measure: bool = False,
    max_per_row: int | None = None,
    candidates_k: int | None = None,
    cover_columns: bool = True,
) -> tuple[Support | None, dict[str, torch.Tensor] | None]:
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

    ``max_per_row`` also caps every row at its ``max_per_row`` largest entries, so the
    support holds at most ``n * max_per_row`` entries however many reference points fall
    within the truncation window (their number grows with ``m`` at a fixed ``eps``: at
    60,000 points a row can have thousands). What the cap drops is measured like the rest
    of the truncation: the verification pass (``measure``) sums the dense plan.

    With ``measure`` and ``candidates_k`` the same pass also finds each row's
    ``candidates_k`` best columns (:class:`Candidates`, returned in the statistics as
    ``"candidates"``, a :meth:`Candidates.to_stats` dictionary), so a failed verification
    needs no further pass to look for them. ``cover_columns=False`` (a support for some
    rows only, added to one that covers the columns) skips the entry every column otherwise
    keeps.
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
    finder = _CandidateFinder(n, m, candidates_k, dev, dt) if measure and candidates_k else None
    if measure:
        # the plan's sums must not carry float32 rounding of (F + G - C)/eps: the pass finds
        # the entries that can matter in the compute dtype (within _MEASURE_WINDOW nats of
        # their row's mass log a_i; the rest hold < 1e-15 of it) and sums those in float64
        assert F is not None and log_a is not None
        g64, f64 = G / eps, F / eps
        near_floor = (log_a - _MEASURE_WINDOW).to(dt)
    for r0, r1, c in geom.row_blocks(pass_rows(geom)):
        z = torch.add(g_s[None, :], c.to(g_s.dtype), alpha=-1.0 / eps)
        if f_s is not None:
            z.add_(f_s[r0:r1, None])
        if max_per_row is not None and max_per_row < m:
            # only each row's largest entries are candidates, in column order
            top_idx = z.topk(max_per_row, dim=1, sorted=False).indices.sort(1).values
            top = z.gather(1, top_idx)
            if f_s is not None:
                keep = top >= thr if uniform else top >= torch.minimum(la[r0:r1, None], lb[top_idx])
            else:
                keep = top >= (top.amax(1, keepdim=True) - truncation)
            rr = keep.nonzero()[:, 0]
            cc = top_idx[keep]
        else:
            if f_s is not None:
                keep = z >= thr if uniform else z >= torch.minimum(la[r0:r1, None], lb[None, :])
            else:
                keep = z >= (z.amax(1, keepdim=True) - truncation)
            idx = keep.nonzero()
            rr, cc = idx[:, 0], idx[:, 1]
        total += rr.shape[0]
        if total > max_nnz:
            return None, None
        rows_l.append(rr + r0)
        cols_l.append(cc)
        cost_l.append(c[rr, cc])
        if finder is not None:  # before z is overwritten by the plan's values
            finder.add(r0, r1, z, c)
        if measure:
            ii, jj = (z >= near_floor[r0:r1, None]).nonzero().unbind(1)
            p = (f64[ii + r0] + g64[jj] - c[ii, jj].double() / eps).exp_()
            row_mass[r0:r1] = torch.zeros(r1 - r0, dtype=torch.float64, device=dev).index_add_(
                0, ii, p
            )
            col_mass.index_add_(0, jj, p)
    rows = torch.cat(rows_l)
    cols = torch.cat(cols_l)
    cost = torch.cat(cost_l)
    covered = torch.bincount(cols, minlength=m) > 0
    if cover_columns and not bool(covered.all()):
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
    support = Support(rows, cols, cost, (n, m))
    stats = {"rows": row_mass, "cols": col_mass} if measure else None
    if stats is not None and finder is not None:
        stats.update(finder.result().to_stats())
    return support, stats


@dataclass(frozen=True)
class Candidates:
    """Each row's nearest columns, found in one pass: where its support may lie.

    At full size (60,000 x 60,000) a pass over the streamed cost is one 60,000 x D x 60,000
    GEMM (about a minute on two cores), and the truncated kernel's support is re-chosen
    several times per solve. Each row's ``k`` largest scores ``(G_j - C_ij)/eps`` are found
    once (:meth:`scan`); every later choice of support is made among them
    (:meth:`select`, ``O(n k)``, no pass). ``F_i`` is constant along a row, so the
    candidates of the balanced score ``F_i + G_j - C_ij`` are the same. The verification
    pass (:func:`select_support` with ``measure``) still sums the dense plan over every
    entry, so what the candidates miss is measured, never assumed.

    Attributes
    ----------
    cols
        ``(n, k)`` int64, each row's candidate columns in increasing order.
    cost
        ``(n, k)`` their costs ``C_ij`` (the geometry's dtype).
    best_row, best_cost
        ``(m,)``: each column's best row in the pass that found the candidates (smallest
        ``C_ij``; in a verification pass, the largest ``F_i - C_ij``) and that cost, so a
        column no row lists still keeps one entry.
    """

    cols: torch.Tensor
    cost: torch.Tensor
    best_row: torch.Tensor
    best_cost: torch.Tensor

    @classmethod
    def scan(cls, geom: CostGeometry, G: torch.Tensor, eps: float, k: int) -> Candidates:
        """One pass over the cost: each row's ``k`` largest ``(G_j - C_ij)/eps``."""
        n, m = geom.shape
        finder = _CandidateFinder(n, m, k, G.device, geom.dtype)
        g_s = (G / eps).to(geom.dtype)
        for r0, r1, c in geom.row_blocks(pass_rows(geom)):
            finder.add(r0, r1, torch.add(g_s[None, :], c, alpha=-1.0 / eps), c)
        return finder.result()

    def to_stats(self) -> dict[str, torch.Tensor]:
        return {
            "candidate_cols": self.cols,
            "candidate_cost": self.cost,
            "best_row": self.best_row,
            "best_cost": self.best_cost,
        }

    @classmethod
    def from_stats(cls, stats: dict[str, torch.Tensor]) -> Candidates:
        return cls(
            stats["candidate_cols"], stats["candidate_cost"], stats["best_row"], stats["best_cost"]
        )

    @property
    def k(self) -> int:
        return int(self.cols.shape[1])

    def select(
        self,
        G: torch.Tensor,
        eps: float,
        truncation: float,
        max_per_row: int,
        F: torch.Tensor | None = None,
        log_a: torch.Tensor | None = None,
        log_b: torch.Tensor | None = None,
    ) -> Support:
        """The support :func:`select_support` would choose with ``max_per_row``, chosen
        among the candidates (same rules: within ``truncation`` of the row's best, or
        with ``F`` significant for its row or column; every column keeps an entry)."""
        n, k = self.cols.shape
        m = int(self.best_row.shape[0])
        z = (G[self.cols] - self.cost.double()) / eps  # (n, k) float64
        if F is not None:
            assert log_a is not None and log_b is not None
            z += (F / eps)[:, None]
        top_k = min(int(max_per_row), k)
        order = z.topk(top_k, dim=1, sorted=False).indices.sort(1).values
        top = z.gather(1, order)
        if F is not None:
            assert log_a is not None and log_b is not None
            floor = torch.minimum(log_a[:, None], log_b[self.cols.gather(1, order)]) - truncation
            keep = top >= floor
        else:
            keep = top >= top.amax(1, keepdim=True) - truncation
        rows = keep.nonzero()[:, 0]
        cols = self.cols.gather(1, order)[keep]
        cost = self.cost.gather(1, order)[keep]
        covered = torch.bincount(cols, minlength=m) > 0
        if not bool(covered.all()):
            missing = (~covered).nonzero().squeeze(1)
            rows = torch.cat([rows, self.best_row[missing]])
            cols = torch.cat([cols, missing])
            cost = torch.cat([cost, self.best_cost[missing]])
            sort = torch.argsort(rows * m + cols)
            rows, cols, cost = rows[sort], cols[sort], cost[sort]
        return Support(rows, cols, cost, (n, m))


class _CandidateFinder:
    """Fills :class:`Candidates` from the row blocks of one pass over the cost."""

    def __init__(self, n: int, m: int, k: int, dev: torch.device, dt: torch.dtype) -> None:
        self.k = min(int(k), m)
        check_memory(n * self.k * 12 + m * 16, dev, f"the candidate lists ({n} x {self.k})")
        self.cols = torch.empty((n, self.k), dtype=torch.long, device=dev)
        self.cost = torch.empty((n, self.k), dtype=dt, device=dev)
        self.best_cost = torch.zeros(m, dtype=dt, device=dev)
        self.best_score = torch.full((m,), -math.inf, dtype=torch.float64, device=dev)
        self.best_row = torch.zeros(m, dtype=torch.long, device=dev)

    def add(self, r0: int, r1: int, score: torch.Tensor, cost: torch.Tensor) -> None:
        """Rows ``r0:r1``: their scores (larger is better) and costs, ``(r1 - r0, m)``."""
        idx = score.topk(self.k, dim=1, sorted=False).indices.sort(1).values
        self.cols[r0:r1] = idx
        self.cost[r0:r1] = cost.gather(1, idx)
        # a column's best row: the largest score (with F, the balanced plan's best entry)
        high, arg = score.max(0)
        better = high > self.best_score
        self.best_score = torch.where(better, high, self.best_score)
        self.best_row = torch.where(better, arg + r0, self.best_row)
        self.best_cost = torch.where(better, cost.gather(0, arg[None, :])[0], self.best_cost)

    def result(self) -> Candidates:
        return Candidates(self.cols, self.cost, self.best_row, self.best_cost)


#: fewest rows per block of a pass over a streamed cost: each block is one GEMM against the
#: whole reference, which is read from memory once per block; measured on 2 cores at
#: 60,000 x 784 reference points, 35-row blocks run at 31 GFLOP/s, 128 at 61, 512 at 89
_MIN_PASS_ROWS = 512


def pass_rows(geom: CostGeometry) -> int:
    """Rows per block of a selection pass: ~8 MiB blocks stay in cache across its 4 sweeps,
    but a streamed cost (each block a GEMM) takes at least :data:`_MIN_PASS_ROWS` rows."""
    itemsize = torch.empty((), dtype=geom.dtype).element_size()
    rows = (8 * 2**20) // max(1, geom.shape[1] * itemsize)
    if geom.matrix is None:
        rows = max(rows, _MIN_PASS_ROWS)
    return max(1, min(geom.shape[0], rows))


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
