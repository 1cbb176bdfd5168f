"""Tests of geoviz.data.formats: round trips on files written here, and bad input."""

from __future__ import annotations

import gzip
import io
import os
import re
import struct
import zipfile
from pathlib import Path

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st
from PIL import Image

from geoviz import memory
from geoviz.data import formats
from geoviz.data.formats import (
    decode_idx,
    encode_idx,
    load_path,
    load_upload,
    load_upload_pair,
    read_idx,
    save_idx,
)
from geoviz.data.formats import idx as idx_module
from geoviz.data.formats import imagefolder as imagefolder_module
from geoviz.data.formats import npz as npz_module
from geoviz.errors import DatasetError, DatasetFormatError, ExportError, ResourceError

RNG = np.random.default_rng(0)


# ------------------------------------------------------------------ helpers
def images_u8(n: int, *shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, *shape), dtype=np.uint8)


def cyclic_labels(n: int, k: int) -> np.ndarray:
    return (np.arange(n) % k).astype(np.uint8)


def as_pixels(imgs: np.ndarray) -> np.ndarray:
    """Expected features: (N, D) float32 pixel / 255."""
    return imgs.reshape(len(imgs), -1).astype(np.float32) / 255


def assert_features(ds, expected: np.ndarray) -> None:
    got = ds.features.numpy()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected.astype(np.float32))


