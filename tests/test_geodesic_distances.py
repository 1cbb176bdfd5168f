"""(2,Q) distances, eq. (ds_eq) and the simplex QP for a_hat (paper Sec. 3.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geoviz.errors import GeovizError, WeightsError
from geoviz.geodesic.distances import (
    objective,
    optimal_weights,
    simplex_grid,
    two_q_distances,
)
from geoviz.geodesic.weights import check_weights

# --------------------------------------------------------------------------- helpers


def _euclidean_two_q(x: np.ndarray, maps: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(2,nu) matrices of Def. 1 from samples x ~ nu and images T_i(x) (no labels)."""
    m = len(maps)
    w_t = np.array([np.mean(np.sum((t - x) ** 2, axis=1)) for t in maps])
    w_b = np.array(
        [[np.mean(np.sum((maps[i] - maps[j]) ** 2, axis=1)) for j in range(m)] for i in range(m)]
    )
    return w_t, w_b


def _two_q_no_labels(x: np.ndarray, maps: list[np.ndarray]):
    """two_q_distances with a single target class and zero label costs (Euclidean case)."""
    n = x.shape[0]
    m = len(maps)
    ones = torch.ones(n, 1, dtype=torch.float64)
    return two_q_distances(
        torch.from_numpy(x),
        torch.zeros(n, dtype=torch.long),
        [torch.from_numpy(t) for t in maps],
        [ones] * m,
        [torch.zeros(1, 1)] * m,
        {(i, j): torch.zeros(1, 1) for i in range(m) for j in range(i + 1, m)},
    )


def _gaussian_maps(seed: int, m: int, d: int = 2):
    """Affine OT maps T_i(x) = m_i + A_i x from N(0, I) to N(m_i, A_i^2), A_i SPD."""
    rng = np.random.default_rng(seed)
    means, mats = [], []
    for _ in range(m):
        b = rng.normal(size=(d, d))
        mats.append(b @ b.T / d + 0.3 * np.eye(d))  # SPD
        means.append(rng.normal(size=d))
    return means, mats


def _population_two_q(means, mats):
    """Closed form: W_{2,nu}^2 between Gaussians pushed from nu = N(0, I) by affine maps."""
    m = len(means)
    d = means[0].shape[0]
    eye = np.eye(d)
    w_t = np.array([means[i] @ means[i] + np.sum((mats[i] - eye) ** 2) for i in range(m)])
    w_b = np.array(
        [
            [
                np.sum((means[i] - means[j]) ** 2) + np.sum((mats[i] - mats[j]) ** 2)
                for j in range(m)
            ]
            for i in range(m)
        ]
    )
    return w_t, w_b


def _grid_min(w_t, w_b, resolution):
    grid = simplex_grid(len(w_t), resolution)
    vals = objective(grid, w_t, w_b)
    k = int(np.argmin(vals))
    return grid[k], float(vals[k])


def _f(a, w_t, w_b) -> float:
    return float(objective(a, w_t, w_b))


# --------------------------------------------------------------------------- simplex grid / weights


@pytest.mark.parametrize(("m", "r"), [(2, 1), (2, 10), (3, 4), (5, 6)])
def test_simplex_grid_counts_vertices_and_sums(m, r):
    grid = simplex_grid(m, r)
    assert grid.shape == (math.comb(r + m - 1, m - 1), m)
    np.testing.assert_allclose(grid.sum(axis=1), 1.0, atol=1e-12)
    assert (grid >= 0).all()
    assert len({tuple(np.round(row * r).astype(int)) for row in grid}) == grid.shape[0]
    for i in range(m):  # every vertex is present
        assert np.any(np.all(grid == np.eye(m)[i], axis=1))
    np.testing.assert_allclose(grid * r, np.round(grid * r), atol=1e-9)


def test_simplex_grid_rejects_bad_arguments():
    with pytest.raises(WeightsError, match="resolution"):
        simplex_grid(3, 0)
    with pytest.raises(WeightsError, match="m >= 1"):
        simplex_grid(0, 3)


