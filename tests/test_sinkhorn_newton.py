"""Sinkhorn-Newton steps of the one loop (:mod:`geoviz.ot.loop`): the same problem and the
same answer as the plain iteration, reached in fewer iterations on clustered costs."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import ot
import pytest
import torch

from geoviz.errors import ConvergenceWarning
from geoviz.ot.geometry import DenseCost
from geoviz.ot.loop import _newton_cg
from geoviz.ot.problem import TransportProblem, uniform_measure
from geoviz.ot.sinkhorn import Sinkhorn
from geoviz.ot.strategies import KernelPolicy


def clustered_problem(
    n: int = 120, m: int = 300, seed: int = 0, rel_eps: float = 1e-3
) -> tuple[TransportProblem, torch.Tensor]:
    """A small OTDD-like problem in a space with well-separated classes (like the shipped
    encoder's, where the colour default's map needed 5,000 plain iterations): tight class
    clusters on the unit sphere, unequal class proportions on the two sides, and a label term
    between classes, so that some mass must cross classes through tiny plan entries."""
    gen = torch.Generator().manual_seed(seed)
    k, dim = 5, 16
    centres = torch.nn.functional.normalize(torch.randn(k, dim, generator=gen, dtype=torch.float64))
    yq = torch.multinomial(torch.tensor([3.0, 2, 2, 1, 2]), n, True, generator=gen)
    yp = torch.multinomial(torch.tensor([2.0, 2, 3, 2, 1]), m, True, generator=gen)

    def points(y: torch.Tensor) -> torch.Tensor:
        x = centres[y] + 0.15 * torch.randn(len(y), dim, generator=gen, dtype=torch.float64)
        return torch.nn.functional.normalize(x)

    xq, xp = points(yq), points(yp)
    label = 2.0 * torch.cdist(centres, centres) ** 2
    cost = torch.cdist(xq, xp) ** 2 + label[yq][:, yp]
    geom = DenseCost(cost, epsilon=rel_eps, relative_epsilon=True)
    a, b = uniform_measure(n, cost.device), uniform_measure(m, cost.device)
    return TransportProblem(geom, a, b, groups=(yq, yp)), cost


def plan_of(res, problem: TransportProblem, cost: torch.Tensor) -> torch.Tensor:
    eps = problem.epsilon_abs
    return (
        problem.a[:, None]
        * problem.b[None, :]
        * torch.exp((res.f[:, None] + res.g[None, :] - cost) / eps)
    )


def test_newton_cg_solves_the_dual_newton_system():
    """The CG solve equals the least-squares (minimum-norm) solution of the singular system."""
    gen = torch.Generator().manual_seed(1)
    plan = torch.rand(7, 9, generator=gen, dtype=torch.float64) ** 4
    pr, pc = plan.sum(1), plan.sum(0)
    a = torch.full((7,), pr.sum().item() / 7, dtype=torch.float64)
    b = torch.full((9,), pc.sum().item() / 9, dtype=torch.float64)
    x, y = _newton_cg(lambda v: plan @ v, lambda u: plan.T @ u, pr, pc, a - pr, b - pc)
    hess = torch.zeros(16, 16, dtype=torch.float64)
    hess[:7, :7], hess[7:, 7:] = torch.diag(pr), torch.diag(pc)
    hess[:7, 7:], hess[7:, :7] = plan, plan.T
    rhs = torch.cat([a - pr, b - pc])
    z = torch.cat([x, y])
    assert float((hess @ z - rhs).norm() / rhs.norm()) < 1e-3
    # the free constant (1, -1) is not moved
    assert abs(float(x.sum() - y.sum())) < 1e-4 * float(z.abs().sum())


@pytest.mark.parametrize("mode", ["dense", "sparse", "auto"])
def test_newton_reaches_the_plain_loops_solution(mode):
    """Same potentials (up to the free constant), plan and cost as the plain loop run to a
    tight tolerance; the default tolerance is met in fewer iterations than without Newton."""
    problem, cost = clustered_problem()
    eps = problem.epsilon_abs
    tight = Sinkhorn(tol=1e-9, max_iter=100_000, kernel=KernelPolicy(mode="dense"), newton=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = tight(problem)
    fast = Sinkhorn(kernel=KernelPolicy(mode=mode))(problem)
    plain = dataclasses.replace(Sinkhorn(kernel=KernelPolicy(mode=mode)), newton=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        slow = plain(problem)
    assert fast.converged and fast.marginal_error <= 1e-4
    assert fast.n_iter < slow.n_iter
    df = fast.f - ref.f
    assert float((df - df.mean()).abs().max()) < 0.5 * eps
    p_ref = plan_of(ref, problem, cost)
    assert float((plan_of(fast, problem, cost) - p_ref).abs().sum()) < 1e-3
    assert math.isclose(fast.transport_cost(), ref.transport_cost(), rel_tol=1e-4)


def test_newton_matches_pot_on_a_tiny_case():
    """On a tiny problem both paths give POT's ``ot.sinkhorn`` plan; at small epsilon both
    approaches the exact optimum of ``ot.emd2``."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(12, 2)), rng.normal(size=(15, 2))
    cost = torch.from_numpy(((x[:, None] - y[None]) ** 2).sum(-1))
    a, b = uniform_measure(12, cost.device), uniform_measure(15, cost.device)
    for rel in (0.05, 0.01):
        problem = TransportProblem(DenseCost(cost, epsilon=rel, relative_epsilon=True), a, b)
        eps = problem.epsilon_abs
        pot = ot.sinkhorn(
            a.numpy(),
            b.numpy(),
            cost.numpy(),
            eps,
            method="sinkhorn_log",
            numItermax=200_000,
            stopThr=1e-12,
        )
        for newton in (True, False):
            solver = Sinkhorn(tol=1e-8, max_iter=20_000, newton=newton)
            res = solver(problem)
            plan = plan_of(res, problem, cost).numpy()
            assert np.abs(plan - pot).sum() < 1e-5
    exact = ot.emd2(a.numpy(), b.numpy(), cost.numpy())
    problem = TransportProblem(DenseCost(cost, epsilon=1e-3, relative_epsilon=True), a, b)
    res = Sinkhorn(tol=1e-6, max_iter=20_000)(problem)
    assert res.converged
    assert abs(res.transport_cost() - exact) < 1e-2 * exact


def test_newton_steps_only_raise_the_dual():
    """Each kept Newton step raises the concave dual (Armijo), so it cannot leave the path
    to the one optimum; the reported error is the measured one."""
    problem, cost = clustered_problem(seed=4)
    res = Sinkhorn()(problem)
    plan = plan_of(res, problem, cost)
    measured = float((plan.sum(1) - problem.a).abs().sum() + (plan.sum(0) - problem.b).abs().sum())
    assert measured == pytest.approx(res.marginal_error, rel=1e-6, abs=1e-12)
    assert res.marginal_error <= 1e-4
