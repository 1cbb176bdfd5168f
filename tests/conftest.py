"""Fixtures shared by several test modules, and the fast tier.

The fast tier
-------------
``make test-fast`` (``pytest -m fast``) runs the tests a developer runs on every change: tiny
fits only, no browser, no training, no Ray, no subprocess runs of the CLI or the app. It
is at least 300 tests in at most 3 minutes on a 2-core machine; ``make test`` is still the
whole suite.

What is fast is declared here, by file, so a new test needs no marker of its own:

* :data:`FAST_FILES` — the test files whose tests are fast. Every test collected from one
  of them gets the ``fast`` marker (``pytest_collection_modifyitems`` below), so a test
  added to such a file is in the tier at once.
* :data:`SLOW_TESTS` — the exceptions inside those files (``"file::function"``, every
  parametrisation), any test marked ``slow`` or ``browser`` and any test that uses the
  ``ray_cluster`` fixture: not in the tier.

A new test file joins the tier by being added to :data:`FAST_FILES`; a test of a fast
file that grows slow is added to :data:`SLOW_TESTS` (the fast run's summary names every
fast test whose set-up or call took over :data:`FAST_TEST_SECONDS`).
``tests/test_fast_tier.py`` checks that every entry names a file and a function that
exist. With exactly ``-m fast`` the other files are not even imported
(``pytest_ignore_collect``), which saves their imports (Playwright, Ray, Streamlit's test
harness); any other marker expression (``-m "fast and not x"``) collects every file and
selects the same tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

#: test files (in ``tests/``) whose tests are in the fast tier, except :data:`SLOW_TESTS`
FAST_FILES: frozenset[str] = frozenset(
    {
        # the OT engine and the maps
        "test_sinkhorn.py",
        "test_geometry.py",
        "test_kernels.py",
        "test_ot_labels.py",
        "test_otdd.py",
        "test_sliced.py",
        "test_maps.py",
        "test_fitted_map.py",
        # the geodesic's mathematics
        "test_weights.py",
        "test_geodesic_distances.py",
        "test_geodesic_labels.py",
        "test_geodesic_uncertainty.py",
        "test_interpolate.py",
        "test_mixup.py",
        "test_special_targets.py",
        "test_spec.py",
        # data, files and the cache
        "test_dataset.py",
        "test_synthetic.py",
        "test_preprocess.py",
        "test_registry.py",
        "test_formats.py",
        "test_formats_archive.py",
        "test_formats_files.py",
        "test_export.py",
        "test_atomic.py",
        "test_backend.py",
        "test_cli_datasets.py",
        # the explorer's widget, the figures' names, the app's state (no page is run)
        "test_widget.py",
        "test_viz_names.py",
        "test_app_state.py",
        # the code's shape and words
        "test_layers.py",
        "test_one_face.py",
        "test_budget.py",
        "test_limits.py",
        "test_glossary.py",
        "test_vocabulary.py",
        # the public API's examples, and this declaration
        "test_doctests.py",
        "test_fast_tier.py",
    }
)

#: tests of :data:`FAST_FILES` kept out of the fast tier: ``"file::function"`` (every
#: parametrisation of the function) -> what makes it slow
SLOW_TESTS: dict[str, str] = {
    "test_otdd.py::test_progress_callback": "batched and streamed solves with progress",
    "test_otdd.py::test_memory_guard_raises_before_allocating": "a large problem's set-up",
    "test_otdd.py::test_debiased_divergence": "three solves at a tight tolerance",
    "test_otdd.py::test_default_maps_are_sharp_on_the_bundled_pair": "the bundled datasets",
    "test_otdd.py::test_epsilon_floor_runs_on_bundled_nist": "bundled images at epsilon 1e-4",
    "test_otdd.py::test_batched_small_batches_are_consistent": "batches, then the full problem",
    "test_sinkhorn.py::test_tiny_epsilon_never_nan_float32": "up to 3,000 iterations",
    "test_kernels.py::test_capped_solve_matches_the_dense_solve": "large capped solves",
    "test_kernels.py::test_rows_wider_than_the_cap_get_more_entries": "a large capped solve",
    "test_sliced.py::test_the_screen_ranks_like_the_full_otdd_on_shifted_copies": "full OTDDs",
    "test_maps.py::test_entropic_map_with_subsampled_fit": "several entropic fits",
    "test_maps.py::test_batched_map_with_large_batch_equals_full": "batched fits",
    "test_maps.py::test_chessboard_identity_map": "a fit at a small epsilon",
    "test_maps.py::test_barycentric_equals_normalised_coupling_products": "a dense coupling",
    "test_fitted_map.py::test_neural_diagnostics_have_no_plan_and_no_nan": "trains a neural map",
    "test_fitted_map.py::test_neural_map_round_trips_its_payload": "trains a neural map",
    "test_geodesic_uncertainty.py::test_q_resampling_intervals_cover_the_closed_form": (
        "hundreds of resampled fits"
    ),
    "test_spec.py::test_fit_spec_fits_in_the_users_space_and_few_shot_labels_there": "a fit",
    "test_spec.py::test_a_few_shot_target_s_space_is_chosen_once_on_its_labelled_points": (
        "measures the candidate spaces"
    ),
    "test_spec.py::test_load_spec_datasets_few_shot_and_distinct_names": "loads datasets",
    "test_dataset.py::test_fingerprint_is_stable_across_processes": "subprocesses",
    "test_backend.py::test_cache_key_is_stable_across_processes": "subprocesses",
    "test_backend.py::test_concurrent_cold_processes_agree_and_leave_no_temps": "subprocesses",
    "test_export.py::test_an_export_killed_mid_write_is_cleaned_up_by_the_next_one": (
        "a subprocess killed mid-write"
    ),
    "test_export.py::test_an_export_whose_files_are_not_regular_files_is_refused": (
        "waits on FIFOs"
    ),
    "test_export.py::test_no_safe_name_is_a_windows_device_name": "many generated names",
    "test_formats_files.py::test_datasets_that_are_not_regular_files_are_refused_quickly": (
        "waits on FIFOs"
    ),
    "test_widget.py::test_weights_start_at_a_hat_rounded_as_the_app_rounds": "a geodesic fit",
    "test_viz_names.py::test_hostile_names_are_text_in_the_fitted_map_figures": (
        "fits and draws image figures"
    ),
}

#: a fast test whose call takes longer than this (seconds) is named in the fast run's
#: summary, to be moved to :data:`SLOW_TESTS`
FAST_TEST_SECONDS = 5.0

_FAST_EXPRESSION = "fast"
_slow_fast_tests: list[tuple[str, float]] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fast: in the fast tier (make test-fast); set from FAST_FILES in tests/conftest.py",
    )


def _fast_run(config: pytest.Config) -> bool:
    return str(config.getoption("markexpr", "") or "").strip() == _FAST_EXPRESSION


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m fast``: the test files outside :data:`FAST_FILES` are not imported (none of
    their tests would be selected)."""
    if (
        _fast_run(config)
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and collection_path.name not in FAST_FILES
    ):
        return True
    return None


