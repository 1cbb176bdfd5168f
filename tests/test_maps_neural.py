"""OTDD neural map (paper Sec. 3.1 eq. (max-min), appendix B): closed forms and the map protocol.

The checks compare the trained map with answers that do not come from training:
the affine Monge map between two Gaussians (Bures formula), the zero-cost
map of the chess-board mixture (identity features, permuted classes), the
identity map between two samples of one distribution, and the barycentric map
of the same problem. Every fit is seeded, so the numbers are reproducible.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy.linalg import sqrtm

from geoviz.backend import DiskCache, configure_torch
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.data.synthetic import chessboard_gmm
from geoviz.errors import DatasetError, GeovizError
from geoviz.maps import BarycentricMap, DatasetMap
from geoviz.maps.networks import (
    ConvCritic,
    UNetGenerator,
    VectorGenerator,
    build_networks,
    choose_architecture,
)
from geoviz.maps.neural import FittedNeuralMap, NeuralOTDDMap
from geoviz.maps.neural_config import NEURAL_PRESETS, NeuralMapConfig, get_neural_preset
from geoviz.maps.neural_training import _IMPROVEMENT
from geoviz.ot.otdd_cost import OTDDConfig

#: A 2-D budget that converges on the test problems in seconds (the "tiny"
#: preset is for smoke runs; these checks need a converged map).
FAST_2D = NeuralMapConfig(
    iterations=600,
    batch_size=256,
    learning_rate=2e-3,
    ema_decay=0.95,
    hidden=64,
    n_blocks=2,
    classifier_iterations=100,
    holdout=0.3,
    eval_every=50,
    patience=3,
)

S_Q = np.array([[1.0, 0.3], [0.3, 0.5]])
S_P = np.array([[2.0, -0.6], [-0.6, 1.0]])
M_Q = np.zeros(2)
M_P = np.array([3.0, 1.0])


def _gaussian(mean, cov, n, seed, classes, name):
    rng = np.random.default_rng(seed)
    x = rng.multivariate_normal(mean, cov, n).astype(np.float32)
    # labels independent of x: every class-conditional is the whole Gaussian, so the
    # label cost is the same for every coupling and the OTDD map is the Gaussian one
    return LabeledDataset(x, rng.integers(0, 2, n), classes, name=name)


def _bures_map():
    """The affine Monge map ``T(x) = m_P + A (x - m_Q)`` and ``W_2^2`` (closed forms)."""
    root = np.real(sqrtm(S_Q))
    inv = np.linalg.inv(root)
    middle = np.real(sqrtm(root @ S_P @ root))
    a = inv @ middle @ inv
    w2 = float(np.sum((M_Q - M_P) ** 2) + np.trace(S_Q + S_P - 2 * middle))
    return a, w2


@pytest.fixture(scope="module", autouse=True)
def torch_like_an_entry_point():
    """Flush denormals as the entry points do (``configure_torch``): a fit no longer sets it,
    and subnormal Adam moments made CPU steps ~10x slower. Restored after the module."""
    before = configure_torch(threads=None, flush_denormal=True)
    yield
    configure_torch(before.threads, before.flush_denormal)


@pytest.fixture(scope="module")
def gaussian_fit(tmp_path_factory):
    q = _gaussian(M_Q, S_Q, 1000, 0, ("a", "b"), "Q")
    p = _gaussian(M_P, S_P, 1000, 1, ("u", "v"), "P")
    cache = DiskCache(tmp_path_factory.mktemp("neural_gauss"))
    return q, p, NeuralOTDDMap(FAST_2D, cache=cache).fit(q, p), cache


def test_gaussian_transport_cost_matches_the_closed_form(gaussian_fit):
    q, p, fitted, _ = gaussian_fit
    a, w2 = _bures_map()
    assert abs(fitted.transport_cost_ / w2 - 1) < 0.05
    exact = (q.features.numpy() - M_Q) @ a.T + M_P
    err = np.mean(np.sum((fitted.mapped_features_.numpy() - exact) ** 2, 1))
    assert err < 0.02 * w2
    # the pushforward is P: exact OT cost between G#Q and P's samples is a small
    # fraction of W_2^2(Q, P) (two 1000-point samples of one law are ~0.05 apart)
    import ot

    mapped = fitted.mapped_features_.double().numpy()
    fidelity = ot.emd2([], [], ot.dist(mapped, p.features.double().numpy()))
    assert fidelity < 0.03 * w2


def test_gaussian_map_generalises_out_of_sample(gaussian_fit):
    _, _, fitted, _ = gaussian_fit
    a, w2 = _bures_map()
    fresh = _gaussian(M_Q, S_Q, 500, 7, ("a", "b"), "Q_new")
    x, soft = fitted.transform(fresh.features, fresh.labels)
    exact = (fresh.features.numpy() - M_Q) @ a.T + M_P
    assert np.mean(np.sum((x.numpy() - exact) ** 2, 1)) < 0.02 * w2
    assert soft.shape == (500, 2)
    torch.testing.assert_close(soft.sum(1), torch.ones(500))


def test_gaussian_early_stopping_kept_better_than_identity(gaussian_fit):
    _, _, fitted, _ = gaussian_fit
    hist = fitted.history_
    assert len(hist["iteration"]) == len(hist["heldout_ot"]) >= 2
    # the kept score is one of the evaluations, and no later one beat it by the improvement
    # threshold that resets patience (a 0.07 % gain is noise, not a new best: neural.py)
    scores = [float(s) for s in hist["heldout_ot"]]
    kept_at = [int(i) for i in hist["iteration"]].index(fitted.best_iteration_)
    assert fitted.heldout_ot_ == pytest.approx(scores[kept_at])
    assert min(scores) >= fitted.heldout_ot_ * (1.0 - _IMPROVEMENT)
    assert fitted.heldout_ot_ < 0.05 * fitted.heldout_ot_identity_
    assert fitted.best_iteration_ in [int(i) for i in hist["iteration"]]


def test_cache_returns_the_same_map(gaussian_fit):
    q, p, fitted, cache = gaussian_fit
    hits = cache.hits_
    again = NeuralOTDDMap(FAST_2D, cache=cache).fit(q, p)
    assert cache.hits_ == hits + 1
    torch.testing.assert_close(again.mapped_features_, fitted.mapped_features_)
    x1, y1 = fitted.transform(q.features[:50], q.labels[:50])
    x2, y2 = again.transform(q.features[:50], q.labels[:50])
    torch.testing.assert_close(x1, x2)
    torch.testing.assert_close(y1, y2)
    # the transform of the training points reproduces the stored images
    torch.testing.assert_close(x1, fitted.mapped_features_[:50])
    assert again.summary() == fitted.summary()


def _boards(permutation, classes):
    q = chessboard_gmm(40, seed=1, class_names=("a", "b", "c", "d"), name="Q")
    p = chessboard_gmm(40, seed=2, class_names=classes, permutation=permutation, name="P")
    return q, p


@pytest.mark.filterwarnings("ignore::geoviz.errors.BlurWarning")  # tight clusters: the plan
def test_chessboard_learns_the_zero_cost_map(tmp_path):  # averages a few same-cluster points
    q, p = _boards([2, 0, 3, 1], ("W", "X", "Y", "Z"))
    cache = DiskCache(tmp_path)
    fitted = NeuralOTDDMap(dataclasses.replace(FAST_2D, iterations=300), cache=cache).fit(q, p)
    bary = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    disp = (fitted.mapped_features_ - q.features).norm(dim=1)
    assert float(disp.mean()) < 0.25  # components have std 0.25 and lie 2 apart
    # the exact OTDD is 0 up to sampling: cost a small fraction of the mean ground cost
    assert fitted.otdd_ < 0.05 * fitted.cost_scale_
    hard = fitted.soft_labels_.argmax(1)
    assert float((hard == bary.soft_labels_.argmax(1)).float().mean()) > 0.95
    expected = torch.as_tensor([2, 0, 3, 1])[q.labels]  # pattern k carries P's class perm[k]
    assert float((hard == expected).float().mean()) > 0.95


def test_same_distribution_gives_the_identity(tmp_path):
    q, p = _boards(None, ("a", "b", "c", "d"))
    fitted = NeuralOTDDMap(
        dataclasses.replace(FAST_2D, iterations=200), cache=DiskCache(tmp_path)
    ).fit(q, p)
    moved = (fitted.mapped_features_ - q.features).square().sum(1).mean()
    spread = (q.features - q.features.mean(0)).square().sum(1).mean()
    assert float(moved) < 0.01 * float(spread)
    assert float((fitted.soft_labels_.argmax(1) == q.labels).float().mean()) > 0.95


def test_protocol_and_dataset_outputs(gaussian_fit):
    q, p, fitted, _ = gaussian_fit
    assert isinstance(fitted, DatasetMap) and isinstance(fitted, FittedNeuralMap)
    assert fitted.supports_out_of_sample and NeuralOTDDMap.supports_out_of_sample
    assert fitted.reference_classes == ("u", "v") and fitted.reference_name == "P"
    ds = fitted.to_dataset()
    assert isinstance(ds, SoftLabeledDataset) and ds.class_names == ("P/u", "P/v")
    assert ds.metadata["map"] == "neural"
    pushed = fitted.transform_dataset(q.subset(np.arange(20)))
    torch.testing.assert_close(pushed.features, fitted.mapped_features_[:20])
    with pytest.raises(GeovizError, match="needs the labels"):
        fitted.transform(q.features[:3])
    with pytest.raises(DatasetError, match="shape"):
        fitted.transform(torch.zeros(3, 5), torch.zeros(3, dtype=torch.long))
    with pytest.raises(DatasetError, match="NaN"):
        fitted.transform(torch.full((2, 2), float("nan")), torch.zeros(2, dtype=torch.long))
    with pytest.raises(DatasetError, match=r"0\.\.1"):
        fitted.transform(torch.zeros(2, 2), torch.tensor([0, 5]))
    with pytest.raises(DatasetError, match="classes"):
        fitted.transform_dataset(p)


def test_relabelling_the_target_classes_changes_nothing(tmp_path):
    """Invariance: permuting the names/indices of Q's classes permutes nothing in the map's images."""
    q, p = _boards([2, 0, 3, 1], ("W", "X", "Y", "Z"))
    perm = np.array([3, 1, 0, 2])
    q2 = LabeledDataset(
        q.features, perm[q.labels.numpy()], tuple(np.array(q.classes)[np.argsort(perm)]), name="Q"
    )
    cfg = dataclasses.replace(FAST_2D, iterations=100)
    a = NeuralOTDDMap(cfg, cache=DiskCache(tmp_path / "a")).fit(q, p)
    b = NeuralOTDDMap(cfg, cache=DiskCache(tmp_path / "b")).fit(q2, p)
    # not bit-identical (the label embedding is initialised per index), but the same map
    assert float((a.mapped_features_ - b.mapped_features_).norm(dim=1).mean()) < 0.15
    assert float((a.soft_labels_.argmax(1) == b.soft_labels_.argmax(1)).float().mean()) > 0.95


def test_seeded_fits_are_reproducible_and_seeds_differ(tmp_path):
    # Gaussians, not the chess board: there the identity start is already optimal and
    # early stopping keeps it whatever the seed
    q = _gaussian(M_Q, S_Q, 200, 0, ("a", "b"), "Q")
    p = _gaussian(M_P, S_P, 200, 1, ("u", "v"), "P")
    cfg = dataclasses.replace(NEURAL_PRESETS["tiny"], iterations=30, eval_every=10)
    off = DiskCache(enabled=False)
    a = NeuralOTDDMap(cfg, cache=off).fit(q, p)
    b = NeuralOTDDMap(cfg, cache=off).fit(q, p)
    c = NeuralOTDDMap(dataclasses.replace(cfg, seed=1), cache=off).fit(q, p)
    torch.testing.assert_close(a.mapped_features_, b.mapped_features_)
    assert not torch.equal(a.mapped_features_, c.mapped_features_)


def test_barycentric_warm_start_lands_on_the_closed_form_quickly(tmp_path):
    """init="barycentric": G starts from the sharp plan's projection, few adversarial steps needed."""
    q = _gaussian(M_Q, S_Q, 600, 0, ("a", "b"), "Q")
    p = _gaussian(M_P, S_P, 600, 1, ("u", "v"), "P")
    cfg = dataclasses.replace(FAST_2D, init="barycentric", init_iterations=300, iterations=50)
    seen: list[str] = []
    fitted = NeuralOTDDMap(cfg, cache=DiskCache(tmp_path)).fit(
        q, p, progress=lambda stage, _f: seen.append(stage)
    )
    assert "warm start" in seen
    a, w2 = _bures_map()
    exact = (q.features.numpy() - M_Q) @ a.T + M_P
    err = np.mean(np.sum((fitted.mapped_features_.numpy() - exact) ** 2, 1))
    assert err < 0.03 * w2 and abs(fitted.transport_cost_ / w2 - 1) < 0.06
    # out of sample too
    fresh = _gaussian(M_Q, S_Q, 300, 9, ("a", "b"), "Q_new")
    x, _ = fitted.transform(fresh.features, fresh.labels)
    exact = (fresh.features.numpy() - M_Q) @ a.T + M_P
    assert np.mean(np.sum((x.numpy() - exact) ** 2, 1)) < 0.03 * w2


