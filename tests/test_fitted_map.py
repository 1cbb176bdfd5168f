"""The one fitted-map type: FittedMap, its typed diagnostics, payload round trips, the result."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from synthetic_data import ring_blobs

from geoviz.backend import DiskCache
from geoviz.cli.geodesic_report import print_maps
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.geodesic import pipeline
from geoviz.geodesic.config import GeodesicConfig
from geoviz.geodesic.pipeline import fit_geodesic
from geoviz.geodesic.result import GeodesicResult
from geoviz.maps import (
    MAP_METHODS,
    BarycentricMap,
    DatasetMap,
    EntropicMap,
    FittedMap,
    NeuralDiagnostics,
    NeuralOTDDMap,
    PlanDiagnostics,
    get_neural_preset,
    map_estimator,
    map_method_label,
)
from geoviz.ot.otdd_cost import OTDDConfig

TINY = dataclasses.replace(
    get_neural_preset("tiny"), iterations=40, eval_every=20, classifier_iterations=30
)


@pytest.fixture
def cache(tmp_path) -> DiskCache:
    return DiskCache(tmp_path / "cache")


@pytest.fixture
def pair() -> tuple[LabeledDataset, LabeledDataset]:
    return ring_blobs(48, 0, 3, "Q"), ring_blobs(40, 1, 4, "P", shift=1.0)


def _same_tensors(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _same_tensors(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same_tensors(x, y)
    else:
        assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


# --------------------------------------------------------------------------- plan maps


def test_barycentric_diagnostics_are_the_plan_s_numbers(pair, cache):
    q, p = pair
    fitted = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    assert isinstance(fitted, FittedMap) and isinstance(fitted, DatasetMap)
    assert fitted.kind == "barycentric" and not fitted.supports_out_of_sample
    diag = fitted.diagnostics()
    assert isinstance(diag, PlanDiagnostics)
    res = fitted.otdd_
    assert diag.otdd == res.cost and diag.epsilon_abs == res.epsilon_abs
    assert diag.marginal_error == res.marginal_error and diag.iterations == res.n_iter
    # sharp before fast: the plan's neighbours are behind the scalar
    plan = fitted.check_plan_neighbours()
    assert plan.index.shape == plan.weight.shape == (q.n_samples, 8)
    assert diag.effective_neighbours == pytest.approx(
        float(plan.row_perplexity.double().median()), rel=1e-5
    )
    conf = float(fitted.soft_labels_.max(1).values.double().mean())
    assert diag.label_confidence == pytest.approx(conf, rel=1e-5)
    assert set(fitted.summary()) == {f.name for f in dataclasses.fields(PlanDiagnostics)}


@pytest.mark.parametrize("estimator_type", [BarycentricMap, EntropicMap])
def test_plan_maps_round_trip_their_payload(pair, cache, estimator_type):
    q, p = pair
    estimator = estimator_type(OTDDConfig(), cache=cache)
    fitted = estimator.fit(q, p)
    again = type(fitted).from_payload(fitted.to_payload(), q, p, estimator)
    _same_tensors(again.to_payload(), fitted.to_payload())
    assert again.diagnostics() == fitted.diagnostics()
    torch.testing.assert_close(again.mapped_features_, fitted.mapped_features_, rtol=0, atol=0)
    assert again.to_dataset().metadata == fitted.to_dataset().metadata


def test_entropic_map_after_a_round_trip_maps_new_points_identically(pair, cache):
    q, p = pair
    estimator = EntropicMap(OTDDConfig(), cache=cache)
    fitted = estimator.fit(q, p)
    again = type(fitted).from_payload(fitted.to_payload(), q, p, estimator)
    fresh = ring_blobs(17, 9, 3, "Q2")
    for a, b in zip(
        fitted.transform(fresh.features, fresh.labels),
        again.transform(fresh.features, fresh.labels),
        strict=True,
    ):
        assert torch.equal(a, b)
    # its images of the fitted points are the rows of the plan (training points)
    x, y = fitted.transform(q.features, q.labels)
    torch.testing.assert_close(x, fitted.mapped_features_, atol=1e-4, rtol=0)
    torch.testing.assert_close(y, fitted.soft_labels_, atol=1e-4, rtol=0)


def test_to_dataset_is_shared_and_names_the_map(pair, cache):
    q, p = pair
    bary = BarycentricMap(OTDDConfig(), cache=cache).fit(q, p)
    ds = bary.to_dataset()
    assert ds.name == "T(Q->P)" and ds.class_names == tuple(f"P/{c}" for c in p.classes)
    assert (
        ds.metadata["map"] == "barycentric" and ds.metadata["target_fingerprint"] == q.fingerprint
    )
    assert bary.to_dataset("mine").name == "mine"
    assert type(bary).to_dataset is FittedMap.to_dataset


# --------------------------------------------------------------------------- neural maps


@pytest.fixture(scope="module")
def neural_fit(tmp_path_factory):
    q, p = ring_blobs(60, 0, 2, "Q"), ring_blobs(60, 1, 2, "P", shift=1.5)
    estimator = NeuralOTDDMap(TINY, cache=DiskCache(tmp_path_factory.mktemp("neural")))
    return q, p, estimator, estimator.fit(q, p)


def test_neural_diagnostics_have_no_plan_and_no_nan(neural_fit):
    fitted = neural_fit[3]
    diag = fitted.diagnostics()
    assert isinstance(diag, NeuralDiagnostics) and fitted.kind == "neural"
    assert diag.effective_neighbours is None and fitted.plan_neighbours() is None
    assert "effective_neighbours" not in diag.as_dict()
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in diag.as_dict().values())
    assert diag.otdd == pytest.approx(diag.transport_cost + diag.label_term)
    assert diag.converged == fitted.stopped_early_ and diag.iterations == fitted.iterations_run_
    with pytest.raises(GeovizError, match="no plan neighbours"):
        fitted.check_plan_neighbours()


def test_neural_map_round_trips_its_payload(neural_fit):
    q, p, estimator, fitted = neural_fit
    again = type(fitted).from_payload(fitted.to_payload(), q, p, estimator)
    _same_tensors(again.to_payload(), fitted.to_payload())
    assert again.diagnostics() == fitted.diagnostics() and again.summary() == fitted.summary()
    x_new = q.features[:7] + 0.25
    for a, b in zip(
        fitted.transform(x_new, q.labels[:7]), again.transform(x_new, q.labels[:7]), strict=True
    ):
        assert torch.equal(a, b)
    assert again.to_dataset().name == "T_N(Q->P)"


# --------------------------------------------------------------------------- methods


def test_map_estimator_covers_every_method_and_refuses_others(cache):
    for method in MAP_METHODS:
        est = map_estimator(method, OTDDConfig(), TINY, cache)
        assert callable(est.fit) and "OTDD map" in map_method_label(method)
    with pytest.raises(GeovizError, match="map method"):
        map_estimator("mlp", OTDDConfig(), TINY, cache)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the result


def test_geodesic_result_is_maps_distances_and_a_hat(pair, cache):
    q, p = pair
    refs = [p, ring_blobs(40, 2, 2, "P2", shift=-1.0)]
    res = fit_geodesic(q, refs, cache=cache)
    assert [f.name for f in dataclasses.fields(GeodesicResult)][-1] == "space_choice"
    assert [f.name for f in dataclasses.fields(GeodesicResult)][:-1] == [
        "target",
        "references",
        "config",
        "maps",
        "distances",
        "a_hat",
        "label_space",
        "feature_space",
        "mapped_images",
    ]
    assert res.feature_space is None and res.mapped_images is None  # pixel space
    diags = res.diagnostics
    np.testing.assert_array_equal(res.otdd, [d.otdd for d in diags])
    np.testing.assert_array_equal(res.effective_neighbours, [d.effective_neighbours for d in diags])
    np.testing.assert_array_equal(res.epsilon_abs, [d.epsilon_abs for d in diags])
    assert res.converged == tuple(d.converged for d in diags)
    assert res.w_to_target is res.distances.w_to_target
    for i, fitted in enumerate(res.maps):
        assert res.mapped_features[i] is fitted.mapped_features_
        assert res.label_distances_to_target[i] is fitted.label_cost_
        assert res.map_summaries()[i].items() >= fitted.summary().items()


def test_a_new_map_kind_needs_no_change_in_the_geodesic(
    pair, cache, monkeypatch, capsys, identity_map_kind
):
    """A third kind of map: its own FittedMap and diagnostics, nothing else changes."""
    q, p = pair
    refs = [p, ring_blobs(40, 2, 2, "P2", shift=-1.0)]

    monkeypatch.setattr(pipeline, "map_estimator", lambda *args: identity_map_kind)
    res = fit_geodesic(q, refs, GeodesicConfig(), cache=cache)
    assert np.isnan(res.epsilon_abs).all() and res.label_confidence.tolist() == [0.5, 0.5]
    assert res.neighbour_index == () and not res.blurry.any()
    with pytest.raises(GeovizError, match="no plan neighbours"):
        res.neighbours(0)
    print_maps(res)
    out = capsys.readouterr().out
    assert "displacement" in out and "P2" in out
