"""make_task and run_method on tiny bundled data (geoviz.transfer.experiment)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from geoviz.backend import DiskCache
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.data.registry import load_dataset
from geoviz.errors import DatasetError, GeovizError, WeightsError
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_geodesic
from geoviz.nn.training import PRESETS
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.transfer.experiment import (
    METHODS,
    MethodResult,
    TransferTask,
    make_task,
    run_method,
)

K = 2


@pytest.fixture(scope="module")
def data():
    target = load_dataset("mnist", split="train", n=60, seed=0)
    test = load_dataset("mnist", split="test", n=60, seed=0)
    ref1 = load_dataset("fashion_mnist", split="train", n=60, seed=0)
    ref2 = load_dataset("usps", split="train", n=60, seed=0)
    return harmonize([target, test, ref1, ref2], size=16)


@pytest.fixture(scope="module")
def task(data):
    target, test, ref1, ref2 = data
    return make_task(target, test, [ref1, ref2], K, seed=0)


@pytest.fixture(scope="module")
def geodesic(task, tmp_path_factory):
    cache = DiskCache(tmp_path_factory.mktemp("transfer_cache"))
    config = GeodesicConfig(otdd=OTDDConfig(epsilon=0.01))
    return fit_geodesic(task.target_train, task.references, config, cache=cache)


@pytest.fixture(scope="module")
def neural_geodesic(task, tmp_path_factory):
    import dataclasses

    from geoviz.maps.neural_config import NEURAL_PRESETS

    cache = DiskCache(tmp_path_factory.mktemp("transfer_neural_cache"))
    neural = dataclasses.replace(
        NEURAL_PRESETS["tiny"], iterations=10, eval_every=5, classifier_iterations=10
    )
    config = GeodesicConfig(otdd=OTDDConfig(epsilon=0.01), method="neural", neural=neural)
    return fit_geodesic(task.target_train, task.references, config, cache=cache)


# --------------------------------------------------------------------------- make_task


def test_make_task_keeps_k_true_labels_per_class(data, task):
    target = data[0]
    assert isinstance(task, TransferTask)
    assert task.k == K and task.seed == 0 and task.m == 2
    assert task.target_fewshot.n_samples == K * target.n_classes
    assert task.target_fewshot.class_counts().tolist() == [K] * target.n_classes
    # the few-shot samples are training samples with their TRUE labels
    train_x = target.features.numpy()
    for x, y in zip(task.target_fewshot.features.numpy(), task.target_fewshot.labels, strict=True):
        row = int(np.flatnonzero((train_x == x).all(axis=1))[0])
        assert int(target.labels[row]) == int(y)
    # the pool keeps every sample; the unlabelled ones are pseudo-labelled (some wrongly)
    assert task.target_train.n_samples == target.n_samples
    assert task.target_train.fingerprint != target.fingerprint
    assert task.target_test is data[1]
    assert task.summary()["n_fewshot"] == K * target.n_classes


def test_make_task_is_seeded(data):
    target, test, ref1, ref2 = data
    a = make_task(target, test, [ref1, ref2], K, seed=3)
    b = make_task(target, test, [ref1, ref2], K, seed=3)
    c = make_task(target, test, [ref1, ref2], K, seed=4)
    assert a.target_fewshot.fingerprint == b.target_fewshot.fingerprint
    assert a.target_fewshot.fingerprint != c.target_fewshot.fingerprint


def test_make_task_rejects_k_larger_than_the_smallest_class(data):
    target, test, ref1, ref2 = data
    smallest = int(target.class_counts().min())
    with pytest.raises(DatasetError, match=f"k={smallest + 1} .* smallest class"):
        make_task(target, test, [ref1, ref2], smallest + 1, seed=0)
    with pytest.raises(DatasetError, match="positive integer"):
        make_task(target, test, [ref1, ref2], 0, seed=0)


def test_task_rejects_mismatched_inputs(data, task):
    target, test, ref1, _ = data
    big = harmonize([ref1], size=20)[0]
    with pytest.raises(DatasetError, match="one feature space"):
        make_task(target, test, [ref1, big], K, seed=0)
    with pytest.raises(DatasetError, match="at least one reference"):
        make_task(target, test, [], K, seed=0)
    other = LabeledDataset(
        features=test.features, labels=test.labels, classes=[f"c{i}" for i in range(10)]
    )
    with pytest.raises(DatasetError, match="one class list"):
        make_task(target, other, [ref1], K, seed=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.k = 3  # type: ignore[misc]


# --------------------------------------------------------------------------- run_method


@pytest.mark.parametrize("method", METHODS)
def test_run_method_all_methods(task, geodesic, neural_geodesic, method):
    if method == "otdd_neural":
        geodesic = neural_geodesic
    result = run_method(task, method, geodesic=geodesic, weights=None, preset="tiny", seed=0)
    assert isinstance(result, MethodResult)
    assert result.method == method and result.seed == 0
    assert isinstance(result.accuracy, float) and 0.0 <= result.accuracy <= 1.0
    assert isinstance(result.seconds, float) and result.seconds >= 0.0
    if method in ("otdd", "otdd_neural", "mixup"):
        assert result.weights == pytest.approx(tuple(geodesic.a_hat), abs=1e-12)
        assert all(isinstance(w, float) for w in result.weights)
        assert result.n_pretrain == task.target_train.n_samples
    else:
        assert result.weights is None and result.n_pretrain == 0
    assert result.to_dict()["accuracy"] == result.accuracy


def test_run_method_is_deterministic(task, geodesic):
    preset = PRESETS["tiny"]
    one = run_method(task, "otdd", geodesic=geodesic, weights=[0.5, 0.5], preset=preset, seed=1)
    two = run_method(task, "otdd", geodesic=geodesic, weights=[0.5, 0.5], preset=preset, seed=1)
    assert one.accuracy == two.accuracy
    assert one.weights == (0.5, 0.5)


def test_mixup_with_explicit_weights_needs_no_geodesic(task):
    result = run_method(task, "mixup", weights=np.array([1.0, 0.0]), preset="tiny", seed=0)
    assert result.weights == (1.0, 0.0)
    assert 0.0 <= result.accuracy <= 1.0


def test_run_method_progress_is_monotone(task, geodesic):
    seen: list[tuple[str, float]] = []
    run_method(
        task,
        "otdd",
        geodesic=geodesic,
        preset="tiny",
        seed=0,
        progress=lambda stage, f: seen.append((stage, f)),
    )
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert seen[0][0] == "pretrain" and seen[-1][0] == "finetune"


# --------------------------------------------------------------------------- errors


def test_run_method_unknown_method_and_preset(task, geodesic):
    with pytest.raises(GeovizError, match=r"unknown transfer method .sgd.*otdd"):
        run_method(task, "sgd", geodesic=geodesic, preset="tiny", seed=0)  # type: ignore[arg-type]
    with pytest.raises(GeovizError, match="unknown transfer preset 'fast'"):
        run_method(task, "1nn", preset="fast", seed=0)


@pytest.mark.parametrize("weights", [[0.7, 0.7], [1.2, -0.2], [1.0, 0.0, 0.0], [np.nan, 1.0]])
@pytest.mark.parametrize("method", ["otdd", "mixup"])
def test_run_method_rejects_weights_off_the_simplex(task, geodesic, method, weights):
    with pytest.raises(WeightsError):
        run_method(task, method, geodesic=geodesic, weights=weights, preset="tiny", seed=0)


def test_run_method_needs_a_geodesic(task):
    with pytest.raises(GeovizError, match="needs the fitted geodesic"):
        run_method(task, "otdd", weights=[0.5, 0.5], preset="tiny", seed=0)
    with pytest.raises(GeovizError, match="needs weights or a fitted geodesic"):
        run_method(task, "mixup", preset="tiny", seed=0)


def test_run_method_rejects_a_geodesic_of_other_references(data, geodesic):
    target, test, ref1, ref2 = data
    three = make_task(target, test, [ref1, ref2, ref1], K, seed=0)
    with pytest.raises(GeovizError, match="fitted on 2 references but the task has 3"):
        run_method(three, "otdd", geodesic=geodesic, preset="tiny", seed=0)


def test_run_method_bad_seed(task):
    with pytest.raises(GeovizError, match="seed"):
        run_method(task, "1nn", preset="tiny", seed="0")  # type: ignore[arg-type]