def test_progress_reports_every_stage(tmp_path):
    q, p = _boards([2, 0, 3, 1], ("W", "X", "Y", "Z"))
    seen: list[tuple[str, float]] = []
    cfg = dataclasses.replace(NEURAL_PRESETS["tiny"], iterations=20, eval_every=10)
    NeuralOTDDMap(cfg, cache=DiskCache(tmp_path)).fit(
        q, p, progress=lambda s, f: seen.append((s, f))
    )
    stages = [s for s, _ in seen]
    for stage in ("labels", "classifier", "adversarial", "done"):
        assert stage in stages
    assert all(0.0 <= f <= 1.0 for _, f in seen) and seen[-1] == ("done", 1.0)


def test_images_use_the_unet_and_start_at_the_identity():
    shape = (1, 12, 10)  # sides not multiples of 4: padded and cropped
    assert choose_architecture(shape) == "unet"
    assert choose_architecture(None) == "mlp" and choose_architecture((1, 4, 4)) == "mlp"
    with pytest.raises(GeovizError, match="UNet"):
        choose_architecture((1, 4, 4), "unet")
    spec = {
        "kind": "unet",
        "image_shape": shape,
        "n_classes": 3,
        "width": 4,
        "n_features": 120,
        "hidden": 8,
        "n_blocks": 1,
    }
    gen, critic = build_networks(spec)
    assert isinstance(gen, UNetGenerator) and isinstance(critic, ConvCritic)
    x = torch.rand(5, 120)
    y = torch.tensor([0, 1, 2, 0, 1])
    assert torch.equal(gen(x, y), x)
    assert critic(x).shape == (5,)
    vec, _ = build_networks({**spec, "kind": "mlp", "n_features": 7})
    assert isinstance(vec, VectorGenerator)
    z = torch.randn(4, 7)
    assert torch.equal(vec(z, torch.tensor([0, 1, 2, 1])), z)


