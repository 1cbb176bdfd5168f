"""Few-shot pseudo-labels (geoviz.data.pseudo_labels): label spreading on a kNN graph vs the
labelled points' kNN vote, on small cases with a known answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geoviz.data import pseudo_labels as pl
from geoviz.data.choice import FewShotOptions
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import few_shot
from geoviz.errors import DatasetError


def _blobs(centres: list[tuple[float, float]], n: int, scale: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(c, scale, size=(n, 2)) for c in centres]).astype(np.float32)
    y = np.repeat(np.arange(len(centres)), n)
    return x, y


def _two_chains() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two parallel chains of points 0.25 apart, 6 apart from each other; chain 0 labelled at
    its left end, chain 1 at its right end: most of each chain is nearer the *other* label."""
    xs = np.arange(0.0, 20.01, 0.25)
    a = np.stack([xs, np.zeros_like(xs)], 1)
    b = np.stack([xs, np.full_like(xs, 6.0)], 1)
    x = np.concatenate([a, b]).astype(np.float32)
    y = np.repeat([0, 1], len(xs))
    labelled = np.array([0, 2 * len(xs) - 1])
    return x, y, labelled


def _moons() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=600, noise=0.05, random_state=0)
    # one labelled point per moon, each at its moon's tip
    labelled = np.array([int(np.argmin(np.where(y == 0, x[:, 0], np.inf))),
                         int(np.argmax(np.where(y == 1, x[:, 0], -np.inf)))])  # fmt: skip
    return x.astype(np.float32), y.astype(np.int64), labelled


def _accuracy(pred: np.ndarray, y: np.ndarray, labelled: np.ndarray) -> float:
    rest = np.setdiff1d(np.arange(len(y)), labelled)
    return float(np.mean(pred[rest] == y[rest]))


def test_two_separated_clusters_with_one_label_each_are_all_right() -> None:
    x, y = _blobs([(0.0, 0.0), (10.0, 0.0)], 40, 0.5)
    labelled = np.array([3, 50])
    pred = pl.spread_labels(x, y, labelled)
    assert np.array_equal(pred, y)


def test_a_chain_carries_its_label_where_the_nearest_label_is_the_other_chain_s() -> None:
    x, y, labelled = _two_chains()
    knn = pl.knn_labels(x, y, labelled, 1)
    spread = pl.spread_labels(x, y, labelled)
    assert np.array_equal(spread, y)
    assert _accuracy(knn, y, labelled) < 0.9  # the kNN vote crosses to the other chain


def test_two_moons_spreading_beats_knn() -> None:
    x, y, labelled = _moons()
    knn = _accuracy(pl.knn_labels(x, y, labelled, 1), y, labelled)
    spread = _accuracy(pl.spread_labels(x, y, labelled), y, labelled)
    assert spread >= 0.97
    assert spread > knn + 0.1


@pytest.mark.parametrize("method", pl.PSEUDO_LABEL_METHODS)
def test_labelled_points_never_change(method: pl.PseudoLabelMethod) -> None:
    x, y = _blobs([(0.0, 0.0), (10.0, 0.0)], 40, 0.5)
    y = y.copy()
    labelled = np.array([3, 7, 50, 61])
    y[7] = 1  # a labelled point of class 1 deep inside class 0's cluster
    pred = pl.pseudo_labels(x, y, labelled, method=method)
    assert np.array_equal(pred[labelled], y[labelled])


@pytest.mark.parametrize("method", pl.PSEUDO_LABEL_METHODS)
def test_invariant_to_relabelling_the_classes_and_deterministic(
    method: pl.PseudoLabelMethod,
) -> None:
    x, y = _blobs([(0.0, 0.0), (3.0, 0.0), (0.0, 3.0)], 50, 1.0, seed=2)
    labelled = np.array([0, 1, 50, 51, 100, 101])
    pred = pl.pseudo_labels(x, y, labelled, method=method)
    assert np.array_equal(pred, pl.pseudo_labels(x, y, labelled, method=method))
    perm = np.array([2, 0, 1])  # class c is called perm[c]
    renamed = pl.pseudo_labels(x, perm[y], labelled, method=method)
    assert np.array_equal(renamed, perm[pred])
    assert 0.5 < _accuracy(pred, y, labelled) < 1.0  # a case with something to get wrong


def test_a_component_without_labels_takes_the_knn_vote() -> None:
    x, y = _blobs([(0.0, 0.0), (10.0, 0.0), (100.0, 100.0)], 30, 0.3)
    labelled = np.array([0, 30])  # the far third cluster has no label
    pred = pl.spread_labels(x, y, labelled)
    knn = pl.knn_labels(x, y, labelled, 1)
    assert np.array_equal(pred[60:], knn[60:])
    assert np.array_equal(pred[:60], y[:60])


def test_more_samples_than_the_graph_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y, labelled = _two_chains()
    monkeypatch.setattr(pl, "MAX_GRAPH_NODES", 100)  # 10-NN of ~50 per chain stay in it
    pred = pl.spread_labels(x, y, labelled)
    assert np.array_equal(pred[labelled], y[labelled])
    assert _accuracy(pred, y, labelled) == 1.0


def test_torch_input_and_high_dimensions_give_the_same_labels() -> None:
    rng = np.random.default_rng(0)
    x, y = _blobs([(0.0, 0.0), (8.0, 0.0)], 40, 0.5)
    # embedded in 100 dimensions by a random rotation: distances unchanged
    q, _ = np.linalg.qr(rng.normal(size=(100, 100)))
    wide = np.concatenate([x, np.zeros((len(x), 98), np.float32)], 1) @ q.T.astype(np.float32)
    labelled = np.array([1, 41])
    assert np.array_equal(pl.spread_labels(torch.tensor(wide), y, labelled), y)


def _dataset(x: np.ndarray, y: np.ndarray) -> LabeledDataset:
    return LabeledDataset(
        features=torch.tensor(x), labels=torch.tensor(y), classes=("a", "b"), name="t"
    )


def test_few_shot_spreads_by_default_and_keeps_knn_as_an_option() -> None:
    x, y, _ = _moons()
    ds = _dataset(x, y)
    spread = few_shot(ds, 2, seed=0)
    knn = few_shot(ds, 2, seed=0, method="knn")
    assert spread.method == "spread" and knn.method == "knn"
    assert np.array_equal(spread.labelled_indices, knn.labelled_indices)
    assert spread.pseudo_label_accuracy >= knn.pseudo_label_accuracy
    got = spread.dataset.labels.numpy()
    assert np.array_equal(got[spread.labelled_indices], y[spread.labelled_indices])
    with pytest.raises(DatasetError, match="pseudo-label method"):
        few_shot(ds, 2, method="magic")  # type: ignore[arg-type]


def test_few_shot_options_name_the_method() -> None:
    assert FewShotOptions().pseudo_labels == "spread"
    assert FewShotOptions(pseudo_labels="knn").pseudo_labels == "knn"
    with pytest.raises(DatasetError, match="pseudo_labels"):
        FewShotOptions(pseudo_labels="magic")  # type: ignore[arg-type]


def test_a_scenario_keeps_its_pseudo_label_method_through_a_link() -> None:
    from geoviz.app.links import scenario_from_token, scenario_to_token
    from geoviz.app.settings import preset_scenarios

    base = next(iter(preset_scenarios().values()))
    for method in pl.PSEUDO_LABEL_METHODS:
        scenario = base.with_(few_shot=FewShotOptions(enabled=True, k=5, pseudo_labels=method))
        back = scenario_from_token(scenario_to_token(scenario))
        assert back == scenario and back.few_shot.pseudo_labels == method
