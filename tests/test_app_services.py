"""The app's services without Streamlit: disk persistence, placements, hard-label shares."""

from __future__ import annotations

import numpy as np
import pytest

from geoviz.app import services
from geoviz.app.state import DatasetChoice, SessionModel, Upload, default_scenario
from geoviz.data.formats import load_upload


@pytest.fixture
def fresh_server(tmp_path, monkeypatch):
    """An empty disk cache and an empty in-memory store (as after a server restart)."""
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEOVIZ_APP_N", "60")
    monkeypatch.setenv("GEOVIZ_APP_EMBED_N", "40")
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")
    services.store().clear()
    yield tmp_path
    services.store().clear()


def _npz_bytes(n: int = 40, seed: int = 0) -> bytes:
    import io

    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    np.savez(buf, x=rng.normal(size=(n, 2)).astype(np.float32), y=np.arange(n) % 2)
    return buf.getvalue()


def test_upload_is_found_by_its_digest_after_a_restart(fresh_server):
    data = _npz_bytes()
    up = Upload("blobs.npz", data)
    services.save_upload(up)
    services.save_upload(up)  # idempotent
    back = services.stored_upload(up.digest)
    assert back is not None and back.data == data and back.filename == "blobs.npz"
    assert services.stored_upload("0" * 64) is None

    # a new session (e.g. a shared URL) without the upload in its state loads it from disk
    model = SessionModel({})
    model.scenario = default_scenario().with_(
        target=DatasetChoice.from_upload(up),
        references=(DatasetChoice("gmm2d", seed=1), DatasetChoice("gmm2d", seed=2)),
        n_target=40,
        n_reference=40,
    )
    assert model.uploads == {}
    loaded = services.scenario_data(model).target
    expected = load_upload(data, "blobs.npz")
    assert loaded.n_samples == expected.n_samples == 40
    np.testing.assert_allclose(loaded.features.numpy(), expected.features.numpy(), atol=1e-6)


def test_missing_upload_is_a_clear_error(fresh_server):
    from geoviz.errors import DatasetError

    model = SessionModel({})
    ghost = Upload("gone.npz", b"never saved")
    model.scenario = default_scenario().with_(target=DatasetChoice.from_upload(ghost))
    with pytest.raises(DatasetError, match="upload it again"):
        services.scenario_data(model)


def test_embedding_and_placement_come_back_from_disk_after_a_restart(fresh_server):
    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=60, n_reference=60)
    data = services.scenario_data(model)
    emb = services.embedding(model, data)
    q_idx = emb.indices[emb.names[0]]
    features = data.target.features[q_idx]
    placed = services.place_points(model, emb, features, ("pa", 0.2, 0.3, 0.5))

    services.store().clear()  # the restart: memory gone, disk kept
    disk = services._disk()
    hits = disk.hits_
    emb2 = services.embedding(model, data)
    placed2 = services.place_points(model, emb2, features, ("pa", 0.2, 0.3, 0.5))
    assert disk.hits_ == hits + 2  # both read back, nothing refitted
    for name in emb.names:
        np.testing.assert_array_equal(emb2.points[name], emb.points[name])
        np.testing.assert_array_equal(emb2.indices[name], emb.indices[name])
    np.testing.assert_array_equal(placed2, placed)
    # PCA placement is exact: the first two principal components of the features
    np.testing.assert_allclose(placed, emb.transform(features), atol=1e-5)


def test_hard_label_shares_follow_the_weights(fresh_server):
    from geoviz.export import dataset_hard_labels
    from geoviz.geodesic.pipeline import GeodesicConfig, fit_geodesic
    from geoviz.ot.otdd import OTDDConfig

    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=200, n_reference=60)
    data = services.scenario_data(model)
    result = fit_geodesic(
        data.target, list(data.references), GeodesicConfig(otdd=OTDDConfig(epsilon=0.01))
    )
    weights = np.array([0.5, 0.3, 0.2])
    pa = services.interpolation(model, result, weights)
    table = services.hard_label_shares(result, pa, "block-sample", 0)
    n = pa.n_samples
    sigma = np.sqrt(weights * (1 - weights) / n)
    shares = table["hard-label share (block-sample)"].to_numpy()
    assert np.all(np.abs(shares - weights) <= 4 * sigma), (shares, weights)
    np.testing.assert_allclose(table["weight a_i"], weights)
    np.testing.assert_allclose(table["soft-label mass"], weights, atol=1e-5)
    # the table counts exactly the labels an export writes
    _, info = dataset_hard_labels(pa, "block-sample", 0)
    np.testing.assert_allclose(shares, [b["share"] for b in info["blocks"]])
    top = pa.soft_labels.numpy().argmax(1)
    for i, block in enumerate(result.block_slices):
        cols = np.arange(pa.soft_labels.shape[1])[block]
        assert table["hard-label share (argmax)"][i] == pytest.approx(np.isin(top, cols).mean())