def fast_key(item: pytest.Item) -> str:
    """``"file::function"``, the form of :data:`SLOW_TESTS`."""
    function = getattr(item, "originalname", None) or item.name.split("[")[0]
    return f"{item.path.name}::{function}"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if (
            item.path.name in FAST_FILES
            and fast_key(item) not in SLOW_TESTS
            and item.get_closest_marker("slow") is None
            and item.get_closest_marker("browser") is None
            and "ray_cluster" not in getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.fast)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if (
        report.when in ("setup", "call")  # setup: a fixture that fits or trains
        and "fast" in report.keywords
        and report.duration > FAST_TEST_SECONDS
    ):
        _slow_fast_tests.append((f"{report.nodeid} ({report.when})", report.duration))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _slow_fast_tests:
        return
    terminalreporter.section("fast tier: slow tests")
    terminalreporter.write_line(
        f"these fast tests took over {FAST_TEST_SECONDS:g} s; if they do on an idle machine, "
        "add them to SLOW_TESTS in tests/conftest.py:"
    )
    for nodeid, seconds in sorted(_slow_fast_tests, key=lambda t: -t[1]):
        terminalreporter.write_line(f"  {seconds:6.1f} s  {nodeid}")


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and bool(getattr(ray, "is_initialized", lambda: False)())