def write_png(path: Path, arr: np.ndarray, mode: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = Image.fromarray(arr) if mode is None else Image.fromarray(arr).convert(mode)
    img.save(path)


def m(path_or_name: str | Path) -> str:
    """A `match=` pattern requiring the file's name in the message."""
    return re.escape(Path(path_or_name).name)


def zip_bytes(files: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


def png_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


# ================================================================== IDX
@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip_file_and_directory(tmp_path: Path, gz: bool) -> None:
    ext = ".gz" if gz else ""
    tr_x, tr_y = images_u8(12, 5, 4, seed=1), cyclic_labels(12, 3)
    te_x, te_y = images_u8(6, 5, 4, seed=2), cyclic_labels(6, 2)[::-1].copy()
    save_idx(tmp_path / f"train-images-idx3-ubyte{ext}", tr_x)
    save_idx(tmp_path / f"train-labels-idx1-ubyte{ext}", tr_y)
    save_idx(tmp_path / f"t10k-images-idx3-ubyte{ext}", te_x)
    save_idx(tmp_path / f"t10k-labels-idx1-ubyte{ext}", te_y)

    for given in (f"train-images-idx3-ubyte{ext}", f"train-labels-idx1-ubyte{ext}"):
        ds = load_path(tmp_path / given)
        assert_features(ds, as_pixels(tr_x))
        np.testing.assert_array_equal(ds.labels.numpy(), tr_y)
        assert ds.classes == ("0", "1", "2")
        assert ds.image_shape == (1, 5, 4)
        assert ds.source == str(tmp_path / given)

    ds_tr = load_path(tmp_path, split="train")
    assert_features(ds_tr, as_pixels(tr_x))
    ds_te = load_path(tmp_path, split="test", kind="idx")
    assert_features(ds_te, as_pixels(te_x))
    np.testing.assert_array_equal(ds_te.labels.numpy(), te_y)
    assert ds_te.classes == ("0", "1")
    assert ds_te.name == tmp_path.name


def test_idx_torchvision_raw_folder(tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    x, y = images_u8(4, 3, 3), np.array([2, 0, 2, 1], np.uint8)
    save_idx(raw / "t10k-images-idx3-ubyte", x)
    save_idx(raw / "t10k-labels-idx1-ubyte", y)
    ds = load_path(tmp_path / "MNIST", split="test")
    assert ds.name == "MNIST"
    assert_features(ds, as_pixels(x))
    np.testing.assert_array_equal(ds.labels.numpy(), y)
    assert load_path(raw / "t10k-labels-idx1-ubyte").name == "MNIST"
    arr = read_idx(raw / "t10k-images-idx3-ubyte")
    arr[0, 0, 0] = 7  # a writable copy, not a view of the file bytes
    assert arr.flags.writeable


def test_idx_dotted_naming_and_name_prefix(tmp_path: Path) -> None:
    x, y = images_u8(4, 3, 3), np.array([1, 0, 1, 0], np.uint8)
    save_idx(tmp_path / "emnist-letters-train-images.idx3-ubyte", x)
    save_idx(tmp_path / "emnist-letters-train-labels.idx1-ubyte", y)
    ds = load_path(tmp_path / "emnist-letters-train-images.idx3-ubyte")
    assert ds.name == "emnist-letters"
    assert_features(ds, as_pixels(x))
    np.testing.assert_array_equal(ds.labels.numpy(), y)


def test_idx_magic_numbers_and_all_dtype_codes(tmp_path: Path) -> None:
    assert encode_idx(np.zeros((2, 3, 4), np.uint8))[:4] == bytes.fromhex("00000803")
    assert encode_idx(np.zeros(7, np.uint8))[:4] == bytes.fromhex("00000801")
    assert encode_idx(np.zeros((2, 3, 4), np.uint8))[4:16] == bytes.fromhex(
        "000000020000000300000004"
    )
    codes = {
        np.uint8: 0x08,
        np.int8: 0x09,
        np.int16: 0x0B,
        np.int32: 0x0C,
        np.float32: 0x0D,
        np.float64: 0x0E,
    }
    for dtype, code in codes.items():
        arr = (
            (np.arange(-12, 12) * 3).astype(dtype).reshape(2, 3, 4)
            if dtype != np.uint8
            else images_u8(2, 3, 4)
        )
        raw = encode_idx(arr)
        assert raw[2] == code
        assert raw[4 + 12 :] == arr.astype(np.dtype(arr.dtype).newbyteorder(">")).tobytes()
        back = decode_idx(raw)
        assert back.dtype == arr.dtype and back.shape == arr.shape
        np.testing.assert_array_equal(back, arr)
        path = save_idx(tmp_path / f"a-{np.dtype(dtype).name}.idx3-ubyte.gz", arr)
        np.testing.assert_array_equal(read_idx(path), arr)


def test_idx_non_uint8_images_are_scaled(tmp_path: Path) -> None:
    x = np.linspace(0, 1, 2 * 3 * 3).reshape(2, 3, 3).astype(np.float32)
    save_idx(tmp_path / "train-images-idx3-ubyte", x)
    save_idx(tmp_path / "train-labels-idx1-ubyte", np.array([0, 1], np.int32))
    ds = load_path(tmp_path)
    assert_features(ds, x.reshape(2, -1))


def test_save_idx_refuses_bad_dtype_and_overwrite(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="int64"):
        encode_idx(np.zeros(3, np.int64))
    path = save_idx(tmp_path / "x-labels-idx1-ubyte", np.zeros(3, np.uint8))
    with pytest.raises(ExportError, match="exists"):
        save_idx(path, np.zeros(3, np.uint8))
    save_idx(path, np.ones(3, np.uint8), overwrite=True)
    np.testing.assert_array_equal(read_idx(path), np.ones(3))


def _idx_pair(
    tmp_path: Path, n_img: int = 6, n_lab: int = 6, gz: bool = False
) -> tuple[Path, Path]:
    ext = ".gz" if gz else ""
    img = save_idx(tmp_path / f"train-images-idx3-ubyte{ext}", images_u8(n_img, 4, 4))
    lab = save_idx(tmp_path / f"train-labels-idx1-ubyte{ext}", cyclic_labels(n_lab, 2))
    return img, lab


def test_idx_truncated_file(tmp_path: Path) -> None:
    img, _ = _idx_pair(tmp_path)
    img.write_bytes(img.read_bytes()[:-5])
    with pytest.raises(DatasetFormatError, match=f"{m(img)}.*truncated"):
        load_path(img)
    img.write_bytes(img.read_bytes()[:10])  # inside the header
    with pytest.raises(DatasetFormatError, match=f"{m(img)}.*truncated"):
        load_path(img)


def test_idx_trailing_bytes_are_corrupt(tmp_path: Path) -> None:
    _, lab = _idx_pair(tmp_path)
    lab.write_bytes(lab.read_bytes() + b"\x00\x00")
    with pytest.raises(DatasetFormatError, match=f"{m(lab)}.*unexpected bytes"):
        load_path(lab)


def test_idx_wrong_magic(tmp_path: Path) -> None:
    img, _ = _idx_pair(tmp_path)
    raw = bytearray(img.read_bytes())
    raw[2] = 0x07
    img.write_bytes(bytes(raw))
    with pytest.raises(DatasetFormatError, match=f"{m(img)}.*wrong magic number 0x00000703"):
        load_path(img)


def test_idx_labels_file_in_images_slot(tmp_path: Path) -> None:
    img, _ = _idx_pair(tmp_path)
    save_idx(img, cyclic_labels(6, 2), overwrite=True)
    with pytest.raises(DatasetFormatError, match=f"{m(img)}.*0x00000801"):
        load_path(img)


def test_idx_count_mismatch(tmp_path: Path) -> None:
    img, lab = _idx_pair(tmp_path, n_img=6, n_lab=5, gz=True)
    with pytest.raises(DatasetFormatError, match=f"{m(img)}.*6 images.*{m(lab)}.*5 labels"):
        load_path(lab)


def test_idx_missing_partner(tmp_path: Path) -> None:
    img = save_idx(tmp_path / "train-images-idx3-ubyte", images_u8(3, 2, 2))
    with pytest.raises(DatasetFormatError, match=f"{m(img)}.*train-labels-idx1-ubyte"):
        load_path(img)


def test_idx_corrupt_gzip(tmp_path: Path) -> None:
    img, lab = _idx_pair(tmp_path, gz=True)
    lab.write_bytes(lab.read_bytes()[:-12])  # truncated gzip stream
    with pytest.raises(DatasetFormatError, match=f"{m(lab)}.*gzip"):
        load_path(img)
    lab.write_bytes(b"not gzip at all")
    with pytest.raises(DatasetFormatError, match=f"{m(lab)}.*gzip"):
        load_path(img)


def test_idx_directory_without_requested_split(tmp_path: Path) -> None:
    _idx_pair(tmp_path)
    with pytest.raises(DatasetFormatError, match="split 'test'"):
        load_path(tmp_path, split="test")


def test_upload_pair_any_order_and_gz() -> None:
    x, y = images_u8(8, 3, 5), cyclic_labels(8, 4)
    xb, yb = gzip.compress(encode_idx(x)), encode_idx(y)
    for args in (
        (xb, yb, "a-images-idx3-ubyte.gz", "a-labels-idx1-ubyte"),
        (yb, xb, "a-labels-idx1-ubyte", "a-images-idx3-ubyte.gz"),
    ):
        ds = load_upload_pair(*args)
        assert_features(ds, as_pixels(x))
        np.testing.assert_array_equal(ds.labels.numpy(), y)
        assert ds.image_shape == (1, 3, 5)
        assert ds.source == "a-images-idx3-ubyte.gz"
    with pytest.raises(DatasetFormatError, match=r"b-labels.*truncated"):
        load_upload_pair(xb, yb[:-1], "a-images-idx3-ubyte.gz", "b-labels")


def test_single_idx_upload_points_to_pair_loader() -> None:
    with pytest.raises(DatasetFormatError, match=r"train-images-idx3-ubyte.*load_upload_pair"):
        load_upload(encode_idx(images_u8(2, 2, 2)), "train-images-idx3-ubyte")


# ================================================================== npz
@pytest.mark.parametrize(
    ("xk", "yk"),
    [("x", "y"), ("X", "Y"), ("images", "labels"), ("features", "labels"), ("data", "labels")],
)
def test_npz_key_conventions(tmp_path: Path, xk: str, yk: str) -> None:
    x, y = images_u8(10, 6, 5), cyclic_labels(10, 3)
    path = tmp_path / "set.npz"
    np.savez(path, **{xk: x, yk: y})
    ds = load_path(path)
    assert_features(ds, as_pixels(x))
    np.testing.assert_array_equal(ds.labels.numpy(), y)
    assert ds.image_shape == (1, 6, 5)
    assert ds.name == "set"
    assert ds.source == str(path)


def test_npz_keras_split_choice(tmp_path: Path) -> None:
    path = tmp_path / "mnist.npz"
    tr_x, te_x = images_u8(9, 4, 4, seed=1), images_u8(5, 4, 4, seed=2)
    tr_y, te_y = cyclic_labels(9, 3), np.array([0, 1, 0, 1, 1], np.uint8)
    np.savez_compressed(path, x_train=tr_x, y_train=tr_y, x_test=te_x, y_test=te_y)
    train = load_path(path)
    test = load_path(path, split="test")
    assert_features(train, as_pixels(tr_x))
    assert_features(test, as_pixels(te_x))
    np.testing.assert_array_equal(test.labels.numpy(), te_y)
    assert train.name == "mnist"

    only_train = tmp_path / "half.npz"
    np.savez(only_train, x_train=tr_x, y_train=tr_y)
    with pytest.raises(DatasetFormatError, match=f"{m(only_train)}.*x_test/y_test"):
        load_path(only_train, split="test")


def test_npz_label_values_become_class_names(tmp_path: Path) -> None:
    path = tmp_path / "s.npz"
    np.savez(path, x=RNG.normal(size=(5, 3)), y=np.array([7, 3, 3, 7, 3]))
    ds = load_path(path)
    assert ds.classes == ("3", "7")
    np.testing.assert_array_equal(ds.labels.numpy(), [1, 0, 0, 1, 0])

    np.savez(path, x=RNG.normal(size=(4, 3)), y=np.array(["dog", "cat", "dog", "emu"]))
    ds = load_path(path)
    assert ds.classes == ("cat", "dog", "emu")
    np.testing.assert_array_equal(ds.labels.numpy(), [1, 0, 1, 2])

    np.savez(path, x=RNG.normal(size=(3, 2)), y=np.array([2.0, 0.0, 2.0]))
    assert load_path(path).classes == ("0", "2")


def test_npz_classes_key_and_one_hot(tmp_path: Path) -> None:
    path = tmp_path / "s.npz"
    y = np.array([0, 2, 2, 0])
    np.savez(path, x=RNG.normal(size=(4, 2)), y=y, classes=np.array(["a", "b", "c"]))
    ds = load_path(path)
    assert ds.classes == ("a", "b", "c")
    np.testing.assert_array_equal(ds.labels.numpy(), y)

    np.savez(
        path,
        x=RNG.normal(size=(4, 2)),
        y=np.array(["c", "a", "a", "c"]),
        class_names=np.array(["a", "b", "c"]),
    )
    np.testing.assert_array_equal(load_path(path).labels.numpy(), [2, 0, 0, 2])

    onehot = np.eye(4, dtype=np.float32)[[3, 1, 1, 3]]
    np.savez(path, x=RNG.normal(size=(4, 2)), y=onehot)
    ds = load_path(path)
    assert ds.classes == ("0", "1", "2", "3")
    np.testing.assert_array_equal(ds.labels.numpy(), [3, 1, 1, 3])

    np.savez(path, x=RNG.normal(size=(2, 2)), y=np.array([[0.5, 0.5], [1.0, 0.0]]))
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*not one-hot"):
        load_path(path)


def test_npz_image_layouts(tmp_path: Path) -> None:
    path = tmp_path / "img.npz"
    y = cyclic_labels(4, 2)
    nhwc = images_u8(4, 6, 5, 3)
    nchw = np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2))
    for x in (nhwc, nchw):
        np.savez(path, x=x, y=y)
        ds = load_path(path)
        assert ds.image_shape == (3, 6, 5)
        assert_features(ds, as_pixels(nchw))
        np.testing.assert_array_equal(ds.images().numpy()[:, 1], nchw[:, 1] / np.float32(255))


def test_npz_float_images_and_vectors(tmp_path: Path) -> None:
    path = tmp_path / "f.npz"
    y = cyclic_labels(3, 2)
    unit = RNG.uniform(0, 1, size=(3, 4, 4))
    np.savez(path, x=unit, y=y)
    assert_features(load_path(path), unit.reshape(3, -1).astype(np.float32))

    as255 = images_u8(3, 4, 4).astype(np.float64)
    np.savez(path, x=as255, y=y)
    assert_features(load_path(path), as_pixels(as255.astype(np.uint8)))

    vectors = RNG.normal(scale=100, size=(3, 7))
    np.savez(path, x=vectors, y=y)
    ds = load_path(path)
    assert ds.image_shape is None
    assert_features(ds, vectors.astype(np.float32))

    np.savez(path, x=RNG.uniform(-3, 300, size=(3, 4, 4)), y=y)
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*range"):
        load_path(path)


def test_npz_never_unpickles(tmp_path: Path) -> None:
    path = tmp_path / "obj.npz"
    np.savez(path, x=np.array([[1.0], [2.0]]), y=np.array([0, {"evil": 1}], dtype=object))
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*'y'.*unpickl"):
        load_path(path)


@pytest.mark.parametrize(
    ("arrays", "error", "pattern"),
    [
        ({"x": np.ones((3, 2)), "y": np.array([0, 1.5, 1])}, DatasetFormatError, "non-integer"),
        ({"x": np.ones((3, 2)), "y": np.array([0, 1])}, DatasetFormatError, "3 samples.*2 labels"),
        ({"x": np.ones((3, 2)), "y": np.array([4, 4, 4])}, DatasetError, "only one class"),
        ({"x": np.ones((0, 2)), "y": np.zeros(0, int)}, DatasetError, "empty"),
        ({"x": np.array([[1.0], [np.nan]]), "y": np.array([0, 1])}, DatasetError, "NaN"),
        (
            {"x": np.array([[[0.5, np.inf]]] * 2), "y": np.array([0, 1])},
            DatasetError,
            "NaN or infinite",
        ),
        (
            {"a": np.ones((3, 2)), "b": np.array([0, 1, 0])},
            DatasetFormatError,
            r"no known.*\['a', 'b'\]",
        ),
        ({"x": np.array(["a", "b"]), "y": np.array([0, 1])}, DatasetFormatError, "must be numbers"),
    ],
)
def test_npz_bad_content(tmp_path: Path, arrays: dict, error: type, pattern: str) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(error, match=f"{m(path)}.*{pattern}"):
        load_path(path)


def test_npz_corrupt_files(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    np.savez(path, x=np.ones((3, 2)), y=np.array([0, 1, 0]))
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*corrupt"):
        load_path(path)
    path.write_bytes(b"hello world")
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*not an .npz"):
        load_path(path)
    buf = io.BytesIO()
    np.save(buf, np.ones(3))
    path.write_bytes(buf.getvalue())
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*single .npy"):
        load_path(path)


def test_npz_upload_bytes() -> None:
    buf = io.BytesIO()
    x, y = images_u8(6, 3, 3), cyclic_labels(6, 2)
    np.savez(buf, images=x, labels=y)
    ds = load_upload(buf.getvalue(), "digits.npz")
    assert_features(ds, as_pixels(x))
    assert ds.source == "digits.npz" and ds.name == "digits"
    with pytest.raises(DatasetFormatError, match=r"digits.npz.*corrupt"):
        load_upload(buf.getvalue()[:-30], "digits.npz")


# ================================================================== ImageFolder
def test_imagefolder_grey(tmp_path: Path) -> None:
    root = tmp_path / "shapes"
    imgs = images_u8(6, 7, 5)
    # torchvision sorts class names as plain strings: "10" < "2" < "b"
    classes = ["2", "10", "b"]
    for i, img in enumerate(imgs):
        write_png(root / classes[i % 3] / f"{i:03d}.png", img)
    (root / "b" / "notes.txt").write_text("ignored")
    (root / ".hidden").mkdir()
    ds = load_path(root)
    assert ds.classes == ("10", "2", "b")
    assert ds.image_shape == (1, 7, 5)
    order = [1, 4, 0, 3, 2, 5]  # class "10" (i=1,4), "2" (i=0,3), "b" (i=2,5)
    assert_features(ds, as_pixels(imgs[order]))
    np.testing.assert_array_equal(ds.labels.numpy(), [0, 0, 1, 1, 2, 2])
    assert ds.name == "shapes" and ds.source == str(root)


def test_imagefolder_rgb_rgba_palette_and_mixed(tmp_path: Path) -> None:
    root = tmp_path / "colour"
    rgb = images_u8(2, 4, 4, 3)
    write_png(root / "a" / "0.png", rgb[0])
    write_png(root / "a" / "1.png", np.dstack([rgb[1], np.full((4, 4), 9, np.uint8)]))  # RGBA
    grey = images_u8(1, 4, 4, seed=5)[0]
    write_png(root / "b" / "g.png", grey)  # grey among colour -> replicated to RGB
    ds = load_path(root, kind="imagefolder")
    assert ds.image_shape == (3, 4, 4)
    expected = np.stack([rgb[0], rgb[1], np.repeat(grey[..., None], 3, axis=2)]).transpose(
        0, 3, 1, 2
    )
    assert_features(ds, as_pixels(expected))

    pal = tmp_path / "pal"
    img = Image.fromarray(rgb[0]).convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    (pal / "x").mkdir(parents=True)
    (pal / "y").mkdir()
    img.save(pal / "x" / "p.gif")
    img.save(pal / "y" / "p.bmp")
    ds = load_path(pal)
    want = np.asarray(img.convert("RGB")).transpose(2, 0, 1)
    assert_features(ds, as_pixels(np.stack([want, want])))


def test_imagefolder_16bit_grey(tmp_path: Path) -> None:
    imgs = np.random.default_rng(4).integers(0, 65536, size=(2, 3, 4), dtype=np.uint16)
    for c, img in zip("ab", imgs, strict=True):
        write_png(tmp_path / c / "x.png", img)
    ds = load_path(tmp_path)
    assert ds.image_shape == (1, 3, 4)
    assert_features(ds, imgs.reshape(2, -1).astype(np.float32) / np.float32(65535))


def test_imagefolder_train_test_subfolders(tmp_path: Path) -> None:
    for split, seed in (("train", 1), ("test", 2)):
        for c in "ab":
            write_png(tmp_path / split / c / "0.png", images_u8(1, 3, 3, seed=seed)[0])
    train, test = load_path(tmp_path), load_path(tmp_path, split="test")
    assert_features(train, as_pixels(np.stack([images_u8(1, 3, 3, seed=1)[0]] * 2)))
    assert_features(test, as_pixels(np.stack([images_u8(1, 3, 3, seed=2)[0]] * 2)))


def test_imagefolder_different_sizes(tmp_path: Path) -> None:
    write_png(tmp_path / "a" / "small.png", images_u8(1, 4, 4)[0])
    write_png(tmp_path / "b" / "big.png", images_u8(1, 6, 5)[0])
    with pytest.raises(
        DatasetFormatError,
        match=r"different sizes: 4x4 \(e.g. a/small.png\), 5x6 \(e.g. b/big.png\)",
    ):
        load_path(tmp_path)


def test_imagefolder_unreadable_and_truncated_images(tmp_path: Path) -> None:
    write_png(tmp_path / "a" / "ok.png", images_u8(1, 4, 4)[0])
    bad = tmp_path / "b" / "broken.png"
    bad.parent.mkdir()
    bad.write_bytes(b"definitely not a png")
    with pytest.raises(DatasetFormatError, match=m(bad)):
        load_path(tmp_path)
    bad.write_bytes(png_bytes(images_u8(1, 40, 40)[0])[:-60])
    with pytest.raises(DatasetFormatError, match=m(bad)):
        load_path(tmp_path)


def test_imagefolder_empty_class_and_one_class(tmp_path: Path) -> None:
    write_png(tmp_path / "a" / "0.png", images_u8(1, 3, 3)[0])
    write_png(tmp_path / "a" / "1.png", images_u8(1, 3, 3)[0])
    (tmp_path / "b").mkdir()
    with pytest.raises(DatasetFormatError, match=r"\['b'\] contain no images"):
        load_path(tmp_path, kind="imagefolder")
    (tmp_path / "b").rmdir()
    with pytest.raises(DatasetError, match=f"{m(tmp_path)}.*only one class"):
        load_path(tmp_path)


# ================================================================== MNIST-M
def _write_mnistm(root: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    data = {}
    for split, n in (("train", 6), ("test", 4)):
        imgs = images_u8(n, 5, 5, 3, seed=n)
        labels = np.array([(3 * i) % 4 for i in range(n)])
        folder = root / f"mnist_m_{split}"
        lines = []
        for i, (img, lab) in enumerate(zip(imgs, labels, strict=True)):
            write_png(folder / f"{i:08d}.png", img)
            lines.append(f"{i:08d}.png {lab}")
        (root / f"mnist_m_{split}_labels.txt").write_text("\n".join(lines) + "\n")
        data[split] = (imgs, labels)
    return data


def test_mnistm_layout(tmp_path: Path) -> None:
    root = tmp_path / "mnist_m"
    data = _write_mnistm(root)
    for split in ("train", "test"):
        imgs, labels = data[split]
        uniq = np.unique(labels)
        for given in (root, root / f"mnist_m_{split}_labels.txt", root / f"mnist_m_{split}"):
            ds = load_path(given, split=split)
            assert ds.image_shape == (3, 5, 5)
            assert_features(ds, as_pixels(imgs.transpose(0, 3, 1, 2)))
            np.testing.assert_array_equal(ds.labels.numpy(), np.searchsorted(uniq, labels))
            assert ds.classes == tuple(str(u) for u in uniq)
    assert load_path(root).name == "mnist_m"


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ("00000001.png", "line 2: expected"),
        ("00000001.png five", "line 2: label 'five'"),
        ("99999999.png 1", "line 2: image '99999999.png' not found"),
        ("../../x.png 1", "line 2: image path.*leaves"),
    ],
)
def test_mnistm_bad_labels_file(tmp_path: Path, line: str, pattern: str) -> None:
    root = tmp_path / "mm"
    _write_mnistm(root)
    txt = root / "mnist_m_train_labels.txt"
    txt.write_text("00000000.png 0\n" + line + "\n")
    with pytest.raises(DatasetFormatError, match=f"{m(txt)}.*{pattern}"):
        load_path(txt)


# ================================================================== CSV
def test_csv_label_column_detection(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    feats = np.array([[0.5, -1.0], [2.0, 3.25], [1.0, 0.0]])
    path.write_text("a,Label,b\n0.5,x,-1\n2,y,3.25\n1,x,0\n")
    ds = load_path(path)
    assert ds.image_shape is None and ds.classes == ("x", "y")
    assert_features(ds, feats)
    np.testing.assert_array_equal(ds.labels.numpy(), [0, 1, 0])

    path.write_text("a,b,c\n0.5,-1,9\n2,3.25,4\n1,0,9\n")  # last column
    ds = load_path(path)
    assert ds.classes == ("4", "9")
    assert_features(ds, feats)

    path.write_text("c,a,b\n9,0.5,-1\n4,2,3.25\n9,1,0\n")  # explicit label column
    ds = load_path(path, label_column="c")
    assert ds.classes == ("4", "9")
    assert_features(ds, feats)
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*non-integer value 0.5"):
        load_path(path, label_column="a")
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*'zz' not found"):
        load_path(path, label_column="zz")


def test_csv_upload_and_gz(tmp_path: Path) -> None:
    text = b"f1,f2,target\n1,2,0\n3,4,1\n5,6,1\n"
    ds = load_upload(text, "up.csv")
    assert_features(ds, np.array([[1, 2], [3, 4], [5, 6]]))
    assert ds.source == "up.csv" and ds.name == "up"
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(text))
    np.testing.assert_array_equal(load_path(path).labels.numpy(), [0, 1, 1])
    ds = load_upload(gzip.compress(text), "t.csv.gz")
    assert ds.name == "t"


@pytest.mark.parametrize(
    ("text", "error", "pattern"),
    [
        (
            "a,b,label\n1,red,0\n2,blue,1\n",
            DatasetFormatError,
            "column 'b' is not numeric.*'red' on line 2",
        ),
        ("a,b,label\n1,2,0\n2,,1\n", DatasetError, "NaN.*column 'b' on line 3"),
        ("a,b,label\n1,2,0\n2,inf,1\n", DatasetError, "infinite value in column 'b'"),
        ("a,label\n1,0\n2,\n", DatasetFormatError, "label column 'label' is empty on line 3"),
        ("a,label\n1,0\n2,0\n", DatasetError, "only one class"),
        ("a,label\n", DatasetError, "empty"),
        ("", DatasetError, "empty"),
        ("label\n1\n0\n", DatasetFormatError, "no feature columns"),
        ('a,label\n"1,0\n', DatasetFormatError, "cannot parse CSV"),
    ],
)
def test_csv_bad_content(tmp_path: Path, text: str, error: type, pattern: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(error, match=f"{m(path)}.*{pattern}"):
        load_path(path)


# ================================================================== zip uploads
def _imagefolder_zip(prefix: str) -> tuple[bytes, np.ndarray]:
    imgs = images_u8(4, 3, 4, seed=3)
    files = {f"{prefix}{'ab'[i % 2]}/{i}.png": png_bytes(img) for i, img in enumerate(imgs)}
    files["__MACOSX/._junk"] = b"\x00junk"
    return zip_bytes(files), imgs


@pytest.mark.parametrize("prefix", ["", "myset/"])
def test_zip_upload_imagefolder(prefix: str) -> None:
    data, imgs = _imagefolder_zip(prefix)
    ds = load_upload(data, "pics.zip")
    assert ds.classes == ("a", "b")
    assert_features(ds, as_pixels(imgs[[0, 2, 1, 3]]))
    assert ds.source == "pics.zip" and ds.name == "pics"


def test_zip_upload_mnistm_and_load_path_zip(tmp_path: Path) -> None:
    root = tmp_path / "mnist_m"
    data = _write_mnistm(root)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for f in sorted(root.rglob("*")):
            zf.write(f, f.relative_to(tmp_path).as_posix())
    ds = load_upload(buf.getvalue(), "mnist_m.zip", split="test")
    assert_features(ds, as_pixels(data["test"][0].transpose(0, 3, 1, 2)))
    zpath = tmp_path / "copy.zip"
    zpath.write_bytes(buf.getvalue())
    ds = load_path(zpath)
    assert_features(ds, as_pixels(data["train"][0].transpose(0, 3, 1, 2)))
    assert ds.source == str(zpath)


@pytest.mark.parametrize(
    "evil", ["../evil.png", "a/../../evil.png", "/tmp/evil.png", "C:/evil.png", "..\\evil.png"]
)
def test_zip_slip_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: str) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    data = zip_bytes({"a/0.png": png_bytes(images_u8(1, 2, 2)[0]), evil: b"owned"})
    with pytest.raises(DatasetFormatError, match=r"evil.zip.*unsafe zip member.*zip-slip"):
        load_upload(data, "evil.zip")
    assert not list(tmp_path.rglob("evil.png"))
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())


