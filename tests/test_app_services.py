"""The app's services without Streamlit: disk persistence, placements, hard-label shares."""

from __future__ import annotations

import numpy as np
import pytest

from geoviz.app.services import caches as cache_services
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import embeddings as embedding_services
from geoviz.app.services import export as export_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.services import maps as map_services
from geoviz.app.session import SessionModel
from geoviz.app.settings import default_scenario
from geoviz.geodesic.weights import SimplexWeights
from geoviz.viz.report import (
    NO_PLAN,
    hard_label_shares,
    label_agreement,
    map_table,
    nearest_reference_table,
)


def test_embedding_and_placement_come_back_from_disk_after_a_restart(fresh_server):
    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=60, n_reference=60)
    data = dataset_services.scenario_data(model)
    emb = embedding_services.embedding(model, data)
    q_idx = emb.indices[emb.names[0]]
    features = data.target.features[q_idx]
    placed = embedding_services.place_points(model, emb, features, ("pa", 0.2, 0.3, 0.5))

    cache_services.store().clear()  # the restart: memory gone, disk kept
    disk = cache_services.disk_cache()
    hits = disk.hits_
    emb2 = embedding_services.embedding(model, data)
    placed2 = embedding_services.place_points(model, emb2, features, ("pa", 0.2, 0.3, 0.5))
    assert disk.hits_ == hits + 2  # both read back, nothing refitted
    for name in emb.names:
        np.testing.assert_array_equal(emb2.points[name], emb.points[name])
        np.testing.assert_array_equal(emb2.indices[name], emb.indices[name])
    np.testing.assert_array_equal(placed2, placed)
    # PCA placement is exact: the first two principal components of the features
    np.testing.assert_allclose(placed, emb.transform(features), atol=1e-5)


def test_explorer_bootstrap_comes_back_from_disk_after_a_restart(fresh_server, monkeypatch):
    import dataclasses

    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic

    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=60, n_reference=60)
    data = dataset_services.scenario_data(model)
    result = fit_geodesic(data.target, list(data.references), GeodesicConfig())
    disk = cache_services.disk_cache()
    first = geodesic_services.cached_bootstrap(result, 30, disk, seed=3)
    direct = result.bootstrap(30, seed=3)
    for name, value in dataclasses.asdict(direct).items():
        got = getattr(first, name)
        if isinstance(value, np.ndarray):
            assert got.dtype == value.dtype
            np.testing.assert_array_equal(got, value)
        else:
            assert got == value

    def boom(*args, **kwargs):
        raise AssertionError("the bootstrap was computed again")

    monkeypatch.setattr(type(result), "bootstrap", boom)
    hits = disk.hits_
    again = geodesic_services.cached_bootstrap(result, 30, disk, seed=3)  # the restart: disk only
    assert disk.hits_ == hits + 1
    np.testing.assert_array_equal(again.a_hat_replicates, direct.a_hat_replicates)
    # other inputs are other entries: another seed, another replicate count
    with pytest.raises(AssertionError, match="computed again"):
        geodesic_services.cached_bootstrap(result, 30, disk, seed=4)
    with pytest.raises(AssertionError, match="computed again"):
        geodesic_services.cached_bootstrap(result, 31, disk, seed=3)


def test_hard_label_shares_follow_the_weights(fresh_server):
    from geoviz.export import dataset_hard_labels
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.ot.otdd_cost import OTDDConfig

    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=200, n_reference=60)
    data = dataset_services.scenario_data(model)
    result = fit_geodesic(
        data.target, list(data.references), GeodesicConfig(otdd=OTDDConfig(epsilon=0.01))
    )
    weights = np.array([0.5, 0.3, 0.2])
    pa = geodesic_services.interpolation(
        model.scenario, result, SimplexWeights.from_input(weights, 3)
    )
    table = hard_label_shares(result, pa, "block-sample", 0)
    n = pa.n_samples
    sigma = np.sqrt(weights * (1 - weights) / n)
    shares = table["hard-label share (block-sample)"].to_numpy()
    assert np.all(np.abs(shares - weights) <= 4 * sigma), (shares, weights)
    np.testing.assert_allclose(table["weight a_i"], weights)
    np.testing.assert_allclose(table["soft-label mass"], weights, atol=1e-5)
    # the table counts exactly the labels an export writes
    _, info = dataset_hard_labels(pa, "block-sample", 0)
    np.testing.assert_allclose(shares, [b["share"] for b in info["blocks"]])
    top = pa.soft_labels.numpy().argmax(1)
    for i, block in enumerate(result.block_slices):
        cols = np.arange(pa.soft_labels.shape[1])[block]
        assert table["hard-label share (argmax)"][i] == pytest.approx(np.isin(top, cols).mean())


