"""The explorer as a Streamlit component (static files in ``frontend/``, no build step).

:func:`geodesic_explorer` draws the weight simplex, ``P_a``'s samples, label mass
and embedding in the browser and returns the weights only when the pointer is
released; :func:`mccann_explorer` does the same for McCann's ``t``. The payloads
are built once per scenario (and map method) by :mod:`geoviz.app.explorer_host.service`.

The browser sends each release as the JSON *text* of its event (issue 41): Streamlit parses
a component's value before any page code runs, and a string is parsed flat, so a value
nested thousands deep cannot fail there; :func:`geoviz.app.browser.component_value` then
parses the text with bounded length and depth. The frame's guards (``frontend/streamlit.js``)
stop any other form on the page before Streamlit's listener sees it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st
import streamlit.components.v1 as components

from geoviz.app.browser import (
    BrowserValueError,
    ReleasedEvent,
    component_value,
    released_event,
    released_t,
    released_weights,
)
from geoviz.app.explorer_host.service import (
    bootstrap_payload,
    embedding_payload,
    geodesic_payload,
    has_embedding_view,
    mccann_payload,
)
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.services.errors import error_text

if TYPE_CHECKING:
    from geoviz.app.session import SessionModel
    from geoviz.geodesic.result import GeodesicResult
    from geoviz.geodesic.weights import SimplexWeights

FRONTEND = Path(__file__).resolve().parents[2] / "explorer" / "frontend"
_component = components.declare_component("geoviz_explorer", path=str(FRONTEND))
LOG = logging.getLogger(__name__)

__all__ = [
    "FIRST_WAIT_SECONDS",
    "POLL_WAIT_SECONDS",
    "ExplorerState",
    "geodesic_explorer",
    "mccann_explorer",
]


def _forget(key: str) -> None:
    """Drop the component's value from this run's state before the component is drawn.

    Streamlit deep-copies a widget's value when the widget is drawn: a refused value nested a
    few hundred deep (short of the JSON parser's limit) would fail there, on every rerun,
    outside the page's checks. A value the page has refused or already handled is not needed
    again, so it never reaches that copy (the browser's next release replaces it).
    """
    st.session_state[key] = None


def _new_event(value: object, key: str) -> ReleasedEvent | None:
    """The component's value when it is a release the page has not handled yet.

    Checked once here: the explorer sends the JSON text of its event, which
    :func:`geoviz.app.browser.component_value` parses with bounded length and depth (anything
    else is refused), then :func:`geoviz.app.browser.released_event` checks. A malformed
    value raises :class:`~geoviz.app.browser.BrowserValueError` once, and is then marked as
    handled so the same bad value is not reported on every rerun. A value that is not a new
    release is forgotten (:func:`_forget`).
    """
    seen = f"_{key}_seq"
    try:
        event = released_event(component_value(value))
    except BrowserValueError as err:
        _forget(key)
        marker = ("<refused>", str(err))  # short, and the same for the same bad value
        if st.session_state.get(seen) == marker:
            return None
        st.session_state[seen] = marker
        raise
    if event is None:
        return None
    if st.session_state.get(seen) == event.marker:
        _forget(key)
        return None
    st.session_state[seen] = event.marker
    return event


def _handled_seq(key: str) -> int | None:
    """The sequence number of the last event of ``key``'s explorer this session handled
    (``None``: none yet, or a refused value)."""
    marker = st.session_state.get(f"_{key}_seq")
    if isinstance(marker, tuple) and len(marker) == 2 and isinstance(marker[1], int):
        return marker[1]
    return None


def _refused(err: BrowserValueError) -> None:
    """Say why a sent value was ignored; the explorer is drawn below it all the same."""
    LOG.info("browser value refused: %s", err)
    st.warning(str(err))


#: how long a run of the page waits for the bootstrap and the embedding view (together)
#: before drawing the explorer without them (they come with the browser's next poll)
FIRST_WAIT_SECONDS = 0.3
#: how long a poll from the browser waits for them, together (the bootstrap first, then the
#: embedding in the time left)
POLL_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class ExplorerState:
    """What one run of :func:`geodesic_explorer` did and what is still to come.

    Attributes
    ----------
    released
        Weights released in the browser since the last run (validated and stored), or
        ``None``.
    pending
        Parts still computed in the background (``"intervals"``, ``"embedding"``): the
        browser polls for them and draws them when they arrive, without a click.
    bootstrap_error, embedding_error
        Why the intervals or the embedding view will not come (``None``: no error).
    """

    released: SimplexWeights | None
    pending: tuple[str, ...]
    bootstrap_error: BaseException | None
    embedding_error: BaseException | None


def geodesic_explorer(
    model: SessionModel, result: GeodesicResult, *, key: str = "geodesic_explorer"
) -> ExplorerState:
    """Draw the explorer. Weights released in the browser since the last run are validated
    and stored once with ``model.set_weights`` first (so URL, Export and the other pages
    follow). The explorer is drawn at once; the bootstrap (intervals, the region as good as
    â, the cloud) and, for image data, the embedding view are computed in the background and
    sent when ready: while they are pending the browser sends a poll (an event without
    weights) that reruns this fragment, which waits up to :data:`POLL_WAIT_SECONDS` for them.
    The explorer is the same component before and after, so a drag is never interrupted
    (the browser polls only between drags, and adds the embedding after a release)."""
    released = None
    polled = False
    try:
        event = _new_event(st.session_state.get(key), key)
        if event is not None and "weights" in event.fields:
            released = model.set_weights(released_weights(event.fields["weights"], result.m))
        polled = event is not None and "poll" in event.fields
    except BrowserValueError as err:  # the last good pick stays, and so does the explorer
        _forget(key)
        _refused(err)
    # one deadline for both parts: a first run waits FIRST_WAIT_SECONDS in all, not per part
    deadline = time.monotonic() + (POLL_WAIT_SECONDS if polled else FIRST_WAIT_SECONDS)
    payload = geodesic_payload(model, result)
    bootstrap, boot_error = geodesic_services.explorer_bootstrap(
        model.scenario, result, max(0.0, deadline - time.monotonic())
    )
    emb = emb_error = None
    if has_embedding_view(result):
        emb, emb_error = embedding_payload(model, result, max(0.0, deadline - time.monotonic()))
    pending = tuple(
        part
        for part, missing in (
            ("intervals", bootstrap is None and boot_error is None),
            ("embedding", has_embedding_view(result) and emb is None and emb_error is None),
        )
        if missing
    )
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
        emb=None if emb is None else emb.data,
        emb_id=None if emb is None else f"{model.scenario.key()}-embedding",
        emb_error=None if emb_error is None else error_text(emb_error),
        pending=list(pending),
        # the event this run handled: every poll gets a render back, even with nothing new
        handled=str(st.session_state.get(f"_{key}_seq")),
        # its number: a render from before the browser's last release (a poll's answer that
        # crossed it) must not put the pick back to the server's older one
        handled_seq=_handled_seq(key),
        key=key,
        default=None,
    )
    return ExplorerState(released, pending, boot_error, emb_error)


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
        _forget(ckey)
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
