"""Placing new points into a fitted embedding, and persisting it (geoviz.viz.embedding)."""

from __future__ import annotations

import numpy as np
import pytest

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError
from geoviz.viz.embedding import Embedding, fit_embedding


def _clusters(dim: int = 10) -> tuple[LabeledDataset, LabeledDataset]:
    rng = np.random.default_rng(0)

    def ds(name: str, offsets: list[float]) -> LabeledDataset:
        x = np.concatenate([rng.normal(size=(60, dim)) + o for o in offsets])
        labels = np.repeat(np.arange(len(offsets)), 60)
        return LabeledDataset(x, labels, tuple(f"c{k}" for k in range(len(offsets))), name=name)

    return ds("A", [0.0, 12.0]), ds("B", [-12.0, 24.0])


@pytest.fixture(scope="module")
def umap_embedding() -> tuple[Embedding, LabeledDataset, LabeledDataset]:
    a, b = _clusters()
    emb = fit_embedding([a, b], method="umap", max_per_dataset=120, seed=0)
    assert emb.method == "umap"
    return emb, a, b


def test_place_one_neighbour_returns_the_fitted_point(umap_embedding):
    emb, a, _ = umap_embedding
    x = a.features[emb.indices["A"]]
    np.testing.assert_allclose(emb.place(x, n_neighbors=1), emb.points["A"], atol=1e-9)


def test_place_puts_new_cluster_samples_in_their_cluster(umap_embedding):
    emb, a, b = umap_embedding
    pts = np.concatenate([emb.points["A"], emb.points["B"]])
    labels = np.concatenate(
        [a.labels.numpy()[emb.indices["A"]], 2 + b.labels.numpy()[emb.indices["B"]]]
    )
    centroids = np.stack([pts[labels == k].mean(axis=0) for k in range(4)])
    new = np.random.default_rng(5).normal(size=(20, 10)) + 12.0  # cluster A/c1
    placed = emb.place(new)
    nearest = np.argmin(np.linalg.norm(placed[:, None, :] - centroids[None], axis=2), axis=1)
    assert np.mean(nearest == 1) >= 0.9
    # inside the hull of the fitted points: a weighted mean of fitted coordinates
    assert np.all(placed.min(axis=0) >= pts.min(axis=0) - 1e-9)
    assert np.all(placed.max(axis=0) <= pts.max(axis=0) + 1e-9)


def test_payload_round_trip_places_identically_without_the_reducer(umap_embedding):
    emb, a, _ = umap_embedding
    back = Embedding.from_payload(emb.to_payload())
    assert back.method == "umap" and back.names == emb.names
    new = a.features[:25]
    np.testing.assert_array_equal(back.place(new), emb.place(new))
    with pytest.raises(DatasetError, match="place"):
        back.transform(new)
    with pytest.raises(DatasetError, match="dimensions"):
        back.place(np.zeros((3, 4)))


def test_pca_place_equals_transform_equals_principal_components():
    from sklearn.decomposition import PCA

    a, b = _clusters()
    emb = fit_embedding([a, b], method="pca", max_per_dataset=60, seed=2)
    x = np.concatenate([a.features.numpy()[emb.indices["A"]], b.features.numpy()[emb.indices["B"]]])
    reference = PCA(n_components=10, random_state=2).fit(x)
    new = np.random.default_rng(1).normal(size=(7, 10)) * 5
    expected = reference.transform(new)[:, :2]
    for placed in (
        emb.place(new),
        emb.transform(new),
        Embedding.from_payload(emb.to_payload()).place(new),
    ):
        # principal axes are defined up to sign
        np.testing.assert_allclose(np.abs(placed), np.abs(expected), atol=1e-3)


def test_umap_kernels_are_cached_on_disk_across_processes():
    """umap-learn compiles its kernels without numba's disk cache; geoviz turns it on so a
    restarted server does not spend ~8 s compiling before its first fit."""
    pytest.importorskip("umap")
    from geoviz.viz.embedding import _cache_numba_kernels, _import_umap

    umap = _import_umap()
    from umap import layouts, umap_

    for kernel in (umap_.smooth_knn_dist, umap_.fast_knn_indices, layouts.clip):
        assert type(kernel._cache).__name__ != "NullCache", kernel
    assert _cache_numba_kernels("umap") == 0  # idempotent: nothing left to switch
    assert umap.UMAP is not None
