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
increase), an optional class-level coarse correction (``groups``), and, in the
final stage once the error is below 1e-2, Sinkhorn-Newton steps on the same dual
(:mod:`geoviz.ot.loop`; kept only when they raise the dual). What
changes between modes is only how the two log-sum-exps are evaluated (a
"kernel"):

(:mod:`geoviz.ot.kernels`: ``dense``, ``sparse`` by kernel truncation, ``online``).

``mode="auto"`` uses the dense kernel while the regularisation is large (the
plan is dense), and the sparse kernel once a support selection keeps at most
``max_density`` of the entries; without a stored matrix it uses the sparse
kernel when it fits, else ``online``.

Symmetric problems (``symmetric=True``) use the averaged update
``f <- (f + T(f)) / 2`` of Feydy et al. (2019) over row blocks.

Problem -> solver -> output
---------------------------
As in OTT-JAX and GeomLoss, the pieces are separate values, each in its own module
(:mod:`geoviz.ot.problem`, this module, :mod:`geoviz.ot.result`; the kernels in
:mod:`geoviz.ot.kernels`, their truncated supports in :mod:`geoviz.ot.support`, the loop
they are injected into in :mod:`geoviz.ot.loop`, the kernel policy and epsilon schedule in
:mod:`geoviz.ot.strategies`; every name is also importable from here):

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
from dataclasses import dataclass

import torch

from geoviz.errors import ConvergenceWarning, GeovizError
from geoviz.ot.geometry import CostGeometry, as_geometry
from geoviz.ot.kernels import (
    DenseKernel,
    DensePool,
    Kernel,
    OnlineKernel,
    SparseKernel,
    check_sparse_memory,
)
from geoviz.ot.loop import Loop, SinkhornCallback, make_groups
from geoviz.ot.problem import TransportProblem, uniform_measure
from geoviz.ot.result import SinkhornResult
from geoviz.ot.strategies import EpsilonScaling, KernelPolicy, SinkhornMode, SupportSource
from geoviz.ot.support import Candidates, Support, select_support

__all__ = [
    "MultiscaleStart",
    "Sinkhorn",
    "sinkhorn",
]

#: tolerance of the intermediate (warm-start) stages
_STAGE_TOL = 1e-2
#: auto mode tries the sparse kernel once eps is below this fraction of the mean cost
_SPARSE_BELOW = 0.03
#: at most this many verification passes (each may re-select the support)
_MAX_VERIFY = 6
#: truncation of the intermediate (warm-start) stages of the sparse kernel
_STAGE_TRUNCATION = 10.0
#: the final sparse stage iterates to this fraction of tol, so that the dense plan
#: (whose error adds the truncated mass) meets tol at the first verification
_SPARSE_TOL_FRACTION = 0.5
#: after each failed verification, the rows whose mass spreads beyond the cap per row get
#: this many times more entries (the rest keep the cap)
_WIDE_GROWTH = 4
#: the final sparse stage re-selects its support once the error is below this
_RESELECT_TOL = 1e-3
#: iterations without the error halving after which the support is re-selected
_STALL = 50
#: stages solved on the full problem after a multiscale start
_FULL_STAGES = 2


# --------------------------------------------------------------------------- strategies


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
        extend = OnlineKernel(geom.subset(rows, None), a_sub.log(), b.log(), absorb_threshold)
        extend.set_eps(eps)
        return eps * (b.log() - extend.col_lse(F_sub))


# --------------------------------------------------------------------------- solver

