"""The app's state without Streamlit: background jobs, result store, URL state, weights."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from geoviz.app.jobs import BackgroundJob, ResultStore
from geoviz.errors import GeovizError


def _gated(gate: threading.Event, calls: list[int], value: int = 42):
    """A job function that reports two stages and waits for ``gate`` in between."""

    def run(progress):
        calls.append(1)
        progress("maps (fashion_mnist)", 0.1)
        progress("maps (usps)", 0.4)
        assert gate.wait(10)
        progress("objective", 0.9)
        return value

    return run


def test_job_reports_progress_and_result():
    gate, calls = threading.Event(), []
    job = BackgroundJob(_gated(gate, calls))
    assert not job.wait(0.2) and not job.done()
    stage, fraction, log = job.snapshot()
    assert (stage, fraction) == ("maps (usps)", 0.4)
    assert [line for _, line in log] == ["maps"]  # one line per top-level stage
    gate.set()
    assert job.wait(10)
    stage, fraction, log = job.snapshot()
    assert job.result_ == 42 and job.error_ is None and fraction == 0.9
    assert [line for _, line in log] == ["maps", "objective"]
    assert log[0][0] <= log[1][0] <= job.elapsed


def test_parts_reporting_in_turn_log_each_stage_once():
    def run(progress):
        for k in range(50):  # two maps on two threads, reporting in turn
            progress(f"map {k % 2 + 1}/2 (sinkhorn)", k / 100)
        progress("objective", 0.9)

    job = BackgroundJob(run)
    assert job.wait(10)
    assert [line for _, line in job.snapshot()[2]] == ["map 1/2", "map 2/2", "objective"]


def test_job_keeps_the_error():
    def fail(progress):
        raise GeovizError("one class only")

    job = BackgroundJob(fail)
    assert job.wait(10)
    assert isinstance(job.error_, GeovizError) and job.result_ is None


def test_watchers_share_one_job_and_can_leave_and_return():
    store = ResultStore()
    gate, calls = threading.Event(), []
    first = store.start_job("k", _gated(gate, calls))
    # a second page (or session) asks for the same key while it runs
    second = store.start_job("k", _gated(gate, calls, value=0))
    assert second is first
    assert store.claim_job("k") is None  # still running: nothing to claim
    # the first watcher "left the page" (stopped polling); the job went on
    gate.set()
    assert store.job("k").wait(10)
    claimed = store.claim_job("k")
    assert claimed is first and store.get("k") == 42 and len(calls) == 1
    assert store.job("k") is None and store.claim_job("k") is None


def test_failed_job_is_not_stored_and_can_be_retried():
    store = ResultStore()
    job = store.start_job("k", lambda progress: 1 / 0)
    assert job.wait(10)
    claimed = store.claim_job("k")
    assert isinstance(claimed.error_, ZeroDivisionError) and "k" not in store
    retry = store.start_job("k", lambda progress: "ok")
    assert retry is not job and retry.wait(10)
    store.claim_job("k")
    assert store.get("k") == "ok"


@pytest.mark.parametrize("fraction,expected", [(-1.0, 0.0), (0.5, 0.5), (3.0, 1.0)])
def test_progress_fraction_is_clipped(fraction, expected):
    job = BackgroundJob(lambda progress: progress("stage", fraction))
    assert job.wait(10)
    assert job.snapshot()[1] == expected


# ---------------------------------------------------------------- form sync and sidebar counts


def _scenario(**changes):
    from geoviz.app.scenario import Scenario
    from geoviz.data.choice import DatasetChoice

    base = Scenario(
        target=DatasetChoice("mnist"),
        references=(DatasetChoice("usps"), DatasetChoice("kmnist")),
        n_target=2000,
        n_reference=2000,
    )
    return base.with_(**changes)


def test_sync_form_state_rewrites_only_when_the_scenario_changed():
    from geoviz.app.session import sync_form_state

    state: dict = {}
    a = _scenario()
    assert sync_form_state(state, a, {"w_n": 2000, "w_t": "mnist"}, marker="m")
    state["w_n"] = 55  # a user's unsubmitted edit survives reruns on the same scenario
    del state["w_t"]  # a key Streamlit dropped is filled again
    assert not sync_form_state(state, a, {"w_n": 2000, "w_t": "mnist"}, marker="m")
    assert state["w_n"] == 55 and state["w_t"] == "mnist"
    b = _scenario(n_target=300)  # changed outside the form: every widget shows it
    assert sync_form_state(state, b, {"w_n": 300, "w_t": "mnist"}, marker="m")
    assert state["w_n"] == 300 and state["m"] == b.key()
    del state["m"]  # forced re-sync (load preset of the same scenario)
    state["w_n"] = 7
    assert sync_form_state(state, b, {"w_n": 300, "w_t": "mnist"}, marker="m")
    assert state["w_n"] == 300


def test_describe_shows_actual_counts_and_caps():
    from geoviz.data.choice import DatasetChoice

    s = _scenario()
    assert s.describe(is_image=True)[0] == "**Q** (target): mnist, N = 2000"
    full = s.describe(is_image=True, n_samples=[2000, 2000, 2000])
    assert full == s.describe(is_image=True) and not any("capped" in x for x in full)
    lines = s.describe(is_image=True, n_samples=[1437, 2000, 300])
    assert lines[0] == "**Q** (target): mnist, N = 1437"
    assert lines[2].startswith("N = 2000 (P1), 300 (P2)")
    assert "N capped at 1437 for mnist (it has only 1437 samples)" in lines
    assert "N capped at 300 for kmnist (it has only 300 samples)" in lines
    assert not any("for usps" in x for x in lines)
    with pytest.raises(GeovizError, match="3 sample counts for 4"):
        _scenario(references=(*s.references, DatasetChoice("digits"))).describe(n_samples=[1, 2, 3])


# ---------------------------------------------------------------- URL state and weights


def test_scenario_token_round_trips_every_preset_and_an_upload():
    from geoviz.app.links import scenario_from_token, scenario_to_token
    from geoviz.app.settings import preset_scenarios
    from geoviz.data.choice import DatasetChoice, FewShotOptions, Upload

    scenarios = list(preset_scenarios().values())
    up = Upload("my data.npz", b"\x00\x01 not really npz")
    base = scenarios[0]
    scenarios.append(
        base.with_(
            target=DatasetChoice.from_upload(up),
            few_shot=FewShotOptions(enabled=True, k=5, n_neighbors=3),
            epsilon=0.0005,
            seed=7,
        )
    )
    for scenario in scenarios:
        token = scenario_to_token(scenario)
        assert token.replace("-", "").replace("_", "").isalnum()  # URL-safe as is
        back = scenario_from_token(token)
        assert back == scenario and back.key() == scenario.key()


@pytest.mark.parametrize("token", ["", "abc", "eNq1kD1uw", "%%%", "eyJ0YXJnZXQiOjF9"])
def test_corrupt_scenario_token_is_a_clear_error(token):
    from geoviz.app.links import scenario_from_token
    from geoviz.errors import DatasetError

    with pytest.raises(DatasetError, match="scenario"):
        scenario_from_token(token)


def test_restore_from_url_keeps_state_on_bad_params_and_reports_why():
    from geoviz.app.links import scenario_to_token
    from geoviz.app.session import SessionModel
    from geoviz.app.settings import default_scenario

    model = SessionModel({})
    model.set_weights([0.2, 0.3, 0.5])
    before = (model.scenario, model.picked_weights(3).tolist())
    problems = model.restore({"scenario": "garbage", "a": "0.5,0.6,0.1"})
    assert len(problems) == 2
    assert "scenario" in problems[0] and "weights" in problems[1]
    assert (model.scenario, model.picked_weights(3).tolist()) == before

    other = SessionModel({})
    scenario = default_scenario().with_(seed=3)
    assert other.restore({"scenario": scenario_to_token(scenario), "a": "0.1,0.2,0.7"}) == []
    assert other.scenario == scenario and other.picked_weights(3).tolist() == [0.1, 0.2, 0.7]
    # and back: the session's URL reproduces the view
    third = SessionModel({})
    assert third.restore(other.query_state()) == []
    assert third.scenario == other.scenario
    assert third.picked_weights(3).tolist() == other.picked_weights(3).tolist()


def test_scenario_key_is_computed_once_and_changes_with_the_scenario(monkeypatch):
    from geoviz.app import scenario as scenarios
    from geoviz.app.settings import default_scenario

    scenario = default_scenario()
    calls = []
    real = scenarios._hash
    monkeypatch.setattr(scenarios, "_hash", lambda obj: calls.append(1) or real(obj))
    keys = {scenario.key() for _ in range(10)}
    assert len(keys) == 1 and len(calls) == 1
    assert scenario.with_(seed=1).key() != scenario.key()
    assert scenario.with_(epsilon=0.01).data_key() == scenario.data_key()


@given(
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=6).filter(
        lambda v: sum(v) > 1e-3
    )
)
def test_entry_weights_are_on_the_simplex_rounded_and_survive_the_url(values):
    from geoviz.app.links import (
        entry_weights,
        weights_from_text,
        weights_to_text,
    )
    from geoviz.geodesic.weights import ENTRY_DECIMALS

    w = np.asarray(values) / np.sum(values)
    w = w / w.sum()
    rounded = entry_weights(w, len(w))
    assert np.all(rounded >= 0) and rounded.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.abs(rounded - w).max() <= 10.0**-ENTRY_DECIMALS + 1e-12
    scaled = rounded * 10**ENTRY_DECIMALS
    assert np.allclose(scaled, np.round(scaled), atol=1e-6)
    # validating the rounded vector again changes nothing (one rounding rule)
    assert entry_weights(rounded, len(w)).tolist() == rounded.tolist()
    assert weights_from_text(weights_to_text(rounded)).tolist() == pytest.approx(rounded.tolist())


@pytest.mark.parametrize(
    ("weights", "m"),
    [([0.5, 0.5], 3), ([0.5, float("nan"), 0.5], 3), ([0.7, 0.6, -0.3], 3), ([0.2, 0.2, 0.2], 3)],
)
def test_entry_weights_reject_bad_input(weights, m):
    from geoviz.app.links import entry_weights
    from geoviz.errors import WeightsError

    with pytest.raises(WeightsError):
        entry_weights(weights, m)


# ---------------------------------------------------------------- map method (barycentric / neural)


def test_map_method_is_in_the_key_and_the_url_token():
    from geoviz.app.links import scenario_from_token, scenario_to_token

    bary = _scenario()
    assert (bary.map_method, bary.neural_preset) == ("barycentric", "cpu")
    neural = bary.with_(map_method="neural", neural_preset="tiny")
    assert neural.key() != bary.key()
    # same datasets and OTDD options: the data and the pairwise OTDD are shared
    assert neural.data_key() == bary.data_key() and neural.otdd_key() == bary.otdd_key()
    # the budget only matters for neural maps
    assert bary.with_(neural_preset="paper").key() == bary.key()
    assert neural.with_(neural_preset="cpu").key() != neural.key()
    assert neural.with_method("barycentric") == bary.with_(neural_preset="tiny")
    assert neural.with_method("neural") is neural
    for scenario in (bary, neural, neural.with_(neural_preset="paper", epsilon=0.01)):
        back = scenario_from_token(scenario_to_token(scenario))
        assert back == scenario and back.key() == scenario.key()
        assert (back.map_method, back.neural_preset) == (
            scenario.map_method,
            scenario.neural_preset,
        )
    assert "OTDD maps: neural (tiny budget)" in neural.describe()
    assert "OTDD maps: barycentric" in bary.describe()


def test_old_token_without_the_map_method_decodes_to_the_defaults_and_the_old_key():
    import base64
    import json
    import zlib

    from geoviz.app import links
    from geoviz.app import scenario as scenarios

    scenario = _scenario(seed=4)
    old = scenario.to_dict()
    # a link made before the map method (and the feature space) existed
    del old["map_method"], old["neural_preset"], old["features"], old["encoder_preset"]
    del old["few_shot"]["pseudo_labels"]  # and before the few-shot pseudo-label method
    raw = json.dumps(old, sort_keys=True, separators=(",", ":"), default=list)
    token = base64.urlsafe_b64encode(zlib.compress(raw.encode(), 9)).decode().rstrip("=")
    back = links.scenario_from_token(token)
    # it keeps its meaning: pixel space, the default when it was made (issue 33)
    assert back == scenario.with_(features="pixels")
    assert (back.map_method, back.neural_preset) == ("barycentric", "cpu")
    # barycentric keys are those of before: cached placements and checkpoints still match
    assert back.key() == scenarios._hash(old)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        # the config's own sentences (issue 44: checked once, by the library)
        ({"map_method": "mlp"}, r"^GeodesicConfig\.method must be one of .*got 'mlp'"),
        ({"neural_preset": "huge"}, r"^unknown neural-map preset 'huge'"),
    ],
)
def test_bad_map_method_or_budget_is_rejected(changes, match):
    from geoviz.errors import DatasetError

    with pytest.raises(DatasetError, match=match):
        _scenario(**changes)


def test_neural_budget_from_the_environment():
    from geoviz.app.settings import AppSettings, default_scenario, preset_scenarios

    assert AppSettings.from_env({}).neural_preset == "cpu"
    settings = AppSettings.from_env({"GEOVIZ_NEURAL_PRESET": " Tiny "})
    assert settings.neural_preset == "tiny"
    assert default_scenario(settings).neural_preset == "tiny"
    assert {s.neural_preset for s in preset_scenarios(settings).values()} == {"tiny"}
    assert default_scenario(settings).map_method == "barycentric"
    with pytest.raises(GeovizError, match="GEOVIZ_NEURAL_PRESET"):
        AppSettings.from_env({"GEOVIZ_NEURAL_PRESET": "fast"})


def test_fit_workers_from_the_environment(monkeypatch):
    import os

    from geoviz.app.settings import AppSettings

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert AppSettings.from_env({}).fit_workers_used() == 3  # the cores this process may use
    assert AppSettings.from_env({"GEOVIZ_FIT_WORKERS": "1"}).fit_workers_used() == 1
    assert AppSettings.from_env({"GEOVIZ_FIT_WORKERS": " 4 "}).fit_workers_used() == 4
    with pytest.raises(GeovizError, match="GEOVIZ_FIT_WORKERS must be >= 0"):
        AppSettings.from_env({"GEOVIZ_FIT_WORKERS": "-2"})
    with pytest.raises(GeovizError, match="GEOVIZ_FIT_WORKERS must be an integer"):
        AppSettings.from_env({"GEOVIZ_FIT_WORKERS": "two"})


# ---------------------------------------------------------------- cache tiers


def test_deriving_values_never_evicts_a_fit():
    """Fill the derived tier far past its size: the fits (and a claimed job) stay."""
    store = ResultStore(max_fits=2, max_derived=4)
    store.get_or_compute(("data", "s"), lambda: "datasets", tier="fit")
    job = store.start_job(("geodesic", "s"), lambda progress: "maps")
    assert job.wait(10) and store.claim_job(("geodesic", "s")) is job
    for i in range(1000):  # a slider moved a thousand times
        store.get_or_compute(("interp", "s", i), lambda i=i: i, tier="derived")
    assert store.get(("data", "s")) == "datasets" and store.get(("geodesic", "s")) == "maps"
    assert len(store.derived) == 4 and len(store.fits) == 2 and len(store) == 6
    # the derived tier is an LRU of its own: only the latest values are kept
    assert ("interp", "s", 999) in store and ("interp", "s", 995) not in store
    # fits evict only fits
    store.get_or_compute(("data", "t"), lambda: "other datasets", tier="fit")
    assert ("data", "s") not in store and store.get(("interp", "s", 999)) == 999
    store.clear()
    assert len(store) == 0


def test_clearing_the_store_forgets_finished_jobs_but_not_running_ones():
    """A restart forgets results: a finished, unclaimed job must not hand its result to the
    next caller as if it were cached; a job still running goes on and is still shared."""
    import threading

    store = ResultStore()
    done = store.start_job("finished", lambda progress: "old result")
    assert done.wait(10)
    release = threading.Event()
    running = store.start_job("running", lambda progress: release.wait(10) and "late")
    store.clear()
    fresh = store.start_job("finished", lambda progress: "recomputed")
    assert fresh is not done and fresh.wait(10) and fresh.result_ == "recomputed"
    assert store.start_job("running", lambda progress: "duplicate") is running
    release.set()
    assert running.wait(10) and running.result_ == "late"


def test_a_cache_tier_is_named():
    store = ResultStore()
    with pytest.raises(ValueError, match="tier"):
        store.get_or_compute("k", lambda: 1, tier="cheap")  # type: ignore[arg-type]


def test_scenario_keys_keep_their_stored_values():
    """The embedding cache and the evidence checkpoint folders are named by these keys:
    the old formula (sha256 of ``json.dumps(sort_keys=True, default=str)``, 24 characters)."""
    import hashlib
    import json
    from pathlib import Path

    from geoviz.app import scenario as scenario_module

    def old(obj):
        text = json.dumps(obj, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    payload = {"n": 60, "refs": ("usps", "kmnist"), "where": Path("/data"), "eps": 1e-3}
    assert scenario_module._hash(payload) == old(payload)
    scenario = _scenario()
    assert scenario.key() == old(scenario._key_dict())


def test_a_detached_model_reads_the_same_scenario_and_does_not_follow_the_session():
    from geoviz.app.session import SessionModel
    from geoviz.app.settings import default_scenario

    state: dict = {}
    model = SessionModel(state)
    model.scenario = default_scenario().with_(n_target=120, n_reference=60)
    copy = model.detached()
    assert copy.state is not state and copy.scenario == model.scenario
    assert copy.settings is model.settings and copy.scenario.key() == model.scenario.key()
    model.scenario = default_scenario().with_(n_target=130, n_reference=60)
    assert copy.scenario.n_target == 120  # a job keeps what it was started with