def test_zip_size_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    data, _ = _imagefolder_zip("")
    monkeypatch.setattr(formats, "MAX_UNCOMPRESSED_BYTES", 100)
    with pytest.raises(DatasetFormatError, match=r"big.zip.*more than 100 bytes"):
        load_upload(data, "big.zip")


def test_zip_corrupt() -> None:
    with pytest.raises(DatasetFormatError, match=r"junk.zip.*not a valid zip"):
        load_upload(b"PK\x03\x04 broken", "junk.zip")
    payload = b"0123456789" * 50
    data = bytearray(zip_bytes({"a/x.png": payload}, compression=zipfile.ZIP_STORED))
    at = bytes(data).index(payload)
    data[at + 5] ^= 0xFF
    with pytest.raises(DatasetFormatError, match=r"crc.zip.*a/x.png"):
        load_upload(bytes(data), "crc.zip")


def test_zip_errors_name_the_member_not_the_temp_dir() -> None:
    data = zip_bytes({"set/a/0.png": png_bytes(images_u8(1, 2, 2)[0]), "set/b/1.png": b"garbage"})
    with pytest.raises(DatasetFormatError, match=r"up.zip/set/b/1.png") as info:
        load_upload(data, "up.zip")
    assert "geoviz-zip-" not in str(info.value)


