"""Fixtures shared by several test modules."""

from __future__ import annotations

import sys

import pytest


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
