"""Page 4 · McCann: slide from Q to one reference along ((1 - t) Id + t T_i)#Q."""

from __future__ import annotations

import time

import numpy as np
import streamlit as st

from geoviz.app import services, widgets
from geoviz.app.state import SessionModel
from geoviz.viz.compare import side_by_side_scatter
from geoviz.viz.images import as_display_images, example_indices, image_grid, soft_label_captions
from geoviz.viz.plots import label_mass_bars, point_set

PLAY_STEPS = 11
T_KEY = "mc_t"
T_DEFAULT = 0.5
#: P^M_t written with HTML sub/superscripts, which plotly titles and legends render.
PM_T = "P<sup>M</sup><sub>t</sub>"


def draw(model: SessionModel, result, i: int, t: float, idx: np.ndarray, tag: str) -> None:
    """Everything that depends on ``t``: samples and the label mass per block."""
    ds = services.mccann(model, result, i, t)
    name = result.reference_names[i]
    if ds.image_shape is not None:
        st.plotly_chart(
            image_grid(
                as_display_images(ds.features[idx], ds.image_shape),
                soft_label_captions(ds.soft_labels[idx], ds.class_names, two_lines=True),
                ncols=10,
                title=f"{PM_T} at t = {t:.2f}: the same 30 target samples moving towards {name}",
            ),
            key=f"mc_grid_{tag}",
        )
    elif ds.features.shape[1] in (2, 3):
        q = result.target
        context = [
            point_set(q, name="Q samples"),
            point_set(result.references[i], name=f"{name} samples"),
        ]
        st.plotly_chart(
            side_by_side_scatter(
                [(f"{PM_T} at t = {t:.2f}", [*context, point_set(ds, name=PM_T)])],
                faded=[c.name for c in context],
                title=f"McCann interpolation Q → {name} (grey: Q and {name})",
                height=520,
            ),
            key=f"mc_scatter_{tag}",
        )
    st.plotly_chart(
        label_mass_bars(
            ds.soft_labels,
            ds.class_names,
            title=f"Average soft label at t = {t:.2f}: mass moves from Q's block to {name}'s",
        ),
        key=f"mc_mass_{tag}",
    )


def t_slider(slot, *, playing_t: float | None = None, step: int = 0) -> float:
    """The ``t`` slider in ``slot``.

    Normally the widget ``mc_t``, whose value lives only in session state (no
    ``value=`` argument, so it is never set twice). While ▶ Play runs, a
    disabled copy showing the frame's ``t`` replaces it, so slider and frame agree.
    """
    if playing_t is not None:
        return slot.slider(
            "t",
            0.0,
            1.0,
            value=float(playing_t),
            step=0.05,
            disabled=True,
            key=f"{T_KEY}_play{step}",
        )
    return slot.slider("t", 0.0, 1.0, step=0.05, key=T_KEY)


def main(model: SessionModel) -> None:
    st.title("4 · McCann interpolation")
    st.markdown(
        "Between Q and one reference $P_i$, McCann's interpolation "
        r"$P^M_t = \big((1-t)\,\mathrm{Id} + t\,T_i\big)_\sharp Q$ moves every target sample a "
        "fraction $t$ of the way along its OTDD map; its label is "
        r"$(1-t)\,[y_Q; 0] + t\,[0; y_i]$ in the label space [Q classes | $P_i$ classes] "
        r"(paper appendix). $t = 0$ is Q, $t = 1$ is $T_{i\sharp} Q$."
    )
    result = widgets.geodesic_with_status(model)
    if result is None:
        return
    mccann_view(model, result)


@st.fragment
def mccann_view(model: SessionModel, result) -> None:
    """Reference, t and ▶ Play: a slider step reruns only this part of the page."""
    names = list(result.reference_names)
    c1, c2, c3 = st.columns([2, 4, 1], vertical_alignment="bottom")
    i = c1.selectbox(
        "Reference P_i",
        list(range(result.m)),
        format_func=lambda k: f"P{k + 1}: {names[k]}",
        key="mc_ref",
    )
    st.session_state.setdefault(T_KEY, T_DEFAULT)
    play = c3.button("▶ Play", key="mc_play", help="Step t from 0 to 1")
    slot = c2.empty()
    idx = example_indices(result.target.labels, min(30, result.target.n_samples), seed=0)
    frame = st.empty()
    if play:
        for step, tt in enumerate(np.linspace(0.0, 1.0, PLAY_STEPS)):
            t_slider(slot, playing_t=float(tt), step=step)
            with frame.container():
                draw(model, result, int(i), float(tt), idx, tag=f"play{step}")
            time.sleep(0.35)
        # Play ends at t = 1: the real slider comes back there (it was not drawn yet this run)
        st.session_state[T_KEY] = 1.0
        t_slider(slot)
    else:
        t = t_slider(slot)
        with frame.container():
            draw(model, result, int(i), float(t), idx, tag="static")


with widgets.app_page("4 · McCann") as model:
    main(model)
