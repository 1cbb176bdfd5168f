"""Validation, fingerprints and helpers of LabeledDataset and SoftLabeledDataset."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError


def _make(n: int = 6, seed: int = 0, **kw) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    args = {
        "features": rng.random((n, 4), dtype=np.float32),
        "labels": np.arange(n) % 3,
        "classes": ("zero", "one", "two"),
        "name": "toy",
        "image_shape": (1, 2, 2),
        "source": "toy.npz",
    }
    args.update(kw)
    return LabeledDataset(**args)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"features": np.zeros((0, 4)), "labels": np.zeros(0, int)},
            "dataset is empty (0 samples)",
        ),
        ({"features": np.zeros((6, 0)), "image_shape": None}, "samples have 0 features"),
        (
            {"features": np.zeros((6, 2, 2))},
            "features must be a 2-D array (N samples x D features), got shape (6, 2, 2)",
        ),
        (
            {"features": np.where(np.eye(6, 4) > 0, np.nan, 0.0)},
            "features contain NaN or infinite values in 4 sample(s)",
        ),
        (
            {"features": np.full((6, 4), np.inf)},
            "features contain NaN or infinite values in 6 sample(s)",
        ),
        ({"features": np.array([["a"] * 4] * 6)}, "features must be real numbers, got dtype <U1"),
        ({"features": [[1.0, 2.0], [3.0]] * 3}, "features must be a numeric (N, D) array"),
        (
            {"features": np.ones((6, 4), dtype=complex)},
            "features must be real numbers, got dtype torch.complex128",
        ),
        ({"labels": [0, 1, 2, 0, 1, 2.5]}, "labels must be integers (found non-integer values)"),
        ({"labels": [0, 1, 2, 0, 1, np.nan]}, "labels must be integers (found non-integer values)"),
        (
            {"labels": np.array(["0", "1", "2", "0", "1", "2"])},
            "labels must be integers, got dtype <U1",
        ),
        ({"labels": np.ones(6, dtype=bool)}, "labels must be integers, got dtype bool"),
        ({"labels": [0, 1, 2, 0, 1, 3]}, "labels must lie in 0..2, found range 0..3"),
        ({"labels": [0, 1, 2, 0, 1, -1]}, "labels must lie in 0..2, found range -1..2"),
        (
            {"labels": [1] * 6},
            "only one class ('one') occurs; OT between labelled datasets needs at least 2",
        ),
        ({"labels": [0, 1, 2, 0, 1]}, "6 samples but 5 labels: counts must match"),
        ({"labels": np.zeros((6, 1), int)}, "labels must be a 1-D array, got shape (6, 1)"),
        (
            {"image_shape": (1, 3, 3)},
            "image_shape (1, 3, 3) has 9 values but each sample has 4 features",
        ),
        ({"image_shape": (4, 1)}, "image_shape must be (C, H, W) with positive sizes, got (4, 1)"),
        (
            {"image_shape": (4, 1, 0)},
            "image_shape must be (C, H, W) with positive sizes, got (4, 1, 0)",
        ),
        ({"classes": ("a", "b", "a")}, "class names must be unique"),
        ({"classes": ("only",), "labels": [0] * 6}, "a dataset needs at least 2 classes, got 1"),
    ],
)
def test_labeled_dataset_validation(kwargs, message):
    with pytest.raises(DatasetError, match=re.escape(message)) as info:
        _make(**kwargs)
    assert isinstance(info.value, GeovizError)
    assert info.value.source == "toy.npz"
    assert str(info.value).startswith("toy.npz: ")


def test_error_names_the_dataset_when_there_is_no_source():
    with pytest.raises(DatasetError, match=r"^toy: dataset is empty"):
        _make(features=np.zeros((0, 4)), labels=[], source=None)


def test_conversions():
    ds = _make(
        features=torch.arange(24, dtype=torch.int32).reshape(6, 4),
        labels=torch.tensor([0, 1, 2] * 2),
    )
    assert ds.features.dtype == torch.float32 and ds.labels.dtype == torch.int64
    assert ds.features.device.type == "cpu"
    assert _make(labels=np.array([0.0, 1.0, 2.0] * 2)).labels.tolist() == [0, 1, 2] * 2
    assert _make(features=np.array([[1, 2, 3, 4]] * 6, dtype=object)).features[0].tolist() == [
        1,
        2,
        3,
        4,
    ]
    vec = LabeledDataset(np.arange(4.0), [0, 1, 0, 1], ("a", "b"))
    assert vec.features.shape == (4, 1) and not vec.is_image
    assert (len(ds), ds.n_features, ds.n_classes, ds.is_image) == (6, 4, 3, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.name = "other"  # type: ignore[misc]


def test_read_only_input_is_copied_without_warning():
    feats = np.random.default_rng(0).random((6, 4)).astype(np.float32)
    feats.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = _make(features=feats)
    assert np.array_equal(ds.features.numpy(), feats)


# ----------------------------------------------------------------------------- fingerprint


def test_fingerprint_is_stable_within_a_process():
    a, b = _make(), _make()
    assert a.fingerprint == b.fingerprint
    assert len(a.fingerprint) == 64
    # provenance and display name are not content
    assert _make(name="other", source="elsewhere.npz").fingerprint == a.fingerprint


def test_fingerprint_is_stable_across_processes():
    code = (
        "import numpy as np; from geoviz.data.dataset import LabeledDataset; "
        "print(LabeledDataset(np.arange(12.0).reshape(6, 2) / 7, [0, 1, 2] * 2, ('a', 'b', 'ü'), "
        "image_shape=(1, 1, 2)).fingerprint)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    here = LabeledDataset(
        torch.arange(12.0, dtype=torch.float64).reshape(6, 2) / 7,
        [0, 1, 2] * 2,
        ["a", "b", "ü"],
        image_shape=[1, 1, 2],
    )
    assert out == here.fingerprint


def test_fingerprint_is_sensitive_to_content():
    base = _make()
    pixel = base.features.clone()
    pixel[3, 2] = torch.nextafter(pixel[3, 2], torch.tensor(2.0))  # one ulp
    labels = base.labels.clone()
    labels[0] = 1
    variants = [
        _make(features=pixel),
        _make(labels=labels),
        _make(classes=("zero", "one", "Two")),
        _make(image_shape=(4, 1, 1)),
        _make(image_shape=None),
        base.subset([1, 0, 2, 3, 4, 5]),
    ]
    prints = {v.fingerprint for v in variants}
    assert base.fingerprint not in prints and len(prints) == len(variants)


# ----------------------------------------------------------------------------- helpers


def test_subset():
    ds = _make(n=9)
    sub = ds.subset([8, 0, 4], name="sub")
    assert sub.name == "sub" and sub.classes == ds.classes and sub.source == ds.source
    assert torch.equal(sub.features, ds.features[[8, 0, 4]]) and sub.labels.tolist() == [2, 0, 1]
    assert ds.subset(torch.tensor([0, 1])).n_samples == 2
    assert ds.subset(np.array([-1, 0])).labels.tolist() == [2, 0]
    mask = np.array([True, False, True, False, False, True, False, False, False])
    by_mask = ds.subset(mask)
    assert by_mask.labels.tolist() == [0, 2, 2]
    assert torch.equal(by_mask.features, ds.features[torch.from_numpy(mask)])
    assert ds.subset(torch.from_numpy(mask)).fingerprint == by_mask.fingerprint
    with pytest.raises(DatasetError, match=r"boolean mask has shape \(3,\), expected \(9,\)"):
        ds.subset([True, False, True])
    with pytest.raises(DatasetError, match="only one class"):
        ds.subset([0, 3, 6])
    with pytest.raises(DatasetError, match="empty"):
        ds.subset([])


def test_one_hot_images_counts_summary():
    ds = _make(n=7)
    hot = ds.one_hot()
    assert hot.shape == (7, 3) and hot.dtype == torch.float32
    assert torch.equal(hot.argmax(1), ds.labels) and torch.equal(hot.sum(1), torch.ones(7))
    assert ds.one_hot(torch.float64).dtype == torch.float64
    images = ds.images()
    assert images.shape == (7, 1, 2, 2)
    assert torch.equal(images[3, 0], ds.features[3].reshape(2, 2))
    assert ds.class_counts().tolist() == [3, 2, 2]
    summary = ds.summary()
    assert summary["class_counts"] == [3, 2, 2] and summary["image_shape"] == [1, 2, 2]
    assert summary["fingerprint"] == ds.fingerprint
    with pytest.raises(DatasetError, match="holds vectors, not images"):
        _make(image_shape=None).images()
    flat = ds.with_features(ds.features[:, :2] * 2, name="pca")
    assert flat.image_shape is None and flat.name == "pca" and torch.equal(flat.labels, ds.labels)
    assert "n_classes=3" in repr(ds)


# ----------------------------------------------------------------------------- soft labels


def _soft(**kw) -> SoftLabeledDataset:
    args = {
        "features": np.zeros((3, 4), np.float32),
        "soft_labels": np.array([[1.0, 0.0], [0.25, 0.75], [0.5, 0.5]], np.float32),
        "class_names": ("mnist/0", "usps/0"),
        "name": "P_a",
        "image_shape": (1, 2, 2),
    }
    args.update(kw)
    return SoftLabeledDataset(**args)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"soft_labels": np.array([[1.0, 0.1], [0.5, 0.5], [0.5, 0.5]])},
            "soft-label rows must sum to 1 (found sums in [1.0000, 1.1000])",
        ),
        (
            {"soft_labels": np.array([[1.5, -0.5], [0.5, 0.5], [0.5, 0.5]])},
            "soft labels must be finite and non-negative",
        ),
        (
            {"soft_labels": np.array([[np.nan, 1.0], [0.5, 0.5], [0.5, 0.5]])},
            "soft labels must be finite and non-negative",
        ),
        ({"soft_labels": np.full((3, 3), 1 / 3)}, "3 soft-label columns but 2 class names"),
        ({"soft_labels": np.full((2, 2), 0.5)}, "soft_labels must have shape (3, K), got (2, 2)"),
        ({"soft_labels": np.full(3, 0.5)}, "soft_labels must have shape (3, K), got (3,)"),
        (
            {"features": np.zeros((3, 5))},
            "image_shape (1, 2, 2) has 4 values but each sample has 5 features",
        ),
        (
            {"features": np.full((3, 4), np.inf)},
            "features contain NaN or infinite values in 3 sample(s)",
        ),
    ],
)
def test_soft_labeled_validation(kwargs, message):
    with pytest.raises(DatasetError, match=r"^P_a: " + re.escape(message)):
        _soft(**kwargs)


def test_soft_labeled_basics():
    meta = {
        "weights": np.array([0.25, 0.75]),
        "eps": np.float32(0.5),
        "t": torch.tensor([1.0]),
        "n": 3,
    }
    ds = _soft(metadata=meta, soft_labels=np.array([[1.0, -1e-8], [0.25, 0.75], [0.5, 0.5]]))
    assert ds.metadata == {
        "weights": [0.25, 0.75],
        "eps": 0.5,
        "t": [1.0],
        "n": 3,
    }  # numbers, not strings
    meta["n"] = 99
    assert ds.metadata["n"] == 3  # copied
    assert float(ds.soft_labels.min()) == 0.0  # tiny negatives clamped
    assert ds.hard_labels.tolist() == [0, 1, 0]  # ties go to the first class
    assert ds.images().shape == (3, 1, 2, 2) and len(ds) == 3
    assert ds.fingerprint == _soft(metadata={"other": 1}, name="x").fingerprint
    assert ds.fingerprint != _soft(class_names=("mnist/0", "usps/1")).fingerprint
    with pytest.raises(DatasetError, match="holds vectors"):
        _soft(image_shape=None).images()


# ----------------------------------------------------------------------------- properties

_feature_arrays = hnp.arrays(
    dtype=np.float32,
    shape=st.tuples(st.integers(2, 8), st.integers(1, 4)),
    elements=st.floats(-1e6, 1e6, width=32, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=30, deadline=None)
@given(features=_feature_arrays, data=st.data())
def test_fingerprint_ignores_how_the_data_arrives(features, data):
    n = features.shape[0]
    labels = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    labels[:2] = [0, 1]  # at least two classes occur
    from_numpy = LabeledDataset(features, labels, ("a", "b", "c"))
    from_torch = LabeledDataset(
        torch.from_numpy(features.copy()), torch.from_numpy(labels), ["a", "b", "c"]
    )
    from_f64_lists = LabeledDataset(
        features.astype(np.float64).tolist(), labels.astype(np.int32).tolist(), ("a", "b", "c")
    )
    assert from_numpy.fingerprint == from_torch.fingerprint == from_f64_lists.fingerprint
    assert from_numpy.subset(np.arange(n)).fingerprint == from_numpy.fingerprint
    assert from_numpy.subset(np.ones(n, dtype=bool)).fingerprint == from_numpy.fingerprint
    order = np.array(data.draw(st.permutations(range(n))))
    same = features[order].tobytes() == features.tobytes() and np.array_equal(labels[order], labels)
    assert (from_numpy.subset(order).fingerprint == from_numpy.fingerprint) == same
