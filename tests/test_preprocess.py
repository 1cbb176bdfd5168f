"""harmonize, PCA features, stratified subsampling and few-shot targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from geoviz.data.bundled import load_bundled
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import (
    LUMA_WEIGHTS,
    FeatureExtractor,
    PCAFeatures,
    few_shot,
    harmonize,
    stratified_allocation,
    stratified_subsample,
)
from geoviz.errors import DatasetError, GeovizError


def _images(n: int, c: int, h: int, w: int, seed: int = 0, name: str = "img") -> LabeledDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, c * h * w, generator=g)
    return LabeledDataset(x, torch.arange(n) % 2, ("a", "b"), name=name, image_shape=(c, h, w))


def _constant_images(colour: tuple[float, ...], h: int, n: int = 4) -> LabeledDataset:
    c = len(colour)
    x = torch.tensor(colour, dtype=torch.float32).view(1, c, 1, 1).expand(n, c, h, h).reshape(n, -1)
    return LabeledDataset(
        x, torch.arange(n) % 2, ("a", "b"), name=f"const{c}", image_shape=(c, h, h)
    )


# --------------------------------------------------------------------------- harmonize


def test_harmonize_resizes_real_bundled_images_to_32() -> None:
    mnist, usps = load_bundled("mnist", "test"), load_bundled("usps", "test")
    out = harmonize([mnist, usps], size=32)
    assert [ds.image_shape for ds in out] == [(1, 32, 32), (1, 32, 32)]
    for before, after in zip([mnist, usps], out, strict=True):
        assert after.n_features == 1024 and after.n_samples == before.n_samples
        assert torch.equal(after.labels, before.labels) and after.classes == before.classes
        assert float(after.features.min()) >= 0.0 and float(after.features.max()) <= 1.0
        # resizing keeps the mean intensity approximately
        assert abs(float(after.features.mean()) - float(before.features.mean())) < 0.02
    assert mnist.image_shape == (1, 28, 28)  # inputs untouched


def test_harmonize_keeps_constant_images_constant() -> None:
    out = harmonize([_constant_images((0.3,), 16), _constant_images((0.8,), 28)], size=32)
    torch.testing.assert_close(out[0].features, torch.full_like(out[0].features, 0.3))
    torch.testing.assert_close(out[1].features, torch.full_like(out[1].features, 0.8))


def test_harmonize_grey_and_rgb_auto_gives_three_channels() -> None:
    grey, rgb = _constant_images((0.25,), 28), _constant_images((0.1, 0.5, 0.9), 32)
    out = harmonize([grey, rgb], size=32, channels="auto")
    assert [ds.image_shape for ds in out] == [(3, 32, 32), (3, 32, 32)]
    images = out[0].images()
    assert torch.equal(images[:, 0], images[:, 1]) and torch.equal(images[:, 1], images[:, 2])
    torch.testing.assert_close(images, torch.full_like(images, 0.25))
    assert out[1] is rgb  # already in the target shape: returned unchanged


def test_harmonize_grey_uses_luma_weights() -> None:
    colour = (0.1, 0.5, 0.9)
    out = harmonize(
        [_constant_images(colour, 8), _constant_images((0.4,), 8)], size=8, channels="grey"
    )
    assert [ds.image_shape for ds in out] == [(1, 8, 8), (1, 8, 8)]
    expected = sum(w * c for w, c in zip(LUMA_WEIGHTS, colour, strict=True))
    torch.testing.assert_close(out[0].features, torch.full_like(out[0].features, expected))


def test_harmonize_rgb_and_none_size() -> None:
    a, b = _images(6, 1, 10, 10), _images(6, 1, 10, 10, seed=1)
    out = harmonize([a, b], size=None, channels="rgb")
    assert out[0].image_shape == (3, 10, 10)
    torch.testing.assert_close(out[0].images()[:, 2], a.images()[:, 0])
    with pytest.raises(DatasetError, match="sizes differ"):
        harmonize([a, _images(6, 1, 12, 12)], size=None)


def test_harmonize_vectors_and_errors() -> None:
    v1 = LabeledDataset(torch.randn(5, 3), [0, 1, 0, 1, 0], ("a", "b"), name="v1")
    v2 = LabeledDataset(torch.randn(7, 3), [0, 1, 0, 1, 0, 1, 1], ("a", "b"), name="v2")
    assert harmonize([v1, v2]) == [v1, v2]
    v3 = LabeledDataset(torch.randn(5, 4), [0, 1, 0, 1, 0], ("a", "b"), name="v3")
    with pytest.raises(DatasetError, match="dimension"):
        harmonize([v1, v3])
    with pytest.raises(DatasetError, match="mix"):
        harmonize([v1, _images(4, 1, 2, 2)])
    with pytest.raises(DatasetError):
        harmonize([])
    with pytest.raises(DatasetError, match="channels"):
        harmonize([_images(4, 2, 3, 3)])
    with pytest.raises(DatasetError, match="channels"):
        harmonize([v1], channels="colour")  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match="size"):
        harmonize([v1], size=0)


@pytest.mark.parametrize("size", [700, 100_000, 129, 3])
def test_harmonize_refuses_image_sizes_outside_the_limits_before_resizing(
    size, monkeypatch
) -> None:
    """The issue: size=700 at n=200 took 2.45 GB, 100000 tried to allocate 8 TB."""
    import geoviz.data.preprocess as preprocess

    def boom(*args, **kwargs):
        raise AssertionError("resized")

    monkeypatch.setattr(preprocess, "_resize_images", boom)
    with pytest.raises(DatasetError, match=rf"image size must be between 4 and 128, got {size:,}"):
        harmonize([_images(4, 1, 8, 8), _images(4, 1, 16, 16)], size=size)


def test_harmonize_accepts_the_size_limits() -> None:
    for size in (4, 128):
        out = harmonize([_images(3, 1, 8, 8), _images(3, 3, 16, 16)], size=size)
        assert [ds.image_shape for ds in out] == [(3, size, size)] * 2


def test_harmonize_checks_memory_before_resizing(monkeypatch) -> None:
    import geoviz.data.preprocess as preprocess
    from geoviz.errors import ResourceError

    asked: list[tuple[int, str]] = []

    def refuse(n_bytes: int, what: str, **kwargs) -> None:
        asked.append((n_bytes, what))
        raise ResourceError(f"{what} needs {n_bytes} bytes")

    def boom(*args, **kwargs):
        raise AssertionError("resized")

    monkeypatch.setattr(preprocess.memory, "check_bytes", refuse)
    monkeypatch.setattr(preprocess, "_resize_images", boom)
    with pytest.raises(ResourceError, match=r"harmonizing 10 images to 3x128x128"):
        harmonize([_images(6, 1, 8, 8), _images(4, 3, 8, 8)], size=128)
    # at least the 10 new float32 feature matrices of 3 x 128 x 128
    assert asked[0][0] >= 10 * 3 * 128 * 128 * 4
    # nothing to allocate: no check, the same datasets back
    asked.clear()
    same = [_images(3, 1, 8, 8), _images(3, 1, 8, 8, seed=1)]
    assert harmonize(same, size=8) == same and asked == []


# --------------------------------------------------------------------------- PCA


def test_pca_output_dims_and_protocol() -> None:
    a, b = _images(60, 1, 4, 4, seed=0, name="a"), _images(40, 1, 4, 4, seed=1, name="b")
    pca = PCAFeatures(n_components=5, seed=0)
    assert isinstance(pca, FeatureExtractor)
    assert pca.fit([a, b]) is pca and pca.name == "pca5"
    za = pca.transform(a)
    assert za.features.shape == (60, 5) and za.image_shape is None
    assert torch.equal(za.labels, a.labels) and za.name == "a"
    comp = pca.components_.double()
    torch.testing.assert_close(comp @ comp.T, torch.eye(5, dtype=torch.float64), atol=1e-5, rtol=0)
    assert pca.explained_variance_ratio_.shape == (5,)
    assert np.all(np.diff(pca.explained_variance_ratio_) <= 1e-9)


def test_pca_is_fitted_on_the_union() -> None:
    a, b = _images(60, 1, 4, 4, seed=0), _images(40, 1, 4, 4, seed=1)
    b = b.with_features(b.features * 0.5 + 0.5)  # shifted distribution
    union = LabeledDataset(
        torch.cat([a.features, b.features]), torch.cat([a.labels, b.labels]), ("a", "b")
    )
    on_both = PCAFeatures(4).fit([a, b])
    on_union = PCAFeatures(4).fit([union])
    torch.testing.assert_close(on_both.mean_, torch.cat([a.features, b.features]).mean(0))
    torch.testing.assert_close(on_both.components_, on_union.components_)
    on_a = PCAFeatures(4).fit([a])
    assert not torch.allclose(on_a.mean_, on_both.mean_, atol=1e-3)
    # with all components the projection is an isometry of the (centred) union
    full = PCAFeatures(16).fit([a, b])
    za, zb = full.transform(a), full.transform(b)
    torch.testing.assert_close(
        torch.cdist(za.features, zb.features),
        torch.cdist(a.features, b.features),
        atol=1e-4,
        rtol=0,
    )


def test_pca_errors() -> None:
    a = _images(10, 1, 2, 2)
    with pytest.raises(GeovizError, match="not fitted"):
        PCAFeatures(2).transform(a)
    with pytest.raises(DatasetError, match="n_components"):
        PCAFeatures(5).fit([a])
    with pytest.raises(DatasetError, match="share D"):
        PCAFeatures(2).fit([a, _images(10, 1, 3, 3)])
    fitted = PCAFeatures(2).fit([a])
    with pytest.raises(DatasetError, match="D=9"):
        fitted.transform(_images(10, 1, 3, 3))
    with pytest.raises(GeovizError):
        PCAFeatures(0)


# --------------------------------------------------------------------------- subsampling


def _labelled(counts: list[int]) -> LabeledDataset:
    labels = np.repeat(np.arange(len(counts)), counts)
    x = np.arange(len(labels), dtype=np.float32)[:, None]
    return LabeledDataset(x, labels, tuple(f"c{i}" for i in range(len(counts))), name="toy")


def test_stratified_subsample_counts_per_class() -> None:
    ds = _labelled([100, 50, 10, 1])
    sub = stratified_subsample(ds, 40, seed=0)
    # quotas 24.8, 12.4, 2.48, 0.25 -> floors 24, 12, 2, 0; class 3 keeps 1; largest remainder to class 0
    assert sub.class_counts().tolist() == [25, 12, 2, 1]
    idx = sub.features[:, 0].long().numpy()
    assert np.all(np.diff(idx) > 0)  # original order, no duplicates
    assert torch.equal(sub.labels, ds.labels[idx])
    balanced = stratified_subsample(load_bundled("kmnist", "test"), 100, seed=0)
    assert balanced.class_counts().tolist() == [10] * 10


def test_stratified_subsample_determinism_and_edges() -> None:
    ds = _labelled([30, 30, 30])
    a, b, c = (stratified_subsample(ds, 12, seed=s) for s in (0, 0, 1))
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert stratified_subsample(ds, 90) is ds and stratified_subsample(ds, 500) is ds
    with pytest.raises(DatasetError, match="classes present"):
        stratified_subsample(ds, 2)


@settings(max_examples=150, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=2, max_size=8).filter(
        lambda c: sum(x > 0 for x in c) >= 1
    ),
    data=st.data(),
)
def test_stratified_allocation_invariants(counts: list[int], data: st.DataObject) -> None:
    counts_arr = np.array(counts)
    present = int((counts_arr > 0).sum())
    n = data.draw(st.integers(present, int(counts_arr.sum())))
    alloc = stratified_allocation(counts_arr, n)
    assert alloc.sum() == n
    assert np.all(alloc <= counts_arr)
    assert np.all(alloc[counts_arr > 0] >= 1) and np.all(alloc[counts_arr == 0] == 0)
    quota = counts_arr * n / counts_arr.sum()
    if np.all(quota[counts_arr > 0] >= 1):  # no class needed the ">= 1" floor
        assert np.all(np.abs(alloc - quota) < 1)
    # larger classes never get fewer samples
    larger = counts_arr[:, None] > counts_arr[None, :]
    assert np.all((alloc[:, None] >= alloc[None, :])[larger])


# --------------------------------------------------------------------------- few-shot


def _separable(n_per_class: int = 30, n_classes: int = 3) -> LabeledDataset:
    rng = np.random.default_rng(0)
    centers = np.arange(n_classes)[:, None] * np.array([[100.0, 0.0]])
    x = np.concatenate([c + rng.normal(size=(n_per_class, 2)) for c in centers])
    y = np.repeat(np.arange(n_classes), n_per_class)
    perm = rng.permutation(len(y))
    return LabeledDataset(x[perm], y[perm], tuple("xyz"[:n_classes]), name="sep")


def test_few_shot_counts_and_perfect_pseudo_labels_on_separable_data() -> None:
    ds = _separable()
    fs = few_shot(ds, 4, seed=0)
    labelled = fs.labelled_indices
    assert np.bincount(ds.labels.numpy()[labelled]).tolist() == [4, 4, 4]
    assert fs.dataset.n_samples == ds.n_samples and torch.equal(fs.dataset.features, ds.features)
    assert torch.equal(fs.dataset.labels, ds.labels)
    assert fs.pseudo_label_accuracy == 1.0 and fs.k == 4


def test_few_shot_determinism_and_seed() -> None:
    ds = _separable()
    assert np.array_equal(
        few_shot(ds, 3, seed=5).labelled_indices, few_shot(ds, 3, seed=5).labelled_indices
    )
    assert not np.array_equal(
        few_shot(ds, 3, seed=5).labelled_indices, few_shot(ds, 3, seed=6).labelled_indices
    )


def test_few_shot_pseudo_labels_match_brute_force_nearest_neighbour() -> None:
    ds = load_bundled("usps", "test")
    fs = few_shot(ds, 2, seed=1, method="knn")
    x, y = ds.features.numpy().astype(np.float64), ds.labels.numpy()
    lab = fs.labelled_indices
    d = ((x[:, None, :] - x[None, lab, :]) ** 2).sum(-1)
    expected = y[lab][np.argmin(d, axis=1)]
    got = fs.dataset.labels.numpy()
    assert np.array_equal(got[lab], y[lab])  # labelled samples keep their true label
    unl = np.setdiff1d(np.arange(len(y)), lab)
    assert np.array_equal(got[unl], expected[unl])
    assert fs.pseudo_label_accuracy == pytest.approx(np.mean(expected[unl] == y[unl]))
    assert 0.3 < fs.pseudo_label_accuracy < 1.0


def test_few_shot_rejects_bad_k() -> None:
    ds = _labelled([10, 3, 5])
    with pytest.raises(DatasetError, match=r"smallest class \('c1', 3"):
        few_shot(ds, 4)
    with pytest.raises(DatasetError):
        few_shot(ds, 0)
    with pytest.raises(DatasetError, match="n_neighbors"):
        few_shot(ds, 1, n_neighbors=4)
    assert few_shot(ds, 3, n_neighbors=3).dataset.n_samples == 18
    big = _labelled([60, 60])
    with pytest.raises(DatasetError, match=r"n_neighbors must be an integer in 1\.\.50"):
        few_shot(big, 30, n_neighbors=51)


def test_box_normalise_scales_and_centres_the_ink():
    from geoviz.data.preprocess import box_normalise

    # a 4x8 bar of ink in the corner of a 16x16 frame (like a USPS digit filling its frame)
    img = np.zeros((2, 16, 16), np.float32)
    img[0, 0:8, 0:4] = 1.0
    ds = LabeledDataset(img.reshape(2, -1), [0, 1], ("a", "b"), image_shape=(1, 16, 16))
    out = box_normalise(ds, box=20, canvas=28)
    assert out.image_shape == (1, 28, 28) and out.labels.tolist() == [0, 1]
    bar = out.features.numpy().reshape(2, 28, 28)[0]
    rows, cols = np.flatnonzero(bar.any(1)), np.flatnonzero(bar.any(0))
    assert rows.size == 20 and cols.size == 10  # longer side -> 20 px, aspect kept
    cy, cx = (np.indices(bar.shape) * bar).reshape(2, -1).sum(1) / bar.sum()
    assert abs(cy - 14) <= 0.5 and abs(cx - 14) <= 0.5  # centre of mass at (14, 14), as MNIST
    assert out.features.numpy()[1].max() == 0.0  # a blank image stays blank
    assert ds.image_shape == (1, 16, 16)  # input untouched


def test_box_normalise_is_near_identity_on_mnist_like_digits():
    from geoviz.data.preprocess import box_normalise
    from geoviz.data.registry import load_dataset

    mnist = load_dataset("mnist", n=50)
    again = box_normalise(mnist)
    # MNIST is already box-normalised: most ink stays where it was
    a, b = mnist.features.numpy(), again.features.numpy()
    overlap = (np.minimum(a, b).sum(1) / np.maximum(a, b).sum(1)).mean()
    assert overlap > 0.6, overlap
    with pytest.raises(DatasetError, match="grey images"):
        box_normalise(load_dataset("iris"))


def _box_one_image(img, box, canvas, threshold=0.1):
    """The digit box of one image, written plainly (the reference for the batched code)."""
    from PIL import Image

    out = np.zeros((canvas, canvas), dtype=np.float32)
    ink = img > threshold * float(img.max())
    if not img.max() > 0 or not ink.any():
        return out
    rows, cols = np.flatnonzero(ink.any(1)), np.flatnonzero(ink.any(0))
    crop = np.ascontiguousarray(img[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1])
    scale = box / max(crop.shape)
    size = (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale)))
    small = np.clip(np.asarray(Image.fromarray(crop).resize(size, Image.BILINEAR)), 0.0, 1.0)
    mass = float(small.sum())
    cy, cx = (np.indices(small.shape) * small).reshape(2, -1).sum(1) / max(mass, 1e-12)
    top = int(np.clip(round(canvas / 2 - cy), 0, canvas - small.shape[0]))
    left = int(np.clip(round(canvas / 2 - cx), 0, canvas - small.shape[1]))
    out[top : top + small.shape[0], left : left + small.shape[1]] = small
    return out


@pytest.mark.parametrize("box,canvas", [(20, 28), (12, 16), (1, 4)])
def test_box_images_equal_the_per_image_procedure(box, canvas):
    """The batched bounding boxes (issue 34: 2.3x faster at 60,000 images) give the same
    images as the plain per-image procedure, blank, one-pixel and border-touching ones too."""
    from geoviz.data.preprocess import box_images
    from geoviz.data.registry import load_dataset

    rng = np.random.default_rng(0)
    digits = load_dataset("mnist").features.numpy()[:300].reshape(-1, 28, 28)
    odd = np.zeros((6, 28, 28), dtype=np.float32)
    odd[1, 5, 7] = 1.0  # one pixel
    odd[2, :, 0] = 0.8  # a full column on the border
    odd[3] = rng.random((28, 28), dtype=np.float32)  # noise everywhere
    odd[4, 27, 27] = 1e-3  # faint ink in a corner
    odd[5, 10:20, 3:25] = 0.5  # a wide bar
    # pixels exactly at the threshold of a peak below 1 (20/255 = 0.1 x 200/255)
    at_threshold = np.zeros((1, 28, 28), dtype=np.float32)
    at_threshold[0, 8:20, 8:20] = np.float32(20 / 255)
    at_threshold[0, 12:16, 12:16] = np.float32(200 / 255)
    images = np.concatenate([digits, odd, at_threshold])
    expected = np.stack([_box_one_image(img, box, canvas) for img in images])
    np.testing.assert_array_equal(box_images(images, box, canvas), expected)