def test_check_weights_messages():
    np.testing.assert_allclose(check_weights([0.2, 0.3, 0.5], 3), [0.2, 0.3, 0.5])
    # tiny negatives are clipped and the row renormalised
    out = check_weights([1.0 + 1e-8, -1e-8, 0.0], 3)
    assert (out >= 0).all() and out.sum() == pytest.approx(1.0, abs=1e-15)
    with pytest.raises(WeightsError, match=r"weight 1 is negative \(-0.2\)"):
        check_weights([0.7, -0.2, 0.5], 3)
    with pytest.raises(WeightsError, match=r"sum to 0.9, not 1"):
        check_weights([0.3, 0.3, 0.3], 3)
    with pytest.raises(WeightsError, match=r"must have 3 entries .* got 2 entries"):
        check_weights([0.5, 0.5], 3)
    with pytest.raises(WeightsError, match=r"weight 0 is nan"):
        check_weights([float("nan"), 0.5, 0.5], 3)
    with pytest.raises(WeightsError, match="numbers"):
        check_weights(["a", "b"], 2)
    with pytest.raises(WeightsError, match="in row 1"):
        check_weights([[0.5, 0.5], [0.6, 0.6]], 2)
    assert isinstance(WeightsError("x"), GeovizError)


# --------------------------------------------------------------------------- Prop. 1, Euclidean case


def test_prop1_equals_direct_w2nu_on_samples():
    """eq. (ds_eq) with exact maps equals int ||sum_i a_i T_i(x) - x||^2 dnu (exact algebra)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 2))
    means, mats = _gaussian_maps(1, 3)
    maps = [mu + x @ a.T for mu, a in zip(means, mats, strict=True)]
    dist = _two_q_no_labels(x, maps)
    w_t, w_b = _euclidean_two_q(x, maps)
    np.testing.assert_allclose(dist.w_to_target, w_t, rtol=1e-12)
    np.testing.assert_allclose(dist.w_between, w_b, rtol=1e-12, atol=1e-12)
    grid = simplex_grid(3, 7)
    direct = np.array(
        [np.mean(np.sum((sum(a[i] * maps[i] for i in range(3)) - x) ** 2, axis=1)) for a in grid]
    )
    np.testing.assert_allclose(
        objective(grid, dist.w_to_target, dist.w_between), direct, rtol=1e-10
    )
    # and the population closed form is approached by the samples
    pw_t, _ = _population_two_q(means, mats)
    np.testing.assert_allclose(w_t, pw_t, rtol=0.25)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_hat_matches_closed_form_gaussians(seed):
    """QP a_hat on the population (2,nu) matrices = brute-force minimiser of ||sum a_i T_i - Id||^2."""
    means, mats = _gaussian_maps(10 + seed, 3)
    w_t, w_b = _population_two_q(means, mats)
    a_hat = optimal_weights(w_t, w_b)

    def direct(a):  # int ||sum_i a_i (m_i + A_i x) - x||^2 dN(0, I), a (..., 3)
        mu = np.einsum("...i,id->...d", a, np.array(means))
        mat = np.einsum("...i,ide->...de", a, np.array(mats)) - np.eye(2)
        return np.sum(mu**2, axis=-1) + np.sum(mat**2, axis=(-2, -1))

    grid = simplex_grid(3, 300)
    vals = direct(grid)
    best = grid[int(np.argmin(vals))]
    assert _f(a_hat, w_t, w_b) <= vals.min() + 1e-12
    assert direct(a_hat) == pytest.approx(_f(a_hat, w_t, w_b), rel=1e-10)
    np.testing.assert_allclose(a_hat, best, atol=2 / 300 + 1e-9)


# --------------------------------------------------------------------------- QP vs grid, m = 2, 3, 5


def test_vertex_minimiser():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 3))
    shifts = [np.array([0.1, 0, 0]), np.array([5.0, 0, 0]), np.array([1.0, 5.0, 0])]
    w_t, w_b = _euclidean_two_q(x, [x + s for s in shifts])
    a_hat = optimal_weights(w_t, w_b)
    np.testing.assert_allclose(a_hat, [1, 0, 0], atol=1e-9)
    assert np.array_equal(_grid_min(w_t, w_b, 50)[0], [1, 0, 0])


@pytest.mark.parametrize("m", [2, 3, 5])
def test_edge_minimiser(m):
    """min ||sum a_i c_i|| over the hull; 0 is reached at (3/4, 1/4, 0, ...)."""
    d = max(m, 2)
    v = np.zeros(d)
    v[0] = 1.0
    shifts = [v, -3 * v] + [5.0 * np.eye(d)[k % d] + 2.0 for k in range(1, m - 1)]
    x = np.random.default_rng(m).normal(size=(40, d))
    w_t, w_b = _euclidean_two_q(x, [x + s for s in shifts])
    expected = np.zeros(m)
    expected[:2] = [0.75, 0.25]
    import qpsolvers

    # clarabel and quadprog are hard dependencies; osqp is checked when installed
    assert {"clarabel", "quadprog"} <= set(qpsolvers.available_solvers)
    optional = [s for s in ("osqp",) if s in qpsolvers.available_solvers]
    for solver in (None, "clarabel", "quadprog", *optional, "enumerate"):
        a_hat = optimal_weights(w_t, w_b, solver=solver)
        np.testing.assert_allclose(a_hat, expected, atol=1e-7, err_msg=str(solver))
        assert a_hat.sum() == pytest.approx(1.0, abs=1e-12)
    grid_a, grid_v = _grid_min(w_t, w_b, 20)
    np.testing.assert_allclose(grid_a, expected, atol=1e-12)
    assert _f(optimal_weights(w_t, w_b), w_t, w_b) <= grid_v + 1e-12


@pytest.mark.parametrize("m", [2, 3, 5])
def test_interior_minimiser_matches_fine_grid(m):
    # origin strictly inside the hull of the shifts => minimum 0 at interior weights
    rng = np.random.default_rng(100 + m)
    d = m - 1 if m > 2 else 1
    shifts = rng.normal(size=(m, d))
    shifts -= shifts.mean(axis=0)  # barycentre at 0: a = 1/m is a minimiser
    x = rng.normal(size=(30, d))
    w_t, w_b = _euclidean_two_q(x, [x + s for s in shifts])
    a_hat = optimal_weights(w_t, w_b)
    assert _f(a_hat, w_t, w_b) == pytest.approx(0.0, abs=1e-9)
    if m <= 3:  # unique minimiser (affinely independent shifts)
        np.testing.assert_allclose(a_hat, np.full(m, 1 / m), atol=1e-7)
    res = {2: 400, 3: 120, 5: 16}[m]
    _, grid_v = _grid_min(w_t, w_b, res)
    assert _f(a_hat, w_t, w_b) <= grid_v + 1e-12


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.sampled_from([2, 3, 5]),
    d=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(0.01, 100.0),
)
def test_qp_matches_grid_on_valid_two_q_matrices(m, d, seed, scale):
    """Random affine maps give genuine (2,Q) matrices; the QP is never beaten by a grid point."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(20, d))
    maps = [scale * (rng.normal(size=d) + x @ rng.normal(size=(d, d))) for _ in range(m)]
    w_t, w_b = _euclidean_two_q(x, maps)
    a_hat = optimal_weights(w_t, w_b)
    assert (a_hat >= 0).all() and a_hat.sum() == pytest.approx(1.0, abs=1e-12)
    res = {2: 200, 3: 40, 5: 10}[m]
    _, grid_v = _grid_min(w_t, w_b, res)
    f_hat = _f(a_hat, w_t, w_b)
    tol = 1e-9 * max(1.0, float(np.abs(w_b).max()), float(np.abs(w_t).max()))
    assert f_hat <= grid_v + tol
    # the exact enumeration agrees on the optimal value
    assert f_hat == pytest.approx(
        _f(optimal_weights(w_t, w_b, solver="enumerate"), w_t, w_b), abs=tol
    )


