"""Page 4 · McCann: slide from Q to one reference along ((1 - t) Id + t T_i)#Q.

The slider, ▶ Play, the samples, the label mass and (for 2-D/3-D data) the
scatter run in the browser (:mod:`geoviz.app.explorer_host`); the server hears ``t``
only when the slider is released or Play ends.
"""

from __future__ import annotations

import streamlit as st

from geoviz.app import widgets
from geoviz.app.explorer_host.component import mccann_explorer
from geoviz.app.session import SessionModel
from geoviz.viz.report import markdown_literal

T_KEY = "mc_t"
T_DEFAULT = 0.5


def main(model: SessionModel) -> None:
    st.title("4 · McCann interpolation")
    st.markdown(
        "Between Q and one reference $P_i$, McCann's interpolation "
        r"$P^M_t = \big((1-t)\,\mathrm{Id} + t\,T_i\big)_\sharp Q$ moves every target sample a "
        "fraction $t$ of the way along its OTDD map; its label is "
        r"$(1-t)\,[y_Q; 0] + t\,[0; y_i]$ in the label space [Q classes | $P_i$ classes] "
        r"(paper appendix). $t = 0$ is Q, $t = 1$ is $T_{i\sharp} Q$. Move $t$ or press "
        "▶ Play: the samples move in your browser."
    )
    result = widgets.geodesic_with_status(model)
    if result is None:
        return
    mccann_view(model, widgets.FitRef(model.scenario, result))


@widgets.page_fragment
def mccann_view(model: SessionModel, fit: widgets.FitRef) -> None:
    """Reference and the browser's t: a release reruns only this part of the page. The fit
    comes by reference: a fragment's arguments live as long as the session."""
    result = fit.get()
    names = list(result.reference_names)
    ref, t_linked = model.mccann_pick()  # from the link, or this session's last choice
    if ref is not None and "mc_ref" not in st.session_state:
        st.session_state["mc_ref"] = ref
    if t_linked is not None and T_KEY not in st.session_state:
        st.session_state[T_KEY] = t_linked
    i = st.selectbox(
        "Reference P_i",
        list(range(result.m)),
        format_func=lambda k: f"P{k + 1}: {names[k]}",
        key="mc_ref",
    )
    t = mccann_explorer(model, result, int(i), t_key=T_KEY, t_default=T_DEFAULT)
    model.set_mccann(ref=int(i), t=t)
    st.caption(f"Released t = {t:.2f} (P{int(i) + 1}: {markdown_literal(names[int(i)])}).")
    # a fragment rerun does not reach the page frame: keep the URL's t and reference current
    widgets.sync_url(model)


with widgets.app_page("4 · McCann") as model:
    main(model)