def test_image_map_end_to_end(tmp_path):
    rng = np.random.default_rng(0)
    n = 48
    labels = np.arange(n) % 2
    imgs = rng.random((n, 1, 12, 12)).astype(np.float32) * 0.2
    imgs[labels == 1, :, 3:9, 3:9] += 0.7
    q = LabeledDataset(imgs.reshape(n, -1), labels, ("o", "x"), name="Q", image_shape=(1, 12, 12))
    p = LabeledDataset(
        np.clip(imgs[::-1].reshape(n, -1) + 0.1, 0, 1),
        labels[::-1],
        ("O", "X"),
        name="P",
        image_shape=(1, 12, 12),
    )
    cfg = dataclasses.replace(NEURAL_PRESETS["tiny"], iterations=10, eval_every=5)
    fitted = NeuralOTDDMap(cfg, cache=DiskCache(tmp_path)).fit(q, p)
    assert fitted.mapped_features_.shape == (n, 144)
    # clipped to the reference's per-pixel range
    lo, hi = p.features.min(0).values, p.features.max(0).values
    assert bool(
        ((fitted.mapped_features_ >= lo - 1e-6) & (fitted.mapped_features_ <= hi + 1e-6)).all()
    )
    ds = fitted.to_dataset()
    assert ds.image_shape == (1, 12, 12)


