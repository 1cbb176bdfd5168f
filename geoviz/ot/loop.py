"""The one Sinkhorn loop: log-domain updates with over-relaxation, class-level correction
and Newton steps.

:class:`Loop` runs the iteration of :mod:`geoviz.ot.sinkhorn` ("One loop") on potentials
``(F, G)`` with whichever kernel (:mod:`geoviz.ot.kernels`) it is given; the solver
decides the kernel and the schedule of regularisations.

Newton steps (Sinkhorn-Newton, Brauer, Clason, Lorenz & Wirth 2017): on a problem whose
plan is nearly block-diagonal (well-separated clusters: a learned feature space at the
default relative epsilon 1e-3, paper Sec. 2.2 eq. (otdd)) Sinkhorn's linear rate is close
to 1 and the final stage can use thousands of iterations. Once the marginal error is below
:data:`_NEWTON_BELOW`, the loop also tries a Newton step on the same concave dual
``<a, F> + <b, G> - eps sum_ij exp((F_i + G_j - C_ij)/eps)``: the linear system
``[[diag(pi 1), pi], [pi^T, diag(pi^T 1)]] (x, y) = (a - pi 1, b - pi^T 1)`` is solved by
Jacobi-preconditioned conjugate gradients with products by the current kernel's plan
(dense or truncated sparse kernel; never the streamed one), and ``(F, G) += t eps (x, y)``
with the largest ``t`` in ``1, 1/2, ..., 1/128`` that raises the dual by Armijo's rule (a CG
iterate from 0 is an ascent direction); when none does, Sinkhorn goes on alone and the next
try waits twice as long. The measured L1 marginal error is then that of the new potentials. The fixed point, the units (``eps`` absolute) and the
stopping rule (the measured L1 marginal error of the returned plan) are those of plain
Sinkhorn: only the path to them is shorter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from geoviz.errors import GeovizError
from geoviz.ot.kernels import AbsorbedKernel, Kernel

__all__ = ["Groups", "Loop", "SinkhornCallback", "make_groups"]

#: ``callback(iteration, marginal_error)``, called at every check of the final stage
SinkhornCallback = Callable[[int, float], None]

_RELAX_BELOW = 0.05
_GRACE = 30
_COARSE_RATIO = 0.8
#: Newton steps are tried once the L1 marginal error is below this (unitless: the plan's
#: total mass is 1), where the quadratic model of the dual is accurate
_NEWTON_BELOW = 1e-2
#: iterations between two Newton tries (doubled after a try that did not lower the error)
_NEWTON_EVERY = 20
#: conjugate-gradient iterations per Newton step, and their relative residual
_CG_MAX = 300
_CG_TOL = 1e-4
#: backtracking halvings of a Newton step before it is given up
_NEWTON_HALVINGS = 8


# --------------------------------------------------------------------------- the loop


@dataclass
class Groups:
    rows: torch.Tensor  # (n,) dense group ids
    cols: torch.Tensor  # (m,)
    onehot_rows: torch.Tensor  # (n, G_rows) float64
    onehot_cols: torch.Tensor  # (m, G_cols) float64
    every: int


def make_groups(
    groups: tuple[torch.Tensor, torch.Tensor] | None,
    n: int,
    m: int,
    dev: torch.device,
    every: int,
) -> Groups | None:
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
    return Groups(rows, cols, gq, gp, max(1, int(every)))


class Loop:
    """State of the one Sinkhorn loop: potentials ``(F, G)`` and the current kernel."""

    def __init__(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        F: torch.Tensor,
        G: torch.Tensor,
        groups: Groups | None,
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

    def error(self, kernel: Kernel) -> tuple[float, torch.Tensor]:
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
        kernel: Kernel,
        tol: float,
        budget: int,
        overrelax: bool,
        omega_max: float,
        report: bool,
        stall: int | None = None,
        newton: bool = False,
    ) -> float:
        """Iterate with ``kernel`` until the error is ``<= tol`` or ``budget`` iterations are used.

        With ``stall``, also stop when the error has not halved in the last ``stall`` iterations.
        With ``newton``, also try Newton steps (module docstring) once the error is below
        :data:`_NEWTON_BELOW`; each kept step counts as one iteration.
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
        newton_every, last_newton = _NEWTON_EVERY, 0
        newton = newton and isinstance(kernel, AbsorbedKernel)
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
            if newton and err < _NEWTON_BELOW and used - last_newton >= newton_every:
                assert isinstance(kernel, AbsorbedKernel)
                last_newton = used
                stepped = self.newton_step(kernel, err)
                if stepped is not None:
                    used += 1
                    continue
                newton_every *= 2  # the quadratic model was not good enough here: less often
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

    def newton_step(self, kernel: AbsorbedKernel, err: float) -> float | None:
        """One damped Newton step on the dual at ``(F, G)`` (module docstring).

        Returns the new measured L1 marginal error, with ``(F, G)`` moved, or ``None`` (and
        ``(F, G)`` unchanged) when no step of length ``1, 1/2, ..., 1/128`` raises the dual
        by Armijo's rule (``err`` is the error at the current potentials, for the caller).
        """
        eps = kernel.eps
        F, G = self.F, self.G
        kernel.row_lse(G)  # (re)builds the kernel around the current potentials if needed
        kernel.col_lse(F)
        if kernel.F0 is None or kernel.G0 is None:
            return None
        du, dv = (F - kernel.F0) / eps, (G - kernel.G0) / eps
        if float(du.abs().max()) > kernel.tau or float(dv.abs().max()) > kernel.tau:
            return None
        u, v = du.exp(), dv.exp()

        def plan_mv(y: torch.Tensor) -> torch.Tensor:  # pi y
            return u * kernel._mv(v * y)

        def plan_tmv(x: torch.Tensor) -> torch.Tensor:  # pi^T x
            return v * kernel._mv_t(u * x)

        ones_m = torch.ones_like(G)
        ones_n = torch.ones_like(F)
        pr, pc = plan_mv(ones_m), plan_tmv(ones_n)
        if not (bool(torch.isfinite(pr).all()) and bool(torch.isfinite(pc).all())):
            return None
        x, y = _newton_cg(plan_mv, plan_tmv, pr, pc, self.a - pr, self.b - pc)
        # Armijo backtracking on the concave dual (a CG iterate from 0 is an ascent direction)
        slope = eps * float((self.a - pr) @ x + (self.b - pc) @ y)
        if not (slope > 0.0) or not math.isfinite(slope):
            return None
        value = float(self.a @ F + self.b @ G) - eps * float(pr.sum())
        step = 1.0
        for _ in range(_NEWTON_HALVINGS):
            F_new, G_new = F + (step * eps) * x, G + (step * eps) * y
            Lr = kernel.row_lse(G_new)
            rows = torch.exp(F_new / eps + Lr)
            new_value = float(self.a @ F_new + self.b @ G_new) - eps * float(rows.sum())
            if math.isfinite(new_value) and new_value >= value + 1e-4 * step * slope:
                Lc = kernel.col_lse(F_new)
                self.F, self.G, self.Lc = F_new, G_new, Lc
                return float(
                    (rows - self.a).abs().sum() + (torch.exp(G_new / eps + Lc) - self.b).abs().sum()
                )
            step *= 0.5
        self.Lc = None  # measured at other potentials: recomputed by the next error()
        return None