# ================================================================== paths and kinds
def test_missing_path_unknown_extension_and_bad_options(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=f"{m(tmp_path / 'nope.npz')}.*does not exist"):
        load_path(tmp_path / "nope.npz")
    odd = tmp_path / "data.xyz"
    odd.write_bytes(b"123")
    with pytest.raises(DatasetFormatError, match=f"{m(odd)}.*unsupported file type '.xyz'"):
        load_path(odd)
    with pytest.raises(DatasetFormatError, match=r"notes.doc.*unsupported"):
        load_upload(b"x", "notes.doc")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetFormatError, match=r"empty.*cannot tell"):
        load_path(tmp_path / "empty")
    with pytest.raises(DatasetError, match="split"):
        load_path(odd, split="validation")  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match="kind"):
        load_path(odd, kind="parquet")  # type: ignore[arg-type]


def test_forced_kind_reads_unusual_names(tmp_path: Path) -> None:
    path = tmp_path / "arrays.bin"
    x, y = RNG.normal(size=(4, 3)), np.array([1, 0, 1, 0])
    with open(path, "wb") as fh:
        np.savez(fh, x=x, y=y)
    ds = load_path(path, kind="npz", name="custom")
    assert ds.name == "custom"
    assert_features(ds, x.astype(np.float32))
    with pytest.raises(DatasetFormatError, match=r"arrays.bin.*not an IDX"):
        load_path(path, kind="idx")