@settings(max_examples=40, deadline=None)
@given(m=st.sampled_from([2, 3, 5]), seed=st.integers(0, 2**31 - 1))
def test_nonconvex_objective_global_minimum(m, seed):
    """Label terms can make W_between non-Euclidean: the objective may be non-convex.

    The face enumeration is exact, so no grid point may be better.
    """
    rng = np.random.default_rng(seed)
    w_b = rng.uniform(0, 3, size=(m, m))
    w_b = np.triu(w_b, 1) + np.triu(w_b, 1).T
    w_t = rng.uniform(0, 3, size=m)
    a_hat = optimal_weights(w_t, w_b)
    res = {2: 200, 3: 60, 5: 12}[m]
    _, grid_v = _grid_min(w_t, w_b, res)
    assert _f(a_hat, w_t, w_b) <= grid_v + 1e-10
    assert _f(a_hat, w_t, w_b) <= w_t.min() + 1e-12


def test_nonconvex_instance_with_edge_minimiser():
    # f(a) = 1 - 4 a1 a2 - 0.1 a3 (a1 + a2): the reduced Hessian is indefinite (non-convex
    # QP, solved by face enumeration) and the global minimum 0 sits mid-edge at (1/2, 1/2, 0)
    w_t = np.array([1.0, 1.0, 1.0])
    w_b = np.array([[0, 4.0, 0.1], [4.0, 0, 0.1], [0.1, 0.1, 0]])
    a_hat = optimal_weights(w_t, w_b)
    grid_a, _ = _grid_min(w_t, w_b, 200)
    np.testing.assert_allclose(a_hat, [0.5, 0.5, 0.0], atol=1e-12)
    np.testing.assert_allclose(grid_a, a_hat, atol=1e-12)
    assert _f(a_hat, w_t, w_b) == pytest.approx(0.0, abs=1e-12)


