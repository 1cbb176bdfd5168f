"""Fixtures shared by several test modules."""

from __future__ import annotations

import pytest


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
    from geoviz.app import services

    monkeypatch.setenv("GEOVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GEOVIZ_APP_N", "60")
    monkeypatch.setenv("GEOVIZ_APP_EMBED_N", "40")
    monkeypatch.setenv("GEOVIZ_EMBEDDING", "pca")
    services.store().clear()
    yield tmp_path
    services.store().clear()
