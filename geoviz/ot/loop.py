"""The one Sinkhorn loop: log-domain updates with over-relaxation and class-level correction.

:class:`Loop` runs the iteration of :mod:`geoviz.ot.sinkhorn` ("One loop") on potentials
``(F, G)`` with whichever kernel (:mod:`geoviz.ot.kernels`) it is given; the solver
decides the kernel and the schedule of regularisations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from geoviz.errors import GeovizError
from geoviz.ot.kernels import Kernel

__all__ = ["Groups", "Loop", "SinkhornCallback", "make_groups"]

#: ``callback(iteration, marginal_error)``, called at every check of the final stage
SinkhornCallback = Callable[[int, float], None]

_RELAX_BELOW = 0.05
_GRACE = 30
_COARSE_RATIO = 0.8


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