# ================================================================== hostile inputs
GiB = 2**30


def limit_memory(monkeypatch: pytest.MonkeyPatch, n_bytes: int | None) -> None:
    """Make geoviz.memory report ``n_bytes`` of room (None: unknown) wherever it is read."""
    found = None if n_bytes is None else (n_bytes, "a test limit")
    monkeypatch.setattr(memory, "memory_limit", lambda: found)


def forbid(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
    """Fail the test if ``module.name`` is called (it would read or decode data)."""

    def called(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{name} was called: data was read before the refusal")

    monkeypatch.setattr(module, name, called)


def npz_declaring(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    """An .npz whose 'x' member is only a .npy header declaring ``shape``: no data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    labels = io.BytesIO()
    np.save(labels, np.arange(10) % 2)
    return zip_bytes({"x.npy": header.getvalue(), "y.npy": labels.getvalue()})


def test_npz_forged_header_is_refused_before_any_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "forged.npz"
    path.write_bytes(npz_declaring((10**12, 10)))
    assert path.stat().st_size < 600
    forbid(monkeypatch, npz_module, "_npz_get")
    # the archive cap (as for zip uploads), on disk and uploaded
    cap = r"declare 72.8 TiB \('x' \(1000000000000, 10\) float64.*more than the limit of 2.00 GiB"
    with pytest.raises(DatasetFormatError, match=f"{m(path)}.*{cap}"):
        load_path(path)
    with pytest.raises(DatasetFormatError, match=f"forged.npz: the arrays to read {cap}"):
        load_upload(path.read_bytes(), "forged.npz")
    # past a raised cap: this process's memory
    monkeypatch.setattr(formats, "MAX_UNCOMPRESSED_BYTES", 2**80)
    limit_memory(monkeypatch, 8 * GiB)
    with pytest.raises(ResourceError, match=f"loading .*{m(path)}.*needs .* TiB but .* 8.00 GiB"):
        load_path(path)
    # memory unknown: the header claims more data than its zip member holds
    limit_memory(monkeypatch, None)
    with pytest.raises(
        DatasetFormatError,
        match=r"array 'x' declares shape \(1000000000000, 10\) of float64 \(80,000,000,000,000 "
        r"bytes\) but its archive member holds only 0 bytes of data",
    ):
        load_path(path)


def test_npz_of_zero_images_is_refused_by_memory_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "zeros.npz"
    np.savez_compressed(path, x=np.zeros((20_000, 28, 28), np.uint8), y=cyclic_labels(20_000, 10))
    assert path.stat().st_size < 100_000  # 15.7 MB of pixels, 188 MB of float32 features
    limit_memory(monkeypatch, 128 * 2**20)
    with monkeypatch.context() as patch:
        forbid(patch, npz_module, "_npz_get")
        with pytest.raises(
            ResourceError,
            match=r"loading .*zeros.npz \('x' \(20000, 28, 28\) uint8 \(15.0 MiB\), 'y' "
            r"\(20000,\) uint8 \(19.5 KiB\)\) needs 194.7 MiB but this process can allocate "
            r"at most 128.0 MiB \(limit: a test limit",
        ):
            load_path(path)
    limit_memory(monkeypatch, GiB)  # the same file loads where it fits
    assert load_path(path).n_samples == 20_000


def test_npz_member_that_is_not_a_npy_array_is_not_read(tmp_path: Path) -> None:
    labels = io.BytesIO()
    np.save(labels, np.arange(4) % 2)
    path = tmp_path / "raw.npz"
    path.write_bytes(zip_bytes({"x.npy": b"\x00" * 4096, "y.npy": labels.getvalue()}))
    with pytest.raises(DatasetFormatError, match=r"member 'x.npy' is not a .npy array"):
        load_path(path)


def _idx_header(code: int, dims: tuple[int, ...]) -> bytes:
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)


def test_idx_gz_declaring_huge_dimensions_is_refused_before_decompressing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit_memory(monkeypatch, 8 * GiB)
    img = tmp_path / "train-images-idx3-ubyte.gz"
    img.write_bytes(gzip.compress(_idx_header(0x08, (60_000, 50_000, 50_000))))
    save_idx(tmp_path / "train-labels-idx1-ubyte.gz", cyclic_labels(6, 2))
    forbid(monkeypatch, idx_module, "_maybe_gunzip")
    refused = r"IDX dimensions \(60000, 50000, 50000\) of uint8\) needs .* TiB but"
    with pytest.raises(ResourceError, match=f"loading .*{m(img)}.*{refused}"):
        load_path(img)
    with pytest.raises(ResourceError, match=f"loading up-images.gz.*{refused}"):
        load_upload_pair(img.read_bytes(), b"", "up-images.gz", "up-labels.gz")


def test_idx_gzip_bomb_stops_at_the_declared_size(tmp_path: Path) -> None:
    # a valid 2x2x2 header followed by 32 MB of zeros (32 kB of gzip)
    data = gzip.compress(_idx_header(0x08, (2, 2, 2)) + bytes(8) + bytes(32 * 2**20))
    assert len(data) < 100_000
    with pytest.raises(
        DatasetFormatError,
        match=r"bomb.gz: corrupt IDX file: dimensions \(2, 2, 2\) declare 24 bytes with the "
        r"header: the gzip data expands to more than 24 bytes",
    ):
        decode_idx(data, "bomb.gz")


def test_plain_files_larger_than_memory_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    img, _ = _idx_pair(tmp_path, n_img=200)
    table = tmp_path / "table.csv"
    table.write_text("a,b,label\n" + "0,1,0\n1,0,1\n" * 200)
    limit_memory(monkeypatch, 1024)
    forbid(monkeypatch, idx_module, "_read_raw")
    # an IDX file: its header's dimensions, before the read
    with pytest.raises(
        ResourceError, match=f"loading .*{m(img)} \\(IDX dimensions \\(200, 4, 4\\) of uint8\\)"
    ):
        load_path(img)
    # any other file: its size, before the read
    with pytest.raises(ResourceError, match=r"reading .*table.csv needs 2.4 KiB but"):
        load_path(table)


def test_csv_gzip_bomb_and_large_csv_are_refused_by_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = b"a,b,label\n" + b"0,0,0\n" * (7 * 2**20)  # 44 MB of CSV, 100 kB gzipped
    bomb = tmp_path / "bomb.csv.gz"
    bomb.write_bytes(gzip.compress(text))
    limit_memory(monkeypatch, 32 * 2**20)
    with pytest.raises(
        ResourceError, match=r"decompressing .*bomb.csv.gz needs at least 32.0 MiB but"
    ):
        load_path(bomb)
    limit_memory(monkeypatch, 64 * 2**10)
    with pytest.raises(ResourceError, match=r"parsing small.csv \(3,003 cells\) needs 152.5 KiB"):
        load_upload(b"a,b,label\n" + b"0,0,0\n" * 1000, "small.csv")


def test_huge_declared_image_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "a" / "big.png"
    big.parent.mkdir()
    Image.new("1", (5000, 5000)).save(big)  # 25 megapixels in a few kB
    assert big.stat().st_size < 10_000
    write_png(tmp_path / "b" / "0.png", images_u8(1, 4, 4)[0])
    forbid(monkeypatch, imagefolder_module, "_read_image")
    with pytest.raises(
        DatasetFormatError,
        match=r"big.png: image a/big.png is 5000x5000 pixels, larger than 4096x4096",
    ):
        load_path(tmp_path)


def test_many_large_images_are_refused_by_memory_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(6):
        path = tmp_path / "ab"[i % 2] / f"{i}.png"
        path.parent.mkdir(exist_ok=True)
        Image.new("L", (1000, 1000)).save(path)
    limit_memory(monkeypatch, 32 * 2**20)
    with monkeypatch.context() as patch:
        forbid(patch, imagefolder_module, "_read_image")
        with pytest.raises(
            ResourceError, match=r"decoding the 6 images of .* \(6,000,000 pixels\) needs 74.4 MiB"
        ):
            load_path(tmp_path)
    limit_memory(monkeypatch, GiB)
    assert load_path(tmp_path).features.shape == (6, 1_000_000)


def test_imagefolder_symlink_loops_neither_repeat_samples_nor_hang(tmp_path: Path) -> None:
    root, outside = tmp_path / "set", tmp_path / "outside"
    for cls, n in (("a", 20), ("b", 20)):
        for i in range(n):
            write_png(root / cls / f"{i:02d}.png", images_u8(1, 4, 4, seed=i)[0])
    for i in range(3):
        write_png(outside / f"x{i}.png", images_u8(1, 4, 4, seed=100 + i)[0])
    (root / "a" / "root").symlink_to(root, target_is_directory=True)  # an ancestor: a loop
    (root / "a" / "self").symlink_to(root / "a", target_is_directory=True)
    (root / "b" / "nested").mkdir()
    (root / "b" / "nested" / "up").symlink_to(root / "b", target_is_directory=True)
    (root / "b" / "ext1").symlink_to(outside, target_is_directory=True)  # followed once
    (root / "b" / "ext2").symlink_to(outside, target_is_directory=True)
    ds = load_path(root)
    assert ds.classes == ("a", "b")
    assert np.bincount(ds.labels.numpy()).tolist() == [20, 23]
    # the walk used before, os.walk(followlinks=True), repeats the class folders through
    # the loops (exponentially often: stopped here after 100 files)
    walked = 0
    for _, _, files in os.walk(root / "a", followlinks=True):
        walked += len(files)
        if walked > 100:
            break
    assert walked > 100


def test_images_are_decoded_to_the_same_values_as_a_plain_stack(tmp_path: Path) -> None:
    grey, rgb = images_u8(3, 5, 4, seed=1), images_u8(3, 5, 4, 3, seed=2)
    for i in range(3):
        write_png(tmp_path / "a" / f"{i}.png", grey[i])
        write_png(tmp_path / "b" / f"{i}.png", rgb[i])
    ds = load_path(tmp_path)
    expected = np.concatenate([np.repeat(grey[..., None], 3, axis=3), rgb]).transpose(0, 3, 1, 2)
    assert ds.image_shape == (3, 5, 4)
    assert_features(ds, as_pixels(expected))


@pytest.mark.parametrize(
    ("array", "mode"),
    [
        (np.zeros((3, 5), np.uint8), "L"),
        (np.zeros((3, 5), np.uint8), "1"),
        (np.zeros((3, 5), np.uint16), None),
        (np.zeros((3, 5, 3), np.uint8), "RGB"),
        (np.zeros((3, 5, 3), np.uint8), "P"),
        (np.zeros((3, 5, 3), np.uint8), "LA"),
        (np.zeros((3, 5, 4), np.uint8), "RGBA"),
    ],
)
def test_png_header_fast_path_agrees_with_pillow(
    tmp_path: Path, array: np.ndarray, mode: str | None
) -> None:
    path = tmp_path / "x.png"
    write_png(path, array, mode)
    with Image.open(path) as im:
        expected = (im.size[0], im.size[1], im.mode)
    assert imagefolder_module._png_header(path.read_bytes()[:26]) == expected
    assert imagefolder_module._png_header(b"GIF89a" + bytes(20)) is None


# ================================================================== CSV bounds and speed (issue 25)
def _wide_csv(rows: int, cols: int, text_labels: bool = False) -> tuple[bytes, np.ndarray]:
    rng = np.random.default_rng(cols)
    x = rng.integers(0, 256, size=(rows, cols))
    header = ",".join([f"p{i}" for i in range(cols)] + ["label"])
    lab = [f"c{i % 3}" if text_labels else str(i % 3) for i in range(rows)]
    lines = [header] + [",".join(map(str, r)) + "," + lab[i] for i, r in enumerate(x)]
    return ("\n".join(lines) + "\n").encode(), x


def test_csv_with_too_many_columns_is_refused_from_its_header(monkeypatch) -> None:
    """Row 2: a 10^6-column CSV cost 114 s of server CPU and was accepted."""
    import pandas as pd

    from geoviz import limits

    def never(*args, **kwargs):  # nothing may be parsed before the header is checked
        raise AssertionError("the table was parsed")

    monkeypatch.setattr(np, "loadtxt", never)
    monkeypatch.setattr(pd, "read_csv", never)
    cols = limits.MAX_CSV_COLUMNS + 1
    data = (",".join(f"c{i}" for i in range(cols)) + "\n" + ",".join(["1"] * cols) + "\n").encode()
    with pytest.raises(ResourceError, match=r"65,537 columns, more than the 65,536"):
        load_upload(data, "wide.csv")
    with pytest.raises(ResourceError, match="columns"):
        load_upload(gzip.compress(data), "wide.csv.gz")


def test_csv_with_too_many_cells_is_refused_before_parsing(monkeypatch) -> None:
    from geoviz import limits

    monkeypatch.setattr(limits, "MAX_CSV_CELLS", 1000)
    monkeypatch.setattr(np, "loadtxt", lambda *a, **k: pytest.fail("parsed"))
    data = b"a,b,label\n" + b"1,2,0\n" * 400  # 401 lines x 3 columns
    with pytest.raises(ResourceError, match=r"1,203 cells\), more than the 1,000"):
        load_upload(data, "tall.csv")


@pytest.mark.parametrize("text_labels", [False, True], ids=["numeric labels", "text labels"])
def test_wide_csv_parses_correctly_on_both_paths(text_labels: bool) -> None:
    data, x = _wide_csv(12, 20_000, text_labels=text_labels)
    ds = load_upload(data, "wide.csv")
    assert ds.n_samples == 12 and ds.n_features == 20_000
    np.testing.assert_array_equal(ds.features.numpy(), x.astype(np.float32))
    assert ds.classes == (("c0", "c1", "c2") if text_labels else ("0", "1", "2"))
    np.testing.assert_array_equal(ds.labels.numpy(), np.arange(12) % 3)


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    st.integers(2, 8),
    st.integers(1, 6),
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=48, max_size=48),
)
def test_fast_and_general_csv_parsers_agree(rows: int, cols: int, values: list[float]) -> None:
    """The loadtxt path (all numeric) and the pandas path (text labels) give the same
    features; relabelling the classes by name changes nothing else."""
    x = np.array(values[: rows * cols], dtype=np.float32).reshape(rows, cols)
    head = ",".join(f"f{j}" for j in range(cols)) + ",label\n"
    labels = [i % 2 for i in range(rows)]
    body_num = "".join(
        ",".join(repr(float(v)) for v in r) + f",{y}\n" for r, y in zip(x, labels, strict=True)
    )
    body_txt = "".join(
        ",".join(repr(float(v)) for v in r) + f",k{y}\n" for r, y in zip(x, labels, strict=True)
    )
    a = load_upload((head + body_num).encode(), "a.csv")
    b = load_upload((head + body_txt).encode(), "b.csv")
    np.testing.assert_array_equal(a.features.numpy(), b.features.numpy())
    np.testing.assert_array_equal(a.features.numpy(), x)
    np.testing.assert_array_equal(a.labels.numpy(), b.labels.numpy())


def test_wide_csv_problems_are_named_like_narrow_ones() -> None:
    from geoviz.data.formats.tabular import WIDE_COLUMNS

    data, _ = _wide_csv(4, WIDE_COLUMNS + 10)
    lines = data.decode().splitlines()
    cells = lines[2].split(",")
    cells[5] = "red"
    bad_feature = "\n".join([*lines[:2], ",".join(cells), *lines[3:]]).encode()
    with pytest.raises(DatasetFormatError, match=r"column 'p5' is not numeric.*'red' on line 3"):
        load_upload(bad_feature, "wide.csv")
    no_label = "\n".join([*lines[:3], lines[3].rsplit(",", 1)[0] + ",", *lines[4:]]).encode()
    with pytest.raises(DatasetFormatError, match="label column 'label' is empty on line 4"):
        load_upload(no_label, "wide.csv")
