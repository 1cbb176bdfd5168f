"""Stabilised entropic optimal transport (Sinkhorn) in torch.

Problem and conventions
-----------------------
For a cost matrix ``C`` ``(n, m)``, positive weights ``a`` ``(n,)`` and ``b``
``(m,)`` of equal mass and an **absolute** regularisation ``epsilon_abs > 0``
this solves::

    min_{pi >= 0, pi 1 = a, pi^T 1 = b}  <pi, C> + eps * KL(pi | a (x) b)

whose solution is ``pi = (a (x) b) * exp((f (+) g - C) / eps)`` with dual
potentials ``f`` ``(n,)`` and ``g`` ``(m,)`` (this is the convention of
:class:`SinkhornResult`: potentials are *relative to* ``a (x) b``, as in
Feydy et al. and Pooladian & Niles-Weed). The plan is the same as that of POT's
``ot.sinkhorn(a, b, C, reg=eps)`` (entropy and KL regularisers differ by a
constant on the transport polytope).

Convergence is measured by the marginal error
``||pi 1 - a||_1 + ||pi^T 1 - b||_1`` of the returned plan; the solver stops as
soon as it is ``<= tol`` (not after a fixed number of iterations). If
``max_iter`` is reached first, a :class:`~geoviz.errors.ConvergenceWarning` is
issued and ``converged=False``.

Algorithm (why it is fast and never overflows)
----------------------------------------------
* **Absorbed kernel iterations.** Potentials ``(F, G)`` are kept in float64 and
  a stabilised kernel ``K = exp((F (+) G - C)/eps)`` is materialised once in the
  cost's dtype; iterations then update scalings ``u, v`` with two
  matrix-vector products (``u = a / K v``, ``v = b / K^T u``), which are memory
  bound and ~15x cheaper than log-sum-exp passes. Whenever ``|log u|`` or
  ``|log v|`` exceeds ``absorb_threshold`` (or a product under/overflows) the
  scalings are absorbed into ``(F, G)`` and the kernel is rebuilt by an exact
  **log-domain** (log-sum-exp, max-shifted) row or column update, so no value
  ever overflows and no row/column of ``K`` can vanish: this is the
  stabilised scheme of Schmitzer (2019) with log-domain fall-back; for very
  small ``eps`` it degrades gracefully into log-domain Sinkhorn.
* **Free convergence checks.** The row marginal of the current plan is
  ``u * (K v)`` and its column marginal ``v * (K^T u)``; both products are
  needed by the updates anyway, so the exact marginal error of the current
  iterate is known at every iteration without touching the matrix again.
* **Epsilon scaling** (annealing): a few iterations at a geometric sequence of
  larger regularisations ``eps_0 > ... > eps`` warm-start the potentials
  (``eps_scaling`` is the ratio between stages; ``None`` disables it).
* **Adaptive over-relaxation** (Thibault et al. 2021, Lehmann et al. 2022):
  in the final stage, once the error is below 0.05 (the asymptotic regime) and
  the plain iteration's linear rate ``rho`` has been measured, updates use
  ``log u <- (1 - w) log u + w log(a / K v)`` with
  ``w = 2 / (1 + sqrt(1 - rho))``, capped at ``omega_max``; if the error grows
  the factor is halved back towards 1 (safeguard), so the result is always a
  plan whose marginal error has been *measured*.
* **Group (class) coarse correction** (``groups=``): see :func:`sinkhorn`.
* **Symmetric problems** (``symmetric=True``, ``a == b``, ``C = C^T``; used for
  the debiasing terms ``OT_eps(a, a)``) use the averaged log-domain update
  ``f <- (f + T(f)) / 2`` of Feydy et al. (2019), which converges in a handful
  of iterations.

Memory: one ``(n, m)`` kernel buffer in the cost's dtype in addition to the
cost (checked with :func:`geoviz.backend.check_memory`); with
``keep_plan=True`` the buffer is turned into the plan in place at the end.

Limits: as for every Sinkhorn variant, a regularisation far below the cost
gaps (``eps`` around 1% of the cost scale or less) on a near-degenerate problem
can need 1e4-1e5 iterations for tight tolerances (POT's ``sinkhorn_log`` stalls
on the same instances); the error is always measured, never assumed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from geoviz.backend import check_memory
from geoviz.errors import ConvergenceWarning, GeovizError

__all__ = ["SinkhornResult", "sinkhorn", "sinkhorn_online", "uniform_weights"]

#: rows per block of the log-sum-exp passes (keeps the temporaries cache-sized)
_ROW_BLOCK = 64
#: columns per block of the column log-sum-exp passes
_COL_BLOCK = 256
_RELAX_BELOW = 0.05
_GRACE = 30
_STAGE_TOL = 1e-2
_COARSE_RATIO = 0.8


def uniform_weights(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(n,)`` float64 vector of ``1/n``."""
    return torch.full((n,), 1.0 / n, dtype=torch.float64, device=device)