def test_optimal_weights_bad_input():
    with pytest.raises(GeovizError, match="shape"):
        optimal_weights([1.0, 2.0], np.zeros((3, 3)))
    with pytest.raises(GeovizError, match="symmetric"):
        optimal_weights([1.0, 2.0], [[0, 1.0], [2.0, 0]])
    with pytest.raises(GeovizError, match="NaN"):
        optimal_weights([1.0, float("nan")], [[0, 1.0], [1.0, 0]])
    with pytest.raises(GeovizError, match="unknown QP solver"):
        optimal_weights([1.0, 2.0], [[0, 1.0], [1.0, 0]], solver="nope")


# --------------------------------------------------------------------------- Def. 2 label terms


def test_two_q_label_terms_brute_force():
    rng = np.random.default_rng(3)
    n, d, c_q, c = 7, 2, 3, [2, 4]
    x = torch.from_numpy(rng.normal(size=(n, d)))
    y_q = torch.from_numpy(rng.integers(0, c_q, size=n))
    xs = [torch.from_numpy(rng.normal(size=(n, d))) for _ in c]
    ys = [torch.from_numpy(rng.dirichlet(np.ones(k), size=n)) for k in c]
    m_q = [torch.from_numpy(rng.uniform(size=(c_q, k))) for k in c]
    m_01 = torch.from_numpy(rng.uniform(size=(c[0], c[1])))
    # (1, 0) given instead of (0, 1): its transpose is used
    dist = two_q_distances(x, y_q, xs, ys, m_q, {(1, 0): m_01.T}, lambda_x=2.0, lambda_y=0.5)
    for i in range(2):
        lab = np.mean(
            [sum(ys[i][k, cc] * m_q[i][y_q[k], cc] for cc in range(c[i])) for k in range(n)]
        )
        feat = np.mean([float(((x[k] - xs[i][k]) ** 2).sum()) for k in range(n)])
        assert dist.label_to_target[i] == pytest.approx(float(lab))
        assert dist.w_to_target[i] == pytest.approx(2.0 * feat + 0.5 * float(lab))
    lab01 = np.mean([float(ys[0][k] @ m_01 @ ys[1][k]) for k in range(n)])
    assert dist.label_between[0, 1] == pytest.approx(lab01)
    assert dist.w_between[1, 0] == dist.w_between[0, 1]
    assert dist.w_between[0, 0] == 0.0
    with pytest.raises(GeovizError, match="missing label distances"):
        two_q_distances(x, y_q, xs, ys, m_q, {})


def test_two_q_ignores_nan_rows_of_absent_classes():
    """label_distances marks classes without samples with NaN; they carry no mass."""
    n = 4
    x = torch.zeros(n, 1, dtype=torch.float64)
    y_q = torch.tensor([0, 1, 0, 1])
    ys = [
        torch.tensor([[1.0, 0.0, 0.0]] * n, dtype=torch.float64),
        torch.tensor([[0.5, 0.5]] * n, dtype=torch.float64),
    ]
    nan = float("nan")
    m_q = [torch.tensor([[1.0, nan, 2.0], [3.0, nan, 4.0], [nan, nan, nan]]), torch.ones(3, 2)]
    m_01 = torch.tensor([[2.0, 2.0], [nan, nan], [nan, 1.0]])
    dist = two_q_distances(x, y_q, [x, x], ys, m_q, {(0, 1): m_01})
    assert dist.label_to_target[0] == pytest.approx(2.0)  # mean of M[0,0]=1 and M[1,0]=3
    assert dist.label_between[0, 1] == pytest.approx(2.0)
    ys_bad = [torch.tensor([[0.0, 1.0, 0.0]] * n, dtype=torch.float64), ys[1]]
    with pytest.raises(GeovizError, match="NaN"):
        two_q_distances(x, y_q, [x, x], ys_bad, m_q, {(0, 1): m_01})