# ---------------------------------------------------------------- barycentric vs neural maps


@pytest.fixture
def fast_neural(monkeypatch):
    """The "tiny" neural budget cut to a few steps: these tests check the app's plumbing."""
    import dataclasses

    from geoviz.maps import neural_config

    small = dataclasses.replace(
        neural_config.NEURAL_PRESETS["tiny"], iterations=20, eval_every=10, classifier_iterations=20
    )
    monkeypatch.setitem(neural_config.NEURAL_PRESETS, "tiny", small)
    return small


def _fit(model: SessionModel, data, scenario) -> tuple[object, set[str]]:
    """Fit ``scenario``'s geodesic as the app does (background job); the stages seen."""
    job = geodesic_services.start_geodesic(scenario, data)
    stages = set()
    while not job.wait(0.005):
        stages.add(job.snapshot()[0])
    assert job.error_ is None, job.error_
    geodesic_services.finish_geodesic(scenario)
    return job.result_, stages | {line for _, line in job.snapshot()[2]}


def test_neural_and_barycentric_maps_side_by_side(fresh_server, fast_neural):
    import torch

    from geoviz.app.settings import AppSettings, preset_scenarios
    from geoviz.errors import GeovizError

    settings = AppSettings(n_default=60, neural_preset="tiny")
    model = SessionModel({}, settings)
    model.scenario = preset_scenarios(settings)["2-D Gaussian mixtures"].with_(map_method="neural")
    config = model.scenario.spec.config
    assert config.method == "neural" and config.neural == fast_neural
    assert model.scenario.with_method("barycentric").spec.config.method == ("barycentric")
    assert map_services.map_pair(model.scenario) == (None, None)
    data = dataset_services.scenario_data(model)

    neural, stages = _fit(model, data, model.scenario)
    assert neural.method == "neural"
    assert any(s.startswith("neural OTDD map 1/3: Q -> P1") for s in stages), stages
    # the stage text says which part of the training runs
    assert any(s.endswith("(classifier)") or s.endswith("(adversarial)") for s in stages), stages
    assert map_services.map_pair(model.scenario)[1] is neural
    assert map_services.map_pair(model.scenario)[0] is None

    # page tables: no NaN anywhere, "n/a (generated, no plan)" for the plan statistics
    table = map_table(neural)
    assert "nan" not in table.to_string().lower()
    assert (table["effective neighbours"] == NO_PLAN).all()
    assert list(table["stopped early"]) == list(neural.converged)
    with pytest.raises(GeovizError, match="no plan neighbours"):
        map_services.plan_neighbours_figure(model.scenario, neural, 0, np.array([0, 1]), 3)

    # the closest real reference samples replace the plan neighbours
    idx = np.array([3, 0, 7])
    near = nearest_reference_table(neural, 1, idx, 4)
    assert list(near["target #"]) == [3] * 4 + [0] * 4 + [7] * 4
    assert (near.groupby("target #")["distance"].apply(lambda d: d.is_monotonic_increasing)).all()
    ref_idx, _ = neural.nearest_references(1, idx, k=4)
    assert list(near["reference #"]) == ref_idx.ravel().tolist()
    fig = map_services.nearest_reference_figure(model.scenario, neural, 1, idx, 4)
    assert fig.layout.title.text.startswith("T2(x) next to real data: the 4 closest")

    # fit the other method on the same data: "Fit the other map (background)"
    other = map_services.companion_scenario(model.scenario)
    assert other.map_method == "barycentric" and other.data_key() == model.scenario.data_key()
    bary, _ = _fit(model, data, other)
    pair = map_services.map_pair(model.scenario)
    assert pair[0] is bary and pair[1] is neural

    agree = label_agreement(bary, neural)
    expected = [
        float((b.argmax(1) == n.argmax(1)).float().mean())
        for b, n in zip(bary.soft_labels, neural.soft_labels, strict=True)
    ]
    np.testing.assert_allclose(agree, expected)
    tables = map_services.map_comparison_tables(model.scenario, bary, neural)
    assert len(tables) == 3
    for i, t in enumerate(tables):
        assert list(t.columns) == ["quantity", "barycentric", "neural"]
        assert "nan" not in t.to_string().lower()
        rows = dict(
            zip(t["quantity"], zip(t["barycentric"], t["neural"], strict=True), strict=True)
        )
        assert rows["effective neighbours"][1] == NO_PLAN
        assert float(rows["effective neighbours"][0]) == pytest.approx(
            bary.effective_neighbours[i], abs=0.05
        )
        assert rows["hard labels agree"] == (f"{agree[i]:.0%}",) * 2
        assert float(rows["label confidence"][1]) == pytest.approx(
            neural.label_confidence[i], abs=0.005
        )
        assert float(rows["nearest-reference ratio"][0]) > 0

    # side by side on the SAME target points: both images of every chosen x
    idx = map_services.comparison_indices(bary, 4, seed=1)
    figs = map_services.side_by_side_figures(model.scenario, bary, neural, idx)
    assert len(figs) == 3 and figs[0].layout.title.text == "P1"  # named by its role: once
    for i, f in enumerate(figs):
        traces = {t.name: t for t in f.data}
        assert {f"barycentric T{i + 1}#Q", f"neural T{i + 1}#Q", "chosen x ∈ Q"} <= set(traces)
        chosen = traces["chosen x ∈ Q"]
        np.testing.assert_allclose(chosen.x, bary.target.features[idx, 0].numpy(), rtol=1e-6)
        np.testing.assert_allclose(
            traces[f"neural T{i + 1}#Q"].x, neural.mapped_features[i][:, 0].numpy(), rtol=1e-6
        )
    assert map_services.side_by_side_figures(model.scenario, bary, neural, idx) is figs  # cached

    # switching the method back and forth never refits: both come from the store
    assert map_services.set_map_method(model, "barycentric")
    assert not map_services.set_map_method(model, "barycentric")
    assert geodesic_services.geodesic_if_ready(model.scenario) is bary
    assert geodesic_services.geodesic_job(model.scenario) is None
    assert map_services.set_map_method(model, "neural", "tiny")
    assert geodesic_services.geodesic_if_ready(model.scenario) is neural
    assert geodesic_services.geodesic_job(model.scenario) is None

    # the geodesic pages' services work unchanged on a neural result: P_a, McCann, export
    from geoviz.export import load_export

    a_hat = SimplexWeights.from_input(neural.a_hat, neural.m, decimals=None)
    pa = geodesic_services.interpolation(model.scenario, neural, a_hat)
    mixed = sum(a * x for a, x in zip(neural.a_hat, neural.mapped_features, strict=True))
    torch.testing.assert_close(pa.features, mixed.float(), atol=1e-5, rtol=0)
    mc = neural.mccann(0, 1.0)  # McCann at t = 1: the map's image of Q
    torch.testing.assert_close(mc.features, neural.mapped_features[0])
    payload, filename, _ = export_services.export_payload(pa, "npz")
    path = fresh_server / filename
    path.write_bytes(payload)
    assert load_export(path).n_samples == pa.n_samples


