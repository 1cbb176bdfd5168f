"""Seeded synthetic datasets: chess-board mixture and Gaussian mixtures."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from geoviz import limits
from geoviz.data.synthetic import (
    CHESSBOARD_CLASSES,
    chessboard_centers,
    chessboard_gmm,
    chessboard_pattern,
    gaussian_mixture,
)
from geoviz.errors import DatasetError


def _nearest_cell(x: np.ndarray, spacing: float) -> tuple[np.ndarray, np.ndarray]:
    centers = chessboard_centers(spacing).reshape(16, 2)
    cell = np.argmin(((x[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
    return cell // 4, cell % 4


def test_chessboard_sizes_and_determinism() -> None:
    a = chessboard_gmm(50, seed=1)
    b = chessboard_gmm(50, seed=1)
    assert a.n_samples == 800 and a.n_features == 2 and a.image_shape is None
    assert a.classes == CHESSBOARD_CLASSES
    assert a.class_counts().tolist() == [200] * 4
    assert a.fingerprint == b.fingerprint
    assert chessboard_gmm(50, seed=2).fingerprint != a.fingerprint
    assert chessboard_gmm(50, seed=1, split="test").fingerprint != a.fingerprint


def test_chessboard_classes_form_a_chess_board_pattern() -> None:
    ds = chessboard_gmm(100, std=0.2, spacing=2.0, seed=0)
    rows, cols = _nearest_cell(ds.features.numpy(), 2.0)
    y = ds.labels.numpy()
    # isotropic std 0.2 vs half-spacing 1.0: practically every point is in its own cell
    assert np.mean(y == 2 * (rows % 2) + (cols % 2)) > 0.999
    # each class owns exactly four cells, two apart in both directions
    pattern = chessboard_pattern()
    for c in range(4):
        cells = np.argwhere(pattern == c)
        assert len(cells) == 4
        assert set(np.diff(np.unique(cells[:, 0])).tolist()) == {2}
        assert set(np.diff(np.unique(cells[:, 1])).tolist()) == {2}
    # neighbouring cells never share a class
    assert (pattern[:, 1:] != pattern[:, :-1]).all() and (pattern[1:] != pattern[:-1]).all()
    # component means sit on the grid
    comp_means = ds.features.numpy().reshape(16, 100, 2).mean(axis=1)
    np.testing.assert_allclose(comp_means, chessboard_centers(2.0).reshape(16, 2), atol=0.1)


def test_chessboard_permutation_relabels_the_same_points() -> None:
    perm = (2, 3, 0, 1)
    base = chessboard_gmm(20, seed=4, class_names=("w", "x", "y", "z"))
    permuted = chessboard_gmm(20, seed=4, class_names=("w", "x", "y", "z"), permutation=perm)
    assert torch.equal(base.features, permuted.features)
    assert torch.equal(permuted.labels, torch.tensor(perm)[base.labels])
    assert base.fingerprint != permuted.fingerprint
    assert permuted.classes == ("w", "x", "y", "z")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"permutation": (0, 1, 2)},
        {"permutation": (0, 0, 1, 2)},
        {"class_names": ("a", "b")},
        {"class_names": ("a", "a", "b", "c")},
        {"std": 0.0},
        {"n_per_component": 0},
        {"split": "val"},
    ],
)
def test_chessboard_rejects_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(DatasetError):
        chessboard_gmm(**kwargs)


@pytest.mark.parametrize("dim", [2, 3])
def test_gaussian_mixture_structure(dim: int) -> None:
    ds = gaussian_mixture(
        n_classes=5, dim=dim, n_per_class=400, spread=6.0, seed=3, std=0.5, anisotropy=0.4
    )
    assert ds.n_samples == 2000 and ds.n_features == dim and ds.n_classes == 5
    assert ds.class_counts().tolist() == [400] * 5
    assert ds.name == f"gmm{dim}d" and ds.classes == ("0", "1", "2", "3", "4")
    x, y = ds.features.numpy().astype(np.float64), ds.labels.numpy()
    means = np.stack([x[y == c].mean(axis=0) for c in range(5)])
    np.testing.assert_allclose(np.linalg.norm(means, axis=1), 6.0, atol=0.15)
    # axis standard deviations lie in [anisotropy * std, std]
    for c in range(5):
        sd = np.sqrt(np.linalg.eigvalsh(np.cov(x[y == c].T)))
        assert sd.min() > 0.4 * 0.5 * 0.85 and sd.max() < 0.5 * 1.15


def test_gaussian_mixture_determinism_and_splits() -> None:
    a = gaussian_mixture(3, 2, 300, seed=7)
    assert a.fingerprint == gaussian_mixture(3, 2, 300, seed=7).fingerprint
    assert a.fingerprint != gaussian_mixture(3, 2, 300, seed=8).fingerprint
    test = gaussian_mixture(3, 2, 300, seed=7, split="test")
    assert a.fingerprint != test.fingerprint
    # train and test are draws from the same mixture: class means agree
    for c in range(3):
        m_train = a.features[a.labels == c].mean(0)
        m_test = test.features[test.labels == c].mean(0)
        assert torch.linalg.norm(m_train - m_test) < 0.2
    named = gaussian_mixture(2, 3, 10, class_names=["cat", "dog"], name="pets")
    assert named.classes == ("cat", "dog") and named.name == "pets"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dim": 4},
        {"n_classes": 1},
        {"n_per_class": 0},
        {"spread": -1.0},
        {"anisotropy": 1.5},
        {"class_names": ("a",)},
    ],
)
def test_gaussian_mixture_rejects_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(DatasetError):
        gaussian_mixture(**kwargs)


@pytest.mark.parametrize(
    ("make", "kwargs", "match"),
    [
        # the issue: n_per_class = 1e9 took 14.9 GiB before failing
        (gaussian_mixture, {"n_per_class": 10**9}, r"n_per_class must be at most 200,000"),
        (gaussian_mixture, {"n_classes": 10**6}, r"n_classes must be at most 1,000"),
        (
            gaussian_mixture,
            {"n_classes": 1000, "n_per_class": 201},
            r"1,000 x 201 = 201,000 samples, more than the 200,000",
        ),
        (gaussian_mixture, {"seed": -1}, r"seed must be between 0 and 2,147,483,647, got -1"),
        (chessboard_gmm, {"n_per_component": 10**9}, r"n_per_component must be at most 12,500"),
        (chessboard_gmm, {"seed": 2**40}, r"seed must be between 0 and"),
    ],
)
def test_generators_refuse_sizes_beyond_the_limits_before_drawing(make, kwargs, match) -> None:
    start = time.perf_counter()
    with pytest.raises(DatasetError, match=match) as info:
        make(**kwargs)
    assert time.perf_counter() - start < 0.5  # refused before any sample is drawn
    assert str(info.value).count("\n") == 0


def test_generators_accept_the_largest_allowed_sizes() -> None:
    ds = gaussian_mixture(n_classes=1000, n_per_class=2, seed=0)
    assert ds.n_classes == 1000 and ds.n_samples == 2000
    assert chessboard_gmm(n_per_component=12_500).n_samples == limits.MAX_SYNTHETIC_SAMPLES