@pytest.fixture(autouse=True)
def _no_stray_ray_cluster(request):
    """A test that starts Ray in this process without a ``ray_cluster`` fixture fails (and
    the cluster is shut down): an embedded cluster left running ends the whole test run
    when its GCS dies later ("Failed to connect to GCS within 60 seconds")."""
    before = _ray_running()
    yield
    if before or "ray_cluster" in request.fixturenames or not _ray_running():
        return
    sys.modules["ray"].shutdown()
    pytest.fail("this test started a Ray cluster inside the test process and left it running")


@pytest.fixture(autouse=True)
def _process_settings_restored():
    """Entry points run in-process here (``geoviz.cli.main``, the app's first page) set
    torch's process-wide settings and install the runtime settings once per process, as
    they should; put both back after each test so one test's entry point does not change
    what the next test computes with."""
    from geoviz import backend

    torch_before = backend.torch_settings()
    runtime_before = backend.configure(None)
    backend.configure(runtime_before)
    yield
    backend.configure(runtime_before)
    backend.configure_torch(
        threads=torch_before.threads, flush_denormal=torch_before.flush_denormal
    )


@pytest.fixture
def fresh_server(tmp_path, monkeypatch):
    """An empty disk cache and an empty in-memory store (as after a server restart), with the
    app's small test sizes."""
    from geoviz.app.services import caches as cache_services

    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEOVIZ_APP_N", "60")
    monkeypatch.setenv("GEOVIZ_APP_EMBED_N", "40")
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")
    cache_services.store().clear()
    yield tmp_path
    cache_services.store().clear()


@pytest.fixture
def identity_map_kind():
    """A third kind of map (neither barycentric nor neural), for tests that show nothing
    outside ``geoviz.maps`` needs to change for one: its estimator (``fit`` gives a
    ``FittedMap`` that maps Q to itself with uniform soft labels) whose diagnostics type
    adds ``mean_displacement`` (0.25) and has no plan (``effective_neighbours`` is None)."""
    import dataclasses

    import torch

    from geoviz.errors import GeovizError
    from geoviz.maps.base import FittedMap, MapDiagnostics

    @dataclasses.dataclass(frozen=True)
    class IdentityDiagnostics(MapDiagnostics):
        mean_displacement: float

    @dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
    class FittedIdentity(FittedMap[None]):
        kind = "entropic"  # any kind name: nothing outside geoviz.maps reads it
        supports_out_of_sample = True

        def transform(self, features, labels=None):
            return features, self.soft_labels_[: features.shape[0]]

        def diagnostics(self):
            return IdentityDiagnostics(1.0, 0.5, None, False, 0, mean_displacement=0.25)

        def to_payload(self):
            return {"x": self.mapped_features_}

        @classmethod
        def from_payload(cls, payload, target, reference, estimator):
            raise GeovizError("not stored")

    class Identity:
        def fit(self, target, reference, progress=None):
            uniform = torch.full((target.n_samples, reference.n_classes), 1 / reference.n_classes)
            return FittedIdentity(
                mapped_features_=target.features,
                soft_labels_=uniform,
                label_cost_=torch.ones(target.n_classes, reference.n_classes, dtype=torch.float64),
                reference_classes=reference.classes,
                reference_name=reference.name,
                target_classes=target.classes,
            )

    return Identity()
