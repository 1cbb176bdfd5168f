"""The explorer's payloads for a scenario, computed once and cached (no Streamlit).

:mod:`geoviz.app.explorer.component` sends them to the browser; the server's start-up
(:mod:`geoviz.app.serve`) builds the default scenario's ahead of the first visitor. Both
read the same entries of :func:`geoviz.app.services.store`, so a payload built by either is
never built twice.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from geoviz.app import services
from geoviz.app.explorer.payload import Payload, build_bootstrap, build_geodesic, build_mccann

if TYPE_CHECKING:
    from geoviz.app.session import SessionModel
    from geoviz.geodesic.pipeline import GeodesicResult
    from geoviz.geodesic.uncertainty import GeodesicBootstrap

LOG = logging.getLogger(__name__)

__all__ = ["bootstrap_payload", "geodesic_payload", "mccann_payload"]


def geodesic_payload(model: SessionModel, result: GeodesicResult) -> Payload:
    """The geodesic explorer's payload for the current scenario. Cached."""
    key = ("explorer", model.scenario.key(), model.settings.embed_per_dataset)

    def compute() -> Payload:
        start = time.perf_counter()
        emb = place = None
        dim = result.target.features.shape[1]
        if result.image_shape is not None or dim not in (2, 3):
            data = services.scenario_data(model)
            emb = services.embedding(model, data)

            def place(features: np.ndarray) -> np.ndarray:
                return services.place_points(model, emb, features, ("explorer-grid",))

        payload = build_geodesic(result, emb, place, mixup_seed=model.scenario.seed)
        LOG.info(
            "explorer payload: %.2f MB in %.2f s (%.2f s with the embedding)",
            payload.size / 1e6,
            payload.seconds,
            time.perf_counter() - start,
        )
        return payload

    # a fit-sized computation (the embedding's grid placement): kept with the fits
    return services.store().get_or_compute(key, compute, tier="fit")


def bootstrap_payload(model: SessionModel, bootstrap: GeodesicBootstrap) -> Payload:
    """The bootstrap's small payload for the current scenario. Cached."""
    key = ("explorer-bootstrap", model.scenario.key(), bootstrap.replicates, bootstrap.seed)
    return services.store().get_or_compute(key, lambda: build_bootstrap(bootstrap), tier="derived")


def mccann_payload(model: SessionModel, result: GeodesicResult, i: int) -> Payload:
    """McCann mode's payload for reference ``i`` (with the embedding view for image data).
    Cached."""
    key = ("explorer-mccann", model.scenario.key(), int(i), model.settings.embed_per_dataset)

    def compute() -> Payload:
        emb = place = None
        if result.image_shape is not None:
            data = services.scenario_data(model)
            emb = services.embedding(model, data)

            def place(features: np.ndarray) -> np.ndarray:
                return services.place_points(model, emb, features, ("mccann-grid", int(i)))

        return build_mccann(result, int(i), emb, place)

    return services.store().get_or_compute(key, compute, tier="fit")
