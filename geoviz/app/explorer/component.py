"""The explorer as a Streamlit component (static files in ``frontend/``, no build step).

:func:`geodesic_explorer` draws the weight simplex, ``P_a``'s samples, label mass
and embedding in the browser and returns the weights only when the pointer is
released; :func:`mccann_explorer` does the same for McCann's ``t``. The payloads
are built once per scenario (and map method) by :mod:`geoviz.app.explorer.service`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st
import streamlit.components.v1 as components

from geoviz.app.browser import (
    BrowserValueError,
    ReleasedEvent,
    released_event,
    released_t,
    released_weights,
)
from geoviz.app.explorer.service import bootstrap_payload, geodesic_payload, mccann_payload

if TYPE_CHECKING:
    from geoviz.app.session import SessionModel
    from geoviz.geodesic.pipeline import GeodesicResult
    from geoviz.geodesic.uncertainty import GeodesicBootstrap
    from geoviz.geodesic.weights import SimplexWeights

FRONTEND = Path(__file__).resolve().parent / "frontend"
_component = components.declare_component("geoviz_explorer", path=str(FRONTEND))
LOG = logging.getLogger(__name__)

__all__ = ["geodesic_explorer", "mccann_explorer"]


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
