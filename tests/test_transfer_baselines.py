"""1-NN and the Mixup pretraining set (geoviz.transfer.baselines)."""

from __future__ import annotations

import numpy as np
import pytest

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, WeightsError
from geoviz.transfer.baselines import mixup_pretraining_set, one_nn_accuracy, one_nn_predict


def _ds(x, y, classes=("a", "b", "c"), name="ds") -> LabeledDataset:
    return LabeledDataset(features=np.asarray(x, float), labels=y, classes=classes, name=name)


def _brute_force(train: np.ndarray, test: np.ndarray) -> np.ndarray:
    d2 = ((test[:, None, :] - train[None, :, :]) ** 2).sum(axis=-1)
    return d2.argmin(axis=1)  # first minimum: lowest index


# --------------------------------------------------------------------------- 1-NN


def test_one_nn_hand_made():
    train = _ds([[0, 0], [10, 0], [0, 10]], [0, 1, 2])
    # (4, 0) -> sample 0 (class a); (6, 1) -> sample 1 (b); (1, 7) -> sample 2 (c);
    # (5, 0) is equidistant from samples 0 and 1: the lower index wins (class a)
    test = _ds([[4, 0], [6, 1], [1, 7], [5, 0]], [0, 1, 1, 0])
    assert one_nn_predict(train.features, test.features).tolist() == [0, 1, 2, 0]
    acc = one_nn_accuracy(train, test)
    assert isinstance(acc, float)
    assert acc == 0.75  # the third test point is labelled b but lies next to c


def test_one_nn_duplicates_go_to_the_lowest_index():
    train = _ds([[1, 1], [3, 3], [1, 1]], [1, 0, 0])
    test = _ds([[1, 1], [1.2, 0.9]], [1, 2])
    assert one_nn_predict(train.features, test.features).tolist() == [0, 0]
    assert one_nn_accuracy(train, test) == 0.5


def test_one_nn_exact_tie_survives_rounding():
    # large offsets make |x|^2 + |y|^2 - 2xy lose the tie; the exact re-check restores it
    big = 1e6
    train = np.array([[big + 1.0, big], [big - 1.0, big]])
    test = np.array([[big, big]])
    assert one_nn_predict(train, test).tolist() == [0]
    assert one_nn_predict(train[::-1].copy(), test).tolist() == [0]


@pytest.mark.parametrize("seed", range(4))
def test_one_nn_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, m, d = rng.integers(2, 60), rng.integers(2, 40), rng.integers(1, 20)
    train_x = rng.normal(size=(n, d)).astype(np.float32)
    test_x = rng.normal(size=(m, d)).astype(np.float32)
    if seed % 2:  # coarse grid: many exact ties
        train_x, test_x = np.round(train_x), np.round(test_x)
    expected = _brute_force(train_x.astype(np.float64), test_x.astype(np.float64))
    np.testing.assert_array_equal(one_nn_predict(train_x, test_x), expected)

    train_y, test_y = rng.integers(0, 3, size=n), rng.integers(0, 3, size=m)
    train_y[:2] = test_y[:2] = [0, 1]  # at least two classes each
    acc = one_nn_accuracy(_ds(train_x, train_y), _ds(test_x, test_y))
    assert acc == float(np.mean(train_y[expected] == test_y))


def test_one_nn_blocks_agree_with_brute_force(monkeypatch):
    import geoviz.transfer.baselines as baselines

    monkeypatch.setattr(baselines, "_BLOCK_ELEMENTS", 50)  # several test rows per block
    rng = np.random.default_rng(9)
    train_x, test_x = rng.random((20, 3)), rng.random((33, 3))
    np.testing.assert_array_equal(one_nn_predict(train_x, test_x), _brute_force(train_x, test_x))


def test_one_nn_errors():
    train = _ds([[0, 0], [1, 1]], [0, 1])
    with pytest.raises(DatasetError, match="same classes"):
        one_nn_accuracy(train, _ds([[0, 0], [1, 1]], [0, 1], classes=("x", "y")))
    with pytest.raises(DatasetError, match="test set 'ds' has 3"):
        one_nn_accuracy(train, _ds([[0, 0, 0], [1, 1, 1]], [0, 1], classes=("a", "b", "c")))
    with pytest.raises(DatasetError, match="LabeledDataset"):
        one_nn_accuracy(train, np.zeros((2, 2)))  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match="NaN"):
        one_nn_predict(np.array([[np.nan, 0.0]]), np.zeros((1, 2)))
    with pytest.raises(DatasetError, match="non-empty"):
        one_nn_predict(np.zeros((0, 2)), np.zeros((1, 2)))


# --------------------------------------------------------------------------- Mixup


def _refs():
    rng = np.random.default_rng(0)
    p1 = _ds(rng.random((30, 4)), np.arange(30) % 2, classes=("x", "y"), name="P1")
    p2 = _ds(rng.random((50, 4)), np.arange(50) % 3, classes=("a", "b", "c"), name="P2")
    target = _ds(rng.random((25, 4)), np.arange(25) % 3, name="Q")
    return target, [p1, p2]


def test_mixup_set_block_masses_equal_the_weights():
    target, refs = _refs()
    out = mixup_pretraining_set(target, refs, [0.3, 0.7], seed=0)
    assert isinstance(out, SoftLabeledDataset)
    assert out.n_samples == target.n_samples
    assert out.class_names == ("P1/x", "P1/y", "P2/a", "P2/b", "P2/c")
    soft = out.soft_labels.numpy()
    np.testing.assert_allclose(soft[:, :2].sum(axis=1), 0.3, atol=1e-6)
    np.testing.assert_allclose(soft[:, 2:].sum(axis=1), 0.7, atol=1e-6)
    # each block is one class of a random partner: exactly one non-zero entry per block
    assert ((soft[:, :2] > 0).sum(axis=1) == 1).all()
    assert ((soft[:, 2:] > 0).sum(axis=1) == 1).all()
    assert out.metadata["kind"] == "mixup"


def test_mixup_set_is_seeded():
    target, refs = _refs()
    a = mixup_pretraining_set(target, refs, [0.5, 0.5], seed=1)
    b = mixup_pretraining_set(target, refs, [0.5, 0.5], seed=1)
    c = mixup_pretraining_set(target, refs, [0.5, 0.5], seed=2)
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != c.fingerprint


@pytest.mark.parametrize("weights", [[0.5, 0.6], [-0.1, 1.1], [1.0], [np.nan, 1.0]])
def test_mixup_set_rejects_weights_off_the_simplex(weights):
    target, refs = _refs()
    with pytest.raises(WeightsError):
        mixup_pretraining_set(target, refs, weights, seed=0)


def test_mixup_set_needs_references():
    target, _ = _refs()
    with pytest.raises(DatasetError, match="at least one reference"):
        mixup_pretraining_set(target, [], [], seed=0)