def test_no_umap_warm_up_when_the_embedding_needs_no_fit(fresh_server, monkeypatch):
    """A restarted server whose disk holds the scenario's embedding never compiles UMAP."""
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "umap")
    monkeypatch.setattr(embedding_services, "_WARM_UP", {})
    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=60, n_reference=60)
    assert not embedding_services.embedding_on_disk(model)
    started = []
    monkeypatch.setattr(embedding_services, "_warm_up_in_background", lambda: started.append(1))
    # on disk (as after a fit in an earlier server process): no warm-up thread
    from geoviz.backend import cache_key

    disk = cache_services.disk_cache()
    params = embedding_services._embedding_params(model)
    path = disk.path_for("app-embedding", cache_key("app-embedding", params))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    assert embedding_services.embedding_on_disk(model)
    assert embedding_services.start_embedding_warm_up(model) is None
    assert embedding_services._WARM_UP == {}  # a later page with another scenario may still warm up
    path.unlink()
    thread = embedding_services.start_embedding_warm_up(model)
    assert thread is not None
    thread.join(10)
    assert started == [1]
    assert embedding_services.start_embedding_warm_up(model) is thread  # once per process


def test_lower_thread_priority_only_touches_the_calling_thread():
    import os
    import threading

    if not hasattr(os, "getpriority"):
        pytest.skip("no thread priorities here")
    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = {}

    def worker() -> None:
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        seen["lowered"] = cache_services.lower_thread_priority(5)
        seen["delta"] = os.getpriority(os.PRIO_PROCESS, tid) - before

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["lowered"] and seen["delta"] == min(5, 19 - main_before)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before


