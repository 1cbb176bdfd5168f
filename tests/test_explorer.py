"""The explorer's payload (geoviz.explorer.payload): decoded as the browser decodes it,
it gives back GeodesicResult's arrays; sizes; the cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import embeddings as embedding_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.session import SessionModel
from geoviz.app.settings import default_scenario
from geoviz.explorer import payload as xp


@pytest.fixture
def fitted(fresh_server):
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.ot.otdd_cost import OTDDConfig

    model = SessionModel({})
    model.scenario = default_scenario().with_(n_target=120, n_reference=60)
    data = dataset_services.scenario_data(model)
    result = fit_geodesic(
        data.target, list(data.references), GeodesicConfig(otdd=OTDDConfig(epsilon=0.01))
    )
    return model, data, result


def mix_like_js(arrays: dict, header: dict, a: np.ndarray) -> np.ndarray:
    """``round(sum_i a_i images[i + 1])`` of the shown samples, as explorer.js mixes them."""
    im = arrays["images"][1:, : header["n_shown"]].astype(np.float64)
    return np.clip(np.floor(np.tensordot(a, im, axes=1) + 0.5), 0, 255).astype(np.uint8)


def test_encode_decode_round_trip():
    arrays = {
        "f8": np.arange(5, dtype=np.float64) / 3,
        "u8": np.arange(7, dtype=np.uint8).reshape(7),
        "f4": np.ones((2, 3, 2), np.float32) * 0.5,
    }
    data = xp.encode({"hello": "wörld"}, arrays)
    assert data[:4] == b"GVZX"
    header, back = xp.decode(data)
    assert header["hello"] == "wörld"
    for name, arr in arrays.items():
        np.testing.assert_array_equal(back[name], arr)
        assert header["arrays"][name]["offset"] % 8 == 0


def test_simplex_compositions_and_resolution():
    comps = xp.simplex_compositions(3, 4)
    assert comps.shape == (15, 3) and (comps.sum(1) == 4).all() and (comps >= 0).all()
    assert len({tuple(c) for c in comps}) == 15
    assert xp.simplex_compositions(2, 5).shape == (6, 2)
    for m in (2, 3, 4, 6):
        res = xp.grid_resolution(m)
        assert 1 <= len(xp.simplex_compositions(m, res)) <= xp.MAX_GRID_NODES


def test_geodesic_payload_gives_back_the_result(fitted):
    from geoviz.app.explorer_host.service import embedding_payload, geodesic_payload

    model, data, result = fitted
    payload = geodesic_payload(model, result)
    header, arrays = xp.decode(payload.data)
    m = result.m
    np.testing.assert_array_equal(arrays["w_to_target"], result.w_to_target)
    np.testing.assert_array_equal(arrays["w_between"], result.w_between)
    np.testing.assert_array_equal(arrays["a_hat"], result.a_hat)
    assert header["m"] == m and header["names"] == list(result.reference_names)
    shown = np.asarray(header["sample_index"][: header["n_shown"]])
    assert header["n_shown"] == 30
    # 3 samples of each of Q's 10 classes
    assert np.bincount(result.target.labels.numpy()[shown], minlength=10).tolist() == [3] * 10
    lo, hi = header["pixel_lo"], header["pixel_hi"]
    placed = np.asarray(header["sample_index"])
    np.testing.assert_array_equal(
        arrays["images"][0], xp.quantize(result.target.features.numpy()[placed], lo, hi)
    )
    for i in range(m):
        np.testing.assert_array_equal(
            arrays["images"][i + 1], xp.quantize(result.mapped_features[i].numpy()[placed], lo, hi)
        )
        soft = result.soft_labels[i].numpy()
        c = soft.shape[1]
        np.testing.assert_allclose(arrays["soft"][i, :, :c], soft[shown], rtol=1e-6)
        np.testing.assert_allclose(arrays["mass"][i, :c], soft.mean(0), rtol=1e-5)
    # the mix of the quantized images is P_a's display image to uint8 rounding
    rng = np.random.default_rng(0)
    for a in rng.dirichlet(np.ones(m), size=20):
        pa = result.interpolate(a)
        want = xp.quantize(pa.features.numpy()[shown], lo, hi).astype(int)
        got = mix_like_js(arrays, header, a).astype(int)
        assert np.abs(want - got).max() <= 1
    # the embedding view comes in its own payload (issue 26: the first view never waits for
    # UMAP); the browser adds its header fields and arrays to these
    assert header["view"] == "pending" and "place" not in arrays
    emb_payload, error = embedding_payload(model, result, wait_seconds=None)
    assert error is None and emb_payload is not None
    emb_header, emb_arrays = xp.decode(emb_payload.data)
    assert emb_header["mode"] == "embedding" and emb_header["view"] == "embedding"
    assert not set(emb_arrays) & set(arrays)  # nothing sent twice
    header, arrays = {**header, **emb_header}, {**arrays, **emb_arrays}
    # embedding placements at the grid nodes: P_a placed by the embedding
    grid, place = arrays["grid"], arrays["place"]
    res = header["grid_res"]
    assert (grid.sum(1) == res).all() and place.shape == (len(grid), len(placed), 2)
    emb = embedding_services.embedding(model, data)
    k = len(grid) // 2
    node = grid[k] / res
    pa = result.interpolate(node)
    np.testing.assert_allclose(place[k], emb.place(pa.features.numpy()[placed]), atol=1e-3)
    assert len(arrays["bg"]) == len(arrays["bg_set"]) > 0


def test_payload_is_cached_and_small(fitted):
    from geoviz.app.explorer_host.service import geodesic_payload, mccann_payload

    model, _, result = fitted
    first = geodesic_payload(model, result)
    assert geodesic_payload(model, result) is first  # a cache hit: the same object
    assert first.size <= 3_000_000
    mc = mccann_payload(model, result, 1)
    assert mccann_payload(model, result, 1) is mc
    header, arrays = xp.decode(mc.data)
    assert header["mode"] == "mccann" and header["ref"] == 1
    shown = np.asarray(header["sample_index"])
    lo, hi = header["pixel_lo"], header["pixel_hi"]
    t = 0.3
    ds = result.mccann(1, t)
    want = xp.quantize(ds.features.numpy()[shown], lo, hi).astype(int)
    im = arrays["images"].astype(np.float64)
    got = np.floor((1 - t) * im[0] + t * im[1] + 0.5).astype(int)
    assert np.abs(want - got).max() <= 1
    # issue 26, item 8: McCann has the embedding view for image data too
    assert header["view"] == "embedding" and header["grid_res"] == 10
    emb = embedding_services.embedding(model, dataset_services.scenario_data(model))
    grid, place = arrays["grid"], arrays["place"]
    assert grid.shape == (11, 2) and place.shape == (11, shown.size, 2)
    k_end = int(np.flatnonzero(grid[:, 1] == 10)[0])  # the node t = 1: T_1(x)
    mapped = result.mapped_features[1].numpy()[shown]
    np.testing.assert_allclose(place[k_end], emb.place(mapped), atol=1e-3)
    assert set(np.unique(arrays["bg_set"])) == {0, 2}  # Q and P_2 only


def test_low_dimensional_payload_moves_every_point(fresh_server):
    from geoviz.app.explorer_host.service import geodesic_payload
    from geoviz.app.settings import AppSettings, preset_scenarios
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic

    model = SessionModel({})
    model.scenario = preset_scenarios(AppSettings(n_default=100))["2-D Gaussian mixtures"]
    data = dataset_services.scenario_data(model)
    result = fit_geodesic(data.target, list(data.references), GeodesicConfig())
    header, arrays = xp.decode(geodesic_payload(model, result).data)
    assert header["view"] == "scatter" and "images" not in arrays
    # a vector preset names each reference by its role: the explorer's corners then read
    # "P1", not "P1 · P1" (roleLabel in drawing_kit.js, tests/js/simplex_views.test.mjs)
    assert header["names"] == ["P1", "P2", "P3"] and header["target_name"] == "Q"
    coords = arrays["coords"]
    assert coords.shape == (result.m + 1, result.target.n_samples, 2)
    a = np.array([0.2, 0.5, 0.3])
    pa = result.interpolate(a).features.numpy()
    np.testing.assert_allclose(np.tensordot(a, coords[1:], axes=1), pa, atol=1e-5)
    np.testing.assert_array_equal(arrays["labels"], result.target.labels.numpy())


# ---------------------------------------------------------------- the pages (AppTest)


def _app_test(page: str):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=600)
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_geodesic_page_stores_the_released_weights_once(fresh_server):
    at = _app_test("pages/3_geodesic.py")
    assert any(type(e).__name__ == "UnknownElement" for e in at.main)  # the component
    assert "a" not in at.query_params
    at.session_state["geodesic_explorer"] = json.dumps(
        {"weights": [0.5, 0.3, 0.2], "seq": 1, "id": "x"}
    )
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "0.5,0.3,0.2" in str(at.query_params["a"])
    assert any("Picked a" in m.value and "0.50" in m.value for m in at.markdown)
    # reset: the same (already handled) release does not come back
    at.button(key="reset_weights").click().run()
    assert "a" not in at.query_params
    # a new release is stored again
    at.session_state["geodesic_explorer"] = json.dumps(
        {"weights": [0.2, 0.2, 0.6], "seq": 2, "id": "x"}
    )
    at.run()
    assert "0.2,0.2,0.6" in str(at.query_params["a"])


def test_mccann_page_hears_t_on_release(fresh_server):
    at = _app_test("pages/4_mccann.py")
    assert any("Released t = 0.50" in c.value for c in at.caption)
    at.session_state["mccann_explorer_0"] = json.dumps({"t": 1.0, "seq": 1, "id": "x"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Released t = 1.00" in c.value for c in at.caption)


def test_bootstrap_payload_gives_back_the_replicates_and_is_cached(fitted):
    """Issue 23: the explorer's second, small payload decodes to the library's replicates."""
    from geoviz.app.explorer_host.service import bootstrap_payload

    model, _, result = fitted
    boot = result.bootstrap(40, seed=2)
    first = bootstrap_payload(model, boot)
    assert bootstrap_payload(model, boot) is first
    header, arrays = xp.decode(first.data)
    assert header["mode"] == "bootstrap" and header["boot"]["replicates"] == 40
    assert header["boot"]["method"] == "q-resample" and header["boot"]["flat"] is False
    np.testing.assert_array_equal(arrays["boot_w_to_target"], boot.w_to_target_replicates)
    np.testing.assert_array_equal(arrays["boot_w_between"], boot.w_between_replicates)
    np.testing.assert_allclose(arrays["boot_a_hat"], boot.a_hat_replicates, atol=1e-7)
    np.testing.assert_array_equal(arrays["boot_a_low"], boot.a_hat_interval().low)
    assert first.size < 200_000


def test_explorer_bootstrap_runs_in_the_background_once(fitted):
    """The page gets None while the job runs and the bootstrap once it is done; the second
    call reads the stored one (no second job)."""
    model, _, result = fitted
    boot, error = geodesic_services.explorer_bootstrap(model.scenario, result)
    assert error is None
    job = geodesic_services.bootstrap_job(model.scenario)
    if boot is None:
        assert job is not None
        job.wait(60)
        boot, error = geodesic_services.explorer_bootstrap(model.scenario, result)
    assert (
        error is None
        and boot is not None
        and boot.replicates == geodesic_services.EXPLORER_REPLICATES
    )
    again, _ = geodesic_services.explorer_bootstrap(model.scenario, result)
    assert again is boot and geodesic_services.bootstrap_job(model.scenario) is None


def test_a_failing_bootstrap_is_said_once_and_not_restarted(fitted, monkeypatch):
    from geoviz.errors import GeovizError

    model, _, result = fitted
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise GeovizError("no replicates today")

    monkeypatch.setattr(type(result), "bootstrap", broken)
    boot, error = geodesic_services.explorer_bootstrap(model.scenario, result)
    if error is None:
        geodesic_services.bootstrap_job(model.scenario).wait(30)
        boot, error = geodesic_services.explorer_bootstrap(model.scenario, result)
    assert boot is None and "no replicates today" in str(error)
    assert geodesic_services.explorer_bootstrap(model.scenario, result)[1] is error
    assert len(calls) == 1


def test_geodesic_page_is_usable_before_a_slow_bootstrap_arrives(fresh_server, monkeypatch):
    """A slow bootstrap goes on in the background: the page draws the explorer at once with a
    progress line below it, and the next run has the intervals (no forced rerun)."""
    import threading

    from geoviz.geodesic.result import GeodesicResult

    release = threading.Event()
    original = GeodesicResult.bootstrap

    def slow(self, *args, **kwargs):
        release.wait(30)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GeodesicResult, "bootstrap", slow)
    at = _app_test("pages/3_geodesic.py")
    assert any(type(e).__name__ == "UnknownElement" for e in at.main)  # the explorer
    assert any("in the background" in (p.proto.text or "") for p in at.get("progress"))
    release.set()
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if not any("in the background" in (p.proto.text or "") for p in at.get("progress")):
            break
        time.sleep(0.2)
    assert not any("in the background" in (p.proto.text or "") for p in at.get("progress"))


def test_mccann_page_keeps_t_and_the_reference_in_the_url(fresh_server):
    """Issue 26, item 8: a link names McCann's reference and t; a release updates both."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=600)
    at.query_params["ref"] = "1"
    at.query_params["t"] = "0.3"
    at.switch_page("pages/4_mccann.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="mc_ref").value == 1
    assert any("Released t = 0.30 (P2:" in c.value for c in at.caption)
    at.session_state["mccann_explorer_1"] = json.dumps({"t": 0.8, "seq": 1, "id": "x"})
    at.run()
    assert "0.8" in str(at.query_params["t"]) and "1" in str(at.query_params["ref"])
    at.selectbox(key="mc_ref").set_value(2).run()
    assert "2" in str(at.query_params["ref"])


@pytest.mark.parametrize(
    ("params", "message"),
    [({"t": "2"}, "McCann t was ignored"), ({"ref": "9"}, "McCann reference was ignored")],
)
def test_mccann_links_with_bad_values_are_one_sentence(fresh_server, params, message):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=600)
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page("pages/4_mccann.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(message in w.value for w in at.warning)


def test_embedding_payload_runs_in_the_background_and_equals_the_one_piece_build(fitted):
    """Split or whole, the browser gets the same arrays: the embedding payload added to the
    pending geodesic payload equals ``build_geodesic`` with the embedding."""
    from geoviz.app.explorer_host.service import embedding_payload, embedding_payload_job

    model, data, result = fitted
    first, error = embedding_payload(model, result, wait_seconds=0.0)
    job = embedding_payload_job(model)
    assert error is None and (first is not None or job is not None)
    if job is not None:
        job.wait()
    done, error = embedding_payload(model, result, wait_seconds=None)
    assert error is None and embedding_payload(model, result)[0] is done  # kept: no second job
    emb = embedding_services.embedding(model, data)

    def place(features):
        return embedding_services.place_points(model, emb, features, ("explorer-grid",))

    whole_header, whole = xp.decode(xp.build_geodesic(result, emb, place).data)
    base_header, base = xp.decode(xp.build_geodesic(result, embedding_pending=True).data)
    assert base_header["view"] == "pending"
    part_header, part = xp.decode(done.data)
    assert set(whole) == set(base) | set(part)
    for name, arr in {**base, **part}.items():
        np.testing.assert_array_equal(arr, whole[name])
    for field in ("view", "embedding_method", "axis_titles", "grid_res"):
        assert part_header[field] == whole_header[field]


def test_a_failing_embedding_is_reported_once_and_not_restarted(fitted, monkeypatch):
    from geoviz.app.explorer_host.service import embedding_payload, embedding_payload_job
    from geoviz.errors import GeovizError

    model, _, result = fitted
    calls = []

    def broken(*_args, **_kwargs):
        calls.append(1)
        raise GeovizError("the embedding could not be fitted")

    monkeypatch.setattr(embedding_services, "embedding", broken)
    payload, error = embedding_payload(model, result, wait_seconds=None)
    assert payload is None and "could not be fitted" in str(error)
    again, error_again = embedding_payload(model, result, wait_seconds=None)
    assert again is None and error_again is error and calls == [1]
    assert embedding_payload_job(model) is None