@dataclass(frozen=True)
class SinkhornResult:
    """Outcome of :func:`sinkhorn`.

    The plan is ``pi = (a (x) b) * exp((f (+) g - cost) / epsilon_abs)``.

    Attributes
    ----------
    f, g
        ``(n,)``, ``(m,)`` float64 dual potentials (on the cost's device).
    a, b
        ``(n,)``, ``(m,)`` float64 marginals.
    epsilon_abs
        The absolute regularisation used.
    n_iter
        Number of Sinkhorn iterations (row + column update pairs; kernel
        rebuilds count as one), summed over all epsilon-scaling stages.
    marginal_error
        ``||pi 1 - a||_1 + ||pi^T 1 - b||_1`` of the returned plan.
    converged
        ``marginal_error <= tol``.
    cost
        The cost matrix the problem was solved for (a reference, not a copy);
        used by :meth:`plan`.
    """

    f: torch.Tensor
    g: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    epsilon_abs: float
    n_iter: int
    marginal_error: float
    converged: bool
    cost: torch.Tensor | None = field(default=None, repr=False, compare=False)
    _plan: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def plan(
        self, cost: torch.Tensor | None = None, *, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """Materialise the ``(n, m)`` transport plan.

        Parameters
        ----------
        cost
            The cost matrix (default: the one stored in the result).
        dtype
            Output dtype (default: the cost's dtype).

        Returns
        -------
        torch.Tensor
            ``(n, m)`` on the cost's device. If the solver was called with
            ``keep_plan=True`` the plan built in place is returned (no copy).
        """
        if self._plan is not None and cost is None and (dtype is None or dtype == self._plan.dtype):
            return self._plan
        cost = self.cost if cost is None else cost
        if cost is None:
            raise GeovizError("SinkhornResult.plan: the cost matrix was not kept; pass cost=")
        dtype = cost.dtype if dtype is None else dtype
        eps = self.epsilon_abs
        row = (self.f / eps + self.a.log()).to(dtype)
        col = (self.g / eps + self.b.log()).to(dtype)
        out = torch.empty(cost.shape, dtype=dtype, device=cost.device)
        for r0 in range(0, cost.shape[0], 1024):
            blk = out[r0 : r0 + 1024]
            torch.add(col, cost[r0 : r0 + 1024].to(dtype), alpha=-1.0 / eps, out=blk)
            blk.add_(row[r0 : r0 + 1024, None]).exp_()
        return out

    def dual_value(self) -> float:
        """``<f, a> + <g, b>``: the regularised cost ``OT_eps`` at convergence."""
        return float(self.f @ self.a + self.g @ self.b)

    def transport_cost(self, cost: torch.Tensor | None = None) -> float:
        """``<pi, C>`` (the un-regularised cost of the entropic plan)."""
        cost = self.cost if cost is None else cost
        if cost is None:
            raise GeovizError(
                "SinkhornResult.transport_cost: the cost matrix was not kept; pass cost="
            )
        plan = self.plan(cost)
        return (
            float(torch.sum(plan.double() * cost.double()))
            if plan.numel() < 2**22
            else float(
                sum(
                    torch.sum(plan[r : r + 1024].double() * cost[r : r + 1024].double())
                    for r in range(0, plan.shape[0], 1024)
                )
            )
        )


# --------------------------------------------------------------------------- passes


def _row_rebuild(
    cost: torch.Tensor, g: torch.Tensor, eps: float, log_a: torch.Tensor, kernel: torch.Tensor
) -> torch.Tensor:
    """Log-domain row update + kernel rebuild.

    Returns ``F`` with ``F_i = eps log a_i - eps LSE_j((G_j - C_ij)/eps)`` and fills
    ``kernel = exp((F (+) G - C)/eps)`` (each row then sums to ``a_i`` exactly).
    """
    dt = cost.dtype
    g_s = (g / eps).to(dt)
    f = torch.empty_like(log_a)
    inv = -1.0 / eps
    for r0 in range(0, cost.shape[0], _ROW_BLOCK):
        r1 = min(r0 + _ROW_BLOCK, cost.shape[0])
        blk = kernel[r0:r1]
        torch.add(g_s, cost[r0:r1], alpha=inv, out=blk)
        mx = blk.amax(dim=1, keepdim=True)
        blk.sub_(mx).exp_()
        s = blk.sum(dim=1, keepdim=True)
        la = log_a[r0:r1, None]
        blk.mul_(la.exp().to(dt) / s)
        f[r0:r1] = eps * (la - mx.double() - s.double().log()).squeeze(1)
    return f


def _col_rebuild(
    cost: torch.Tensor, f: torch.Tensor, eps: float, log_b: torch.Tensor, kernel: torch.Tensor
) -> torch.Tensor:
    """Log-domain column update + kernel rebuild (columns then sum to ``b``)."""
    dt = cost.dtype
    f_s = (f / eps).to(dt)[:, None]
    g = torch.empty_like(log_b)
    inv = -1.0 / eps
    tmp = torch.empty((cost.shape[0], min(_COL_BLOCK, cost.shape[1])), dtype=dt, device=cost.device)
    for c0 in range(0, cost.shape[1], _COL_BLOCK):
        c1 = min(c0 + _COL_BLOCK, cost.shape[1])
        blk = tmp[:, : c1 - c0]
        torch.add(f_s, cost[:, c0:c1], alpha=inv, out=blk)
        mx = blk.amax(dim=0, keepdim=True)
        blk.sub_(mx).exp_()
        s = blk.sum(dim=0, keepdim=True)
        lb = log_b[None, c0:c1]
        blk.mul_(lb.exp().to(dt) / s)
        kernel[:, c0:c1] = blk
        g[c0:c1] = eps * (lb - mx.double() - s.double().log()).squeeze(0)
    return g


def _row_lse(cost: torch.Tensor, g_plus: torch.Tensor, eps: float) -> torch.Tensor:
    """``LSE_j((g_plus_j - C_ij)/eps)`` in float64, blocked (no kernel stored)."""
    dt = cost.dtype
    g_s = (g_plus / eps).to(dt)
    out = torch.empty(cost.shape[0], dtype=torch.float64, device=cost.device)
    buf = torch.empty(
        (min(_ROW_BLOCK * 4, cost.shape[0]), cost.shape[1]), dtype=dt, device=cost.device
    )
    step = buf.shape[0]
    for r0 in range(0, cost.shape[0], step):
        r1 = min(r0 + step, cost.shape[0])
        blk = buf[: r1 - r0]
        torch.add(g_s, cost[r0:r1], alpha=-1.0 / eps, out=blk)
        out[r0:r1] = torch.logsumexp(blk, dim=1).double()
    return out


# --------------------------------------------------------------------------- solver


def _check_inputs(
    cost: torch.Tensor,
    a: torch.Tensor | None,
    b: torch.Tensor | None,
    epsilon_abs: float,
    tol: float,
    max_iter: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    if (
        not isinstance(cost, torch.Tensor)
        or cost.ndim != 2
        or cost.shape[0] == 0
        or cost.shape[1] == 0
    ):
        shape = tuple(cost.shape) if isinstance(cost, torch.Tensor) else type(cost).__name__
        raise GeovizError(f"sinkhorn: cost must be a non-empty 2-D tensor, got {shape}")
    if cost.dtype not in (torch.float32, torch.float64):
        raise GeovizError(f"sinkhorn: cost must be float32 or float64, got {cost.dtype}")
    if not (
        isinstance(epsilon_abs, (int, float)) and math.isfinite(epsilon_abs) and epsilon_abs > 0
    ):
        raise GeovizError(f"sinkhorn: epsilon_abs must be a finite number > 0, got {epsilon_abs!r}")
    if not (tol > 0):
        raise GeovizError(f"sinkhorn: tol must be > 0, got {tol!r}")
    if int(max_iter) < 1:
        raise GeovizError(f"sinkhorn: max_iter must be >= 1, got {max_iter!r}")
    n, m = cost.shape
    dev = cost.device
    out = []
    for name, w, size in (("a", a, n), ("b", b, m)):
        if w is None:
            out.append(uniform_weights(size, dev))
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
    step = max(1, (2**22) // max(1, m))  # chunked: a full isfinite() mask would cost n*m bytes
    if not all(bool(torch.isfinite(cost[r : r + step]).all()) for r in range(0, n, step)):
        raise GeovizError("sinkhorn: cost contains NaN or infinite values")
    return out[0], out[1]


def sinkhorn(
    cost: torch.Tensor,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    epsilon_abs: float,
    tol: float = 1e-4,
    max_iter: int = 5000,
    check_every: int = 1,
    eps_scaling: float | None = 0.25,
    eps_start: float | None = None,
    stage_iter: int = 30,
    overrelax: bool = True,
    omega_max: float = 1.9,
    absorb_threshold: float = 30.0,
    init: tuple[torch.Tensor, torch.Tensor] | None = None,
    symmetric: bool = False,
    keep_plan: bool = False,
    callback: Callable[[int, float], None] | None = None,
    groups: tuple[torch.Tensor, torch.Tensor] | None = None,
    coarse_every: int = 10,
) -> SinkhornResult:
    """Solve entropic OT between ``a`` and ``b`` for ``cost`` (see module docstring).

    Parameters
    ----------
    cost
        ``(n, m)`` float32 or float64 tensor (any device); not modified.
    a, b
        ``(n,)``, ``(m,)`` positive weights of equal mass (default uniform).
    epsilon_abs
        Absolute entropic regularisation ``eps > 0`` (same units as ``cost``).
    tol
        Stop when ``||pi 1 - a||_1 + ||pi^T 1 - b||_1 <= tol``.
    max_iter
        Iteration budget (all stages together); exceeding it warns with
        :class:`~geoviz.errors.ConvergenceWarning` and sets ``converged=False``.
    check_every
        Evaluate the stopping rule every ``check_every`` iterations (the error
        itself costs O(n + m) per iteration, so 1 is the sensible default).
    eps_scaling
        Ratio in ``(0, 1)`` between successive regularisations of the annealing
        schedule, or ``None`` for none.
    eps_start
        First regularisation of the schedule (default: the mean of ``cost``).
    stage_iter
        Iterations spent at each intermediate regularisation.
    overrelax
        Use adaptive over-relaxation (see module docstring).
    omega_max
        Upper bound of the over-relaxation factor (``< 2``).
    absorb_threshold
        Absorb scalings into the potentials when ``|log u|`` or ``|log v|``
        exceeds this value.
    init
        Warm start ``(f, g)`` in the convention of :class:`SinkhornResult`
        (``g`` seeds the first row update, which recomputes ``f``; disables
        epsilon scaling).
    symmetric
        Solve a symmetric problem (``C = C^T``, ``a = b``) with averaged updates.
    keep_plan
        Build the plan in place of the kernel buffer at the end (no extra
        memory); :meth:`SinkhornResult.plan` then returns it.
    callback
        ``callback(iteration, marginal_error)`` after each check.
    groups
        Optional ``(row_groups (n,), col_groups (m,))`` integer group ids (for
        OTDD: the class labels). When the group-aggregated marginal error makes
        up more than 80% of the error, the potentials are shifted by one
        constant per group so that the aggregated marginals are matched
        exactly (damped Newton on the small ``(G_rows, G_cols)`` aggregated
        dual: an exact block-coordinate ascent step of the dual problem). This
        removes the very slow inter-class mode of Sinkhorn on label-structured
        costs with unequal class proportions (e.g. 10/10/10/10 vs 8/8/7/7 points
        per class: > 5000 plain iterations vs ~100 to reach 1e-10).
    coarse_every
        Minimum number of iterations between two group corrections.

    Returns
    -------
    SinkhornResult
    """
    a, b = _check_inputs(cost, a, b, epsilon_abs, tol, max_iter)
    eps = float(epsilon_abs)
    check_every = max(1, int(check_every))
    if eps_scaling is not None and not (0.0 < eps_scaling < 1.0):
        raise GeovizError(f"sinkhorn: eps_scaling must be in (0, 1) or None, got {eps_scaling!r}")
    if not (1.0 <= omega_max < 2.0):
        raise GeovizError(f"sinkhorn: omega_max must be in [1, 2), got {omega_max!r}")
    log_a, log_b = a.log(), b.log()
    if init is not None:
        f0 = torch.as_tensor(init[0]).to(device=cost.device, dtype=torch.float64) + eps * log_a
        g0 = torch.as_tensor(init[1]).to(device=cost.device, dtype=torch.float64) + eps * log_b
    else:
        f0 = torch.zeros_like(log_a)
        g0 = torch.zeros_like(log_b)

    if symmetric:
        if cost.shape[0] != cost.shape[1] or not torch.allclose(a, b):
            raise GeovizError("sinkhorn: symmetric=True needs a square cost and a == b")
        gen = torch.Generator().manual_seed(0)
        ii = torch.randint(0, cost.shape[0], (min(4096, cost.numel()),), generator=gen).to(
            cost.device
        )
        jj = torch.randint(0, cost.shape[0], (ii.numel(),), generator=gen).to(cost.device)
        scale = float(cost[ii, jj].abs().max()) + 1e-30
        if float((cost[ii, jj] - cost[jj, ii]).abs().max()) > 1e-4 * scale:
            raise GeovizError("sinkhorn: symmetric=True needs a symmetric cost (C = C^T)")
        return _solve_symmetric(cost, a, eps, tol, int(max_iter), f0, callback)

    check_memory(cost.numel() * cost.element_size(), cost.device, "the Sinkhorn kernel buffer")
    kernel = torch.empty_like(cost)

    schedule = [eps]
    if eps_scaling is not None and init is None:
        start = float(cost.mean()) if eps_start is None else float(eps_start)
        e = eps
        while e / eps_scaling < start:
            e = e / eps_scaling
            schedule.append(e)
        schedule = schedule[::-1]
        if int(max_iter) < 2 * len(schedule):
            schedule = [eps]  # too small a budget to anneal: every stage but the last would eat it

    state = _DenseState(cost, kernel, a, b, log_a, log_b, absorb_threshold)
    state.G = g0 - g0.mean()
    if groups is not None:
        state.set_groups(groups[0], groups[1], int(coarse_every))
    n_iter = 0
    err = math.inf
    for stage, e in enumerate(schedule):
        final = stage == len(schedule) - 1
        # intermediate stages always leave at least one iteration for the target epsilon
        budget = int(max_iter) - n_iter if final else min(stage_iter, int(max_iter) - n_iter - 1)
        if budget <= 0:
            continue
        err, used = state.run(
            e,
            tol if final else max(tol, _STAGE_TOL),
            budget,
            check_every,
            overrelax and final,
            omega_max,
            callback,
            n_iter,
        )
        n_iter += used
    f, g = state.potentials()
    converged = err <= tol
    if not converged:
        warnings.warn(
            f"Sinkhorn stopped after {n_iter} iterations (max_iter={max_iter}) with marginal error "
            f"{err:.3g} > tol={tol:g}; increase max_iter or epsilon",
            ConvergenceWarning,
            stacklevel=2,
        )
    plan = state.plan_inplace() if keep_plan else None
    if plan is None:
        del kernel
        state.kernel = None
    return SinkhornResult(
        f=f - eps * log_a,
        g=g - eps * log_b,
        a=a,
        b=b,
        epsilon_abs=eps,
        n_iter=n_iter,
        marginal_error=float(err),
        converged=bool(converged),
        cost=cost,
        _plan=plan,
    )


class _DenseState:
    """Potentials + scalings + stabilised kernel of the dense solver."""

    def __init__(self, cost, kernel, a, b, log_a, log_b, absorb_threshold):
        self.cost, self.kernel = cost, kernel
        self.a, self.b, self.log_a, self.log_b = a, b, log_a, log_b
        self.tau = float(absorb_threshold)
        self.F = torch.zeros_like(log_a)
        self.G = torch.zeros_like(log_b)
        self.lu = torch.zeros_like(log_a)  # log u
        self.lv = torch.zeros_like(log_b)  # log v
        self.eps = 1.0
        self.ktu: torch.Tensor | None = None  # K^T u at the current (u, v)
        self.groups: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.coarse_every = 0

    def set_groups(self, rows: torch.Tensor, cols: torch.Tensor, every: int) -> None:
        dev = self.kernel.device
        rows = torch.as_tensor(rows).to(dev).long().reshape(-1)
        cols = torch.as_tensor(cols).to(dev).long().reshape(-1)
        if rows.numel() != self.kernel.shape[0] or cols.numel() != self.kernel.shape[1]:
            raise GeovizError(
                "sinkhorn: groups must have one id per row and one per column of the cost"
            )
        _, rows = torch.unique(rows, return_inverse=True)
        _, cols = torch.unique(cols, return_inverse=True)
        gq = torch.nn.functional.one_hot(rows).double()
        gp = torch.nn.functional.one_hot(cols).double()
        if gq.shape[1] < 2 and gp.shape[1] < 2:
            return
        self.groups = (rows, cols, gq, gp)
        self.coarse_every = max(1, int(every))

    def coarse_correct(self) -> None:
        """Match the group-aggregated marginals exactly (per-group potential shifts)."""
        assert self.groups is not None
        rows, cols, gq, gp = self.groups
        dt = self.kernel.dtype
        u, v = self.lu.exp(), self.lv.exp()
        kv = (self.kernel @ (v[:, None] * gp).to(dt)).double()  # (n, Gp)
        agg = gq.T @ (u[:, None] * kv)  # (Gq, Gp) aggregated plan
        shift_r, shift_c = _coarse_newton(agg.cpu(), (gq.T @ self.a).cpu(), (gp.T @ self.b).cpu())
        self.lu = self.lu + shift_r.to(self.lu.device)[rows]
        self.lv = self.lv + shift_c.to(self.lv.device)[cols]
        self.ktu = self._mv_t(self.lu.exp())

    # -- helpers
    def _absorb(self) -> None:
        self.F = self.F + self.eps * self.lu
        self.G = self.G + self.eps * self.lv
        self.lu.zero_()
        self.lv.zero_()

    def rebuild_rows(self) -> None:
        """Absorb, then exact log-domain row update + new kernel."""
        self._absorb()
        shift = self.G.mean()
        self.G = self.G - shift
        self.F = _row_rebuild(self.cost, self.G, self.eps, self.log_a, self.kernel)
        self.ktu = self._mv_t(torch.ones_like(self.log_a))

    def rebuild_cols(self) -> None:
        self._absorb()
        shift = self.F.mean()
        self.F = self.F - shift
        self.G = _col_rebuild(self.cost, self.F, self.eps, self.log_b, self.kernel)
        self.ktu = self._mv_t(torch.ones_like(self.log_a))

    def _mv(self, v: torch.Tensor) -> torch.Tensor:
        return (self.kernel @ v.to(self.kernel.dtype)).double()

    def _mv_t(self, u: torch.Tensor) -> torch.Tensor:
        return (u.to(self.kernel.dtype) @ self.kernel).double()

    def potentials(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.F + self.eps * self.lu, self.G + self.eps * self.lv

    def plan_inplace(self) -> torch.Tensor:
        dt = self.kernel.dtype
        self.kernel.mul_(self.lu.exp().to(dt)[:, None]).mul_(self.lv.exp().to(dt)[None, :])
        return self.kernel

    # -- main loop at one regularisation
    def run(self, eps, tol, budget, check_every, overrelax, omega_max, callback, it0):
        """Iterate at ``eps`` until the marginal error is ``<= tol`` or ``budget`` is spent.

        Returns ``(error of the current iterate, iterations used)``.
        """
        self._absorb()  # with the previous regularisation
        self.eps = eps
        self.rebuild_rows()
        used = 1
        omega = 1.0
        history: list[float] = []
        best = math.inf
        since_best = 0
        relaxed_at: int | None = None
        last_coarse = 0
        err = math.inf
        a, b, log_a, log_b = self.a, self.b, self.log_a, self.log_b
        while True:
            kv = self._mv(self.lv.exp())
            u = self.lu.exp()
            v = self.lv.exp()
            err = float((u * kv - a).abs().sum() + (v * self.ktu - b).abs().sum())
            if not math.isfinite(err) and used < budget:
                self.rebuild_rows()
                used += 1
                continue
            if (used % check_every == 0 or used >= budget) and callback is not None:
                callback(it0 + used, err)
            if err <= tol and (used % check_every == 0 or used >= budget):
                break
            if used >= budget:
                break
            if self.groups is not None and used - last_coarse >= self.coarse_every:
                # correct the group-aggregated marginals when they carry most of the error
                _, _, gq, gp = self.groups
                agg_err = float(
                    (gq.T @ (u * kv - a)).abs().sum() + (gp.T @ (v * self.ktu - b)).abs().sum()
                )
                if agg_err > _COARSE_RATIO * err:
                    self.coarse_correct()
                    last_coarse = used
                    used += 1
                    continue
            # adaptive over-relaxation
            history.append(err)
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
                and len(history) - relaxed_at > _GRACE
                and (err > 5.0 * best or since_best > 100)
            ):
                omega = 1.0 + 0.5 * (omega - 1.0)
                if omega < 1.05:
                    omega = 1.0
                best, since_best = err, 0
                relaxed_at = len(history)
            # row update
            if not bool((kv > 0).all()) or not bool(torch.isfinite(kv).all()):
                self.rebuild_rows()
                used += 1
                continue
            target = log_a - kv.log()
            self.lu = target if omega == 1.0 else (1.0 - omega) * self.lu + omega * target
            ktu = self._mv_t(self.lu.exp())
            if not bool((ktu > 0).all()) or not bool(torch.isfinite(ktu).all()):
                self.rebuild_cols()
                used += 1
                continue
            target = log_b - ktu.log()
            self.lv = target if omega == 1.0 else (1.0 - omega) * self.lv + omega * target
            self.ktu = ktu
            used += 1
            if float(self.lu.abs().max()) > self.tau or float(self.lv.abs().max()) > self.tau:
                self.rebuild_rows()
        return err, used


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


def _solve_symmetric(cost, a, eps, tol, max_iter, f0, callback) -> SinkhornResult:
    """Averaged log-domain iterations for a symmetric problem (potential ``f = g``)."""
    log_a = a.log()
    f = f0.clone()  # internal convention: pi = exp((F_i + F_j - C_ij)/eps)
    err = math.inf
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        t = eps * log_a - eps * _row_lse(cost, f, eps)
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
            f"symmetric Sinkhorn stopped after {n_iter} iterations with marginal error {err:.3g} > tol={tol:g}",
            ConvergenceWarning,
            stacklevel=3,
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
        cost=cost,
    )


# --------------------------------------------------------------------------- online (streamed)


def sinkhorn_online(
    block_cost: Callable[[int, int], torch.Tensor],
    n: int,
    m: int,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    epsilon_abs: float,
    tol: float = 1e-4,
    max_iter: int = 5000,
    block: int = 2048,
    values: torch.Tensor | None = None,
    callback: Callable[[int, float], None] | None = None,
    device: torch.device | str | None = None,
    eps_scaling: float | None = 0.25,
    eps_start: float | None = None,
    stage_iter: int = 30,
) -> tuple[SinkhornResult, dict]:
    """Log-domain Sinkhorn that never materialises the ``(n, m)`` cost.

    ``block_cost(j0, j1)`` must return the ``(n, j1 - j0)`` cost columns
    ``j0:j1``; it is called ``ceil(m / block)`` times per iteration (one column
    update and the streaming log-sum-exp of the row update share a pass), plus
    one final pass. Memory is ``O(n * block)``; time is one full cost evaluation
    per iteration. The marginal error is exact and free: after the column
    update the column marginals are exact and the row marginals are
    ``a * exp((f_old - f_new)/eps)``; the returned potentials are those of the
    state whose error was measured.

    Parameters
    ----------
    block_cost
        Callable producing cost column blocks (float32/float64, on one device).
    n, m
        Problem size.
    a, b
        Weights (default uniform).
    epsilon_abs, tol, max_iter
        As in :func:`sinkhorn`.
    block
        Columns per block.
    values
        Optional ``(m, k)`` values to average with the row-normalised plan in
        the final pass (barycentric projection); returned as ``extra["barycentric"]``
        ``(n, k)`` float64.
    callback
        ``callback(iteration, marginal_error)``.
    device
        Device of the potentials (default: that of the first cost block).
    eps_scaling, eps_start, stage_iter
        Epsilon annealing as in :func:`sinkhorn` (``eps_start`` defaults to the
        mean of the first cost block).

    Returns
    -------
    (SinkhornResult, dict)
        The result (``cost=None``) and ``{"transport_cost": <pi, C>, "barycentric": ...}``.
    """
    if not (
        isinstance(epsilon_abs, (int, float)) and math.isfinite(epsilon_abs) and epsilon_abs > 0
    ):
        raise GeovizError(
            f"sinkhorn_online: epsilon_abs must be a finite number > 0, got {epsilon_abs!r}"
        )
    if not (tol > 0) or int(max_iter) < 1 or n < 1 or m < 1 or block < 1:
        raise GeovizError("sinkhorn_online: need tol > 0, max_iter >= 1, n, m >= 1 and block >= 1")
    eps = float(epsilon_abs)
    first = block_cost(0, min(block, m))
    dev = first.device if device is None else torch.device(device)
    a = (
        uniform_weights(n, dev)
        if a is None
        else torch.as_tensor(a, dtype=torch.float64, device=dev)
    )
    b = (
        uniform_weights(m, dev)
        if b is None
        else torch.as_tensor(b, dtype=torch.float64, device=dev)
    )
    log_a, log_b = a.log(), b.log()
    blocks = [(j0, min(m, j0 + block)) for j0 in range(0, m, block)]
    f = torch.zeros(n, dtype=torch.float64, device=dev)
    g = torch.zeros(m, dtype=torch.float64, device=dev)

    def cost_of(k: int) -> torch.Tensor:
        return first if k == 0 and cached_first[0] else block_cost(*blocks[k])

    cached_first = [len(blocks) == 1]
    schedule = [eps]
    if eps_scaling is not None:
        if not (0.0 < eps_scaling < 1.0):
            raise GeovizError(
                f"sinkhorn_online: eps_scaling must be in (0, 1) or None, got {eps_scaling!r}"
            )
        start = float(first.mean()) if eps_start is None else float(eps_start)
        e = eps
        while e / eps_scaling < start:
            e = e / eps_scaling
            schedule.append(e)
        schedule = schedule[::-1]
        if int(max_iter) < 2 * len(schedule):
            schedule = [eps]
    err = math.inf
    it = 0
    for stage, e_cur in enumerate(schedule):
        final = stage == len(schedule) - 1
        stage_tol = tol if final else max(tol, _STAGE_TOL)
        budget = int(max_iter) - it if final else min(int(stage_iter), int(max_iter) - it - 1)
        for _ in range(max(budget, 0)):
            it += 1
            f_s = (f / e_cur)[:, None]
            run_max = torch.full((n,), -math.inf, dtype=torch.float64, device=dev)
            run_sum = torch.zeros(n, dtype=torch.float64, device=dev)
            for k, (j0, j1) in enumerate(blocks):
                cb = cost_of(k)
                z = f_s.to(cb.dtype) - cb / e_cur  # (n, bs)
                g[j0:j1] = e_cur * (log_b[j0:j1] - torch.logsumexp(z, dim=0).double())
                s = (g[j0:j1] / e_cur).to(cb.dtype)[None, :] - cb / e_cur
                bm = s.amax(dim=1).double()
                new_max = torch.maximum(run_max, bm)
                run_sum = (
                    run_sum * torch.exp(run_max - new_max)
                    + torch.exp(s - new_max[:, None].to(s.dtype)).sum(1).double()
                )
                run_max = new_max
            f_new = e_cur * (log_a - run_max - run_sum.log())
            err = float((a * torch.expm1((f - f_new) / e_cur)).abs().sum())
            if callback is not None and final:
                callback(it, err)
            if err <= stage_tol or (final and it >= int(max_iter)):
                break  # keep (f, g): the state whose error was measured
            f = f_new
        if not final and budget > 0:
            f = f_new  # rows exact for the next stage's start
    converged = err <= tol
    if not converged:
        warnings.warn(
            f"streamed Sinkhorn stopped after {it} iterations (max_iter={max_iter}) with marginal error "
            f"{err:.3g} > tol={tol:g}; increase max_iter or epsilon",
            ConvergenceWarning,
            stacklevel=2,
        )
    # final pass: <pi, C> and optional barycentric averages at the measured state (f, g)
    transport = 0.0
    if values is not None:
        values = values.to(dev)
        run_max = torch.full((n,), -math.inf, dtype=torch.float64, device=dev)
        acc = torch.zeros((n, values.shape[1]), dtype=torch.float64, device=dev)
        run_sum = torch.zeros(n, dtype=torch.float64, device=dev)
    for k, (j0, j1) in enumerate(blocks):
        cb = cost_of(k)
        s = (g[j0:j1] / eps).to(cb.dtype)[None, :] - cb / eps
        logp = s + (f / eps).to(cb.dtype)[:, None]
        transport += float((logp.exp_() * cb).sum(1).double().sum())
        if values is not None:
            bm = s.amax(dim=1).double()
            new_max = torch.maximum(run_max, bm)
            scale = torch.exp(run_max - new_max)
            w = torch.exp(s - new_max[:, None].to(s.dtype)) * b[j0:j1].to(s.dtype)[None, :]
            acc = acc * scale[:, None] + (w @ values[j0:j1].to(w.dtype)).double()
            run_sum = run_sum * scale + w.sum(1).double()
            run_max = new_max
    extra: dict = {"transport_cost": transport}
    if values is not None:
        extra["barycentric"] = acc / run_sum[:, None]
    result = SinkhornResult(
        f=f - eps * log_a,
        g=g - eps * log_b,
        a=a,
        b=b,
        epsilon_abs=eps,
        n_iter=it,
        marginal_error=float(err),
        converged=bool(converged),
        cost=None,
    )
    return result, extra