def _newton_cg(
    plan_mv: Callable[[torch.Tensor], torch.Tensor],
    plan_tmv: Callable[[torch.Tensor], torch.Tensor],
    pr: torch.Tensor,
    pc: torch.Tensor,
    rhs_r: torch.Tensor,
    rhs_c: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Solve ``[[diag(pr), pi], [pi^T, diag(pc)]] (x, y) = (rhs_r, rhs_c)`` by Jacobi-
    preconditioned conjugate gradients (the matrix is the dual's Hessian times ``eps``: positive
    semi-definite, its null direction ``(1, -1)`` is orthogonal to the right-hand side, whose
    two parts have the same sum). The null direction is lifted by the rank-one term
    ``lift (1, -1) (1, -1)^T``, which leaves the solution orthogonal to it unchanged and
    keeps rounding from growing along it (plain CG diverges there)."""
    n = pr.numel()
    d = torch.cat([pr, pc]).clamp_min(1e-300)
    rhs = torch.cat([rhs_r, rhs_c])
    null = torch.cat([torch.ones_like(pr), -torch.ones_like(pc)])
    lift = float(d.mean())

    def hess(z: torch.Tensor) -> torch.Tensor:
        zx, zy = z[:n], z[n:]
        out = torch.cat([pr * zx + plan_mv(zy), plan_tmv(zx) + pc * zy])
        return out + (lift * float(null @ z)) * null

    z = torch.zeros_like(rhs)
    r = rhs.clone()
    s = r / d
    p = s.clone()
    rs = float(r @ s)
    stop = (_CG_TOL**2) * rs
    for _ in range(_CG_MAX):
        if rs <= stop or rs <= 0.0:
            break
        hp = hess(p)
        php = float(p @ hp)
        if not (php > 0.0) or not math.isfinite(php):
            break
        alpha = rs / php
        z = z + alpha * p
        r = r - alpha * hp
        s = r / d
        rs_new = float(r @ s)
        p = s + (rs_new / rs) * p
        rs = rs_new
    return z[:n], z[n:]


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
