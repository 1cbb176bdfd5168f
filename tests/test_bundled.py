"""Bundled dataset samples (assets/nist/*.npz) and the script that makes them."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from geoviz.data import bundled
from geoviz.errors import DatasetError, DatasetFormatError, UnknownDatasetError

ROOT = Path(__file__).resolve().parents[1]
FASHION = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)


@pytest.mark.parametrize("name", bundled.BUNDLED_NAMES)
@pytest.mark.parametrize("split", ["train", "test"])
def test_bundled_loads_with_expected_shape_and_range(name: str, split: str) -> None:
    spec = bundled.BUNDLED[name]
    ds = bundled.load_bundled(name, split)
    assert ds.n_samples == (2000 if split == "train" else 500)
    assert ds.n_samples == (spec.n_train if split == "train" else spec.n_test)
    assert ds.image_shape == spec.image_shape
    assert ds.n_features == int(np.prod(spec.image_shape))
    assert ds.features.dtype == torch.float32
    assert float(ds.features.min()) >= 0.0 and float(ds.features.max()) <= 1.0
    # pixels are k / 255 exactly
    scaled = ds.features * 255
    assert torch.equal(scaled.round(), scaled.round().clamp(0, 255))
    assert torch.allclose(scaled, scaled.round(), atol=1e-4)
    assert ds.n_classes == spec.n_classes == 10
    assert (ds.class_counts() > 0).all()
    assert ds.name == name


def test_image_shapes_and_class_names_come_from_the_files() -> None:
    assert bundled.load_bundled("usps").image_shape == (1, 16, 16)
    assert bundled.load_bundled("mnist").classes == tuple(str(i) for i in range(10))
    assert bundled.load_bundled("fashion_mnist", "test").classes == FASHION
    assert bundled.load_bundled("kmnist").classes[:3] == ("o", "ki", "su")


@pytest.mark.parametrize("name", ["fashion_mnist", "kmnist"])
def test_balanced_sources_give_exactly_balanced_stratified_samples(name: str) -> None:
    # both sources have equal class sizes, so a stratified subset is exactly balanced
    assert bundled.load_bundled(name, "train").class_counts().tolist() == [200] * 10
    assert bundled.load_bundled(name, "test").class_counts().tolist() == [50] * 10


def test_assets_stay_small() -> None:
    """A few MB: the four dataset samples (2.6 MB), the shipped encoder (1.2 MB), figures."""
    total = sum(p.stat().st_size for p in (ROOT / "assets").rglob("*") if p.is_file())
    assert total < 5 * 2**20


def test_assets_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "nist").mkdir()
    shutil.copy(ROOT / "assets" / "nist" / "usps.npz", tmp_path / "nist" / "usps.npz")
    monkeypatch.setenv("GEOVIZ_ASSETS_DIR", str(tmp_path))
    assert bundled.assets_dir() == tmp_path
    ds = bundled.load_bundled("usps", "test")
    assert str(tmp_path) in ds.source
    with pytest.raises(DatasetError, match=r"mnist\.npz.*GEOVIZ_ASSETS_DIR"):
        bundled.load_bundled("mnist")


def test_bad_files_and_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "nist").mkdir()
    monkeypatch.setenv("GEOVIZ_ASSETS_DIR", str(tmp_path))
    (tmp_path / "nist" / "mnist.npz").write_bytes(b"not a zip file")
    with pytest.raises(DatasetFormatError, match=r"mnist\.npz"):
        bundled.load_bundled("mnist")
    np.savez_compressed(tmp_path / "nist" / "usps.npz", x_train=np.zeros((3, 4, 4), np.uint8))
    with pytest.raises(DatasetFormatError, match="missing key"):
        bundled.load_bundled("usps")
    with pytest.raises(DatasetError, match="split"):
        bundled.load_bundled("kmnist", "validation")
    with pytest.raises(UnknownDatasetError):
        bundled.load_bundled("cifar10")


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "make_assets", ROOT / "scripts" / "make_assets.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_assets_writes_stratified_deterministic_subsets(tmp_path: Path) -> None:
    script = _load_script()
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(0)
    originals = {}
    for name in script.NAMES:
        y_train = np.repeat(np.arange(3), [60, 30, 10])
        y_test = np.repeat(np.arange(3), [20, 20, 10])
        x_train = rng.integers(0, 256, (100, 5, 6), dtype=np.uint8)
        x_test = rng.integers(0, 256, (50, 5, 6), dtype=np.uint8)
        np.savez_compressed(
            src / f"{name}.npz",
            x_train=x_train,
            y_train=y_train,
            x_test=x_test,
            y_test=y_test,
            classes=np.array(["a", "b", "c"]),
        )
        originals[name] = (x_train, y_train)
    args = ["--source", str(src), "--n-train", "20", "--n-test", "10", "--seed", "3"]
    assert script.main([*args, "--out", str(tmp_path / "one")]) == 0
    assert script.main([*args, "--out", str(tmp_path / "two")]) == 0
    for name in script.NAMES:
        with (
            np.load(tmp_path / "one" / "nist" / f"{name}.npz") as a,
            np.load(tmp_path / "two" / "nist" / f"{name}.npz") as b,
        ):
            assert sorted(a.files) == ["classes", "x_test", "x_train", "y_test", "y_train"]
            for key in a.files:
                np.testing.assert_array_equal(a[key], b[key])
            assert a["x_train"].dtype == np.uint8 and a["x_train"].shape == (20, 5, 6)
            assert np.bincount(a["y_train"]).tolist() == [12, 6, 2]  # 60:30:10 of 20
            assert np.bincount(a["y_test"]).tolist() == [4, 4, 2]  # 20:20:10 of 10
            # every kept image is a source image with its own label
            x_src, y_src = originals[name]
            for img, label in zip(a["x_train"], a["y_train"], strict=True):
                match = np.flatnonzero((x_src == img).all(axis=(1, 2)))
                assert match.size == 1 and y_src[match[0]] == label
