"""OTDD maps: barycentric projection, entropic out-of-sample map, protocol, cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from geoviz.backend import DiskCache
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.maps import (
    BarycentricMap,
    DatasetMap,
    EntropicMap,
    FittedBarycentricMap,
    FittedEntropicMap,
    apply_map,
)
from geoviz.ot.otdd import otdd
from geoviz.ot.otdd_cost import OTDDConfig

CUDA = pytest.param(
    "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
)


def gmm(n: int, seed: int, classes=("a", "b", "c", "d"), name="gmm", dim: int = 2):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    rng.shuffle(y)
    centers = np.zeros((4, dim))
    centers[:, :2] = [[0, 0], [0, 4], [4, 0], [4, 4]]
    x = centers[y] + rng.normal(size=(n, dim)) * 0.6
    return LabeledDataset(x.astype(np.float32), y, tuple(classes), name=name)


@pytest.fixture
def cache(tmp_path) -> DiskCache:
    return DiskCache(tmp_path / "cache")


@pytest.fixture
def pair():
    return gmm(60, 1, name="Q"), gmm(48, 2, classes=("w", "x", "y", "z"), name="P")


def test_barycentric_equals_normalised_coupling_products(pair, cache):
    q, p = pair
    fitted = BarycentricMap(OTDDConfig(), cache=cache, keep_coupling=True).fit(q, p)
    plan = fitted.coupling_.double()
    assert plan.shape == (60, 48)
    rows = plan / plan.sum(1, keepdim=True)
    want_x = rows @ p.features.double()
    want_y = rows @ p.one_hot(torch.float64)
    torch.testing.assert_close(fitted.mapped_features_.double(), want_x, atol=1e-5, rtol=0)
    torch.testing.assert_close(fitted.soft_labels_.double(), want_y, atol=1e-6, rtol=0)
    # eq. (bary_map): N_Q pi X_P agrees up to the marginal error
    torch.testing.assert_close(60 * plan @ p.features.double(), want_x, atol=1e-2, rtol=0)
    assert fitted.mapped_features_.dtype == torch.float32 and fitted.mapped_features_.shape == (
        60,
        2,
    )
    torch.testing.assert_close(fitted.soft_labels_.sum(1), torch.ones(60), atol=1e-6, rtol=0)
    assert bool((fitted.soft_labels_ >= 0).all())


def test_entropic_map_equals_barycentric_on_training_points(pair, cache):
    q, p = pair
    cfg = OTDDConfig(epsilon=0.02)
    bary = BarycentricMap(cfg, cache=cache).fit(q, p)
    ent = EntropicMap(cfg, cache=cache).fit(q, p)
    x, y = ent.transform(q.features, q.labels)
    torch.testing.assert_close(x, bary.mapped_features_, atol=1e-4, rtol=0)
    torch.testing.assert_close(y, bary.soft_labels_, atol=1e-5, rtol=0)
    assert ent.g_.shape == (48,) and ent.train_index_.shape == (60,)


def test_entropic_map_out_of_sample_is_pointwise(pair, cache):
    q, p = pair
    ent = EntropicMap(OTDDConfig(), cache=cache).fit(q, p)
    new = gmm(30, 3, name="new")
    x_all, y_all = ent.transform(new.features, new.labels)
    x_half, y_half = ent.transform(new.features[10:20], new.labels[10:20])
    torch.testing.assert_close(x_half, x_all[10:20])
    torch.testing.assert_close(y_half, y_all[10:20])
    torch.testing.assert_close(y_all.sum(1), torch.ones(30), atol=1e-6, rtol=0)
    # a new point sitting on a reference point's blob maps into the reference's convex hull
    lo, hi = p.features.min(0).values, p.features.max(0).values
    assert bool(((x_all >= lo - 1e-4) & (x_all <= hi + 1e-4)).all())
    # the label matters: the same feature with another label is mapped elsewhere
    x_other, _ = ent.transform(new.features[:1], (new.labels[:1] + 1) % 4)
    assert float((x_other - x_all[:1]).norm()) > 0.5


def test_protocol_and_flags(pair, cache):
    q, p = pair
    bary = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    ent = EntropicMap(OTDDConfig(), cache=cache).fit(q, p)
    for fitted in (bary, ent):
        assert isinstance(fitted, DatasetMap)
        assert fitted.reference_classes == ("w", "x", "y", "z") and fitted.reference_name == "P"
    assert bary.supports_out_of_sample is False and ent.supports_out_of_sample is True
    assert (
        BarycentricMap.supports_out_of_sample is False
        and EntropicMap.supports_out_of_sample is True
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        bary.mapped_features_ = torch.zeros(1)  # type: ignore[misc]


def test_barycentric_transform_only_training_points(pair, cache):
    q, p = pair
    bary = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    x, y = bary.transform(q.features.clone(), q.labels)
    assert torch.equal(x, bary.mapped_features_) and torch.equal(y, bary.soft_labels_)
    with pytest.raises(GeovizError, match="EntropicMap"):
        bary.transform(q.features + 1.0)
    with pytest.raises(DatasetError, match="shape"):
        bary.transform(torch.zeros(5, 3))


def test_entropic_transform_bad_input(pair, cache):
    q, p = pair
    ent = EntropicMap(OTDDConfig(), cache=cache).fit(q, p)
    with pytest.raises(GeovizError, match="labels"):
        ent.transform(q.features)
    with pytest.raises(DatasetError, match=r"0\.\.3"):
        ent.transform(q.features[:2], torch.tensor([0, 7]))
    with pytest.raises(DatasetError, match="shape"):
        ent.transform(q.features[:2, :1], torch.tensor([0, 1]))
    bad = q.features[:2].clone()
    bad[0, 0] = float("nan")
    with pytest.raises(DatasetError, match="NaN"):
        ent.transform(bad, torch.tensor([0, 1]))
    with pytest.raises(GeovizError, match="OTDDConfig"):
        EntropicMap({"epsilon": 1})  # type: ignore[arg-type]


def test_dimension_mismatch(cache):
    q = gmm(20, 4)
    p = gmm(20, 5, dim=3)
    for est in (BarycentricMap(cache=cache), EntropicMap(cache=cache)):
        with pytest.raises(DatasetError, match="feature dimensions differ"):
            est.fit(q, p)


def test_relabelled_reference_permutes_soft_labels(pair, cache):
    q, p = pair
    perm = np.array([2, 3, 1, 0])
    names = [None] * 4
    for old, new in enumerate(perm):
        names[new] = f"new-{p.classes[old]}"
    p2 = LabeledDataset(p.features, perm[p.labels.numpy()], tuple(names), name="P2")
    for est in (BarycentricMap(OTDDConfig(), cache=cache), EntropicMap(OTDDConfig(), cache=cache)):
        a = est.fit(q, p)
        b = est.fit(q, p2)
        xa, ya = a.transform(q.features, q.labels)
        xb, yb = b.transform(q.features, q.labels)
        torch.testing.assert_close(xb, xa)
        torch.testing.assert_close(yb[:, perm], ya)
        assert b.otdd_.cost == pytest.approx(a.otdd_.cost, rel=1e-6)


def test_cache_hits_and_misses(pair, cache):
    q, p = pair
    first = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    again = BarycentricMap(OTDDConfig(device="cpu"), cache=cache).fit(q, p)
    assert (cache.misses_, cache.hits_) == (1, 1)
    assert torch.equal(first.mapped_features_, again.mapped_features_)
    assert again.otdd_.cost == first.otdd_.cost
    BarycentricMap(OTDDConfig(epsilon=0.2), cache=cache).fit(q, p)
    BarycentricMap(OTDDConfig(), cache=cache).fit(p, q)
    assert cache.misses_ == 3
    e1 = EntropicMap(OTDDConfig(), cache=cache).fit(q, p)
    e2 = EntropicMap(OTDDConfig(), cache=cache).fit(q, p)
    assert cache.misses_ == 4 and cache.hits_ == 2
    torch.testing.assert_close(e1.g_, e2.g_)


def test_default_cache_location(pair, monkeypatch, tmp_path):
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "default"))
    q, p = pair
    BarycentricMap(OTDDConfig()).fit(q, p)
    assert any((tmp_path / "default" / "barycentric_map").glob("*.pt"))


def test_batched_map_with_large_batch_equals_full(pair, cache):
    q, p = pair
    full = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    batched = BarycentricMap(OTDDConfig(batch_size=100), cache=cache).fit(q, p)
    torch.testing.assert_close(batched.mapped_features_, full.mapped_features_)
    torch.testing.assert_close(batched.soft_labels_, full.soft_labels_)
    small = BarycentricMap(OTDDConfig(batch_size=16, reference_subsample=20), cache=cache).fit(q, p)
    assert small.otdd_.n_batches == 4 and small.coupling_ is None
    torch.testing.assert_close(small.soft_labels_.sum(1), torch.ones(60), atol=1e-5, rtol=0)


def test_entropic_map_with_subsampled_fit(pair, cache):
    q, p = pair
    ent = EntropicMap(OTDDConfig(batch_size=24, reference_subsample=30), cache=cache).fit(q, p)
    assert ent.train_index_.shape == (24,) and ent.reference_index_.shape == (30,)
    assert ent.reference_features_.shape == (30, 2)
    x, y = ent.transform(q.features[ent.train_index_], q.labels[ent.train_index_])
    torch.testing.assert_close(x, ent.otdd_.mapped_features, atol=1e-4, rtol=0)
    torch.testing.assert_close(y, ent.otdd_.soft_labels, atol=1e-5, rtol=0)


def test_chessboard_identity_map(cache):
    def board(seed, classes, name):
        r = np.random.default_rng(seed)
        comp = np.arange(320) % 16
        r.shuffle(comp)
        i, j = comp // 4, comp % 4
        x = np.stack([i * 3.0, j * 3.0], 1) + r.normal(size=(320, 2)) * 0.3
        return LabeledDataset(x.astype(np.float32), (i % 2) * 2 + (j % 2), classes, name=name)

    q = board(1, ("a", "b", "c", "d"), "Q")
    p = board(2, ("B1", "W1", "B2", "W2"), "P")
    fitted = BarycentricMap(OTDDConfig(epsilon=0.01), cache=cache).fit(q, p)
    disp = (fitted.mapped_features_ - q.features).norm(dim=1)
    assert float(disp.mean()) < 0.5
    assert float((fitted.soft_labels_.argmax(1) == q.labels).float().mean()) > 0.97


def test_apply_map_and_to_dataset(pair, cache):
    q, p = pair
    bary = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    ds = bary.to_dataset()
    assert isinstance(ds, SoftLabeledDataset)
    assert ds.class_names == ("P/w", "P/x", "P/y", "P/z") and ds.n_samples == 60
    assert ds.metadata["otdd"]["converged"] is True
    ent = EntropicMap(OTDDConfig(), cache=cache).fit(q, p)
    pushed = apply_map(ent, gmm(25, 9, name="fresh"))
    assert pushed.class_names == ds.class_names and pushed.n_samples == 25
    via = ent.transform_dataset(gmm(25, 9, name="fresh"))
    torch.testing.assert_close(via.features, pushed.features)
    with pytest.raises(DatasetError, match="classes"):
        ent.transform_dataset(gmm(25, 9, classes=("k", "l", "m", "n")))


def test_results_match_plain_otdd(pair, cache):
    q, p = pair
    cfg = OTDDConfig(epsilon=0.1)
    fitted = BarycentricMap(cfg, cache=cache).fit(q, p)
    res = otdd(q, p, cfg, barycentric=True)
    torch.testing.assert_close(fitted.mapped_features_, res.mapped_features)
    assert fitted.otdd_.cost == pytest.approx(res.cost)
    assert isinstance(fitted, FittedBarycentricMap)
    assert isinstance(EntropicMap(cfg, cache=cache).fit(q, p), FittedEntropicMap)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_dtypes_and_devices(pair, cache, dtype, device):
    q, p = pair
    ref = BarycentricMap(OTDDConfig(device="cpu", tol=1e-6), cache=DiskCache(enabled=False)).fit(
        q, p
    )
    cfg = OTDDConfig(dtype=dtype, device=device, tol=1e-6)
    got = BarycentricMap(cfg, cache=cache).fit(q, p)
    assert got.mapped_features_.device.type == "cpu" and got.mapped_features_.dtype == torch.float32
    torch.testing.assert_close(got.mapped_features_, ref.mapped_features_, atol=1e-4, rtol=0)
    ent = EntropicMap(cfg, cache=cache).fit(q, p)
    x, _ = ent.transform(q.features, q.labels)
    torch.testing.assert_close(x, got.mapped_features_, atol=1e-4, rtol=0)
