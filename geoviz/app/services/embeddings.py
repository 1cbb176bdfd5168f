"""The embedding (UMAP or PCA) of the scenario's datasets, fitted in the background."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import numpy as np

from geoviz.app.jobs import BackgroundJob
from geoviz.app.services.caches import Progress, disk_cache, lower_thread_priority, store
from geoviz.app.services.datasets import ScenarioData
from geoviz.app.session import SessionModel
from geoviz.backend import ArraySpec, cache_key
from geoviz.viz.embedding import Embedding, auto_method, fit_embedding, warm_up_umap

_WARM_UP: dict[str, threading.Thread | None] = {}


_WARM_UP_LOCK = threading.Lock()


def _warm_up_in_background() -> float | None:
    lower_thread_priority()
    return warm_up_umap()


def start_embedding_warm_up(model: SessionModel | None = None) -> threading.Thread | None:
    """Compile UMAP in a background thread (niced), once per server process, if needed.

    Called after a page ran, so that a Geodesic page opened later does not
    pay numba's compilation in its first UMAP fit. Skipped (returns ``None``)
    when ``GEOVIZ_EMBEDDING=pca``, and, with ``model``, while the scenario's
    embedding needs no fit: it is in memory, on disk (a restarted server reads
    it back without importing UMAP at all) or being fitted by
    :func:`start_embedding`. Returns the started thread.
    """
    if model is not None and _embedding_needs_no_fit(model):
        return None
    with _WARM_UP_LOCK:
        if "thread" not in _WARM_UP:
            thread = None
            if auto_method() != "pca":
                thread = threading.Thread(
                    target=_warm_up_in_background, name="geoviz-umap-warm-up", daemon=True
                )
                thread.start()
            _WARM_UP["thread"] = thread
        return _WARM_UP["thread"]


def _embedding_params(model: SessionModel) -> dict[str, Any]:
    return {
        "data": model.scenario.data_key(),
        "per_dataset": int(model.settings.embed_per_dataset),
        "seed": int(model.scenario.seed),
        "method": auto_method(),
    }


def _embedding_key(params: dict[str, Any]) -> tuple[Hashable, ...]:
    return ("embedding", *params.values())


def _usable_embedding(payload: dict[str, Any], n_datasets: int) -> Embedding:
    """The embedding a disk-cache entry holds, if it has one finite 2-D point set per dataset
    (else an error, and the cache recomputes it)."""
    emb = Embedding.from_payload(payload)
    points = list(emb.points.values())
    if len(points) != n_datasets or not all(p.ndim == 2 and np.isfinite(p).all() for p in points):
        raise ValueError("its points do not match the scenario's datasets")
    return emb


def embedding_on_disk(model: SessionModel) -> bool:
    """Whether the scenario's fitted embedding is in the disk cache (nothing is read)."""
    disk = disk_cache()
    if not disk.enabled:
        return False
    params = _embedding_params(model)
    return disk.path_for("app-embedding", cache_key("app-embedding", params)).is_file()


def _embedding_needs_no_fit(model: SessionModel) -> bool:
    key = _embedding_key(_embedding_params(model))
    return key in store() or store().job(key) is not None or embedding_on_disk(model)


def start_embedding(model: SessionModel, data: ScenarioData) -> BackgroundJob | None:
    """Start fitting the scenario's embedding in the background; ``None`` if it is ready.

    The embedding depends on the datasets only, not on the maps, so the app
    starts it together with the geodesic fit (:func:`start_geodesic`): UMAP's
    compilation and fit then overlap with the OTDD couplings (the explorer's
    payload needs both). An embedding on disk is read back (no UMAP import).
    """
    params = _embedding_params(model)
    key = _embedding_key(params)
    if key in store():
        return None

    def run(progress: Progress) -> Embedding:
        # niced: on 2 cores the maps' fit, which the first view waits for, comes first
        lower_thread_priority()
        progress("embedding", 0.0)
        payload = disk_cache().get_or_compute(
            "app-embedding",
            params,
            lambda: fit_embedding(
                list(data.datasets),
                max_per_dataset=params["per_dataset"],
                seed=params["seed"],
                method=params["method"],
            ).to_payload(),
            check=lambda p: _usable_embedding(p, len(data.datasets)),
        )
        return Embedding.from_payload(payload)

    return store().start_job(key, run)


def embedding(model: SessionModel, data: ScenarioData) -> Embedding:
    """UMAP (or PCA) of ``Q`` and every ``P_i``: fitted once per scenario, kept on disk.

    The disk cache key is the scenario's *data* key (epsilon does not move the
    datasets), the points per dataset, the seed and the method; a restarted
    server reads the embedding back instead of refitting it. Joins the
    background fit of :func:`start_embedding` when one runs.
    """
    key = _embedding_key(_embedding_params(model))
    ready: Embedding | None = store().get(key)
    if ready is not None:
        return ready
    job = start_embedding(model, data)
    if job is None:  # stored meanwhile
        stored: Embedding = store().get(key)
        return stored
    job.wait()
    store().claim_job(key)
    if job.error_ is not None:
        raise job.error_
    fitted: Embedding = job.result_
    return fitted


def place_points(
    model: SessionModel, emb: Embedding, features: Any, tag: tuple[Hashable, ...]
) -> np.ndarray:
    """``emb.place(features)`` cached in memory and on disk under ``tag`` (e.g. the weights of ``P_a``)."""
    params = {**_embedding_params(model), "scenario": model.scenario.key(), "tag": list(tag)}

    def compute() -> np.ndarray:
        payload = disk_cache().get_or_compute(
            "app-placement",
            params,
            lambda: {"points": emb.place(features)},
            expect={"points": ArraySpec((None, 2))},
        )
        return np.asarray(payload["points"], dtype=np.float64)

    return store().get_or_compute(("place", model.scenario.key(), *tag), compute, tier="derived")
