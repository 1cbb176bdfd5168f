"""Fixtures shared by several test modules."""

from __future__ import annotations

import pytest


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
