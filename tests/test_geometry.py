"""Cost geometries holding epsilon, and the problem -> solver -> output split of Sinkhorn."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from geoviz import limits
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.ot.geometry import DenseCost, PointCloudCost
from geoviz.ot.labels import label_distances
from geoviz.ot.otdd import otdd
from geoviz.ot.otdd_cost import OTDDConfig, ground_cost, mean_ground_cost
from geoviz.ot.problem import TransportProblem, uniform_measure
from geoviz.ot.sinkhorn import MultiscaleStart, Sinkhorn, sinkhorn
from geoviz.ot.strategies import EpsilonScaling, KernelPolicy


class _CountingCost(DenseCost):
    """A stored cost that counts the row blocks read (to see how often the mean is taken)."""

    reads = 0

    def row_block(self, r0: int, r1: int) -> torch.Tensor:
        type(self).reads += 1
        return super().row_block(r0, r1)


def _clouds(n: int = 30, m: int = 25, seed: int = 3) -> PointCloudCost:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 4, generator=g), torch.randn(m, 4, generator=g) + 1.0
    lab = torch.rand(3, 2, generator=g, dtype=torch.float64) * 5
    return PointCloudCost(
        x,
        y,
        labels=torch.arange(n) % 3,
        labels_ref=torch.arange(m) % 2,
        label_cost=lab,
        lambda_x=0.5,
        lambda_y=2.0,
        dtype=torch.float64,
    )


def _datasets(n: int = 60) -> tuple[LabeledDataset, LabeledDataset]:
    rng = np.random.default_rng(0)
    y = np.arange(n) % 3
    x = rng.normal(size=(n, 2)).astype(np.float32) + 3.0 * y[:, None]
    xr = rng.normal(size=(n, 2)).astype(np.float32) + 3.0 * y[::-1, None] + 1.0
    return (
        LabeledDataset(x, y, ("a", "b", "c"), name="q"),
        LabeledDataset(xr, y[::-1].copy(), ("u", "v", "w"), name="p"),
    )


# --------------------------------------------------------------------------- epsilon


def test_relative_epsilon_is_epsilon_times_mean_and_resolved_once():
    cost = torch.rand(40, 30, dtype=torch.float64) * 3
    _CountingCost.reads = 0
    geom = _CountingCost(cost, epsilon=0.05, relative_epsilon=True)
    assert geom.epsilon_abs == pytest.approx(0.05 * float(cost.mean()), rel=1e-12)
    reads = _CountingCost.reads
    assert reads > 0
    for _ in range(3):
        geom.epsilon_abs  # noqa: B018 - cached: no further pass over the cost
    assert _CountingCost.reads == reads


def test_absolute_epsilon_is_itself_and_with_epsilon_does_not_mutate():
    cost = torch.rand(10, 8, dtype=torch.float64)
    geom = DenseCost(cost)
    assert geom.epsilon is None
    with pytest.raises(GeovizError, match="no epsilon"):
        geom.epsilon_abs  # noqa: B018
    absolute = geom.with_epsilon(0.125, relative=False)
    relative = absolute.with_epsilon(0.5, relative=True)
    assert absolute.epsilon_abs == 0.125
    assert relative.epsilon_abs == pytest.approx(0.5 * float(cost.mean()), rel=1e-12)
    assert geom.epsilon is None and absolute.epsilon == 0.125  # originals untouched
    assert relative.matrix is cost  # shared, not copied


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), True])
def test_absolute_epsilon_validation(bad):
    with pytest.raises(GeovizError, match="epsilon_abs"):
        DenseCost(torch.ones(3, 3), epsilon=bad)


@pytest.mark.parametrize("bad", [limits.EPSILON_MIN / 2, limits.EPSILON_MAX * 2, 0.0])
def test_relative_epsilon_validation_is_that_of_limits(bad):
    with pytest.raises(GeovizError) as caught:
        DenseCost(torch.ones(3, 3), epsilon=bad, relative_epsilon=True)
    with pytest.raises(GeovizError) as expected:
        limits.check_epsilon(bad)
    assert str(caught.value) == str(expected.value)


def test_relative_epsilon_of_a_zero_cost_is_refused():
    geom = DenseCost(torch.zeros(4, 4), epsilon=0.1, relative_epsilon=True)
    with pytest.raises(GeovizError, match="relative epsilon is undefined"):
        geom.epsilon_abs  # noqa: B018


def test_epsilon_below_the_dtype_resolution_is_refused():
    geom = DenseCost(torch.rand(6, 6) + 1.0, epsilon=1e-9)
    with pytest.raises(GeovizError, match="float32 cost can resolve"):
        geom.epsilon_abs  # noqa: B018
    assert DenseCost(torch.rand(6, 6).double() + 1.0, epsilon=1e-9).epsilon_abs == 1e-9


def test_parts_keep_the_absolute_epsilon_of_the_whole():
    geom = _clouds().with_epsilon(0.01, relative=True)
    whole = geom.epsilon_abs
    part = geom.subset(torch.tensor([0, 1, 2]), torch.tensor([5, 6]))
    assert not part.relative_epsilon and part.epsilon_abs == whole
    assert part.mean() != pytest.approx(geom.mean())  # its own mean, not the whole's
    stored = geom.stored()
    assert stored.epsilon_abs == whole and stored.mean() == geom.mean()
    np.testing.assert_array_equal(stored.dense().numpy(), geom.dense().numpy())


def test_subset_of_everything_is_the_same_cost():
    geom = _clouds()
    same = geom.subset(None, None)
    np.testing.assert_array_equal(same.dense().numpy(), geom.dense().numpy())
    assert same.mean() == geom.mean()


# --------------------------------------------------------------------------- otdd geometry


def test_config_cost_geometry_matches_ground_cost_and_otdd_epsilon():
    target, reference = _datasets()
    lab = label_distances(target, reference)
    cfg = OTDDConfig(epsilon=0.01, lambda_x=0.7, lambda_y=1.3, dtype="float64", device="cpu")
    geom = cfg.cost_geometry(target, reference, lab)
    mean = mean_ground_cost(target, reference, lab, lambda_x=0.7, lambda_y=1.3)
    assert geom.mean() == mean
    dense = ground_cost(
        target.features,
        target.labels,
        reference.features,
        reference.labels,
        lab,
        lambda_x=0.7,
        lambda_y=1.3,
        dtype=torch.float64,
        device="cpu",  # where cfg computes (a CUDA machine would pick its GPU by default)
    )
    np.testing.assert_array_equal(geom.dense().numpy(), dense.numpy())
    assert float(dense.mean()) == pytest.approx(mean, rel=1e-9)  # the closed form is the mean
    res = otdd(target, reference, cfg, label_cost=lab)
    assert res.epsilon_abs == geom.epsilon_abs == pytest.approx(0.01 * mean, rel=1e-15)


# --------------------------------------------------------------------------- solver objects


def test_schedule_is_geometric_down_to_epsilon():
    geom = DenseCost(torch.full((2, 2), 20.0, dtype=torch.float64))
    scaling = EpsilonScaling(ratio=0.25)
    assert scaling.stages(1.0, geom, max_iter=100) == [16.0, 4.0, 1.0]
    assert EpsilonScaling(ratio=0.25, start=5.0).stages(1.0, geom, 100) == [4.0, 1.0]
    assert scaling.stages(1.0, geom, max_iter=5) == [1.0]  # too small a budget to anneal


def test_settings_and_problem_are_frozen_and_validated():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Sinkhorn().tol = 1.0  # type: ignore[misc]
    for make, match in (
        (lambda: Sinkhorn(tol=0.0), "tol"),
        (lambda: Sinkhorn(max_iter=0), "max_iter"),
        (lambda: Sinkhorn(omega_max=2.0), "omega_max"),
        (lambda: KernelPolicy(mode="fast"), "mode"),  # type: ignore[arg-type]
        (lambda: KernelPolicy(max_density=0.0), "max_density"),
        (lambda: EpsilonScaling(ratio=1.0), "eps_scaling"),
    ):
        with pytest.raises(GeovizError, match=match):
            make()
    with pytest.raises(GeovizError, match="no epsilon"):
        TransportProblem(DenseCost(torch.ones(2, 2)), uniform_measure(2), uniform_measure(2))
    weights = torch.tensor([0.25, 0.75])
    problem = TransportProblem(DenseCost(torch.ones(2, 2), epsilon=1.0), weights, weights)
    assert problem.a.dtype == torch.float64 and problem.a is not weights
    assert torch.equal(weights, torch.tensor([0.25, 0.75]))  # not mutated


def test_solver_object_equals_functional_entry_and_is_reusable():
    cost = torch.cdist(torch.randn(40, 3), torch.randn(30, 3)).square().double()
    eps = 0.02 * float(cost.mean())
    want = sinkhorn(cost, epsilon_abs=eps, tol=1e-9, mode="sparse", multiscale=None)
    solver = Sinkhorn(tol=1e-9, kernel=KernelPolicy(mode="sparse"), multiscale=None)
    problem = TransportProblem(
        DenseCost(cost, epsilon=eps), uniform_measure(40), uniform_measure(30)
    )
    first, second = solver(problem), solver(problem)
    for got in (first, second):
        assert got.n_iter == want.n_iter and got.mode == want.mode == "sparse"
        np.testing.assert_array_equal(got.f.numpy(), want.f.numpy())
        np.testing.assert_array_equal(got.g.numpy(), want.g.numpy())


def test_warm_start_through_the_solver_call():
    cost = torch.cdist(torch.randn(50, 2), torch.randn(40, 2)).square().double()
    problem = TransportProblem(
        DenseCost(cost, epsilon=0.05, relative_epsilon=True),
        uniform_measure(50),
        uniform_measure(40),
    )
    solver = Sinkhorn(tol=1e-9)
    cold = solver(problem)
    warm = solver(problem, init=(cold.f, cold.g))
    assert warm.converged and warm.n_iter <= 2 < cold.n_iter
    assert warm.epsilon_abs == cold.epsilon_abs == problem.epsilon_abs


def test_multiscale_start_gives_the_same_plan():
    """The coarse start only changes where the full problem starts, not its solution."""
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(90, 2, generator=g), torch.randn(80, 2, generator=g)
    geom = DenseCost(torch.cdist(x, y).square().double(), epsilon=0.01, relative_epsilon=True)
    problem = TransportProblem(geom, uniform_measure(90), uniform_measure(80))
    plain = Sinkhorn(tol=1e-9, multiscale=None)(problem)
    coarse = Sinkhorn(tol=1e-9, multiscale=MultiscaleStart(size=30))(problem)
    assert MultiscaleStart(size=30).applies(problem, "auto", 5)
    assert not MultiscaleStart(size=45).applies(problem, "auto", 5)
    np.testing.assert_allclose(coarse.plan().numpy(), plain.plan().numpy(), atol=1e-8)
