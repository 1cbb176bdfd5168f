"""Stabilised Sinkhorn: marginals, limits, invariances, against POT, bad input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import ot
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geoviz.errors import ConvergenceWarning, GeovizError
from geoviz.ot.geometry import DenseCost, PointCloudCost
from geoviz.ot.problem import TransportProblem, uniform_measure
from geoviz.ot.sinkhorn import Sinkhorn, sinkhorn
from geoviz.ot.strategies import EpsilonScaling, KernelPolicy

CUDA = pytest.param(
    "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
)


def _cloud_cost(
    n: int, m: int, dim: int = 3, seed: int = 0, dtype=torch.float64, clusters: bool = False
):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g, dtype=torch.float64)
    y = torch.randn(m, dim, generator=g, dtype=torch.float64) + 0.5
    if clusters:
        x = x + 6.0 * (torch.arange(n) % 3)[:, None].double()
        y = y + 6.0 * (torch.arange(m) % 3)[:, None].double()
    return torch.cdist(x, y).square().to(dtype), x, y


def _marginal_error(plan: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    p = plan.double()
    return float((p.sum(1) - a).abs().sum() + (p.sum(0) - b).abs().sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rel_eps", [1.0, 0.1, 0.01])
def test_plan_satisfies_marginals(dtype, rel_eps):
    cost, _, _ = _cloud_cost(60, 45, dtype=dtype, clusters=True)
    eps = rel_eps * float(cost.mean())
    res = sinkhorn(cost, epsilon_abs=eps, tol=1e-5)
    assert res.converged and res.marginal_error <= 1e-5
    plan = res.plan()
    assert plan.shape == (60, 45) and plan.dtype == dtype
    err = _marginal_error(plan, res.a, res.b)
    assert err <= 1e-5 + (1e-5 if dtype == torch.float32 else 1e-12)
    assert err == pytest.approx(res.marginal_error, abs=2e-6 if dtype == torch.float32 else 1e-12)


def test_nonuniform_marginals():
    cost, _, _ = _cloud_cost(30, 20, seed=1)
    g = torch.Generator().manual_seed(0)
    a = torch.rand(30, generator=g, dtype=torch.float64) + 0.1
    b = torch.rand(20, generator=g, dtype=torch.float64) + 0.1
    a, b = a / a.sum(), b / b.sum()
    res = sinkhorn(cost, a, b, epsilon_abs=0.05 * float(cost.mean()), tol=1e-7)
    assert _marginal_error(res.plan(), a, b) <= 1e-7 + 1e-12


def test_default_marginals_are_the_uniform_measure():
    u = uniform_measure(7)
    assert u.shape == (7,) and u.dtype == torch.float64
    assert float(u.sum()) == pytest.approx(1.0, abs=1e-15) and bool((u == 1 / 7).all())
    cost, _, _ = _cloud_cost(30, 20, seed=1)
    res = sinkhorn(cost, epsilon_abs=0.05 * float(cost.mean()), tol=1e-7)
    torch.testing.assert_close(res.a.cpu(), uniform_measure(30), rtol=0, atol=0)
    torch.testing.assert_close(res.b.cpu(), uniform_measure(20), rtol=0, atol=0)


def test_matches_pot_plan():
    cost, _, _ = _cloud_cost(40, 35, seed=2)
    eps = 0.1 * float(cost.mean())
    a = np.full(40, 1 / 40)
    b = np.full(35, 1 / 35)
    want = ot.sinkhorn(
        a, b, cost.numpy(), eps, method="sinkhorn_log", stopThr=1e-13, numItermax=100000
    )
    res = sinkhorn(cost, epsilon_abs=eps, tol=1e-10)
    np.testing.assert_allclose(res.plan().numpy(), want, atol=1e-10)


def test_small_epsilon_approaches_exact_ot():
    cost, _, _ = _cloud_cost(25, 25, seed=3)
    exact = ot.emd2(np.full(25, 1 / 25), np.full(25, 1 / 25), cost.numpy())
    gaps = []
    for rel in (0.3, 0.1, 0.03):  # smaller eps needs >1e5 iterations here (POT too)
        eps = rel * float(cost.mean())
        res = sinkhorn(cost, epsilon_abs=eps, tol=1e-7, max_iter=20000)
        assert res.converged
        gap = res.transport_cost() - exact
        # 0 <= <pi_eps, C> - OT <= eps * KL(pi_eps | a b) <= eps * log(25) (up to the marginal error)
        assert -1e-5 < gap <= eps * math.log(25)
        gaps.append(gap)
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 0.05 * exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_clouds_give_identity_plan(dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(50, 5, generator=g, dtype=torch.float64)
    cost = torch.cdist(x, x).square().to(dtype)
    res = sinkhorn(cost, epsilon_abs=1e-3 * float(cost.mean()), tol=1e-6)
    plan = res.plan().double()
    assert res.converged
    assert torch.equal(plan.argmax(1), torch.arange(50))
    assert float(plan.diagonal().sum()) > 0.999


def test_tiny_epsilon_never_nan_float32():
    cost, _, _ = _cloud_cost(80, 70, seed=5, dtype=torch.float32, clusters=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = sinkhorn(cost, epsilon_abs=1e-5 * float(cost.mean()), tol=1e-4, max_iter=3000)
    assert torch.isfinite(res.f).all() and torch.isfinite(res.g).all()
    plan = res.plan()
    assert torch.isfinite(plan).all()
    assert math.isfinite(res.marginal_error)
    if res.converged:
        assert _marginal_error(plan, res.a, res.b) <= 2e-4


@pytest.mark.parametrize(
    ("dtype", "relative"),
    [
        (torch.float32, 1e-8),
        (torch.float32, 1e-12),
        (torch.float32, 1e-100),  # was: "value cannot be converted to type float without overflow"
        (torch.float64, 1e-20),  # was: an infinite marginal error after max_iter iterations
        (torch.float64, 1e-300),
    ],
)
def test_epsilon_below_cost_resolution_is_refused(dtype, relative):
    cost, _, _ = _cloud_cost(80, 70, seed=5, dtype=dtype)
    with pytest.raises(GeovizError, match=f"below what a {str(dtype)[6:]} cost can resolve"):
        sinkhorn(cost, epsilon_abs=relative * float(cost.mean()), max_iter=50)
    # a stored matrix and a geometry evaluated by blocks get the same answer
    with pytest.raises(GeovizError, match="rounding noise"):
        sinkhorn(DenseCost(cost), epsilon_abs=relative * float(cost.mean()), max_iter=50)


def test_float64_cost_resolves_smaller_epsilon_than_float32():
    """1e-12 x mean cost: refused for a float32 cost, finite for the same cost in float64."""
    cost, _, _ = _cloud_cost(60, 50, seed=8, dtype=torch.float64)
    eps = 1e-12 * float(cost.mean())
    with pytest.raises(GeovizError, match="float32"):
        sinkhorn(cost.float(), epsilon_abs=eps, max_iter=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = sinkhorn(cost, epsilon_abs=eps, max_iter=300)
    assert torch.isfinite(res.plan()).all() and math.isfinite(res.marginal_error)


def test_max_iter_warns_and_flags():
    cost, _, _ = _cloud_cost(40, 40, seed=6, clusters=True)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        res = sinkhorn(cost, epsilon_abs=1e-3 * float(cost.mean()), tol=1e-12, max_iter=3)
    assert not res.converged and res.n_iter <= 3 and res.marginal_error > 1e-12


def test_stops_on_tolerance_not_count():
    cost, _, _ = _cloud_cost(40, 40, seed=7)
    eps = 0.05 * float(cost.mean())
    loose = sinkhorn(cost, epsilon_abs=eps, tol=1e-2)
    tight = sinkhorn(cost, epsilon_abs=eps, tol=1e-9)
    assert loose.converged and tight.converged
    assert loose.n_iter < tight.n_iter
    assert tight.marginal_error <= 1e-9


def test_options_do_not_change_the_solution():
    cost, _, _ = _cloud_cost(50, 40, seed=8, clusters=True)
    eps = 0.01 * float(cost.mean())
    ref = sinkhorn(cost, epsilon_abs=eps, tol=1e-10, eps_scaling=None, overrelax=False).plan()
    problem = TransportProblem(
        DenseCost(cost, epsilon=eps), uniform_measure(50), uniform_measure(40)
    )
    for kw in (
        {},
        {"scaling": EpsilonScaling(ratio=0.5, stage_iter=3)},
        {"overrelax": False},
        {"kernel": KernelPolicy(absorb_threshold=2.0)},
    ):
        plan = Sinkhorn(tol=1e-10, **kw)(problem).plan()
        np.testing.assert_allclose(plan.numpy(), ref.numpy(), atol=1e-9)


def test_keep_plan_equals_recomputed_plan():
    cost, _, _ = _cloud_cost(30, 30, seed=9, dtype=torch.float32)
    res = sinkhorn(cost, epsilon_abs=0.05 * float(cost.mean()), keep_plan=True)
    kept = res.plan()
    recomputed = res.plan(cost)
    np.testing.assert_allclose(kept.numpy(), recomputed.numpy(), rtol=1e-4, atol=1e-9)


def test_duality_gap_small():
    cost, _, _ = _cloud_cost(30, 25, seed=10)
    eps = 0.1 * float(cost.mean())
    res = sinkhorn(cost, epsilon_abs=eps, tol=1e-11)
    plan = res.plan()
    ab = res.a[:, None] * res.b[None, :]
    primal = float((plan * cost).sum() + eps * (plan * (plan / ab).log() - plan + ab).sum())
    assert res.dual_value() == pytest.approx(primal, rel=1e-8)


def test_symmetric_solver_matches_general_solver():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(40, 3, generator=g, dtype=torch.float64)
    cost = torch.cdist(x, x).square()
    eps = 0.05 * float(cost.mean())
    sym = sinkhorn(cost, epsilon_abs=eps, tol=1e-10, symmetric=True)
    gen = sinkhorn(cost, epsilon_abs=eps, tol=1e-10)
    assert sym.converged
    assert sym.dual_value() == pytest.approx(gen.dual_value(), rel=1e-8)
    np.testing.assert_allclose(sym.plan().numpy(), gen.plan().numpy(), atol=1e-10)


@pytest.mark.parametrize("mode", ["online", "sparse"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_other_kernels_match_dense(mode, dtype):
    cost, _, _ = _cloud_cost(45, 37, seed=12, dtype=dtype)
    eps = 0.05 * float(cost.mean())
    tol = 1e-8 if dtype == torch.float64 else 1e-5
    dense = sinkhorn(cost, epsilon_abs=eps, tol=tol, mode="dense")
    values = torch.randn(37, 4, dtype=dtype)
    other = sinkhorn(cost, epsilon_abs=eps, tol=tol, mode=mode, truncation=40.0)
    assert other.converged and other.mode == mode
    rtol = 1e-6 if dtype == torch.float64 else 1e-3
    assert other.dual_value() == pytest.approx(dense.dual_value(), rel=rtol)
    plan = dense.plan().double()
    assert other.transport_cost() == pytest.approx(float((plan * cost.double()).sum()), rel=rtol)
    bary = (plan / plan.sum(1, keepdim=True)) @ values.double()
    np.testing.assert_allclose(other.apply(values).numpy(), bary.numpy(), atol=50 * rtol)
    np.testing.assert_allclose(other.plan().double().numpy(), plan.numpy(), atol=rtol / 45)


def test_point_cloud_geometry_blocks_equal_the_matrix():
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(30, 4, generator=g), torch.randn(25, 4, generator=g)
    labels, labels_ref = torch.arange(30) % 3, torch.arange(25) % 2
    lab = torch.rand(3, 2, generator=g, dtype=torch.float64) * 5
    geom = PointCloudCost(
        x,
        y,
        labels=labels,
        labels_ref=labels_ref,
        label_cost=lab,
        lambda_x=0.5,
        lambda_y=2.0,
        dtype=torch.float64,
        block_bytes=7 * 25 * 8,
    )
    brute = 0.5 * torch.cdist(x.double(), y.double()).square() + 2.0 * lab[labels][:, labels_ref]
    np.testing.assert_allclose(geom.dense().numpy(), brute.numpy(), atol=1e-9)
    assert geom.mean() == pytest.approx(float(brute.mean()))
    assert geom.with_epsilon(0.1, relative=True).epsilon_abs == pytest.approx(
        0.1 * float(brute.mean())
    )
    rows, cols = torch.tensor([2, 5, 29]), torch.tensor([0, 24])
    np.testing.assert_allclose(
        geom.subset(rows, cols).dense().numpy(), brute[rows][:, cols].numpy(), atol=1e-9
    )
    # the same problem through the stored matrix and through the lazy geometry
    eps = 0.01 * float(brute.mean())
    lazy = sinkhorn(geom, epsilon_abs=eps, tol=1e-9)
    stored = sinkhorn(DenseCost(brute), epsilon_abs=eps, tol=1e-9, mode="dense")
    np.testing.assert_allclose(lazy.plan().numpy(), stored.plan().numpy(), atol=1e-9)


@pytest.mark.parametrize("mode", ["dense", "sparse", "online"])
def test_permutation_gives_identity_plan_and_one_neighbour(mode):
    """Q = a permuted copy of P: at small epsilon the plan is that permutation (closed form)."""
    g = torch.Generator().manual_seed(7)
    line = torch.randperm(20, generator=g).double() * 10.0  # spacing 10: gaps of 100 >> eps
    x = torch.stack([line, torch.zeros_like(line)], 1)
    perm = torch.randperm(20, generator=g)
    cost = torch.cdist(x, x[perm]).square()
    res = sinkhorn(cost, epsilon_abs=5.0, tol=1e-7, mode=mode)  # off-plan weights ~ e^-20
    assert res.converged
    want = torch.argsort(perm)  # row i is matched to the column holding x_i
    idx, wts = res.top_neighbours(3)
    assert torch.equal(idx[:, 0], want)
    np.testing.assert_allclose(wts[:, 0].numpy(), 1.0, atol=1e-6)
    np.testing.assert_allclose(res.row_perplexity().numpy(), 1.0, atol=1e-4)
    np.testing.assert_allclose(res.apply(x[perm]).numpy(), x.numpy(), atol=1e-5)


def test_uniform_plan_has_perplexity_m():
    res = sinkhorn(torch.ones(6, 9, dtype=torch.float64), epsilon_abs=1.0, tol=1e-12)
    np.testing.assert_allclose(res.row_perplexity().numpy(), 9.0, rtol=1e-9)
    idx, wts = res.top_neighbours(20)  # k is capped at m
    assert idx.shape == (6, 9) and torch.allclose(
        wts, torch.full((6, 9), 1 / 9, dtype=torch.float64)
    )


@pytest.mark.parametrize("rel_eps", [0.01, 0.002])
def test_sparse_kernel_matches_dense_at_small_epsilon(rel_eps):
    cost, _, _ = _cloud_cost(120, 90, seed=21, clusters=True)
    eps = rel_eps * float(cost.mean())
    dense = sinkhorn(cost, epsilon_abs=eps, tol=1e-7, mode="dense", max_iter=20000)
    sparse = sinkhorn(cost, epsilon_abs=eps, tol=1e-7, mode="sparse", max_iter=20000)
    assert sparse.mode == "sparse" and sparse.nnz < 0.5 * cost.numel()
    # the reported error is that of the dense plan of the potentials and of the truncated plan
    assert _marginal_error(sparse.plan(), sparse.a, sparse.b) <= sparse.marginal_error + 1e-12
    trunc = sparse.sparse_plan().to_dense()
    assert _marginal_error(trunc, sparse.a, sparse.b) <= sparse.marginal_error + 1e-12
    assert 0.0 <= sparse.truncated_mass <= 1e-7
    np.testing.assert_allclose(sparse.plan().numpy(), dense.plan().numpy(), atol=1e-6)


def test_multiscale_start_reaches_the_same_plan():
    cost, _, _ = _cloud_cost(200, 180, seed=22)
    eps = 0.005 * float(cost.mean())
    plain = sinkhorn(cost, epsilon_abs=eps, tol=1e-7, mode="dense", max_iter=20000)
    coarse = sinkhorn(cost, epsilon_abs=eps, tol=1e-7, multiscale=40, max_iter=20000)
    assert coarse.converged
    np.testing.assert_allclose(coarse.plan().numpy(), plain.plan().numpy(), atol=1e-6)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(2, 25),
    m=st.integers(2, 25),
    rel_eps=st.sampled_from(
        [1.0, 0.3, 0.1]
    ),  # tiny eps on degenerate costs: >1e5 iterations (POT too)
    seed=st.integers(0, 10_000),
)
def test_property_marginals_random_costs(n, m, rel_eps, seed):
    g = torch.Generator().manual_seed(seed)
    cost = torch.rand(n, m, generator=g, dtype=torch.float64) * 10
    res = sinkhorn(cost, epsilon_abs=rel_eps * float(cost.mean()) + 1e-3, tol=1e-6, max_iter=50000)
    assert res.converged
    assert _marginal_error(res.plan(), res.a, res.b) <= 1e-6 + 1e-12


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon_abs": 0.0}, "epsilon_abs"),
        ({"epsilon_abs": -1.0}, "epsilon_abs"),
        ({"epsilon_abs": float("nan")}, "epsilon_abs"),
        ({"epsilon_abs": 1.0, "tol": 0.0}, "tol"),
        ({"epsilon_abs": 1.0, "max_iter": 0}, "max_iter"),
        ({"epsilon_abs": 1.0, "a": torch.ones(3) / 3}, "weights a"),
        ({"epsilon_abs": 1.0, "b": -torch.ones(4) / 4}, "positive"),
        ({"epsilon_abs": 1.0, "b": torch.ones(4)}, "equal mass"),
        ({"epsilon_abs": 1.0, "eps_scaling": 1.5}, "eps_scaling"),
    ],
)
def test_bad_inputs(kwargs, match):
    cost = torch.rand(5, 4, dtype=torch.float64)
    with pytest.raises(GeovizError, match=match):
        sinkhorn(cost, **kwargs)


def test_bad_cost():
    with pytest.raises(GeovizError, match="2-D"):
        sinkhorn(torch.rand(5), epsilon_abs=1.0)
    bad = torch.rand(3, 3)
    bad[0, 0] = float("nan")
    with pytest.raises(GeovizError, match="NaN"):
        sinkhorn(bad, epsilon_abs=1.0)
    with pytest.raises(GeovizError, match="float32 or float64"):
        sinkhorn(torch.ones(3, 3, dtype=torch.int64), epsilon_abs=1.0)


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_devices(device, dtype):
    cost, _, _ = _cloud_cost(64, 48, seed=13, dtype=dtype)
    eps = 0.05 * float(cost.mean())
    ref = sinkhorn(cost, epsilon_abs=eps, tol=1e-6)
    got = sinkhorn(cost.to(device), epsilon_abs=eps, tol=1e-6)
    assert got.f.device.type == device and got.converged
    np.testing.assert_allclose(
        got.plan().cpu().double().numpy(), ref.plan().double().numpy(), atol=1e-6
    )


@pytest.mark.parametrize("mode", ["dense", "sparse", "online"])
@pytest.mark.parametrize("max_iter", [1, 2, 5, 40])
def test_reported_error_is_that_of_the_returned_plan(max_iter, mode):
    cost, _, _ = _cloud_cost(40, 30, seed=14, clusters=True)
    eps = 0.01 * float(cost.mean())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = sinkhorn(cost, epsilon_abs=eps, tol=1e-12, max_iter=max_iter, mode=mode)
    assert res.n_iter <= max_iter and not res.converged
    dense_err = _marginal_error(res.plan(cost), res.a, res.b)
    if mode == "sparse":  # the larger of the dense and the truncated plan's errors
        trunc_err = _marginal_error(res.sparse_plan().to_dense(), res.a, res.b)
        assert max(dense_err, trunc_err) == pytest.approx(res.marginal_error, rel=1e-9)
    else:
        assert dense_err == pytest.approx(res.marginal_error, rel=1e-9)


def test_symmetric_rejects_asymmetric_cost():
    cost = torch.rand(20, 20, dtype=torch.float64)
    with pytest.raises(GeovizError, match="symmetric"):
        sinkhorn(cost, epsilon_abs=0.1, symmetric=True)
    with pytest.raises(GeovizError, match="square"):
        sinkhorn(torch.rand(4, 5, dtype=torch.float64), epsilon_abs=0.1, symmetric=True)


def test_warm_start_from_solution_needs_no_iterations():
    cost, _, _ = _cloud_cost(50, 40, seed=15)
    eps = 0.01 * float(cost.mean())
    cold = sinkhorn(cost, epsilon_abs=eps, tol=1e-9)
    warm = sinkhorn(cost, epsilon_abs=eps, tol=1e-9, init=(cold.f, cold.g))
    assert warm.converged and warm.n_iter <= 2 < cold.n_iter
    np.testing.assert_allclose(warm.plan().numpy(), cold.plan().numpy(), atol=1e-10)
