"""The Mixup baseline (geoviz.geodesic.mixup): random pairs, weights a, concatenated labels."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError, WeightsError
from geoviz.geodesic.labels import label_space
from geoviz.geodesic.mixup import mixup_interpolation, mixup_pairs
from geoviz.geodesic.weights import check_weights

N = 40
SIZES = (50, 40, 25)  # the last reference is smaller than the target: drawn with replacement
CLASSES = (2, 3, 4)


def _target(n: int = N, seed: int = 0) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    return LabeledDataset(
        features=rng.normal(size=(n, 3)), labels=np.arange(n) % 2, classes=("u", "v"), name="Q"
    )


def _indexed_references() -> list[LabeledDataset]:
    """Reference i has x_j = (j + 1) e_i and label j % C_i: an output reveals its partners."""
    refs = []
    for i, (size, c) in enumerate(zip(SIZES, CLASSES, strict=True)):
        x = np.zeros((size, 3))
        x[:, i] = np.arange(1, size + 1)
        refs.append(
            LabeledDataset(
                features=x,
                labels=np.arange(size) % c,
                classes=tuple(f"k{k}" for k in range(c)),
                name=f"P{i + 1}",
            )
        )
    return refs


def _partners(out: torch.Tensor, a: np.ndarray) -> np.ndarray:
    """``(m, N)`` indices j_i(n) read back from the features x_n = sum_i a_i (j_i + 1) e_i."""
    raw = out.double().numpy().T / a[:, None]
    idx = np.round(raw) - 1
    np.testing.assert_allclose(raw - 1, idx, atol=1e-4)  # integers: one sample per reference
    return idx.astype(np.int64)


def test_each_output_mixes_one_sample_per_reference_with_weights_a():
    refs = _indexed_references()
    a = np.array([0.2, 0.5, 0.3])
    mix = mixup_interpolation(_target(), refs, a, seed=7)
    assert mix.features.shape == (N, 3) and mix.features.dtype == torch.float32
    j = _partners(mix.features, a)
    for i, size in enumerate(SIZES):
        assert j[i].min() >= 0 and j[i].max() < size
    # the documented pairing is the one used
    np.testing.assert_array_equal(j, mixup_pairs(N, SIZES, seed=7))
    # x_n = sum_i a_i x_i[j_i(n)] (float64 accumulation, float32 result)
    expected = sum(a[i] * refs[i].features.double()[j[i]] for i in range(3))
    torch.testing.assert_close(mix.features, expected.float())


def test_labels_are_the_a_scaled_concatenated_one_hot_labels():
    refs = _indexed_references()
    a = np.array([0.2, 0.5, 0.3])
    mix = mixup_interpolation(_target(), refs, a, seed=7)
    space = label_space(refs)
    assert mix.class_names == space.class_names  # the same label space as P_a
    j = _partners(mix.features, a)
    labels = mix.soft_labels.double().numpy()
    for i, block in enumerate(space.block_slices):
        expected = np.zeros((N, CLASSES[i]))
        expected[np.arange(N), j[i] % CLASSES[i]] = a[i]
        np.testing.assert_allclose(labels[:, block], expected, atol=1e-7)
    np.testing.assert_allclose(labels.sum(axis=1), 1.0, atol=1e-6)


def test_pairs_without_replacement_when_the_reference_is_large_enough():
    pairs = mixup_pairs(N, SIZES, seed=3)
    assert pairs.shape == (3, N) and pairs.dtype == np.int64
    for i, size in enumerate(SIZES):
        if size >= N:
            assert len(set(pairs[i].tolist())) == N  # every sample at most once
        else:
            assert set(pairs[i].tolist()) <= set(range(size))  # uniform, with replacement
    # a vertex of the simplex gives distinct samples of that reference, unchanged
    refs = _indexed_references()
    vertex = mixup_interpolation(_target(), refs, [1.0, 0.0, 0.0], seed=3)
    rows = {tuple(r) for r in refs[0].features.numpy().tolist()}
    got = [tuple(r) for r in vertex.features.numpy().tolist()]
    assert all(r in rows for r in got) and len(set(got)) == N


def test_deterministic_given_the_seed():
    refs = _indexed_references()
    a = [0.2, 0.5, 0.3]
    one = mixup_interpolation(_target(), refs, a, seed=11)
    two = mixup_interpolation(_target(), refs, a, seed=11)
    other = mixup_interpolation(_target(), refs, a, seed=12)
    torch.testing.assert_close(one.features, two.features, rtol=0, atol=0)
    torch.testing.assert_close(one.soft_labels, two.soft_labels, rtol=0, atol=0)
    assert not torch.equal(one.features, other.features)


def test_pairs_are_random_not_an_ot_coupling():
    """The partners depend on neither the target's samples nor the classes: the coupling
    is the independent one, where an OT map would pair matching classes."""
    refs = _indexed_references()
    a = [0.2, 0.5, 0.3]
    # two targets of the same size but different features and labels: the same output
    first = mixup_interpolation(_target(seed=0), refs, a, seed=5)
    second = mixup_interpolation(_target(seed=99), refs, a, seed=5)
    torch.testing.assert_close(first.features, second.features, rtol=0, atol=0)

    # two references with the same two well-separated classes: an OT coupling pairs
    # class k with class k (joint [[0.5, 0], [0, 0.5]]); Mixup pairs them independently
    n = 4000
    cls = np.arange(n) % 2
    p1 = LabeledDataset(features=cls[:, None] * 10.0, labels=cls, classes=("a", "b"), name="P1")
    p2 = LabeledDataset(features=cls[:, None] * 10.0, labels=cls, classes=("a", "b"), name="P2")
    target = LabeledDataset(features=cls[:, None] * 10.0, labels=cls, classes=("a", "b"), name="Q")
    pairs = mixup_pairs(n, [n, n], seed=0)
    joint = np.zeros((2, 2))
    np.add.at(joint, (cls[pairs[0]], cls[pairs[1]]), 1.0 / n)
    # standard error sqrt(0.25 * 0.75 / 4000) ~ 0.007
    np.testing.assert_allclose(joint, 0.25, atol=0.03)
    mix = mixup_interpolation(target, [p1, p2], [0.5, 0.5], seed=0)
    # label mass on P1/a + P2/b: 0.5 for same-class pairs, 1 or 0 for an a-b mix
    cross_mass = mix.soft_labels.numpy()[:, [0, 3]].sum(axis=1)
    cross = float(np.mean(np.abs(cross_mass - 0.5) > 0.25))
    assert cross == pytest.approx(0.5, abs=0.05)  # an OT coupling would give 0


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([0.5, 0.6, 0.0], r"sum to 1.1"),
        ([0.7, -0.2, 0.5], r"weight 1 is negative"),
        ([np.nan, 0.5, 0.5], r"weight 0 is nan"),
        ([0.5, 0.5], r"must have 3 entries"),
        (["x", "y", "z"], r"numbers"),
    ],
)
def test_weights_off_the_simplex_raise_the_check_weights_error(weights, message):
    with pytest.raises(WeightsError, match=message) as err:
        mixup_interpolation(_target(), _indexed_references(), weights)
    with pytest.raises(WeightsError) as same:
        check_weights(weights, 3)
    assert str(err.value) == str(same.value)  # one validator, one message


def test_bad_datasets_are_rejected():
    refs = _indexed_references()
    with pytest.raises(DatasetError, match="at least one reference"):
        mixup_interpolation(_target(), [], [])
    flat = LabeledDataset(
        features=np.zeros((6, 2)), labels=np.arange(6) % 2, classes=("c", "d"), name="F"
    )
    with pytest.raises(DatasetError, match="one feature space"):
        mixup_interpolation(_target(), [refs[0], flat], [0.5, 0.5])
    with pytest.raises(DatasetError, match="LabeledDataset"):
        mixup_interpolation(_target().features, refs, [0.2, 0.5, 0.3])
    with pytest.raises(DatasetError, match="positive number"):
        mixup_pairs(0, [3])


def test_name_metadata_and_image_shape():
    images = [
        LabeledDataset(
            features=np.random.default_rng(i).random((30, 4)),
            labels=np.arange(30) % 2,
            classes=("a", "b"),
            name="img",
            image_shape=(1, 2, 2),
        )
        for i in range(2)
    ]
    mix = mixup_interpolation(_target(n=12), images, [0.25, 0.75], seed=2)
    assert mix.name == "Mixup(0.25,0.75)"
    assert mix.image_shape == (1, 2, 2)
    assert mix.class_names == ("img/a", "img/b", "img#2/a", "img#2/b")  # unique prefixes
    meta = json.loads(json.dumps(mix.metadata))
    assert meta["kind"] == "mixup" and meta["coupling"] == "random"
    assert meta["weights"] == [0.25, 0.75] and meta["seed"] == 2 and meta["n"] == 12
    assert meta["references"] == ["img", "img#2"] and meta["target"]["name"] == "Q"
