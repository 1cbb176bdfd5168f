"""The explorer's payloads for a scenario, computed once and cached (no Streamlit).

:mod:`geoviz.app.explorer_host.component` sends them to the browser; the server's start-up
(:mod:`geoviz.app.serve`) builds the default scenario's ahead of the first visitor. Both
read the same entries of :func:`geoviz.app.services.caches.store`, so a payload built by
either is never built twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np

from geoviz.app.services import caches as cache_services
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import embeddings as embedding_services
from geoviz.app.services.caches import Progress
from geoviz.explorer.payload import (
    Payload,
    build_bootstrap,
    build_embedding,
    build_geodesic,
    build_mccann,
)

if TYPE_CHECKING:
    from geoviz.app.jobs import BackgroundJob
    from geoviz.app.session import SessionModel
    from geoviz.geodesic.result import GeodesicResult
    from geoviz.geodesic.uncertainty import GeodesicBootstrap

LOG = logging.getLogger(__name__)

__all__ = [
    "bootstrap_payload",
    "embedding_payload",
    "embedding_payload_job",
    "geodesic_payload",
    "has_embedding_view",
    "mccann_payload",
]


def has_embedding_view(result: GeodesicResult) -> bool:
    """Whether the explorer shows ``P_a`` in an embedding (images, or more than 3
    features); 2-D/3-D data are drawn as they are."""
    return result.image_shape is not None or result.target.features.shape[1] not in (2, 3)


def geodesic_payload(model: SessionModel, result: GeodesicResult) -> Payload:
    """The geodesic explorer's payload for the current scenario, without the embedding view
    (header ``view = "pending"`` where there is one: :func:`embedding_payload` brings it, so
    the simplex, the images and the label mass never wait for UMAP). Cached."""
    key = ("explorer", model.scenario.key())

    def compute() -> Payload:
        payload = build_geodesic(
            result,
            mixup_seed=model.scenario.seed,
            embedding_pending=has_embedding_view(result),
        )
        LOG.info("explorer payload: %.2f MB in %.2f s", payload.size / 1e6, payload.seconds)
        return payload

    return cache_services.store().get_or_compute(key, compute, tier="fit")


def _embedding_payload_key(model: SessionModel) -> tuple[Hashable, ...]:
    return ("explorer-embedding", model.scenario.key(), model.settings.embed_per_dataset)


def embedding_payload_job(model: SessionModel) -> BackgroundJob | None:
    """The running (or finished, unclaimed) job of :func:`embedding_payload`, if any."""
    return cache_services.store().job(_embedding_payload_key(model))


def embedding_payload(
    model: SessionModel, result: GeodesicResult, wait_seconds: float | None = 0.0
) -> tuple[Payload | None, BaseException | None]:
    """The explorer's embedding view for the current scenario (:func:`build_embedding`).

    ``(payload, None)`` when ready; ``(None, None)`` while its background job runs (started
    or joined here, and waited for up to ``wait_seconds``; ``None``: until done): the
    embedding of the scenario's datasets (:func:`geoviz.app.services.embeddings.embedding`,
    UMAP's import and fit, or the disk cache) and the placement of ``P_a`` at the grid
    nodes; ``(None, error)`` when it failed (remembered, so a failing fit is not restarted
    on every rerun).
    """
    key = _embedding_payload_key(model)
    ready = cache_services.store().get(key)
    if ready is not None:
        return ready, None

    # read here, in the page's thread: a job's thread cannot read the session's state
    data = dataset_services.scenario_data(model)
    job_model = model.detached()

    def run(progress: Progress) -> Payload:
        start = time.perf_counter()
        progress("embedding", 0.0)
        emb = embedding_services.embedding(job_model, data)
        progress("placing P_a on the grid", 0.7)

        def place(features: np.ndarray) -> np.ndarray:
            return embedding_services.place_points(job_model, emb, features, ("explorer-grid",))

        payload = build_embedding(result, emb, place)
        LOG.info(
            "explorer embedding: %.2f MB, ready %.2f s after it was asked for",
            payload.size / 1e6,
            time.perf_counter() - start,
        )
        return payload

    done, error = cache_services.store().job_result(key, run, wait_seconds)
    return done, error


def bootstrap_payload(model: SessionModel, bootstrap: GeodesicBootstrap) -> Payload:
    """The bootstrap's small payload for the current scenario. Cached."""
    key = ("explorer-bootstrap", model.scenario.key(), bootstrap.replicates, bootstrap.seed)
    return cache_services.store().get_or_compute(
        key, lambda: build_bootstrap(bootstrap), tier="derived"
    )


def mccann_payload(model: SessionModel, result: GeodesicResult, i: int) -> Payload:
    """McCann mode's payload for reference ``i`` (with the embedding view for image data).
    Cached."""
    key = ("explorer-mccann", model.scenario.key(), int(i), model.settings.embed_per_dataset)

    def compute() -> Payload:
        emb = place = None
        if result.image_shape is not None:
            data = dataset_services.scenario_data(model)
            emb = embedding_services.embedding(model, data)

            def place(features: np.ndarray) -> np.ndarray:
                return embedding_services.place_points(
                    model, emb, features, ("mccann-grid", int(i))
                )

        return build_mccann(result, int(i), emb, place)

    return cache_services.store().get_or_compute(key, compute, tier="fit")
