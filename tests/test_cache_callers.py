"""The disk cache's callers state what they read (issue 32): a damaged entry of a map, an
OTDD solve or a feature space is warned about and recomputed, never used or blamed on a
dataset."""

from __future__ import annotations

import warnings

import pytest
import torch
from cache_forgery import forge_entry

from geoviz.backend import CacheCorruptWarning, DiskCache
from geoviz.data.synthetic import gaussian_mixture
from geoviz.features.base import FittedFeatures
from geoviz.maps.barycentric import BarycentricMap, EntropicMap
from geoviz.ot.otdd import otdd
from geoviz.ot.otdd_cost import OTDDConfig


def _only_entry(cache: DiskCache, namespace: str) -> str:
    (path,) = (cache.directory / namespace).glob("*.pt")
    return path.stem


def _forge(cache: DiskCache, namespace: str, mutate, *, sign: str) -> None:
    """Edit the one entry of ``namespace`` and sign it again: with a plain sha256 (what the
    old envelope was), or with the folder's secret and a structure that matches the edit
    (a forger who has the secret: only the caller's expectations can tell)."""
    forge_entry(
        cache,
        namespace,
        _only_entry(cache, namespace),
        lambda envelope: mutate(envelope["payload"]),
        sign="sha256" if sign == "sha256" else "secret+structure",
    )


@pytest.fixture(scope="module")
def pair():
    return (
        gaussian_mixture(n_classes=3, n_per_class=12, seed=0),
        gaussian_mixture(n_classes=2, n_per_class=15, seed=1),
    )


def _transpose_coupling(payload):
    payload["coupling"] = payload["coupling"].T.contiguous()


def _drop_labels(payload):
    del payload["label_distances"]


def _nan_projection(payload):
    payload["mapped_features"][0, 0] = float("nan")


@pytest.mark.parametrize("sign", ["sha256", "secret"])
@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (_transpose_coupling, r"'coupling' has shape \(30, 36\), expected \(36, 30\)"),
        (_drop_labels, "lacks 'label_distances'"),
        (_nan_projection, "'mapped_features' holds NaN"),
    ],
)
def test_a_damaged_otdd_entry_is_recomputed(tmp_path, pair, mutate, reason, sign):
    q, p = pair
    cache = DiskCache(tmp_path)
    cfg = OTDDConfig()
    fresh = otdd(q, p, cfg, barycentric=True, keep_coupling=True)
    otdd(q, p, cfg, barycentric=True, keep_coupling=True, cache=cache)
    _forge(cache, "otdd", mutate, sign=sign)
    why = "signature does not match" if sign == "sha256" else reason
    with pytest.warns(
        CacheCorruptWarning, match=rf"geoviz cache entry .*\.pt is corrupt \(.*{why}"
    ):
        again = otdd(q, p, cfg, barycentric=True, keep_coupling=True, cache=cache)
    assert torch.allclose(again.coupling, fresh.coupling)
    assert torch.allclose(again.mapped_features, fresh.mapped_features)
    assert cache.corrupt_ == 1


def test_a_scaled_map_re_signed_is_detected(tmp_path, pair):
    q, p = pair
    cache = DiskCache(tmp_path)
    fresh = BarycentricMap(OTDDConfig(), cache=DiskCache(enabled=False)).fit(q, p)
    BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)

    def scale(payload):
        payload["mapped_features"] = payload["mapped_features"] * 3.0

    _forge(cache, "barycentric_map", scale, sign="sha256")
    with pytest.warns(CacheCorruptWarning, match="barycentric_map.*signature does not match"):
        again = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    assert torch.allclose(again.mapped_features_, fresh.mapped_features_)


@pytest.mark.parametrize("sign", ["sha256", "secret"])
def test_nan_feature_vectors_are_not_blamed_on_the_dataset(tmp_path, pair, sign):
    q, _ = pair
    cache = DiskCache(tmp_path)
    space = FittedFeatures(
        name="double", digest="d" * 64, dim=2, encode=lambda x: 2.0 * x, cache=cache
    )
    expected = space.transform(q).features.clone()

    def poison(payload):
        payload["features"][3, 1] = float("nan")

    _forge(cache, "feature_vectors", poison, sign=sign)
    with pytest.warns(CacheCorruptWarning, match="feature_vectors.*corrupt"):
        again = space.transform(q)  # not a DatasetError naming q's source
    assert torch.equal(again.features, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(space.transform(q).features, expected)


def test_wrong_width_feature_vectors_are_recomputed(tmp_path, pair):
    q, _ = pair
    cache = DiskCache(tmp_path)
    space = FittedFeatures(name="same", digest="e" * 64, dim=2, encode=lambda x: x, cache=cache)
    space.transform(q)

    def widen(payload):
        payload["features"] = torch.cat([payload["features"]] * 2, dim=1)

    _forge(cache, "feature_vectors", widen, sign="secret")
    with pytest.warns(CacheCorruptWarning, match=r"'features' has shape \(36, 4\), expected"):
        assert space.transform(q).features.shape == (36, 2)


def test_cached_results_read_back_without_warnings(tmp_path, pair):
    """The expectations hold for what the callers really store (no false alarms)."""
    q, p = pair
    cache = DiskCache(tmp_path)
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheCorruptWarning)
            otdd(q, p, OTDDConfig(), barycentric=True, keep_coupling=True, cache=cache)
            otdd(q, p, OTDDConfig(batch_size=16), keep_coupling=False, cache=cache)
            BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
            EntropicMap(OTDDConfig(batch_size=20, reference_subsample=16), cache=cache).fit(q, p)
    assert cache.hits_ == 4 and cache.corrupt_ == 0


@pytest.mark.parametrize("field", ["a_hat", "a_hat_replicates"])
def test_a_forged_explorer_bootstrap_is_recomputed(fresh_server, field):
    """The explorer's bootstrap cache (issue 26): replicates of another shape, or estimates
    that are not the result's, are a corrupt entry even when the structure was forged too."""
    import numpy as np

    from geoviz.app.services import caches as cache_services
    from geoviz.app.services import datasets as dataset_services
    from geoviz.app.services import geodesic as geodesic_service
    from geoviz.app.session import SessionModel
    from geoviz.app.settings import default_scenario
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic

    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=60, n_reference=60)
    data = dataset_services.scenario_data(model)
    result = fit_geodesic(data.target, list(data.references), GeodesicConfig())
    disk = cache_services.disk_cache()
    first = geodesic_service.cached_bootstrap(result, 20, disk, seed=3)

    def forge(payload):
        value = payload[field]
        payload[field] = value[:-1] if field.endswith("replicates") else value * 0.5

    _forge(disk, geodesic_service.BOOTSTRAP_NAMESPACE, forge, sign="secret")
    with pytest.warns(CacheCorruptWarning, match="corrupt"):
        again = geodesic_service.cached_bootstrap(result, 20, disk, seed=3)
    np.testing.assert_array_equal(again.a_hat_replicates, first.a_hat_replicates)
    np.testing.assert_array_equal(again.a_hat, first.a_hat)
