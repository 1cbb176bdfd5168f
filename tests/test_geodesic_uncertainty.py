"""Bootstrap intervals of W_i, W_ij, W^2(P_a, Q) and a_hat (issue 23).

Checked against closed forms: with Q = N(0, I) in 2-D and the Gaussian OT maps
T_i(x) = m_i + A_i x (Brenier, paper Prop. 1), the population W_i, W_ij and a_hat are known,
so the coverage of the Q-resampling intervals over independent draws of Q is measured, not
assumed.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_geodesic_distances import _population_two_q, _two_q_no_labels

from geoviz.errors import GeovizError, ResourceError, WeightsError
from geoviz.geodesic.distances import objective, optimal_weights, simplex_grid
from geoviz.geodesic.uncertainty import (
    MAX_REPLICATES,
    GeodesicBootstrap,
    bootstrap_q,
)


def _affine_maps():
    """Three Gaussian OT maps from N(0, I) whose population a_hat is inside the triangle."""
    means = [np.array([1.0, 0.0]), np.array([-0.5, 0.9]), np.array([-0.5, -0.9])]
    mats = [
        np.array([[1.2, 0.1], [0.1, 0.8]]),
        np.array([[0.9, -0.2], [-0.2, 1.1]]),
        np.array([[1.0, 0.0], [0.0, 1.3]]),
    ]
    return means, mats


def _distances(x: np.ndarray, means, mats):
    """two_q_distances of samples x ~ Q mapped by the exact maps (one class, no label cost)."""
    return _two_q_no_labels(x, [mu + x @ a.T for mu, a in zip(means, mats, strict=True)])


def test_per_sample_terms_average_to_the_distances():
    rng = np.random.default_rng(0)
    means, mats = _affine_maps()
    d = _distances(rng.normal(size=(300, 2)), means, mats)
    assert d.n_samples == 300
    np.testing.assert_allclose(d.per_sample_to_target.mean(axis=0), d.w_to_target, rtol=1e-12)
    np.testing.assert_allclose(d.per_sample_between.mean(axis=0), d.w_between, rtol=1e-12)


def test_same_seed_same_replicates_and_other_seed_others():
    rng = np.random.default_rng(1)
    means, mats = _affine_maps()
    d = _distances(rng.normal(size=(200, 2)), means, mats)
    a = bootstrap_q(d, 50, seed=3)
    b = bootstrap_q(d, 50, seed=3)
    c = bootstrap_q(d, 50, seed=4)
    np.testing.assert_array_equal(a.w_to_target_replicates, b.w_to_target_replicates)
    assert not np.array_equal(a.w_to_target_replicates, c.w_to_target_replicates)
    assert a.replicates == 50 and a.method == "q-resample" and a.n_samples == 200


def test_replicates_are_sums_over_a_resample():
    """A replicate equals two_q_distances on the resampled rows (brute force for one b)."""
    rng = np.random.default_rng(2)
    means, mats = _affine_maps()
    x = rng.normal(size=(40, 2))
    d = _distances(x, means, mats)
    boot = bootstrap_q(d, 20, seed=7)
    counts = np.random.default_rng(7).multinomial(40, np.full(40, 1 / 40), size=20)
    rows = np.repeat(np.arange(40), counts[0])
    again = _distances(x[rows], means, mats)
    np.testing.assert_allclose(boot.w_to_target_replicates[0], again.w_to_target, rtol=1e-10)
    np.testing.assert_allclose(boot.w_between_replicates[0], again.w_between, rtol=1e-10)
    np.testing.assert_allclose(
        boot.a_hat_replicates[0], optimal_weights(again.w_to_target, again.w_between), atol=1e-8
    )


def test_objective_replicates_follow_eq_ds_eq():
    rng = np.random.default_rng(3)
    means, mats = _affine_maps()
    boot = bootstrap_q(_distances(rng.normal(size=(100, 2)), means, mats), 30, seed=0)
    grid = simplex_grid(3, 6)
    reps = boot.objective_replicates(grid)
    for b in (0, 17):
        expect = objective(grid, boot.w_to_target_replicates[b], boot.w_between_replicates[b])
        np.testing.assert_allclose(reps[b], expect, rtol=1e-12)
    one = boot.objective_replicates(grid[4])
    np.testing.assert_allclose(one, reps[:, 4], rtol=1e-12)


def test_region_holds_a_hat_and_excludes_far_vertices():
    rng = np.random.default_rng(4)
    means, mats = _affine_maps()
    boot = bootstrap_q(_distances(rng.normal(size=(2000, 2)), means, mats), 200, seed=0)
    inside = boot.as_good_as_a_hat(np.vstack([boot.a_hat, np.eye(3)]))
    assert inside[0]  # a_hat is as good as itself
    assert not inside[1:].any()  # the vertices are far worse at N = 2000
    gap = boot.gap_interval(boot.a_hat)
    assert float(gap.estimate) == 0.0 and float(gap.low) <= 0.0 <= float(gap.high) + 1e-15


def test_region_shrinks_with_more_samples():
    means, mats = _affine_maps()
    grid = simplex_grid(3, 40)
    sizes = []
    for n in (200, 3200):
        x = np.random.default_rng(5).normal(size=(n, 2))
        sizes.append(
            int(bootstrap_q(_distances(x, means, mats), 200, seed=0).as_good_as_a_hat(grid).sum())
        )
    assert sizes[1] < sizes[0] / 2, sizes


def test_q_resampling_intervals_cover_the_closed_form():
    """Nominal 95% intervals of W_i and of each a_hat weight cover the population value in
    85-99% of 200 independent draws of Q (N = 400, B = 200)."""
    means, mats = _affine_maps()
    w_t_pop, w_b_pop = _population_two_q(means, mats)
    a_pop = optimal_weights(w_t_pop, w_b_pop)
    assert (a_pop > 0.1).all()  # an interior minimiser: percentile intervals make sense
    reps = 200
    hit_w = np.zeros(3)
    hit_a = np.zeros(3)
    hit_f = 0
    for r in range(reps):
        x = np.random.default_rng(1000 + r).normal(size=(400, 2))
        boot = bootstrap_q(_distances(x, means, mats), 200, seed=r)
        w = boot.w_to_target_interval()
        a = boot.a_hat_interval()
        f = boot.objective_interval(a_pop)
        hit_w += (w.low <= w_t_pop) & (w_t_pop <= w.high)
        hit_a += (a.low <= a_pop) & (a_pop <= a.high)
        hit_f += int(f.low <= objective(a_pop, w_t_pop, w_b_pop) <= f.high)
    coverage = np.concatenate([hit_w, hit_a, [hit_f]]) / reps
    assert ((coverage >= 0.85) & (coverage <= 0.99)).all(), coverage


def test_bad_input_gives_clear_sentences():
    rng = np.random.default_rng(6)
    means, mats = _affine_maps()
    d = _distances(rng.normal(size=(50, 2)), means, mats)
    with pytest.raises(GeovizError, match="bootstrap replicates"):
        bootstrap_q(d, 3)
    with pytest.raises(GeovizError, match="bootstrap replicates"):
        bootstrap_q(d, MAX_REPLICATES + 1)
    with pytest.raises(GeovizError, match="level"):
        bootstrap_q(d, 50, level=1.5)
    boot = bootstrap_q(d, 50)
    with pytest.raises(WeightsError):
        boot.objective_interval([0.5, 0.6, -0.1])
    # identical references: the objective is flat, no region
    same = _distances(rng.normal(size=(50, 2)), [means[0]] * 3, [mats[0]] * 3)
    flat = bootstrap_q(same, 50)
    assert flat.flat
    with pytest.raises(GeovizError, match="identical as seen from Q"):
        flat.as_good_as_a_hat(simplex_grid(3, 4))


def test_too_many_replicates_for_memory(monkeypatch):
    import geoviz.geodesic.uncertainty as unc

    rng = np.random.default_rng(7)
    means, mats = _affine_maps()
    d = _distances(rng.normal(size=(50, 2)), means, mats)
    monkeypatch.setattr(unc, "memory_limit_bytes", lambda: 10_000)
    with pytest.raises(ResourceError, match="fewer replicates"):
        bootstrap_q(d, 1000)


def test_manifest_has_the_documented_keys():
    rng = np.random.default_rng(8)
    means, mats = _affine_maps()
    boot = bootstrap_q(_distances(rng.normal(size=(100, 2)), means, mats), 40, seed=2)
    out = boot.manifest()
    for key in ("a_hat_low", "a_hat_high", "w_to_target_low", "w_to_target_high"):
        assert len(out[key]) == 3 and all(isinstance(v, float) for v in out[key])
    assert out["replicates"] == 40 and out["method"] == "q-resample"
    assert all(lo <= hi for lo, hi in zip(out["a_hat_low"], out["a_hat_high"], strict=True))


def test_shapes_are_checked():
    with pytest.raises(GeovizError, match="shape"):
        GeodesicBootstrap(
            method="q-resample",
            seed=0,
            n_samples=10,
            w_to_target=np.zeros(3),
            w_between=np.zeros((3, 3)),
            a_hat=np.ones(3) / 3,
            w_to_target_replicates=np.zeros((5, 3)),
            w_between_replicates=np.zeros((5, 2, 2)),
            a_hat_replicates=np.zeros((5, 3)),
        )
