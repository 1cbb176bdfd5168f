"""The explorer as a Streamlit component (static files in ``frontend/``, no build step).

:func:`geodesic_explorer` draws the weight simplex, ``P_a``'s samples, label mass
and embedding in the browser and returns the weights only when the pointer is
released; :func:`mccann_explorer` does the same for McCann's ``t``. The payloads
are built once per scenario (and map method) and kept in
:func:`geoviz.app.services.store`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import streamlit as st
import streamlit.components.v1 as components

from geoviz.app import services
from geoviz.app.browser import (
    BrowserValueError,
    ReleasedEvent,
    released_event,
    released_t,
    released_weights,
)
from geoviz.app.explorer.payload import Payload, build_bootstrap, build_geodesic, build_mccann

if TYPE_CHECKING:
    from geoviz.app.session import SessionModel
    from geoviz.geodesic.pipeline import GeodesicResult
    from geoviz.geodesic.uncertainty import GeodesicBootstrap
    from geoviz.geodesic.weights import SimplexWeights

FRONTEND = Path(__file__).resolve().parent / "frontend"
_component = components.declare_component("geoviz_explorer", path=str(FRONTEND))
LOG = logging.getLogger(__name__)

__all__ = [
    "bootstrap_payload",
    "geodesic_explorer",
    "geodesic_payload",
    "mccann_explorer",
    "mccann_payload",
]


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


def _new_event(value: Any, key: str) -> ReleasedEvent | None:
    """The component's value when it is a release the page has not handled yet.

    Checked once here (:func:`geoviz.app.browser.released_event`): a malformed value raises
    :class:`~geoviz.app.browser.BrowserValueError` once, and is then marked as handled so the
    same bad value is not reported on every rerun.
    """
    seen = f"_{key}_seq"
    try:
        event = released_event(value)
    except BrowserValueError as err:
        marker = ("<refused>", str(err))  # short, and the same for the same bad value
        if st.session_state.get(seen) == marker:
            return None
        st.session_state[seen] = marker
        raise
    if event is None or st.session_state.get(seen) == event.marker:
        return None
    st.session_state[seen] = event.marker
    return event


def _refused(err: BrowserValueError) -> None:
    """Say why a sent value was ignored; the explorer is drawn below it all the same."""
    LOG.info("browser value refused: %s", err)
    st.warning(str(err))


def geodesic_explorer(
    model: SessionModel,
    result: GeodesicResult,
    *,
    bootstrap: GeodesicBootstrap | None = None,
    key: str = "geodesic_explorer",
) -> SimplexWeights | None:
    """Draw the explorer. Weights released in the browser since the last run are validated
    and stored once with ``model.set_weights`` first (so URL, Export and the other pages
    follow) and returned; ``None`` when nothing new was released. ``bootstrap`` (once the
    background bootstrap is done) adds the intervals, the region as good as â and the cloud;
    the explorer is the same component before and after, so a drag is never interrupted."""
    released = None
    try:
        event = _new_event(st.session_state.get(key), key)
        if event is not None and "weights" in event.fields:
            released = model.set_weights(released_weights(event.fields["weights"], result.m))
    except BrowserValueError as err:  # the last good pick stays, and so does the explorer
        _refused(err)
    payload = geodesic_payload(model, result)
    picked = model.picked_weights(result.m)
    boot = None if bootstrap is None else bootstrap_payload(model, bootstrap)
    _component(
        payload=payload.data,
        payload_id=f"{model.scenario.key()}-geodesic",
        picked=None if picked is None else picked.tolist(),
        boot=None if boot is None else boot.data,
        boot_id=None
        if bootstrap is None
        else f"{model.scenario.key()}-boot-{bootstrap.replicates}",
        key=key,
        default=None,
    )
    return released


def mccann_explorer(
    model: SessionModel,
    result: GeodesicResult,
    i: int,
    *,
    key: str = "mccann_explorer",
    t_key: str = "mc_t",
    t_default: float = 0.5,
) -> float:
    """McCann mode for reference ``i``; returns ``t`` (``st.session_state[t_key]``), which
    follows the browser's slider and Play on release."""
    ckey = f"{key}_{int(i)}"
    try:
        event = _new_event(st.session_state.get(ckey), ckey)
        if event is not None and "t" in event.fields:
            st.session_state[t_key] = released_t(event.fields["t"])
    except BrowserValueError as err:  # the last good t stays, and so does the explorer
        _refused(err)
    t = float(st.session_state.setdefault(t_key, t_default))
    payload = mccann_payload(model, result, i)
    _component(
        payload=payload.data,
        payload_id=f"{model.scenario.key()}-mccann-{int(i)}",
        t=t,
        key=ckey,
        default=None,
    )
    return t