def test_config_validation():
    with pytest.raises(GeovizError, match="iterations"):
        NeuralMapConfig(iterations=0)
    with pytest.raises(GeovizError, match="learning_rate"):
        NeuralMapConfig(learning_rate=float("nan"))
    with pytest.raises(GeovizError, match="holdout"):
        NeuralMapConfig(holdout=0.7)
    with pytest.raises(GeovizError, match="architecture"):
        NeuralMapConfig(architecture="resnet")  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="device"):
        NeuralMapConfig(device="tpu")
    with pytest.raises(GeovizError, match="init"):
        NeuralMapConfig(init="random")  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="cpu_threads"):
        NeuralMapConfig(cpu_threads=0)
    with pytest.raises(GeovizError, match="preset"):
        get_neural_preset("huge")
    assert get_neural_preset("cpu") is NEURAL_PRESETS["cpu"]
    with pytest.raises(GeovizError, match="OTDDConfig"):
        NeuralOTDDMap("tiny", otdd="x")  # type: ignore[arg-type]
    # the device is not part of the cache key, every training setting is
    base = NeuralMapConfig()
    assert base.cache_params() == dataclasses.replace(base, device="cpu").cache_params()
    assert base.cache_params() == dataclasses.replace(base, cpu_threads=2).cache_params()
    assert base.cache_params() != dataclasses.replace(base, seed=3).cache_params()


def test_dimension_mismatch():
    q = chessboard_gmm(5, seed=1)
    p = LabeledDataset(np.zeros((10, 3), np.float32), np.arange(10) % 2, ("a", "b"), name="P")
    with pytest.raises(DatasetError, match="feature dimensions"):
        NeuralOTDDMap("tiny", cache=DiskCache(enabled=False)).fit(q, p)
