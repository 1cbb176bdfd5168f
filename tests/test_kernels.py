"""The sparse kernel's support at full size: a cap per row and candidate lists.

Checked against brute force on dense matrices (every row's true top entries) and, end to
end, the streamed capped solve against the stored dense solve on a size where both fit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.ot.geometry import PointCloudCost
from geoviz.ot.otdd import otdd
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.ot.support import Candidates, select_support


def _cloud(n: int, m: int, seed: int) -> PointCloudCost:
    rng = np.random.default_rng(seed)
    xq = torch.from_numpy(rng.normal(size=(n, 3)).astype(np.float32))
    xp = torch.from_numpy(rng.normal(size=(m, 3)).astype(np.float32))
    yq = torch.from_numpy(rng.integers(0, 2, n))
    yp = torch.from_numpy(rng.integers(0, 2, m))
    lab = torch.tensor([[0.0, 2.0], [2.0, 0.0]], dtype=torch.float64)
    return PointCloudCost(xq, xp, labels=yq, labels_ref=yp, label_cost=lab)


def _entries(support) -> set[tuple[int, int]]:
    return set(zip(support.rows.tolist(), support.cols.tolist(), strict=True))


def test_candidates_are_each_rows_largest_scores():
    geom = _cloud(70, 90, 0)
    c = geom.dense().double()
    g = torch.from_numpy(np.random.default_rng(1).normal(size=90))
    eps = 0.3
    cand = Candidates.scan(geom, g, eps, 12)
    score = (g[None, :] - c) / eps
    for i in range(70):
        expect = set(torch.topk(score[i], 12).indices.tolist())
        assert set(cand.cols[i].tolist()) == expect
        assert cand.cols[i].tolist() == sorted(cand.cols[i].tolist())
    torch.testing.assert_close(cand.cost.double(), c.gather(1, cand.cols), rtol=0, atol=1e-5)
    assert torch.equal(cand.best_row, c.min(0).indices)


@pytest.mark.parametrize("balanced", [False, True])
def test_candidate_selection_equals_a_capped_pass(balanced):
    """With every column a candidate, choosing among the candidates is the pass itself."""
    geom = _cloud(60, 50, 2)
    rng = np.random.default_rng(3)
    g = torch.from_numpy(rng.normal(size=50))
    f = torch.from_numpy(rng.normal(size=60)) if balanced else None
    log_a, log_b = torch.full((60,), -np.log(60.0)), torch.full((50,), -np.log(50.0))
    eps, cap, trunc = 0.5, 20 if balanced else 7, 6.0
    extra = {"F": f, "log_a": log_a, "log_b": log_b} if balanced else {}
    full, _ = select_support(geom, g, eps, trunc, 60 * 50 + 50, max_per_row=cap, **extra)
    cand = Candidates.scan(geom, g, eps, 50)
    chosen = cand.select(g, eps, trunc, cap, **extra)
    assert full is not None
    assert _entries(chosen) == _entries(full)


def test_cap_keeps_each_rows_best_and_covers_every_column():
    geom = _cloud(40, 400, 4)
    g = torch.zeros(400, dtype=torch.float64)
    support, _ = select_support(geom, g, 1.0, 50.0, 40 * 400 + 400, max_per_row=5)
    assert support is not None
    c = geom.dense()
    for i in range(40):
        own = set(torch.topk(-c[i], 5).indices.tolist())
        assert own <= {j for r, j in _entries(support) if r == i}
    assert torch.bincount(support.cols, minlength=400).min() >= 1


def _digits(n: int, seed: int, shift: float, name: str) -> LabeledDataset:
    """Ten well-separated 8-d clusters, one class each (a small stand-in for digit sets)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 10
    centres = np.random.default_rng(99).normal(size=(10, 8)) * 4
    x = centres[y] + shift + rng.normal(size=(n, 8))
    return LabeledDataset(x.astype(np.float32), y, tuple(str(c) for c in range(10)), name=name)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "stored"])
def test_capped_solve_matches_the_dense_solve(stream):
    """The full-size solver (32 kept entries per row out of 700, supports chosen among
    candidates) against the stored dense solve on the same problem: on a streamed cost (one
    problem at full size) and on a stored one (each batch of the batched mode).

    Tolerances: the cap drops at most the mass the verification measures (``tol``), so the
    OTDD values agree to 1e-3 relative, the plans to 2 x tol in L1, and each mapped point
    lies within 1 % of the feature scale of the dense map's.
    """
    q, p = _digits(600, 0, 0.0, "Q"), _digits(700, 1, 0.5, "P")
    dense_cfg = OTDDConfig(solver="dense", tol=1e-5)
    streamed_cfg = dataclasses.replace(
        dense_cfg, solver="auto", stream_reference=stream, support_per_row=32
    )
    dense = otdd(q, p, dense_cfg, barycentric=True)
    streamed = otdd(q, p, streamed_cfg, barycentric=True, keep_coupling=False)
    assert streamed.converged and streamed.solver_mode == "sparse"
    assert streamed.marginal_error <= 1e-5
    assert streamed.cost == pytest.approx(dense.cost, rel=1e-3)
    scale = float(p.features.std())
    gap = (streamed.mapped_features - dense.mapped_features).norm(dim=1)
    assert float(gap.max()) <= 0.01 * scale * np.sqrt(p.n_features)
    torch.testing.assert_close(streamed.soft_labels, dense.soft_labels, atol=1e-2, rtol=0)
    # the plans: the streamed one rebuilt from its potentials on the dense cost
    # (on the CPU: with CUDA the solves ran on the GPU)
    f, g = (t.cpu() for t in streamed.potentials)
    c = torch.as_tensor(dense_cfg.cost_geometry(q, p, streamed.label_distances).dense())
    c = c.cpu().double()
    plan = torch.exp((f[:, None] + g[None, :] - c) / streamed.epsilon_abs) / (600 * 700)
    assert float((plan - dense.coupling.cpu().double()).abs().sum()) <= 2e-3
    assert streamed.effective_neighbours == pytest.approx(dense.effective_neighbours, rel=0.05)


def test_rows_wider_than_the_cap_get_more_entries():
    """At a blurrier epsilon a mapped point spreads over ~10 reference points, but the cap
    keeps 3 per row: the verification measures the missing mass and widens those rows until
    the dense plan meets the tolerance, so the value is still the dense solve's."""
    q, p = _digits(300, 2, 0.0, "Q"), _digits(320, 3, 0.5, "P")
    dense = otdd(q, p, OTDDConfig(solver="dense", epsilon=0.01, tol=1e-5), keep_coupling=False)
    capped = otdd(
        q,
        p,
        OTDDConfig(epsilon=0.01, tol=1e-5, stream_reference=True, support_per_row=3),
        keep_coupling=False,
    )
    assert dense.effective_neighbours > 3  # the cap alone could not hold these rows
    assert capped.converged and capped.marginal_error <= 1e-5
    assert capped.cost == pytest.approx(dense.cost, rel=1e-4)
