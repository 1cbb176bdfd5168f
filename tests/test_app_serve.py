"""The app's launcher (geoviz.app.serve): what it preloads, the default scenario it prefetches
(the same values, under the same keys, as a visitor's first Geodesic page) and the
``streamlit run`` command it hands over to."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from geoviz.app import serve
from geoviz.app.explorer_host.service import bootstrap_payload, embedding_payload, geodesic_payload
from geoviz.app.services import caches as cache_services
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.session import SessionModel
from geoviz.errors import GeovizError
from geoviz.geodesic.pipeline import fit_geodesic


def test_prefetch_fills_the_store_with_what_the_geodesic_page_reads(fresh_server):
    ready = serve.prefetch_default_scenario()
    assert list(ready) == ["data", "geodesic", "explorer payload", "bootstrap", "embedding view"]
    times = list(ready.values())
    assert times == sorted(times)

    model = SessionModel({})  # a visitor's session: the default scenario of the same settings
    result = geodesic_services.geodesic_if_ready(model.scenario)
    assert result is not None, "the visitor's page would have to fit the maps again"
    # independent: the library's own fit of the same datasets and configuration
    data = dataset_services.scenario_data(model)
    direct = fit_geodesic(data.target, list(data.references), model.scenario.spec.config)
    np.testing.assert_allclose(result.w_to_target, direct.w_to_target, rtol=1e-9)
    np.testing.assert_allclose(result.a_hat, direct.a_hat, atol=1e-7)

    # the payloads are cache hits for the visitor: computing them again would fail here
    before = cache_services.store().fits.misses_, cache_services.store().derived.misses_
    payload = geodesic_payload(model, result)
    boot, error = geodesic_services.explorer_bootstrap(model.scenario, result)
    assert error is None and boot is not None
    bootstrap_payload(model, boot)
    emb, emb_error = embedding_payload(model, result)  # no wait: it must be there already
    assert emb_error is None and emb is not None and emb.header["view"] == "embedding"
    assert (cache_services.store().fits.misses_, cache_services.store().derived.misses_) == before
    assert payload.header["m"] == result.m and payload.header["view"] == "pending"


def test_prefetch_reports_a_bad_scenario_as_the_page_would(fresh_server, monkeypatch):
    from geoviz.errors import DatasetError

    monkeypatch.setenv("GEOVIZ_APP_MAX_MB", "16")
    monkeypatch.setenv("GEOVIZ_APP_N", "100000")  # far over 16 MB of features
    with pytest.raises(DatasetError, match="GEOVIZ_APP_MAX_MB"):
        serve.prefetch_default_scenario()


@pytest.mark.parametrize(
    ("raw", "enabled"),
    [("", True), ("1", True), ("on", True), ("TRUE", True), ("0", False), ("off", False)],
)
def test_prefetch_switch(raw, enabled):
    assert serve.prefetch_enabled({"GEOVIZ_PREFETCH": raw}) is enabled


def test_prefetch_switch_refuses_other_values_in_one_sentence():
    with pytest.raises(GeovizError, match=r"GEOVIZ_PREFETCH must be 0 or 1 \(.*\), got 'maybe'"):
        serve.prefetch_enabled({"GEOVIZ_PREFETCH": "maybe"})


def test_streamlit_argv_runs_the_app_script_with_the_options_given():
    argv = serve.streamlit_argv(["--server.port", "8502"])
    assert argv[:2] == ["streamlit", "run"]
    assert argv[2] == str(serve.APP_SCRIPT) and serve.APP_SCRIPT.is_file()
    assert argv[-2:] == ["--server.port", "8502"]  # after the app's settings: they win
    assert all(flag.startswith("--") and "=" in flag for flag in argv[3:-2])


def test_preload_imports_the_modules_and_skips_a_missing_one():
    code = (
        "import sys\n"
        "from geoviz.app import serve\n"
        "got = serve.preload(['json', 'no_such_module_geoviz_test', 'qpsolvers'])\n"
        "print(sorted(got), 'qpsolvers' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert out.strip() == "['json', 'qpsolvers'] True"


@pytest.mark.parametrize(
    ("name", "raw", "sentence"),
    [
        ("GEOVIZ_FIT_WORKERS", "abc", "GEOVIZ_FIT_WORKERS must be an integer >= 0, got 'abc'"),
        ("GEOVIZ_APP_GRID", "1", "GEOVIZ_APP_GRID must be >= 2, got 1"),
        ("GEOVIZ_TRANSFER_BACKEND", "fast", "must be auto, ray or sequential, got 'fast'"),
        ("GEOVIZ_PREFETCH", "maybe", "GEOVIZ_PREFETCH must be 0 or 1"),
        ("GEOVIZ_DEVICE", "gpu", "GEOVIZ_DEVICE must be auto, cpu or cuda, got 'gpu'"),
        ("GEOVIZ_FIT_CACHE_MB", "abc", "GEOVIZ_FIT_CACHE_MB must be an integer >= 64, got 'abc'"),
        ("GEOVIZ_FIT_IDLE_MINUTES", "0", "GEOVIZ_FIT_IDLE_MINUTES must be >= 1, got 0"),
        # issue 41: these passed the start and failed later (every upload link, the first
        # Ray run of the Evidence page)
        ("GEOVIZ_UPLOAD_SECRET", "a" * 14, "GEOVIZ_UPLOAD_SECRET must be at least 16 bytes"),
        ("GEOVIZ_RAY_CONNECT_TIMEOUT", "abc", "GEOVIZ_RAY_CONNECT_TIMEOUT must be a number of"),
        ("GEOVIZ_RAY_CONNECT_TIMEOUT", "-5", "seconds in (0, 3600], got '-5'"),
        ("GEOVIZ_RAY_CONNECT_TIMEOUT", "inf", "seconds in (0, 3600], got 'inf'"),
    ],
)
def test_settings_problem_names_the_variable_and_its_values(name, raw, sentence):
    assert sentence in serve.settings_problem({name: raw})
    assert serve.settings_problem({}) is None


def test_good_settings_pass_the_start_up_check():
    good = {
        "GEOVIZ_UPLOAD_SECRET": "a" * 16,
        "GEOVIZ_RAY_CONNECT_TIMEOUT": "2.5",
        "GEOVIZ_FIT_CACHE_MB": "64",
        "GEOVIZ_FIT_IDLE_MINUTES": "1",
    }
    assert serve.settings_problem(good) is None


@pytest.mark.parametrize(
    ("name", "raw", "sentence"),
    [
        ("GEOVIZ_FIT_WORKERS", "abc", "GEOVIZ_FIT_WORKERS must be an integer >= 0, got 'abc'"),
        # issue 41: was also "...; using the default result budget" before the refusal
        ("GEOVIZ_FIT_CACHE_MB", "abc", "GEOVIZ_FIT_CACHE_MB must be an integer >= 64, got 'abc'"),
        (
            "GEOVIZ_UPLOAD_SECRET",
            "fourteen bytes",
            "GEOVIZ_UPLOAD_SECRET must be at least 16 bytes (it keys the links to uploads), got 14",
        ),
        (
            "GEOVIZ_RAY_CONNECT_TIMEOUT",
            "inf",
            "GEOVIZ_RAY_CONNECT_TIMEOUT must be a number of seconds in (0, 3600], got 'inf'",
        ),
    ],
)
def test_a_bad_setting_stops_the_server_before_it_starts(name, raw, sentence):
    """``GEOVIZ_FIT_WORKERS=abc`` used to start a server whose every page was an error box:
    now the launcher exits with status 2 and one sentence, before Streamlit runs, and says
    nothing else (no "using the default" line that the exit contradicts)."""
    import os

    env = {**os.environ, name: raw, "GEOVIZ_PREFETCH": "0"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "geoviz.app.serve",
            "--server.port",
            "8599",
            "--server.headless",
            "true",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"geoviz: environment variable {sentence}"]
    assert "Traceback" not in proc.stderr and "streamlit" not in proc.stdout.lower()