#: the default strategies: frozen values, so one instance is shared by every solver
_DEFAULT_KERNEL = KernelPolicy()
_DEFAULT_SCALING = EpsilonScaling()


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
    newton
        Final stage, dense and sparse kernels: once the L1 error is below 1e-2, also try
        Sinkhorn-Newton steps on the same dual (:mod:`geoviz.ot.loop`; kept by Armijo,
        one iteration each): same fixed point and stopping rule, far fewer iterations on
        nearly block-diagonal plans (colour default, ``benchmarks/README.md``).
    keep_plan
        Dense kernel: build the plan in place of the kernel buffer at the end
        (no extra memory); :meth:`SinkhornResult.plan` then returns it.
    """

    tol: float = 1e-4
    max_iter: int = 5000
    kernel: KernelPolicy = _DEFAULT_KERNEL
    scaling: EpsilonScaling | None = _DEFAULT_SCALING
    multiscale: MultiscaleStart | None = MultiscaleStart()
    overrelax: bool = True
    omega_max: float = 1.9
    check_every: int = 1
    coarse_every: int = 10
    keep_plan: bool = False
    newton: bool = True

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
        groups = make_groups(problem.groups, n, m, geom.device, self.coarse_every)
        loop = Loop(problem.a, problem.b, F, G, groups, callback, max(1, int(self.check_every)))
        source = SupportSource(geom, self.kernel)
        kernel, err = self._anneal(problem, loop, init is None, source)
        truncated_mass, sparse_plan = 0.0, None
        if isinstance(kernel, SparseKernel):
            kernel, err, truncated_mass = self._verify_sparse(problem, kernel, loop, err, source)
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
        if self.keep_plan and isinstance(kernel, DenseKernel):
            plan = kernel.plan_inplace(loop.F, loop.G)
        nnz, sparse_cost = n * m, math.nan
        if isinstance(kernel, SparseKernel) and sparse_plan is not None:
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
    def _anneal(
        self, problem: TransportProblem, loop: Loop, cold: bool, source: SupportSource
    ) -> tuple[Kernel, float]:
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
        pool = DensePool(geom, loop.log_a, loop.log_b, policy.absorb_threshold)
        if self.multiscale is not None and self.multiscale.applies(
            problem, policy.mode, len(schedule)
        ):
            # coarse-to-fine: the blurry stages on a random subsample, then one c-transform
            loop.G = self.multiscale.start(
                problem, schedule[:-_FULL_STAGES], stage_iter, policy.absorb_threshold
            )
            schedule = schedule[-_FULL_STAGES:]
        kernel: Kernel | None = None
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
                support = source.choose(loop.G, e, trunc, max_nnz)
                if support is not None:
                    check_sparse_memory(support.nnz, geom.device)
                    kernel = SparseKernel(
                        geom, loop.log_a, loop.log_b, policy.absorb_threshold, support
                    )
            if kernel is None:  # too dense to truncate (or asked for)
                kernel = (
                    pool.get()
                    if geom.matrix is not None and policy.mode != "online"
                    else OnlineKernel(geom, loop.log_a, loop.log_b, policy.absorb_threshold)
                )
            kernel.set_eps(e)
            if not final:
                err = loop.run(kernel, max(self.tol, _STAGE_TOL), budget, False, 1.0, False)
            elif isinstance(kernel, SparseKernel):
                # leave room for the dense plan's extra error, measured at verification
                kernel, err = self._final_sparse_stage(
                    kernel, loop, geom, e, self.tol * _SPARSE_TOL_FRACTION, budget, source
                )
            else:
                err = loop.run(
                    kernel,
                    self.tol,
                    budget,
                    self.overrelax,
                    self.omega_max,
                    True,
                    newton=self.newton,
                )
        assert kernel is not None
        return kernel, err

    def _verify_sparse(
        self,
        problem: TransportProblem,
        kernel: SparseKernel,
        loop: Loop,
        err: float,
        source: SupportSource,
    ) -> tuple[SparseKernel, float, float]:
        """Measure the dense plan of the returned potentials; re-select the support if needed.

        Returns the final kernel, the error (the larger of the dense and the
        truncated plan's) and the dense plan's mass outside the support.
        """
        geom, eps, policy = problem.geometry, problem.epsilon_abs, self.kernel
        n, m = geom.shape
        truncated_mass = 0.0
        for attempt in range(_MAX_VERIFY):
            new_support, stats = select_support(
                geom,
                loop.G,
                eps,
                policy.truncation,
                n * m + m,
                F=loop.F,
                log_a=loop.log_a,
                log_b=loop.log_b,
                measure=True,
                max_per_row=policy.max_per_row,
                candidates_k=source.candidates_k,
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
            if policy.max_per_row is not None and policy.max_per_row < m:
                wide = self._wide_rows(kernel, loop, stats["rows"], n)
                cap = min(m, policy.max_per_row * _WIDE_GROWTH ** (attempt + 1))
                support = support.union(self._rows_support(geom, loop, eps, wide, cap))
            del kernel, new_support  # the old kernel's buffers go before the new one's
            check_sparse_memory(support.nnz, geom.device)
            kernel = SparseKernel(geom, loop.log_a, loop.log_b, policy.absorb_threshold, support)
            kernel.set_eps(eps)
            if "candidate_cols" in stats:  # the potentials moved: the pass found new ones
                source.candidates = Candidates.from_stats(stats)
            kernel, err = self._final_sparse_stage(
                kernel, loop, geom, eps, self.tol * _SPARSE_TOL_FRACTION, left, source
            )
        return kernel, err, truncated_mass

    def _wide_rows(
        self, kernel: SparseKernel, loop: Loop, dense_rows: torch.Tensor, n: int
    ) -> torch.Tensor:
        """Rows whose dense plan holds more than ``tol / (4 n)`` outside the support: the
        rows whose mass spreads over more reference points than the cap keeps."""
        inside = torch.zeros(n, dtype=torch.float64, device=dense_rows.device).index_add_(
            0, kernel.rows, kernel.plan_values(loop.F, loop.G)
        )
        return ((dense_rows - inside) > self.tol / (4 * n)).nonzero().squeeze(1)

    def _rows_support(
        self, geom: CostGeometry, loop: Loop, eps: float, rows: torch.Tensor, cap: int
    ) -> Support:
        """The support of ``rows`` alone with ``cap`` entries each (one pass over those rows)."""
        n, m = geom.shape
        if rows.numel() == 0:
            return Support(rows, rows, torch.empty(0, dtype=geom.dtype, device=rows.device), (n, m))
        part, _ = select_support(
            geom.subset(rows, None),
            loop.G,
            eps,
            self.kernel.truncation,
            rows.numel() * m + m,
            F=loop.F[rows],
            log_a=loop.log_a[rows],
            log_b=loop.log_b,
            max_per_row=cap,
            cover_columns=False,
        )
        assert part is not None
        return Support(rows[part.rows], part.cols, part.cost, (n, m))

    def _final_sparse_stage(
        self,
        kernel: SparseKernel,
        loop: Loop,
        geom: CostGeometry,
        eps: float,
        stage_tol: float,
        budget: int,
        source: SupportSource,
    ) -> tuple[SparseKernel, float]:
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
                kernel,
                phase_tol,
                budget,
                self.overrelax,
                self.omega_max,
                True,
                stall=window,
                newton=self.newton,
            )
            budget -= loop.n_iter - used0
            if budget <= 0 or err <= stage_tol:
                break
            grown = self._resupport(kernel, loop, eps, source)
            if err <= phase_tol:
                phase_tol = stage_tol  # the planned re-selection
            elif grown.support.nnz == kernel.support.nnz:
                if source.capped:
                    # the cap per row may be what stalls: the verification pass measures
                    # which rows spread wider and widens them (_verify_sparse)
                    return kernel, err
                window *= 2  # complete support, slow convergence: check less often
            kernel = grown
        return kernel, err

    def _resupport(
        self, kernel: SparseKernel, loop: Loop, eps: float, source: SupportSource
    ) -> SparseKernel:
        """A sparse kernel on the old support plus the entries significant for ``(F, G)``."""
        n, m = kernel.support.shape
        support = source.choose(
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
        check_sparse_memory(merged.nnz, merged.rows.device)
        out = SparseKernel(
            source.geom, loop.log_a, loop.log_b, self.kernel.absorb_threshold, merged
        )
        out.set_eps(eps)
        return out

    def _solve_symmetric(
        self, problem: TransportProblem, f0: torch.Tensor, callback: SinkhornCallback | None
    ) -> SinkhornResult:
        """Averaged log-domain iterations for a symmetric problem (potential ``f = g``)."""
        geom, a, eps, tol = problem.geometry, problem.a, problem.epsilon_abs, self.tol
        log_a = a.log()
        kernel = OnlineKernel(geom, log_a, log_a, 30.0)
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

    Examples
    --------
    Three points and the same points in another order: at a small epsilon the plan is the
    permutation (each point keeps its mass ``1/3``) and moves nothing:

    >>> import torch
    >>> from geoviz.ot import sinkhorn
    >>> x = torch.tensor([[0.0], [1.0], [2.0]])
    >>> y = torch.tensor([[2.0], [0.0], [1.0]])
    >>> res = sinkhorn(torch.cdist(x, y) ** 2, epsilon_abs=0.05)
    >>> res.converged, res.marginal_error <= 1e-4
    (True, True)
    >>> (3 * res.plan()).round(decimals=3)
    tensor([[0., 1., 0.],
            [0., 0., 1.],
            [1., 0., 0.]])
    >>> round(res.transport_cost(), 6)
    0.0
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