def test_weights_moved_many_times_keep_the_fit_in_memory(fresh_server):
    """The app's own store: P_a at far more weights than the derived tier holds never
    evicts the scenario's datasets or geodesic (the fits tier)."""
    model = SessionModel({})
    scenario = model.scenario
    calls = []

    class Fitted:  # stands for a GeodesicResult: P_a is all the services ask of it here
        def interpolate(self, weights, n=None, seed=0):
            calls.append(np.asarray(weights))
            return tuple(weights)

    fit = Fitted()
    cache_services.store().put(("geodesic", scenario.key()), fit, tier="fit")
    cache_services.store().put(("data", scenario.data_key()), "datasets", tier="fit")
    for i in range(3 * cache_services.MAX_DERIVED):
        a = SimplexWeights.from_input([i / 1000, 0.5 - i / 1000, 0.5], 3)
        assert geodesic_services.interpolation(scenario, fit, a) == a.values
    assert len(calls) == 3 * cache_services.MAX_DERIVED  # every one computed once
    assert geodesic_services.geodesic_if_ready(scenario) is fit
    assert dataset_services.scenario_data_if_ready(scenario) == "datasets"
    assert len(cache_services.store().derived) == cache_services.MAX_DERIVED


def test_torch_threads_are_set_once_per_process(monkeypatch):
    import torch

    from geoviz import backend
    from geoviz.backend import settings

    monkeypatch.setattr(cache_services, "_TORCH_CONFIGURED", [])
    # the first call installs the runtime settings and flush-denormal for the process:
    # put them back afterwards (torch has no getter for flush-denormal, backend records it)
    flush_before = backend.torch_settings().flush_denormal
    monkeypatch.setattr(settings, "_configured", settings._configured)
    monkeypatch.setattr(backend, "_flush_denormal", flush_before)
    before = torch.get_num_threads()
    seen = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.append(n))
    assert cache_services.configure_torch(1) is True and seen == [1]
    assert cache_services.configure_torch(3) is False and seen == [1]  # later pages change nothing
    monkeypatch.setattr(cache_services, "_TORCH_CONFIGURED", [])
    assert cache_services.configure_torch(0) is True and seen == [1]  # 0: torch's default kept
    assert torch.get_num_threads() == before
    assert settings._configured == settings.RuntimeSettings.from_env()  # installed once
    torch.set_flush_denormal(flush_before)


def test_an_app_fit_teaches_the_cost_model_its_spaces_iterations(fresh_server):
    """Issue 45 item 1: the app's fits, like the CLI's, keep their Sinkhorn iterations per
    space in the calibration file, so the next estimate in that space starts from them."""
    from geoviz.app.settings import AppSettings, preset_scenarios
    from geoviz.backend.cost_model import load_cost_model

    settings = AppSettings(n_default=60)
    model = SessionModel({}, settings)
    model.scenario = preset_scenarios(settings)["2-D Gaussian mixtures"]
    data = dataset_services.scenario_data(model)
    result, _ = _fit(model, data, model.scenario)
    space = result.features_name
    measured = [d.iterations for d in result.diagnostics]
    fresh = load_cost_model(fresh_server / "cache", measure=lambda _: 50.0)
    assert space in fresh.iterations
    prior = load_cost_model(fresh_server / "unused", measure=lambda _: 50.0).iterations_of(space)
    # learned from the fit: moved from the prior towards what the maps measured
    assert (
        min(prior, np.mean(measured)) <= fresh.iterations_of(space) <= max(prior, np.mean(measured))
    )
