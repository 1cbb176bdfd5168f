"""Label-to-label distances: closed forms, brute force, invariances, bad input."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import scipy.linalg
import torch

import geoviz.ot.labels as labels_mod
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, GeovizError
from geoviz.ot.labels import class_samples, gaussian_w2, label_distances

HAS_CUDA = torch.cuda.is_available()
CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA"))
DEVICES = ["cpu", CUDA]


def _dataset(x, y, classes, name="ds") -> LabeledDataset:
    return LabeledDataset(np.asarray(x, dtype=np.float32), np.asarray(y), tuple(classes), name=name)


def _random_classes(
    seed: int, n_per_class: tuple[int, ...], dim: int, name: str = "ds"
) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c, n in enumerate(n_per_class):
        mix = rng.normal(size=(dim, dim)) / np.sqrt(dim)
        xs.append(rng.normal(size=(n, dim)) @ mix + rng.normal(size=dim) * 2.0)
        ys.append(np.full(n, c))
    return _dataset(
        np.concatenate(xs), np.concatenate(ys), [f"c{c}" for c in range(len(n_per_class))], name
    )


def _bures_sqrtm(m1, s1, m2, s2) -> float:
    """Independent closed form with scipy.linalg.sqrtm (well-conditioned inputs only)."""
    r1 = scipy.linalg.sqrtm(s1)
    cross = scipy.linalg.sqrtm(r1 @ s2 @ r1)
    return float(np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2.0 * np.real(cross)))


def _bures_eigh(m1, s1, m2, s2) -> float:
    """Independent eigen-decomposition reference that tolerates singular covariances."""
    w, v = np.linalg.eigh(s1)
    r1 = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    mid = r1 @ s2 @ r1
    ev = np.linalg.eigvalsh(0.5 * (mid + mid.T))
    return float(
        np.sum((m1 - m2) ** 2)
        + np.trace(s1)
        + np.trace(s2)
        - 2.0 * np.sum(np.sqrt(np.clip(ev, 0, None)))
    )


def _class_stats(ds: LabeledDataset):
    x = ds.features.double().numpy()
    y = ds.labels.numpy()
    return [
        (x[y == c].mean(0), np.cov(x[y == c].T, ddof=1).reshape(ds.n_features, ds.n_features))
        for c in range(ds.n_classes)
    ]


def test_gaussian_matches_sqrtm_closed_form():
    a = _random_classes(0, (40, 55, 30), dim=4)
    b = _random_classes(1, (35, 60), dim=4)
    got = label_distances(a, b, method="gaussian", max_per_class=None)
    assert got.shape == (3, 2) and got.dtype == torch.float64 and got.device.type == "cpu"
    sa, sb = _class_stats(a), _class_stats(b)
    want = np.array([[_bures_sqrtm(m1, s1, m2, s2) for (m2, s2) in sb] for (m1, s1) in sa])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-9, atol=1e-9)


def test_gaussian_1d_closed_form():
    # 1-D Gaussians: W2^2 = (m1 - m2)^2 + (sd1 - sd2)^2
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(1.0, 0.5, 80), rng.normal(-2.0, 2.0, 120)])[:, None]
    y = np.repeat([0, 1], [80, 120])
    ds = _dataset(x, y, ["p", "q"])
    got = label_distances(ds, ds, max_per_class=None).numpy()
    xs = ds.features.double().numpy()[:, 0]
    m = [xs[y == c].mean() for c in (0, 1)]
    sd = [xs[y == c].std(ddof=1) for c in (0, 1)]
    want = (m[0] - m[1]) ** 2 + (sd[0] - sd[1]) ** 2
    assert got[0, 1] == pytest.approx(want, rel=1e-10)
    assert got[1, 0] == pytest.approx(want, rel=1e-10)
    assert got[0, 0] == 0.0 and got[1, 1] == 0.0


def test_gaussian_rank_deficient_matches_eigh_reference():
    # 12 samples per class in 60-d: covariances of rank 11
    a = _random_classes(4, (12, 12, 12), dim=60)
    b = _random_classes(5, (12, 9), dim=60)
    got = label_distances(a, b, max_per_class=None).numpy()
    sa, sb = _class_stats(a), _class_stats(b)
    want = np.array([[_bures_eigh(m1, s1, m2, s2) for (m2, s2) in sb] for (m1, s1) in sa])
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-7)


def test_gaussian_784d_rank_deficient_no_nan():
    rng = np.random.default_rng(6)
    n_per, dim = 30, 784
    x = rng.random((3 * n_per, dim)).astype(np.float32) * (rng.random(dim) > 0.3)  # dead pixels too
    y = np.repeat([0, 1, 2], n_per)
    ds = _dataset(x, y, ["a", "b", "c"])
    other = _dataset(rng.random((2 * n_per, dim)), np.repeat([0, 1], n_per), ["u", "v"])
    w_self = label_distances(ds, ds)
    w_cross = label_distances(ds, other)
    for w in (w_self, w_cross):
        assert torch.isfinite(w).all() and (w >= 0).all()
    assert torch.equal(w_self, w_self.T)
    assert torch.all(w_self.diagonal() == 0)
    # reference function with explicit (singular 784 x 784) covariances agrees
    (m0, s0), (m1, s1) = _class_stats(ds)[:2]
    ref = gaussian_w2(
        torch.tensor(m0[None]),
        torch.tensor(s0[None]),
        torch.tensor(m1[None]),
        torch.tensor(s1[None]),
    )
    assert float(ref[0, 0]) == pytest.approx(float(w_self[0, 1]), rel=1e-6)


def test_gaussian_w2_reference_matches_sqrtm():
    rng = np.random.default_rng(7)

    def spd(d):
        m = rng.normal(size=(d, d))
        return m @ m.T + 0.1 * np.eye(d)

    m1, m2 = rng.normal(size=3), rng.normal(size=3)
    s1, s2 = spd(3), spd(3)
    got = gaussian_w2(
        torch.tensor(m1[None]),
        torch.tensor(s1[None]),
        torch.tensor(m2[None]),
        torch.tensor(s2[None]),
    )
    assert float(got[0, 0]) == pytest.approx(_bures_sqrtm(m1, s1, m2, s2), rel=1e-9)


def test_exact_1d_equals_sorted_closed_form():
    # equal-size 1-D samples: W2^2 = mean (sorted(x) - sorted(y))^2
    rng = np.random.default_rng(8)
    xa = rng.normal(size=(50, 1))
    xb = rng.normal(1.0, 2.0, size=(50, 1))
    a = _dataset(np.concatenate([xa, xa + 5]), np.repeat([0, 1], 50), ["a0", "a1"])
    b = _dataset(np.concatenate([xb, -xb]), np.repeat([0, 1], 50), ["b0", "b1"])
    got = label_distances(a, b, method="exact", max_per_class=None).numpy()
    fa = a.features.double().numpy()[:, 0]
    fb = b.features.double().numpy()[:, 0]
    for i in range(2):
        for j in range(2):
            want = np.mean(
                (np.sort(fa[50 * i : 50 * (i + 1)]) - np.sort(fb[50 * j : 50 * (j + 1)])) ** 2
            )
            assert got[i, j] == pytest.approx(want, rel=1e-8, abs=1e-10)


def _emd2_brute(a: LabeledDataset, b: LabeledDataset) -> np.ndarray:
    """Independent reference: POT's emd2 on direct-difference float64 costs, all samples."""
    xa, ya = a.features.double().numpy(), a.labels.numpy()
    xb, yb = b.features.double().numpy(), b.labels.numpy()
    out = np.zeros((a.n_classes, b.n_classes))
    for i in range(a.n_classes):
        for j in range(b.n_classes):
            p, q = xa[ya == i], xb[yb == j]
            cost = ((p[:, None, :] - q[None, :, :]) ** 2).sum(-1)
            out[i, j] = ot.emd2(np.full(len(p), 1 / len(p)), np.full(len(q), 1 / len(q)), cost)
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_exact_matches_emd2_brute_force_with_unequal_sizes(device):
    a = _random_classes(9, (20, 13), dim=3)
    b = _random_classes(10, (17, 11, 9), dim=3)
    got = label_distances(a, b, method="exact", max_per_class=None, device=device)
    assert got.device.type == "cpu" and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), _emd2_brute(a, b), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_exact_self_distance_matches_emd2_brute_force(device):
    ds = _random_classes(20, (9, 14, 6, 11), dim=4)
    got = label_distances(ds, ds, method="exact", max_per_class=None, device=device).numpy()
    want = _emd2_brute(ds, ds)
    assert np.abs(np.diag(want)).max() < 1e-12  # emd2 of a sample with itself
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_exact_blocks_and_threads_do_not_change_the_result(device, monkeypatch):
    # tiny device blocks (one class per cost block) and 1 vs 3 CPU solver threads
    a = _random_classes(21, (8, 12, 5, 10, 7), dim=3)
    b = _random_classes(22, (9, 6, 11, 4), dim=3)
    want = _emd2_brute(a, b)
    sa = class_samples(a, None)
    sb = class_samples(b, None)
    dev = torch.device(device)
    monkeypatch.setattr(labels_mod, "_BLOCK_BYTES", 1)
    one = labels_mod._exact_w2(sa, sb, False, dev, workers=1)
    three = labels_mod._exact_w2(sa, sb, False, dev, workers=3)
    np.testing.assert_allclose(one.numpy(), want, rtol=1e-8, atol=1e-12)
    # the same LP per pair, whichever thread solves it (its costs may be summed in another order)
    torch.testing.assert_close(one, three, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("device", DEVICES)
def test_features_are_promoted_to_float64(device):
    # far from the origin a float32 ||x||^2 + ||y||^2 - 2 x.y loses everything (1e6 * 6e-8);
    # the float64 expansion on any device still matches direct differences
    a = _random_classes(23, (15, 12), dim=3)
    b = _random_classes(24, (10, 13), dim=3)
    far_a = _dataset(a.features.numpy() + 1000.0, a.labels.numpy(), a.classes, "far_a")
    far_b = _dataset(b.features.numpy() + 1000.0, b.labels.numpy(), b.classes, "far_b")
    got = label_distances(far_a, far_b, method="exact", max_per_class=None, device=device)
    np.testing.assert_allclose(got.numpy(), _emd2_brute(far_a, far_b), rtol=1e-6, atol=1e-6)
    gauss = label_distances(far_a, far_b, max_per_class=None, device=device).numpy()
    sa, sb = _class_stats(far_a), _class_stats(far_b)
    ref = np.array([[_bures_sqrtm(m1, s1, m2, s2) for (m2, s2) in sb] for (m1, s1) in sa])
    np.testing.assert_allclose(gauss, ref, rtol=1e-8, atol=1e-8)


def _self_cases() -> list[LabeledDataset]:
    return [
        _random_classes(11, (30, 250, 40), dim=5),  # n_c > D (eigen-factor); middle subsampled
        _random_classes(25, (12, 9, 15, 7), dim=20),  # n_c <= D (sample factor, rank-deficient)
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", ["exact", "gaussian"])
def test_self_distance_zero_and_symmetric(method, device):
    for ds in _self_cases():
        # the same object, and an equal copy (same fingerprint, different object)
        copy = _dataset(ds.features.numpy().copy(), ds.labels.numpy(), ds.classes, ds.name)
        assert copy.fingerprint == ds.fingerprint and copy is not ds
        for other in (ds, copy):
            w = label_distances(ds, other, method=method, max_per_class=100, device=device)
            assert w.dtype == torch.float64 and w.device.type == "cpu"
            assert torch.equal(w, w.T)  # exactly symmetric
            assert torch.all(w.diagonal() == 0)  # exactly zero
            off = w[~torch.eye(ds.n_classes, dtype=torch.bool)]
            assert torch.all(off > 0.1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", ["exact", "gaussian"])
def test_self_distance_upper_triangle_equals_cross_computation(method, device):
    # the mirrored self-distance equals the generic (non-symmetric) path on a renamed copy,
    # which computes every entry, so mirroring hides no asymmetry of the estimator
    ds = _random_classes(26, (20, 35, 15), dim=4)
    renamed = _dataset(ds.features.numpy(), ds.labels.numpy(), ["u", "v", "w"], "renamed")
    assert renamed.fingerprint != ds.fingerprint
    w_self = label_distances(ds, ds, method=method, max_per_class=None, device=device)
    w_cross = label_distances(ds, renamed, method=method, max_per_class=None, device=device)
    np.testing.assert_allclose(w_self.numpy(), w_cross.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("method", ["exact", "gaussian"])
def test_relabelling_permutes_columns(method):
    a = _random_classes(12, (40, 30), dim=3)
    b = _random_classes(13, (60, 25, 35), dim=3)  # first class subsampled with max_per_class=50
    perm = np.array([2, 0, 1])  # new index of old class c is perm[c]
    new_classes = [None] * 3
    for old, new in enumerate(perm):
        new_classes[new] = f"renamed{old}"
    b2 = _dataset(b.features.numpy(), perm[b.labels.numpy()], new_classes)
    w = label_distances(a, b, method=method, max_per_class=50)
    w2 = label_distances(a, b2, method=method, max_per_class=50)
    np.testing.assert_allclose(w2.numpy()[:, perm], w.numpy(), rtol=1e-12, atol=1e-12)


def test_subsampling_is_seeded_and_capped():
    ds = _random_classes(14, (300, 50), dim=2)
    s0 = class_samples(ds, max_per_class=100, seed=0)
    s0b = class_samples(ds, max_per_class=100, seed=0)
    s1 = class_samples(ds, max_per_class=100, seed=1)
    assert s0[0].shape == (100, 2) and s0[1].shape == (50, 2)
    assert torch.equal(s0[0], s0b[0]) and not torch.equal(s0[0], s1[0])
    assert torch.equal(s0[1], s1[1])  # not capped: all samples
    w0 = label_distances(ds, ds, max_per_class=100, seed=0)
    w1 = label_distances(ds, ds, max_per_class=100, seed=1)
    assert not torch.equal(w0, w1)


def test_absent_class_nan_or_raise():
    a = _dataset(
        np.random.default_rng(0).normal(size=(20, 2)), np.repeat([0, 2], 10), ["x", "missing", "z"]
    )
    b = _random_classes(15, (10, 10), dim=2)
    w = label_distances(a, b)
    assert torch.isnan(w[1]).all()
    assert torch.isfinite(w[[0, 2]]).all()
    w_self = label_distances(a, a)
    assert torch.isnan(w_self[1]).all() and torch.isnan(w_self[:, 1]).all()
    assert torch.isfinite(w_self[[0, 2]][:, [0, 2]]).all()
    with pytest.raises(DatasetError, match="missing"):
        label_distances(a, b, missing="raise")


def test_bad_inputs():
    a = _random_classes(16, (5, 5), dim=2)
    b = _random_classes(17, (5, 5), dim=3)
    with pytest.raises(DatasetError, match="feature dimensions differ"):
        label_distances(a, b)
    with pytest.raises(GeovizError, match="unknown method"):
        label_distances(a, a, method="sinkhorn")  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="max_per_class"):
        label_distances(a, a, max_per_class=0)


def test_single_sample_class_is_a_dirac():
    # one sample per class: Gaussian and exact both reduce to ||x - x'||^2
    a = _dataset([[0.0, 0.0], [1.0, 2.0]], [0, 1], ["a", "b"])
    b = _dataset([[3.0, 4.0], [0.0, 1.0]], [0, 1], ["c", "d"])
    want = np.array([[25.0, 1.0], [8.0, 2.0]])
    for method in ("gaussian", "exact"):
        np.testing.assert_allclose(label_distances(a, b, method=method).numpy(), want, atol=1e-9)


@pytest.mark.parametrize("device", DEVICES)
def test_device_argument(device):
    a = _random_classes(18, (20, 20), dim=3)
    b = _random_classes(19, (20, 20), dim=3)
    ref = label_distances(a, b, device="cpu")
    got = label_distances(a, b, device=device)
    assert got.device.type == "cpu" and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-9)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA")
@pytest.mark.parametrize("method", ["exact", "gaussian"])
def test_cpu_and_cuda_agree(method):
    cases = [
        (_random_classes(27, (40, 90, 25), dim=6), _random_classes(28, (30, 60), dim=6)),
        (_random_classes(29, (15, 20, 9), dim=50), _random_classes(30, (12, 18), dim=50)),
    ]
    for a, b in cases:
        for other in (a, b):
            w_cpu = label_distances(a, other, method=method, max_per_class=50, device="cpu")
            w_gpu = label_distances(a, other, method=method, max_per_class=50, device="cuda")
            assert w_gpu.device.type == "cpu" and w_gpu.dtype == torch.float64
            np.testing.assert_allclose(w_gpu.numpy(), w_cpu.numpy(), rtol=1e-9, atol=1e-9)
            if other is a:
                assert torch.equal(w_gpu, w_gpu.T) and torch.all(w_gpu.diagonal() == 0)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA")
def test_gaussian_w2_reference_on_cuda_matches_cpu():
    ds = _random_classes(31, (40, 50), dim=4)
    (m0, s0), (m1, s1) = _class_stats(ds)
    args = [torch.tensor(v[None]) for v in (m0, s0, m1, s1)]
    cpu = gaussian_w2(*args)
    gpu = gaussian_w2(*[t.cuda() for t in args])
    assert gpu.device.type == "cuda"  # an intermediate: stays on the inputs' device
    np.testing.assert_allclose(gpu.cpu().numpy(), cpu.numpy(), rtol=1e-10)
