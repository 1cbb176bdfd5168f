"""Table 1 for one task: every method and seed (geoviz.transfer.table)."""

from __future__ import annotations

import numpy as np
import pytest

from geoviz.errors import GeovizError


@pytest.fixture(scope="module")
def tiny():
    from geoviz.data.preprocess import harmonize
    from geoviz.data.registry import load_dataset
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.ot.otdd_cost import OTDDConfig
    from geoviz.transfer.experiment import make_task

    raw = [
        load_dataset("mnist", n=60, seed=0),
        load_dataset("fashion_mnist", n=60, seed=0),
        load_dataset("usps", n=60, seed=0),
        load_dataset("mnist", split="test", n=40, seed=0),
    ]
    train, *refs, test = harmonize(raw, size=16)
    task = make_task(train, test, refs, 2, seed=0)
    geodesic = fit_geodesic(
        task.target_train, list(task.references), GeodesicConfig(otdd=OTDDConfig(epsilon=0.01))
    )
    return task, geodesic


def test_every_method_and_seed_summarised_from_its_runs(tiny):
    from geoviz.transfer.baselines import one_nn_accuracy
    from geoviz.transfer.table import METHODS, compare_methods

    task, geodesic = tiny
    comp = compare_methods(task, geodesic, seeds=[0, 1], preset="tiny", backend="sequential")
    assert [(r.method, r.seed) for r in comp.results] == [(m, s) for m in METHODS for s in (0, 1)]
    assert comp.weights == pytest.approx(tuple(geodesic.a_hat))
    for row in comp.summary():
        acc = 100 * np.array([r.accuracy for r in comp.results if r.method == row["method"]])
        assert row["mean"] == pytest.approx(acc.mean()) and row["std"] == pytest.approx(
            acc.std(ddof=1)
        )
        assert 0.0 <= row["mean"] <= 100.0 and row["n_seeds"] == 2
    # 1-NN has no randomness and matches the baseline computed directly
    direct = one_nn_accuracy(task.target_fewshot, task.target_test)
    assert comp.accuracies("1nn") == pytest.approx([direct, direct])
    assert list(comp.to_frame()["method"]) == list(METHODS)


def test_same_seed_same_numbers_and_weights_are_used(tiny):
    from geoviz.transfer.table import compare_methods

    task, geodesic = tiny
    first = compare_methods(task, geodesic, seeds=[3], preset="tiny", methods=["otdd"])
    again = compare_methods(task, geodesic, seeds=[3], preset="tiny", methods=["otdd"])
    assert first.accuracies("otdd").tolist() == again.accuracies("otdd").tolist()
    vertex = compare_methods(
        task, geodesic, seeds=[3], preset="tiny", methods=["otdd"], weights=np.array([1.0, 0.0])
    )
    assert vertex.weights == (1.0, 0.0)
    assert vertex.results[0].weights == pytest.approx((1.0, 0.0))


def test_bad_requests_are_clear_errors(tiny):
    from geoviz.transfer.table import compare_methods

    task, geodesic = tiny
    with pytest.raises(GeovizError, match="unknown transfer method"):
        compare_methods(task, geodesic, seeds=[0], preset="tiny", methods=["neural"])
    with pytest.raises(GeovizError, match="at least one seed"):
        compare_methods(task, geodesic, seeds=[], preset="tiny")
    with pytest.raises(GeovizError):
        compare_methods(task, geodesic, seeds=[0], preset="tiny", weights=np.array([0.5, 0.6]))


def test_without_geodesic_only_methods_that_need_no_maps(tiny):
    from geoviz.transfer.baselines import one_nn_accuracy
    from geoviz.transfer.table import compare_methods

    task, _ = tiny
    with pytest.raises(GeovizError, match="'otdd' needs the fitted geodesic"):
        compare_methods(
            task, None, seeds=[0], preset="tiny", methods=["otdd"], weights=np.array([0.5, 0.5])
        )
    with pytest.raises(GeovizError, match="'mixup' needs weights or a fitted geodesic"):
        compare_methods(task, None, seeds=[0], preset="tiny", methods=["1nn", "mixup"])
    comp = compare_methods(
        task, None, seeds=[0], preset="tiny", methods=["1nn"], backend="sequential"
    )
    assert comp.weights == ()
    direct = one_nn_accuracy(task.target_fewshot, task.target_test)
    assert comp.accuracies("1nn") == pytest.approx([direct])


def test_otdd_neural_column_pretrains_on_the_neural_geodesic(tiny):
    """The "OTDD neural map" column: P_a from neural maps at their own a_hat."""
    import dataclasses

    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.maps.neural_config import NEURAL_PRESETS
    from geoviz.transfer.experiment import run_method
    from geoviz.transfer.table import ALL_METHODS, METHOD_TITLES, compare_methods

    task, geodesic = tiny
    neural_cfg = dataclasses.replace(
        NEURAL_PRESETS["tiny"], iterations=10, eval_every=5, classifier_iterations=10
    )
    neural = fit_geodesic(
        task.target_train,
        list(task.references),
        dataclasses.replace(geodesic.config, method="neural", neural=neural_cfg),
    )
    comp = compare_methods(
        task,
        geodesic,
        seeds=[0],
        preset="tiny",
        methods=["otdd", "otdd_neural"],
        neural_geodesic=neural,
        backend="sequential",
    )
    by_method = {r.method: r for r in comp.results}
    assert by_method["otdd_neural"].weights == pytest.approx(tuple(neural.a_hat))
    assert by_method["otdd"].weights == pytest.approx(tuple(geodesic.a_hat))
    # the same run by hand gives the same accuracy (deterministic, and on the neural P_a)
    direct = run_method(task, "otdd_neural", geodesic=neural, preset="tiny", seed=0)
    assert direct.accuracy == by_method["otdd_neural"].accuracy
    assert "otdd_neural" in ALL_METHODS and "neural" in METHOD_TITLES["otdd_neural"]
    with pytest.raises(GeovizError, match="neural_geodesic"):
        compare_methods(task, geodesic, seeds=[0], preset="tiny", methods=["otdd_neural"])
    with pytest.raises(GeovizError, match="fitted with neural maps"):
        run_method(task, "otdd_neural", geodesic=geodesic, preset="tiny", seed=0)
    with pytest.raises(GeovizError, match="fitted with barycentric maps"):
        run_method(task, "otdd", geodesic=neural, preset="tiny", seed=0)
