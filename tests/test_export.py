"""Round trips, manifests, atomicity and layouts of geoviz.export."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import zipfile
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

import geoviz
import geoviz.atomic as atomic
import geoviz.export as gx
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetFormatError, ExportError, ExportExistsError, GeovizError
from geoviz.export import (
    class_folder_names,
    export_bytes,
    export_dataset,
    export_formats,
    load_export,
    load_snippet,
    safe_name,
    sidecar_manifest_path,
    verify_manifest,
)

ODD_NAMES = (
    "mnist/0",
    "fashion_mnist/T-shirt/top",
    "fashion_mnist/T-shirt_top",  # same safe name as the previous one
    "x/A B",
    "x/a b",  # differs only by case after sanitising
    "x/..",
    "x/CON",
    "x/ü: ñ?*",
    "labels.csv",
)


def _soft_labels(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random simplex rows whose argmax cycles through every class."""
    soft = rng.dirichlet(np.ones(k), size=n).astype(np.float32)
    for i in range(n):
        soft[i, i % k] += 2.0
    soft /= soft.sum(axis=1, keepdims=True)
    return soft.astype(np.float32)


def _image_ds(
    n: int = 12,
    shape: tuple[int, int, int] = (1, 4, 5),
    names: tuple[str, ...] = ("mnist/0", "mnist/1", "usps/7"),
    seed: int = 0,
) -> SoftLabeledDataset:
    """Features are multiples of 1/255 (as uint8 / 255 in float32), so PNG formats are exact."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(n, int(np.prod(shape))), dtype=np.uint8)
    pixels[0, 0], pixels[0, 1] = 0, 255  # the extremes
    return SoftLabeledDataset(
        features=pixels.astype(np.float32) / np.float32(255),
        soft_labels=_soft_labels(n, len(names), rng),
        class_names=names,
        name="P_a(0.5,0.3,0.2)",
        image_shape=shape,
        metadata={
            "kind": "generalized_geodesic",
            "weights": [0.5, 0.3, 0.2],
            "target": {"name": "kmnist", "fingerprint": "f" * 64},
            "references": ["mnist", "usps"],
            "reference_fingerprints": ["a" * 64, "b" * 64],
            "epsilon": 0.05,
            "nested": {"ok": [1, None, True, "ü"]},
        },
    )


def _vector_ds(n: int = 10, d: int = 3, seed: int = 1) -> SoftLabeledDataset:
    rng = np.random.default_rng(seed)
    return SoftLabeledDataset(
        features=rng.normal(size=(n, d)).astype(np.float32) * 1e3,  # arbitrary float32 values
        soft_labels=_soft_labels(n, 2, rng),
        class_names=("gauss/a", "gauss/b"),
        name="vectors",
        metadata={"weights": [1.0]},
    )


def _assert_same(a: SoftLabeledDataset, b: SoftLabeledDataset) -> None:
    assert torch.equal(a.features, b.features)
    assert torch.equal(a.soft_labels, b.soft_labels)
    assert a.features.dtype == b.features.dtype == torch.float32
    assert a.class_names == b.class_names
    assert a.image_shape == b.image_shape
    assert a.metadata == b.metadata
    assert a.name == b.name
    assert a.fingerprint == b.fingerprint


def _block_sampled(ds: SoftLabeledDataset) -> np.ndarray:
    """The hard labels every exporter writes by default (block-sample, seed 0)."""
    return gx.dataset_hard_labels(ds, "block-sample", 0)[0]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


TARGETS = {
    "npz": "synth.npz",
    "pt": "synth.pt",
    "parquet": "synth.parquet",
    "zip": "synth.zip",
    "dir": "synth",
}


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("shape", [(1, 4, 5), (3, 2, 3)])
def test_image_round_trip_is_exact_for_multiples_of_1_255(tmp_path, target, shape):
    ds = _image_ds(shape=shape)
    result = export_dataset(ds, tmp_path / TARGETS[target])
    back = load_export(tmp_path / TARGETS[target])
    _assert_same(back, ds)
    assert result.manifest["export_fingerprint"] == back.fingerprint
    verify_manifest(result.data_path)


@pytest.mark.parametrize("target", ["npz", "pt", "parquet"])
def test_vector_round_trip_is_exact(tmp_path, target):
    ds = _vector_ds()
    result = export_dataset(ds, tmp_path / TARGETS[target])
    assert result.manifest["lossless"] is True
    _assert_same(load_export(result.data_path), ds)


@pytest.mark.parametrize("target", ["parquet", "zip", "dir"])
def test_png_formats_quantise_to_1_255(tmp_path, target):
    rng = np.random.default_rng(3)
    base = _image_ds()
    ds = SoftLabeledDataset(
        rng.random(base.features.shape, dtype=np.float32),
        base.soft_labels,
        base.class_names,
        image_shape=base.image_shape,
    )
    result = export_dataset(ds, tmp_path / TARGETS[target])
    back = load_export(result.data_path)
    err = (back.features - ds.features).abs().max().item()
    assert 0 < err <= 1 / 510 + 1e-6
    assert torch.equal(back.features * 255, torch.round(back.features * 255))
    assert torch.equal(back.soft_labels, ds.soft_labels)
    assert result.manifest["lossless"] is False
    assert result.manifest["quantization"]["max_abs_error"] == pytest.approx(err)
    assert result.manifest["export_fingerprint"] == back.fingerprint != ds.fingerprint


def test_values_outside_unit_interval_warn_and_clip(tmp_path):
    base = _image_ds()
    feats = base.features.clone()
    feats[0, :3] = torch.tensor([-0.5, 1.5, 2.0])
    ds = SoftLabeledDataset(feats, base.soft_labels, base.class_names, image_shape=base.image_shape)
    with pytest.warns(UserWarning, match="3 feature value"):
        result = export_dataset(ds, tmp_path / "s.parquet")
    assert result.manifest["quantization"]["n_clipped"] == 3
    assert load_export(result.data_path).features[0, :3].tolist() == [0.0, 1.0, 1.0]


def test_labeled_dataset_exports_as_one_hot(tmp_path):
    ds = LabeledDataset(np.eye(4, dtype=np.float32), [0, 1, 1, 0], ("a", "b"), name="toy")
    back = load_export(export_dataset(ds, tmp_path / "t.npz").data_path)
    assert back.class_names == ("toy/a", "toy/b")
    assert torch.equal(back.soft_labels, ds.one_hot())
    assert back.metadata["datasets"][0]["fingerprint"] == ds.fingerprint


# ----------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("shape", [(1, 4, 5), (3, 2, 3)])
def test_npz_layout_has_no_object_arrays(tmp_path, shape):
    ds = _image_ds(shape=shape)
    path = export_dataset(ds, tmp_path / "s.npz").data_path
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    assert {
        "features",
        "soft_labels",
        "labels",
        "class_names",
        "image_shape",
        "images",
        "metadata_json",
    } <= set(arrays)
    assert all(a.dtype != object for a in arrays.values())
    assert arrays["class_names"].dtype.kind == "U"
    assert arrays["features"].dtype == np.float32 and arrays["soft_labels"].dtype == np.float32
    np.testing.assert_array_equal(arrays["labels"], _block_sampled(ds))
    assert arrays["image_shape"].tolist() == list(shape)
    c, h, w = shape
    images = arrays["images"]
    assert images.dtype == np.uint8
    assert images.shape == ((len(ds), h, w) if c == 1 else (len(ds), h, w, c))
    chw = images.reshape(len(ds), h, w, c).transpose(0, 3, 1, 2).reshape(len(ds), -1)
    np.testing.assert_array_equal(chw, np.rint(ds.features.numpy() * 255))
    assert json.loads(str(arrays["metadata_json"])) == ds.metadata


def test_npz_vectors_have_empty_image_shape_and_no_images(tmp_path):
    path = export_dataset(_vector_ds(), tmp_path / "v.npz").data_path
    with np.load(path, allow_pickle=False) as data:
        assert data["image_shape"].shape == (0,)
        assert "images" not in data.files


def test_pt_loads_with_weights_only(tmp_path):
    ds = _image_ds()
    obj = torch.load(export_dataset(ds, tmp_path / "s.pt").data_path, weights_only=True)
    assert torch.equal(obj["features"], ds.features)
    assert torch.equal(obj["labels"], torch.from_numpy(_block_sampled(ds)))
    assert obj["class_names"] == list(ds.class_names)
    assert obj["image_shape"] == list(ds.image_shape)
    assert obj["metadata"] == ds.metadata and obj["manifest"]["format"] == "pt"


def test_parquet_image_layout_is_hf_compatible(tmp_path):
    ds = _image_ds(shape=(3, 2, 3))
    path = export_dataset(ds, tmp_path / "s.parquet").data_path
    table = pq.read_table(path)
    assert table.column_names == ["image", "label", "soft_labels"]
    assert table.schema.field("image").type == pa.struct(
        [("bytes", pa.binary()), ("path", pa.string())]
    )
    assert table.schema.field("label").type == pa.int64()
    assert table.schema.field("soft_labels").type == pa.list_(pa.float32())
    meta = table.schema.metadata
    assert json.loads(meta[b"class_names"]) == list(ds.class_names)
    hf = json.loads(meta[b"huggingface"])["info"]["features"]
    assert hf["image"] == {"_type": "Image"}
    assert hf["label"] == {"_type": "ClassLabel", "names": list(ds.class_names)}
    assert json.loads(meta[b"geoviz_manifest"])["fingerprint"] == ds.fingerprint

    frame = pd.read_parquet(path)
    assert len(frame) == len(ds)
    assert frame["label"].tolist() == _block_sampled(ds).tolist()
    np.testing.assert_array_equal(np.stack(frame["soft_labels"].to_numpy()), ds.soft_labels.numpy())
    cell = frame["image"].iloc[1]
    img = np.asarray(Image.open(io.BytesIO(cell["bytes"])))
    assert img.shape == (2, 3, 3)
    np.testing.assert_array_equal(
        img.transpose(2, 0, 1).reshape(-1), np.rint(ds.features[1].numpy() * 255)
    )


def test_parquet_vector_layout(tmp_path):
    ds = _vector_ds()
    path = export_dataset(ds, tmp_path / "v.parquet").data_path
    table = pq.read_table(path)
    assert table.column_names == ["features", "label", "soft_labels"]
    assert table.schema.field("features").type == pa.list_(pa.float32())
    frame = pd.read_parquet(path)
    np.testing.assert_array_equal(np.stack(frame["features"].to_numpy()), ds.features.numpy())


def test_imagefolder_layout(tmp_path):
    ds = _image_ds()
    root = export_dataset(ds, tmp_path / "folder").data_path
    rows = (root / "labels.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "file_name,mnist/0,mnist/1,usps/7"
    folders = class_folder_names(ds.class_names)
    hard = _block_sampled(ds).tolist()
    for i, row in enumerate(rows[1:]):
        rel = row.split(",")[0]
        assert rel == f"{folders[hard[i]]}/{i:02d}.png"
        pixels = np.asarray(Image.open(root / rel))
        np.testing.assert_array_equal(pixels.reshape(-1), np.rint(ds.features[i].numpy() * 255))
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    assert set(manifest["files"]) == {p for p in _listing(root) if p.endswith((".png", ".csv"))}


def test_odd_class_names_map_to_safe_unique_folders_and_round_trip(tmp_path):
    ds = _image_ds(n=len(ODD_NAMES) * 2, names=ODD_NAMES)
    folders = class_folder_names(ODD_NAMES)
    keys = [f.casefold() for f in folders]
    assert len(set(keys)) == len(keys)
    assert not {"labels.csv", "manifest.json"} & set(keys)
    for folder in folders:
        assert re.fullmatch(r"[\w.+-]+", folder), folder
        assert not folder.startswith(".") and folder not in (".", "..")
        assert folder.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL"}
    for target in ("dir", "zip"):
        result = export_dataset(ds, tmp_path / TARGETS[target])
        _assert_same(load_export(result.data_path), ds)
    tops = {p.name for p in (tmp_path / "synth").iterdir() if p.is_dir()}
    assert tops == set(folders)  # every class is the argmax of some sample
    with zipfile.ZipFile(tmp_path / "synth.zip") as zf:
        assert {n.split("/")[0] for n in zf.namelist() if "/" in n} == set(folders)


def test_safe_name_cases():
    assert safe_name("fashion_mnist/Sneaker") == "fashion_mnist_Sneaker"
    assert safe_name('a\\b:c*d?e"f<g>h|i') == "a_b_c_d_e_f_g_h_i"
    assert safe_name("..") == "item" and safe_name("", fallback="x") == "x"
    assert safe_name(".hidden") == "hidden"
    assert safe_name("CON") == "_CON" and safe_name("lpt1.txt") == "_lpt1.txt"
    assert safe_name("über") == "über"
    assert len(safe_name("é" * 300).encode()) <= 100
    assert class_folder_names(["a/b", "a_b", "A_B"]) == ["a_b", "a_b_1", "A_B_2"]


# ----------------------------------------------------------------------------- manifest


@pytest.mark.parametrize("target", list(TARGETS))
def test_manifest_contents_and_checksums(tmp_path, target):
    ds = _image_ds()
    result = export_dataset(ds, tmp_path / TARGETS[target])
    on_disk = json.loads(result.manifest_path.read_text(encoding="utf-8"))
    assert on_disk == result.manifest
    fmt = "imagefolder" if target in ("zip", "dir") else target
    assert on_disk["format"] == fmt
    assert on_disk["geoviz_version"] == geoviz.__version__
    assert on_disk["n_samples"] == len(ds) and on_disk["class_names"] == list(ds.class_names)
    assert on_disk["weights"] == [0.5, 0.3, 0.2]
    assert on_disk["metadata"] == ds.metadata
    assert on_disk["fingerprint"] == ds.fingerprint
    datasets = {(d["role"], d["name"]): d["fingerprint"] for d in on_disk["datasets"]}
    assert datasets == {
        ("target", "kmnist"): "f" * 64,
        ("reference", "mnist"): "a" * 64,
        ("reference", "usps"): "b" * 64,
    }
    assert datetime.fromisoformat(on_disk["created"].replace("Z", "+00:00")).tzinfo is not None
    root = result.manifest_path.parent
    for rel, entry in on_disk["files"].items():
        assert _sha(root / rel) == entry["sha256"]
        assert (root / rel).stat().st_size == entry["bytes"]
    if target in ("npz", "pt", "parquet", "zip"):
        assert result.manifest_path == tmp_path / "synth.manifest.json"
        assert list(on_disk["files"]) == [TARGETS[target]]
    else:
        assert result.manifest_path == tmp_path / "synth" / "manifest.json"


def _flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    pos = len(data) // 2 if offset is None else offset
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("target", list(TARGETS))
def test_tampered_file_is_detected(tmp_path, target):
    result = export_dataset(_image_ds(), tmp_path / TARGETS[target])
    verify_manifest(result.data_path)
    verify_manifest(result.manifest_path)
    victim = result.data_path
    if victim.is_dir():
        victim = next(victim.rglob("*.png"))
    _flip_byte(victim)
    with pytest.raises(ExportError, match=re.escape(victim.name) + ".*sha256"):
        verify_manifest(result.data_path)
    with pytest.raises(ExportError):
        load_export(result.data_path, verify=True)


def test_missing_and_tampered_imagefolder_members(tmp_path):
    root = export_dataset(_image_ds(), tmp_path / "d").data_path
    (root / "labels.csv").write_text("file_name,a\n", encoding="utf-8")
    with pytest.raises(ExportError, match=r"labels\.csv"):
        verify_manifest(root)
    root = export_dataset(_image_ds(), tmp_path / "e").data_path
    png = next(root.rglob("*.png"))
    png.unlink()
    with pytest.raises(ExportError, match="missing"):
        verify_manifest(root)


def test_missing_manifest_is_an_error(tmp_path):
    result = export_dataset(_image_ds(), tmp_path / "s.npz")
    result.manifest_path.unlink()
    os.replace(result.data_path, tmp_path / "t.npz")
    verify_manifest(tmp_path / "t.npz")  # falls back to the embedded manifest
    np.savez(tmp_path / "plain.npz", features=np.zeros((2, 2)))
    with pytest.raises(ExportError, match="no manifest"):
        verify_manifest(tmp_path / "plain.npz")
    with pytest.raises(ExportError, match="manifest not found"):
        verify_manifest(tmp_path / "nothing.manifest.json")


# ----------------------------------------------------------------------------- overwrite / atomicity


@pytest.mark.parametrize("target", list(TARGETS))
def test_refuses_to_overwrite_and_overwrite_true_replaces(tmp_path, target):
    path = tmp_path / TARGETS[target]
    first = export_dataset(_image_ds(seed=0), path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ExportExistsError, match=re.escape(str(path)) + ".*already exists"):
        export_dataset(_image_ds(seed=1), path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    second = export_dataset(_image_ds(seed=1), path, overwrite=True)
    _assert_same(load_export(path), _image_ds(seed=1))
    assert second.manifest["fingerprint"] != first.manifest["fingerprint"]
    verify_manifest(path)
    assert not [p for p in _listing(tmp_path) if Path(p).name.startswith(".")]


def test_existing_sidecar_alone_blocks_export(tmp_path):
    export_dataset(_image_ds(), tmp_path / "s.npz")
    with pytest.raises(ExportExistsError, match=r"s\.manifest\.json already exists"):
        export_dataset(_image_ds(), tmp_path / "s.pt")
    assert not (tmp_path / "s.pt").exists()


def test_overwrite_never_replaces_a_foreign_directory(tmp_path):
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not a geoviz export"):
        export_dataset(_image_ds(), foreign, overwrite=True)
    assert (foreign / "precious.txt").read_text() == "keep me"


def test_failed_directory_write_leaves_nothing(tmp_path, monkeypatch):
    real = atomic._write_bytes
    calls = {"n": 0}

    def flaky(path, data, **kw):
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError(28, "No space left on device")
        real(path, data, **kw)

    monkeypatch.setattr(atomic, "_write_bytes", flaky)
    with pytest.raises(ExportError, match="No space left"):
        export_dataset(_image_ds(), tmp_path / "new" / "deeper" / "folder")
    assert calls["n"] == 4
    assert _listing(tmp_path) == []  # even the parent folders it created are gone


def test_failed_commit_restores_previous_export(tmp_path, monkeypatch):
    path = tmp_path / "s.parquet"
    export_dataset(_image_ds(seed=0), path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real = atomic._place
    calls = {"n": 0}

    def flaky(tmp, target):
        calls["n"] += 1
        if calls["n"] == 2:  # the data file is in place, the manifest fails
            raise OSError(5, "I/O error")
        real(tmp, target)

    monkeypatch.setattr(atomic, "_place", flaky)
    with pytest.raises(ExportError, match="I/O error"):
        export_dataset(_image_ds(seed=1), path, overwrite=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    verify_manifest(path)


def test_vectors_cannot_go_to_image_formats(tmp_path):
    with pytest.raises(ExportError, match="holds vectors"):
        export_dataset(_vector_ds(), tmp_path / "v.zip")
    with pytest.raises(ExportError, match="holds vectors"):
        export_bytes(_vector_ds(), "imagefolder")
    assert _listing(tmp_path) == []
    many = SoftLabeledDataset(np.zeros((2, 5)), np.eye(2), ("a", "b"), image_shape=(5, 1, 1))
    with pytest.raises(ExportError, match="1-4 channels"):
        export_dataset(many, tmp_path / "m.parquet")
    _assert_same(load_export(export_dataset(many, tmp_path / "m.npz").data_path), many)


# ----------------------------------------------------------------------------- formats, bytes, snippets


def test_format_inference_and_errors(tmp_path):
    ds = _image_ds()
    assert export_dataset(ds, tmp_path / "a.npz").format == "npz"
    assert export_dataset(ds, tmp_path / "b.pt").format == "pt"
    assert export_dataset(ds, tmp_path / "c.parquet").format == "parquet"
    assert export_dataset(ds, tmp_path / "d.zip").format == "imagefolder"
    assert export_dataset(ds, tmp_path / "e").format == "imagefolder"
    custom = export_dataset(ds, tmp_path / "f.bin", format="npz")
    _assert_same(load_export(custom.data_path), ds)  # sniffed from content
    with pytest.raises(ExportError, match="cannot infer"):
        export_dataset(ds, tmp_path / "x.csv")
    with pytest.raises(ExportError, match="does not match"):
        export_dataset(ds, tmp_path / "x.npz", format="pt")
    with pytest.raises(ExportError, match="unknown export format"):
        export_dataset(ds, tmp_path / "x.npz", format="hdf5")


@pytest.mark.parametrize("fmt", export_formats())
def test_export_bytes_round_trip(tmp_path, fmt):
    ds = _image_ds()
    data, filename, mime = export_bytes(ds, fmt)
    assert (
        filename
        == "P_a_0.5_0.3_0.2"
        + {"npz": ".npz", "pt": ".pt", "parquet": ".parquet", "imagefolder": ".zip"}[fmt]
    )
    assert mime == {
        "imagefolder": "application/zip",
        "parquet": "application/vnd.apache.parquet",
    }.get(fmt, "application/octet-stream")
    path = tmp_path / filename
    path.write_bytes(data)
    _assert_same(load_export(path), ds)
    verify_manifest(path)  # embedded manifest (zip: inside; single files: content fingerprint)
    if fmt == "imagefolder":
        with zipfile.ZipFile(path) as zf:
            manifest = json.loads(zf.read("manifest.json"))
            assert set(manifest["files"]) == set(zf.namelist()) - {"manifest.json"}


def test_export_bytes_tampering_is_detected(tmp_path):
    ds = _image_ds()
    data, filename, _ = export_bytes(ds, "npz")
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["features"][0, 0] = 0.5
    path = tmp_path / filename
    np.savez(path, **arrays)
    with pytest.raises(ExportError, match="fingerprint"):
        verify_manifest(path)

    data, filename, _ = export_bytes(ds, "imagefolder")
    tampered = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "labels.csv":
                body = body.replace(b"0.", b"1.", 1)
            dst.writestr(info, body)
    path = tmp_path / filename
    path.write_bytes(tampered.getvalue())
    with pytest.raises(ExportError, match=r"labels\.csv"):
        verify_manifest(path)


def test_load_snippets_run(tmp_path, monkeypatch):
    ds = _image_ds()
    monkeypatch.chdir(tmp_path)
    for fmt in ("npz", "pt"):
        data, filename, _ = export_bytes(ds, fmt)
        Path(filename).write_bytes(data)
        snippet = load_snippet(fmt, filename)
        assert "\n" not in snippet
        scope: dict = {}
        exec(snippet, scope)
        np.testing.assert_array_equal(np.asarray(scope["X"]), ds.features.numpy())
        np.testing.assert_array_equal(np.asarray(scope["Y"]), ds.soft_labels.numpy())
    for fmt, name in (("parquet", "a b.parquet"), ("imagefolder", "x.zip"), ("imagefolder", "dir")):
        snippet = load_snippet(fmt, name)
        compile(snippet, "<snippet>", "exec")
        assert "load_dataset" in snippet and json.dumps(name) in snippet
    with pytest.raises(ExportError):
        load_snippet("csv", "x.csv")  # type: ignore[arg-type]


def test_load_export_rejects_garbage(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(DatasetFormatError, match=r"junk\.npz"):
        load_export(tmp_path / "junk.npz")
    (tmp_path / "junk.parquet").write_bytes(b"PAR1garbage")
    with pytest.raises(DatasetFormatError, match=r"junk\.parquet"):
        load_export(tmp_path / "junk.parquet")
    with pytest.raises(DatasetFormatError, match="no such file"):
        load_export(tmp_path / "absent.pt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetFormatError, match=r"labels\.csv"):
        load_export(tmp_path / "empty")


def test_sidecar_path_naming():
    assert sidecar_manifest_path("out/synth.npz") == Path("out/synth.manifest.json")
    assert sidecar_manifest_path("out/synth") == Path("out/synth.manifest.json")


# --------------------------------------------------------------------------- hard-label rules

A_WEIGHTS = (0.5, 0.3, 0.2)
REFS = ("mnist", "fashion_mnist", "kmnist")


def _pa_ds(n: int = 2000, seed: int = 0, image: bool = False) -> SoftLabeledDataset:
    """Soft labels ``[a_1 y_1 | a_2 y_2 | a_3 y_3]`` with peaked ``y_i`` over 4 classes each."""
    rng = np.random.default_rng(seed)
    blocks = [a * rng.dirichlet(np.full(4, 0.3), size=n) for a in A_WEIGHTS]
    soft = np.concatenate(blocks, axis=1).astype(np.float32)
    soft /= soft.sum(axis=1, keepdims=True)
    shape = (1, 2, 2) if image else None
    feats = rng.integers(0, 256, size=(n, 4)).astype(np.float32) / np.float32(255)
    return SoftLabeledDataset(
        features=feats if image else rng.normal(size=(n, 3)).astype(np.float32),
        soft_labels=soft,
        class_names=tuple(f"{r}/{k}" for r in REFS for k in range(4)),
        name="P_a(0.5,0.3,0.2)",
        image_shape=shape,
        metadata={"weights": list(A_WEIGHTS), "references": list(REFS)},
    )


def _shares(labels: np.ndarray) -> np.ndarray:
    return np.bincount(labels // 4, minlength=3) / len(labels)


def test_block_sample_shares_match_weights_within_4_standard_errors():
    ds = _pa_ds()
    n = ds.n_samples
    a = np.array(A_WEIGHTS)
    bound = 4 * np.sqrt(a * (1 - a) / n)  # binomial standard errors
    blocks = [slice(0, 4), slice(4, 8), slice(8, 12)]
    by_weights = gx.hard_labels_from_soft(ds.soft_labels, blocks, weights=a, seed=3)
    by_mass = gx.hard_labels_from_soft(
        ds.soft_labels.numpy(), [range(4), range(4, 8), range(8, 12)]
    )
    by_dataset, info = gx.dataset_hard_labels(ds)
    for labels in (by_weights, by_mass, by_dataset):
        assert labels.dtype == np.int64 and labels.shape == (n,)
        assert (np.abs(_shares(labels) - a) <= bound).all(), _shares(labels)
        # within the drawn block the label is that block's argmax
        soft = ds.soft_labels.numpy()
        for i, lab in enumerate(labels):
            lo = lab // 4 * 4
            assert lab == lo + soft[i, lo : lo + 4].argmax()
    assert info["rule"] == "block-sample" and info["seed"] == 0
    assert info["probabilities"] == "weights"
    assert [b["name"] for b in info["blocks"]] == list(REFS)
    assert [b["weight"] for b in info["blocks"]] == list(A_WEIGHTS)
    np.testing.assert_allclose([b["share"] for b in info["blocks"]], _shares(by_dataset))
    assert sum(b["count"] for b in info["blocks"]) == n
    # without usable weights the block masses (= a_i) are used
    no_weights = SoftLabeledDataset(
        features=ds.features, soft_labels=ds.soft_labels, class_names=ds.class_names
    )
    labels, info = gx.dataset_hard_labels(no_weights, seed=5)
    assert info["probabilities"] == "block mass"
    np.testing.assert_allclose([b["weight"] for b in info["blocks"]], a, atol=1e-5)
    assert (np.abs(_shares(labels) - a) <= bound).all()


def test_argmax_rule_reproduces_the_old_labels_and_underrepresents_small_weights():
    ds = _pa_ds()
    labels, info = gx.dataset_hard_labels(ds, "argmax", seed=7)
    np.testing.assert_array_equal(labels, ds.hard_labels.numpy())
    np.testing.assert_array_equal(
        gx.hard_labels_from_soft(ds.soft_labels, [], rule="argmax"), ds.hard_labels.numpy()
    )
    assert info["rule"] == "argmax" and info["seed"] is None
    assert _shares(labels)[2] < 0.05  # the bug of issue 7: kmnist almost never wins the argmax


def test_block_sample_is_deterministic_given_a_seed():
    ds = _pa_ds(n=500)
    one = gx.dataset_hard_labels(ds, "block-sample", 11)[0]
    np.testing.assert_array_equal(one, gx.dataset_hard_labels(ds, "block-sample", 11)[0])
    assert not np.array_equal(one, gx.dataset_hard_labels(ds, "block-sample", 12)[0])
    a = export_bytes(ds, "npz", hard_label_seed=11)[0]
    b = export_bytes(ds, "npz", hard_label_seed=11)[0]
    with np.load(io.BytesIO(a)) as da, np.load(io.BytesIO(b)) as db:
        np.testing.assert_array_equal(da["labels"], db["labels"])
        np.testing.assert_array_equal(da["labels"], one)


def test_label_blocks_from_references_and_prefixes():
    blocks = gx.label_blocks(("a/x", "a/y", "a/b/z", "c"), references=[{"name": "a"}, "a/b"])
    # "a/b/z" starts with both "a/" and "a/b/": fall back to prefixes
    assert [(n, c.tolist()) for n, c in blocks] == [("a", [0, 1, 2]), ("", [3])]
    blocks = gx.label_blocks(("q/1", "p/1", "q/2"), references=["q", "p"])
    assert [(n, c.tolist()) for n, c in blocks] == [("q", [0, 2]), ("p", [1])]


@pytest.mark.parametrize(
    ("target", "image"),
    [
        ("npz", False),
        ("pt", False),
        ("parquet", False),
        ("parquet", True),
        ("dir", True),
        ("zip", True),
    ],
)
@pytest.mark.parametrize("rule", ["argmax", "block-sample"])
def test_round_trip_keeps_hard_labels_and_rule(tmp_path, target, image, rule):
    ds = _pa_ds(n=60, image=image)
    expected, info = gx.dataset_hard_labels(ds, rule, 4)
    path = tmp_path / TARGETS[target]
    result = export_dataset(ds, path, hard_label_rule=rule, hard_label_seed=4)
    assert result.manifest["hard_labels"] == info
    assert result.manifest["hard_labels"]["rule"] == rule
    lossy = image and target != "npz"
    assert result.manifest["fidelity"] == ("lossy (uint8)" if lossy else "lossless")
    labels, read_info = gx.load_hard_labels(result.data_path)
    np.testing.assert_array_equal(labels, expected)
    assert read_info == info
    verify_manifest(result.data_path)
    assert load_export(result.data_path).soft_labels.shape == ds.soft_labels.shape


@pytest.mark.parametrize("fmt", ["npz", "pt", "parquet"])
def test_export_bytes_records_rule(tmp_path, fmt):
    ds = _pa_ds(n=40)
    data, filename, _ = export_bytes(ds, fmt, hard_label_rule="argmax")
    (tmp_path / filename).write_bytes(data)
    labels, info = gx.load_hard_labels(tmp_path / filename)
    np.testing.assert_array_equal(labels, ds.hard_labels.numpy())
    assert info["rule"] == "argmax"


def test_old_manifest_without_rule_still_loads(tmp_path):
    ds = _pa_ds(n=30, image=True)
    old = dict(np.load(io.BytesIO(export_bytes(ds, "npz", hard_label_rule="argmax")[0])))
    manifest = json.loads(str(old["manifest_json"]))
    for key in ("hard_labels", "fidelity"):
        del manifest[key]
    old["manifest_json"] = np.array(json.dumps(manifest))
    np.savez_compressed(tmp_path / "old.npz", **old)
    _assert_same(load_export(tmp_path / "old.npz"), ds)
    labels, info = gx.load_hard_labels(tmp_path / "old.npz")
    np.testing.assert_array_equal(labels, ds.hard_labels.numpy())
    assert info == {"rule": "argmax", "seed": None, "legacy": True}

    root = export_dataset(ds, tmp_path / "folder", hard_label_rule="argmax").data_path
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    del manifest["hard_labels"]
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    assert load_export(root).n_samples == ds.n_samples
    assert gx.load_hard_labels(root)[1]["rule"] == "argmax"


@pytest.mark.parametrize("bad", ["max", "Argmax", "block_sample", "", None, 1])
def test_bad_rule_names_raise_a_clear_error(tmp_path, bad):
    ds = _pa_ds(n=10)
    with pytest.raises(GeovizError, match=r"unknown hard-label rule.*'argmax', 'block-sample'"):
        gx.hard_labels_from_soft(ds.soft_labels, [slice(0, 4)], rule=bad)
    with pytest.raises(GeovizError, match="unknown hard-label rule"):
        export_dataset(ds, tmp_path / "x.npz", hard_label_rule=bad)
    assert not (tmp_path / "x.npz").exists()
    with pytest.raises(GeovizError, match="unknown hard-label rule"):
        export_bytes(ds, "pt", hard_label_rule=bad)
    with pytest.raises(GeovizError, match="seed"):
        export_bytes(ds, "pt", hard_label_seed=-1)


def test_format_descriptions_flag_uint8_storage():
    assert "lossy (uint8)" in gx.format_description("imagefolder")
    assert "lossy (uint8)" in gx.format_description("parquet", images=True)
    assert "lossless" in gx.format_description("parquet", images=False)
    assert "lossy" not in gx.format_description("npz") + gx.format_description("pt")
    with pytest.raises(ExportError):
        gx.format_description("tiff")


# ---------------------------------------------------------------- one registry (issue 24)


@pytest.fixture
def toy_format():
    """The toy JSON format of ``tests/toy_export_format.py``: one module, one registration."""
    import toy_export_format

    from geoviz.export import register_format, unregister_format

    spec = register_format(toy_export_format.SPEC)
    try:
        yield spec
    finally:
        unregister_format(spec.name)


def test_a_new_format_is_one_module_and_one_registration(toy_format, tmp_path, capsys):
    from geoviz.cli import main
    from geoviz.export import format_description, load_hard_labels, verify_manifest

    assert toy_format.name in export_formats() and toy_format.name in export_formats(images=False)
    assert format_description(toy_format.name).startswith("toyjson")
    ds = _vector_ds()
    # the library: written through the dispatcher (sidecar manifest, atomic), read back exactly
    result = export_dataset(ds, tmp_path / "p.toyjson")
    assert result.format == "toyjson" and result.manifest["format"] == "toyjson"
    back = load_export(result.data_path, verify=True)
    np.testing.assert_array_equal(back.features.numpy(), ds.features.numpy())
    np.testing.assert_array_equal(back.soft_labels.numpy(), ds.soft_labels.numpy())
    assert back.class_names == ds.class_names and back.fingerprint == ds.fingerprint
    verify_manifest(result.data_path)
    labels, info = load_hard_labels(result.data_path)
    assert labels.shape == (ds.n_samples,) and info["rule"] == "block-sample"
    # sniffed without its suffix, as every format is
    renamed = tmp_path / "p.data"
    renamed.write_bytes(result.data_path.read_bytes())
    assert load_export(renamed).fingerprint == ds.fingerprint
    data, filename, mime = export_bytes(ds, "toyjson")
    assert filename.endswith(".toyjson") and mime == "application/json" and data.startswith(b"{")
    # the CLI offers it: `geoviz project --format toyjson` writes it
    out = tmp_path / "cli.toyjson"
    args = ["project", "--target", "gmm2d", "--refs", "chessboard,gmm2d", "--n", "48", "--quiet"]
    assert main([*args, "--format", "toyjson", "--out", str(out)]) == 0
    assert load_export(out).n_samples == 48
    capsys.readouterr()


def test_an_unknown_or_clashing_format_is_refused():
    import toy_export_format

    from geoviz.errors import ExportError
    from geoviz.export import format_spec, register_format

    with pytest.raises(ExportError, match="unknown export format 'nope': use one of npz, pt"):
        format_spec("nope")
    with pytest.raises(ExportError, match="registered already"):
        register_format(format_spec("npz"))
    clash = dataclasses.replace(toy_export_format.SPEC, suffixes=(".npz",))
    with pytest.raises(ExportError, match=re.escape("'.npz' already names 'npz'")):
        register_format(clash)
    assert clash.name not in export_formats()  # nothing registered by a refusal


# ----------------------------------------------------------------------------- Windows device names


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("COM¹", "_COM¹"),  # superscript one: a device on Windows, kept as is before
        ("com²", "_com²"),
        ("LPT³.txt", "_LPT³.txt"),
        ("COM0", "_COM0"),
        ("lpt0.tar.gz", "_lpt0.tar.gz"),
        ("nul.txt", "_nul.txt"),
        ("AUX. .", "_AUX"),  # trailing dots and spaces are dropped by Windows too
        ("Con  ", "_Con"),
        ("x/COM¹", "x_COM¹"),  # not a device once prefixed
        ("COM10", "COM10"),
        ("COM¹¹", "COM¹¹"),
        ("CONSOLE", "CONSOLE"),
    ],
)
def test_windows_device_names_are_made_safe(name, folder):
    assert safe_name(name) == folder
    assert not gx.names.is_windows_reserved(folder)


def test_no_safe_name_is_a_windows_device_name():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    devices = st.sampled_from(["CON", "PRN", "AUX", "NUL", "COM", "LPT"])
    digits = st.sampled_from(["", "0", "1", "9", "\u00b9", "\u00b2", "\u00b3"])
    tails = st.text(alphabet=". _-xtT", max_size=4)
    cases = st.tuples(devices, digits, tails).map(lambda t: "".join(t))
    anything = st.text(max_size=12)

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(cases, anything).flatmap(lambda n: st.tuples(st.just(n), st.booleans())))
    def check(case):
        name, lower = case
        name = name.lower() if lower else name
        assert not gx.names.is_windows_reserved(safe_name(name))

    check()


def test_device_class_names_get_unique_recorded_folders_and_round_trip(tmp_path):
    names = ("COM¹", "_COM¹", "com¹", "nul.txt", "LPT²")
    ds = _image_ds(n=len(names) * 2, names=names)
    folders = class_folder_names(names)
    assert folders == ["_COM¹", "_COM¹_1", "_com¹_2", "_nul.txt", "_LPT²"]
    result = export_dataset(ds, tmp_path / "synth")
    assert result.manifest["class_folders"] == folders  # the mapping, in class order
    tops = {p.name for p in result.data_path.iterdir() if p.is_dir()}
    assert tops == set(folders)
    _assert_same(load_export(result.data_path), ds)
    labels, _ = gx.load_hard_labels(result.data_path)
    np.testing.assert_array_equal(labels, _block_sampled(ds))


# ----------------------------------------------------------------------------- killed exports


def test_an_export_killed_mid_write_is_cleaned_up_by_the_next_one(tmp_path):
    """SIGKILL during an ImageFolder export leaves its hidden temporary folder; the next
    export into the same folder removes it before writing, and is complete."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "exports"
    code = (
        "import sys, time, numpy as np\n"
        "import geoviz.atomic as a\n"
        "from geoviz.data.dataset import SoftLabeledDataset\n"
        "from geoviz.export import export_dataset\n"
        "real, count = a._write_bytes, [0]\n"
        "def slow(path, data, **kw):\n"
        "    real(path, data, **kw)\n"
        "    count[0] += 1\n"
        "    if count[0] == 3:\n"
        "        print('writing', flush=True); time.sleep(120)\n"
        "a._write_bytes = slow\n"
        "soft = np.full((8, 2), 0.5, dtype=np.float32)\n"
        "ds = SoftLabeledDataset(features=np.zeros((8, 4), np.float32), soft_labels=soft,\n"
        "    class_names=('a', 'b'), name='synth', image_shape=(1, 2, 2))\n"
        f"export_dataset(ds, {str(out / 'synth')!r})\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    left = [p.name for p in out.iterdir()]
    assert len(left) == 1 and left[0].startswith(".synth.") and left[0].endswith(".tmp")

    ds = _image_ds()
    result = export_dataset(ds, out / "synth")
    assert [p.name for p in out.iterdir()] == ["synth"]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    verify_manifest(result.data_path)
    _assert_same(load_export(result.data_path), ds)


def test_an_export_whose_files_are_not_regular_files_is_refused(tmp_path):
    """Reading an export back opens only regular files: a FIFO named manifest.json or
    put in an image's place blocked ``read_text``/``read_bytes`` (issue 32). Run in a child
    with an alarm, so that the old code fails instead of hanging."""
    from hostile_files import make_fifo, needs_posix_files, run_cases

    needs_posix_files()
    root = export_dataset(_image_ds(), tmp_path / "d").data_path
    (root / "manifest.json").unlink()
    make_fifo(root / "manifest.json")
    other = export_dataset(_image_ds(), tmp_path / "e").data_path
    png = next(other.rglob("*.png"))
    png.unlink()
    make_fifo(png)
    results = run_cases(
        f"""
        from geoviz.export import verify_manifest
        CASES = {{
            "manifest": lambda: verify_manifest({str(root)!r}),
            "member": lambda: verify_manifest({str(other)!r}),
        }}
        """
    )
    kind, message = results["manifest"]
    assert kind == "ExportError" and "not a regular file" in message, results
    kind, message = results["member"]
    assert kind == "ExportError" and png.name in message, results
