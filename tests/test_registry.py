"""Dataset registry, scikit-learn sets and the torchvision download path."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from geoviz.data import registry, sklearn_sets, torchvision_sets
from geoviz.data.dataset import LabeledDataset
from geoviz.data.registry import DatasetInfo, dataset_info, list_datasets, load_dataset
from geoviz.errors import DatasetError, DownloadUnavailableError, GeovizError, UnknownDatasetError

OFFLINE = [info.name for info in list_datasets(include_download=False)]


@pytest.fixture(autouse=True)
def _fresh_cache():
    registry.clear_cache()
    yield
    registry.clear_cache()


def test_listing_kinds_and_order() -> None:
    infos = list_datasets()
    by_name = {info.name: info for info in infos}
    for name in ("mnist", "fashion_mnist", "kmnist", "usps"):
        assert by_name[name].kind == "bundled" and by_name[name].offline
    for name in ("digits", "iris", "wine"):
        assert by_name[name].kind == "sklearn" and by_name[name].offline
    for name in ("chessboard", "gmm2d", "gmm3d"):
        assert by_name[name].kind == "synthetic" and by_name[name].offline
    downloads = [info for info in infos if info.kind == "download"]
    assert {info.name for info in downloads} >= {
        "torchvision:mnist",
        "torchvision:emnist_letters",
        "torchvision:fashion_mnist",
        "torchvision:kmnist",
        "torchvision:usps",
    }
    assert all(not info.offline for info in downloads)
    offline_flags = [info.offline for info in infos]
    assert offline_flags == sorted(offline_flags, reverse=True)  # offline ones first
    assert [i.name for i in list_datasets(include_download=False)] == [
        i.name for i in infos if i.offline
    ]
    assert dataset_info("torchvision:emnist_letters").n_classes == 26
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_name["mnist"].n_train = 3  # type: ignore[misc]
    assert isinstance(by_name["mnist"], DatasetInfo)


@pytest.mark.parametrize("name", OFFLINE)
@pytest.mark.parametrize("split", ["train", "test"])
def test_every_offline_dataset_loads_as_listed(name: str, split: str) -> None:
    info = dataset_info(name)
    ds = load_dataset(name, split=split)
    assert isinstance(ds, LabeledDataset)
    assert ds.n_samples == (info.n_train if split == "train" else info.n_test)
    assert ds.n_classes == info.n_classes and ds.image_shape == info.image_shape
    assert ds.n_features == info.n_features
    assert (ds.class_counts() > 0).all()
    if info.kind == "bundled" and name not in ("mnist_m", "mnist_tex"):  # the samples
        assert (info.n_train, info.n_test) == (2000, 500)
    if ds.is_image:
        assert float(ds.features.min()) >= 0.0 and float(ds.features.max()) <= 1.0


def test_class_names() -> None:
    assert load_dataset("fashion_mnist").classes[0] == "T-shirt/top"
    assert load_dataset("fashion_mnist").classes[-1] == "Ankle boot"
    assert load_dataset("digits").classes == tuple(str(i) for i in range(10))
    assert load_dataset("iris").classes == ("setosa", "versicolor", "virginica")
    assert load_dataset("wine").classes == ("class_0", "class_1", "class_2")
    assert load_dataset("chessboard", class_names=["p", "q", "r", "s"]).classes == (
        "p",
        "q",
        "r",
        "s",
    )


def test_sklearn_splits_and_standardisation() -> None:
    train_idx, test_idx = sklearn_sets._split_indices("iris")
    assert not set(train_idx) & set(test_idx) and len(train_idx) + len(test_idx) == 150
    train, test = load_dataset("iris"), load_dataset("iris", split="test")
    assert test.class_counts().tolist() == [10, 10, 10]  # stratified 20 %
    torch.testing.assert_close(train.features.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        train.features.std(0, unbiased=False), torch.ones(4), atol=1e-5, rtol=0
    )
    raw = load_dataset("iris", standardize=False)
    assert float(raw.features.max()) > 6.0  # sepal length in cm
    digits = load_dataset("digits")
    assert digits.image_shape == (1, 8, 8) and float(digits.features.max()) == 1.0
    torch.testing.assert_close(digits.features * 16, (digits.features * 16).round())


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(UnknownDatasetError) as info:
        load_dataset("mnsit")
    message = str(info.value)
    assert "'mnsit'" in message and "Did you mean 'mnist'" in message and "fashion_mnist" in message
    assert isinstance(info.value, GeovizError) and isinstance(info.value, KeyError)
    with pytest.raises(UnknownDatasetError, match="torchvision:emnist_letters"):
        load_dataset("letters")
    with pytest.raises(UnknownDatasetError, match="Available: mnist"):
        load_dataset("no/such/file.npz")


def test_aliases_and_bad_arguments() -> None:
    assert load_dataset("Fashion-MNIST") is load_dataset("fashion_mnist")
    assert load_dataset("bundled:usps", split="test").name == "usps"
    with pytest.raises(DatasetError, match="split"):
        load_dataset("mnist", split="val")  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match="option"):
        load_dataset("mnist", standardize=True)
    with pytest.raises(DatasetError, match="n must be"):
        load_dataset("mnist", n=1)


def test_fingerprint_stable_across_loads_and_changed_by_one_pixel() -> None:
    first = load_dataset("usps", split="test")
    registry.clear_cache()
    second = load_dataset("usps", split="test")
    assert first is not second
    assert first.fingerprint == second.fingerprint
    features = second.features.clone()
    features[17, 42] = 1.0 - features[17, 42]
    changed = LabeledDataset(
        features, second.labels, second.classes, name="usps", image_shape=second.image_shape
    )
    assert changed.fingerprint != first.fingerprint


def test_subsample_and_in_process_cache() -> None:
    sub = load_dataset("mnist", n=200, seed=3)
    full = load_dataset("mnist")
    quota = full.class_counts() * 200 / full.n_samples
    assert sub.n_samples == 200 and np.all(np.abs(sub.class_counts() - quota) < 1)
    assert load_dataset("mnist", n=200, seed=3) is sub  # cached
    assert load_dataset("mnist", n=200, seed=4).fingerprint != sub.fingerprint
    assert load_dataset("mnist", n=5000) is full
    assert load_dataset("mnist", seed=9) is full  # the seed only matters for subsamples here
    # synthetic sets use the seed for the data itself
    assert load_dataset("gmm2d", seed=1).fingerprint != load_dataset("gmm2d", seed=2).fingerprint
    perm = load_dataset("chessboard", permutation=[1, 0, 3, 2])
    assert torch.equal(perm.features, load_dataset("chessboard").features)
    assert load_dataset("chessboard", permutation=[1, 0, 3, 2]) is perm  # lists are cache keys


def test_existing_path_is_delegated_to_load_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    base = load_dataset("kmnist", split="test")

    def fake_load_path(path, *, split="train", kind="auto", name=None, label_column=None):
        calls.append((path, split, kind, name))
        return base

    from geoviz.data import registry

    monkeypatch.setattr(registry, "load_path", fake_load_path)
    file = tmp_path / "mnist"  # same name as a registry entry: needs ./ or a Path
    file.write_bytes(b"x")
    assert load_dataset(file, split="test", name="mine") is base
    assert calls == [(str(file.resolve()), "test", "auto", "mine")]
    sub = load_dataset(str(tmp_path / "mnist"), n=50, kind="npz")
    assert sub.n_samples == 50 and calls[-1][2] == "npz"
    # a changed file is reloaded, an unchanged one comes from the cache
    n_calls = len(calls)
    load_dataset(str(tmp_path / "mnist"), n=50, kind="npz")
    assert len(calls) == n_calls
    file.write_bytes(b"xy")
    load_dataset(str(tmp_path / "mnist"), n=50, kind="npz")
    assert len(calls) == n_calls + 1


# --------------------------------------------------------------------------- torchvision


def test_missing_torchvision_raises_download_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision -> ImportError
    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path))
    with pytest.raises(DownloadUnavailableError) as info:
        load_dataset("torchvision:mnist")
    message = str(info.value)
    assert "pip install torchvision" in message
    assert str(tmp_path / "torchvision" / "MNIST" / "raw") in message
    assert "train-images-idx3-ubyte" in message and "load_path" in message
    assert isinstance(info.value, GeovizError)
    with pytest.raises(DownloadUnavailableError, match=r"usps\.bz2"):
        torchvision_sets.load_torchvision("usps", "test")


def _fake_torchvision(monkeypatch: pytest.MonkeyPatch, factory) -> list:
    calls: list = []

    def make(cls_name):
        def ctor(root, train=True, download=True, **kwargs):
            calls.append((cls_name, root, train, download, kwargs))
            return factory(cls_name, train, kwargs)

        return ctor

    datasets = types.SimpleNamespace(
        **{c: make(c) for c in ("MNIST", "EMNIST", "FashionMNIST", "KMNIST", "USPS")}
    )
    module = types.ModuleType("torchvision")
    module.datasets = datasets
    monkeypatch.setitem(sys.modules, "torchvision", module)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", datasets)
    return calls


def test_failed_download_raises_download_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def factory(cls_name, train, kwargs):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz")

    _fake_torchvision(monkeypatch, factory)
    with pytest.raises(DownloadUnavailableError, match=r"Error downloading.*KMNIST/raw"):
        torchvision_sets.load_torchvision("kmnist", root=tmp_path)


def test_torchvision_conversion_emnist_upright_and_usps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rng = np.random.default_rng(0)
    raw = torch.from_numpy(rng.integers(0, 256, (52, 28, 28), dtype=np.uint8))
    letters = torch.arange(52) % 26 + 1  # EMNIST letters labels are 1..26
    usps = rng.integers(0, 256, (20, 16, 16), dtype=np.uint8)

    def factory(cls_name, train, kwargs):
        if cls_name == "EMNIST":
            return types.SimpleNamespace(data=raw, targets=letters)
        if cls_name == "USPS":
            return types.SimpleNamespace(data=usps, targets=[i % 10 for i in range(20)])
        return types.SimpleNamespace(data=raw[:20], targets=torch.arange(20) % 10)

    calls = _fake_torchvision(monkeypatch, factory)
    em = torchvision_sets.load_torchvision("emnist_letters", "test", root=tmp_path)
    assert calls[-1] == ("EMNIST", str(tmp_path), False, True, {"split": "letters"})
    assert em.classes == tuple("abcdefghijklmnopqrstuvwxyz")
    assert torch.equal(em.labels, letters - 1)
    # stored transposed in the files; returned upright: image[i, j] == raw[j, i]
    torch.testing.assert_close(em.images()[3, 0], raw[3].T.float() / 255)
    us = torchvision_sets.load_torchvision("usps", root=tmp_path, download=False)
    assert calls[-1][:4] == ("USPS", str(tmp_path), True, False)
    assert us.image_shape == (1, 16, 16)
    torch.testing.assert_close(us.images()[5, 0], torch.from_numpy(usps[5]).float() / 255)
    fm = load_dataset("torchvision:fashion_mnist", root=tmp_path)
    assert fm.classes[0] == "T-shirt/top" and fm.n_samples == 20


def test_an_unknown_name_lists_only_what_can_load_here(monkeypatch) -> None:
    """The "Available:" list named torchvision entries where torchvision is missing (issue 32:
    no choice that cannot work here)."""
    from geoviz.data import torchvision_sets

    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: False)
    with pytest.raises(UnknownDatasetError) as info:
        load_dataset("no_such_set")
    available = str(info.value).split("Available: ", 1)[1]
    assert "mnist" in available and "torchvision:" not in available
    monkeypatch.setattr(torchvision_sets, "torchvision_installed", lambda: True)
    with pytest.raises(UnknownDatasetError, match="torchvision:usps"):
        load_dataset("no_such_set")
