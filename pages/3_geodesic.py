"""Page 3 · Geodesic: W²(P_a, Q) over the weight simplex, pick a, look at P_a."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from geoviz import glossary
from geoviz.app import widgets
from geoviz.app.explorer_host.component import geodesic_explorer
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.session import SessionModel
from geoviz.errors import GeovizError
from geoviz.geodesic.weights import SimplexWeights, format_weights
from geoviz.viz.compare import mixup_comparison
from geoviz.viz.plots import otdd_heatmap
from geoviz.viz.report import markdown_literal, two_q_markdown

if TYPE_CHECKING:
    from geoviz.data.dataset import SoftLabeledDataset
    from geoviz.geodesic import GeodesicResult

EXPLORER_KEY = "geodesic_explorer"


def on_reset(model: SessionModel) -> None:
    model.clear_weights()


# ---------------------------------------------------------------- sections


def two_q_matrix(result: GeodesicResult) -> None:
    names = ["Q", *result.reference_names]
    m = result.m
    mat = np.zeros((m + 1, m + 1))
    mat[0, 1:] = mat[1:, 0] = result.w_to_target
    mat[1:, 1:] = result.w_between
    with st.expander(f"The (2,Q) dataset distances {glossary.W_SYMBOL} (paper Def. 2)"):
        st.markdown(
            r"With $(x_i, y_i) = T_i(z)$ the image of a target sample $z$ under the OTDD map "
            r"$T_i$, the (2,Q) distance measures how far apart the maps send the *same* "
            "target samples:"
        )
        st.latex(
            r"\mathcal{W}^2_{2,Q}(P_i, P_j) = \int \big(\lVert x_i - x_j \rVert^2"
            r" + W_2^2(\alpha_{y_i}, \alpha_{y_j})\big)\, dQ(z)"
        )
        st.markdown("The objective over the weight simplex is (paper Sec. 3.3)")
        st.latex(
            r"\mathcal{W}^2(P_a, Q) = \sum_i a_i\, \mathcal{W}^2_{2,Q}(P_i, Q)"
            r" - \tfrac12 \sum_{i \neq j} a_i a_j\, \mathcal{W}^2_{2,Q}(P_i, P_j)"
        )
        # Markdown, not a table widget or a heatmap: their scripts (a data-frame renderer,
        # Plotly) load before the explorer below can draw, ~2 s for Plotly on 2 cores
        # (issue 26); the heatmap comes when asked for
        st.markdown(two_q_markdown(mat, names))
        if st.toggle("As a heatmap", key="two_q_as_heatmap"):
            st.plotly_chart(
                otdd_heatmap(
                    mat, names, title="(2,Q) dataset distances", value_label=glossary.W_SYMBOL
                ),
                key="two_q_heatmap",
            )


def picked_summary(
    model: SessionModel, result: GeodesicResult, weights: SimplexWeights, names: list[str]
) -> None:
    """What the server holds after a release (the URL, Export and other pages use it)."""
    c1, c2 = st.columns([4, 1], vertical_alignment="center")
    names = [markdown_literal(n) for n in names]  # a link's or an upload's names, as typed
    value = float(result.objective(weights))
    gap = value - result.w2_hat
    c1.markdown(
        f"**Picked a** = {weights.format(names)} · {glossary.OBJECTIVE} = {value:.6g}"
        + (
            f" ({gap:+.3g} vs {glossary.A_HAT})"
            if model.picked_weights(result.m) is not None
            else ""
        )
        + f" · {glossary.A_HAT} = {format_weights(result.a_hat, names)}"
    )
    c2.button(f"Reset to {glossary.A_HAT}", on_click=on_reset, args=(model,), key="reset_weights")


def mixup_view(
    model: SessionModel,
    result: GeodesicResult,
    pa: SoftLabeledDataset,
    weights: SimplexWeights,
    names: list[str],
) -> None:
    st.subheader("OT maps vs naive mixup")
    naive = geodesic_services.mixup(model.scenario, result, weights)
    fig = mixup_comparison(
        result.target,
        list(result.references),
        pa,
        naive,
        names,  # as typed: the figure escapes the names it draws
        f"Same weights a = {weights.format()}, different couplings (paper Fig. 3b)",
    )
    st.plotly_chart(fig, key="geo_compare")
    st.caption(
        "With the OTDD maps every sample of Q moves to matching classes of each P_i, so P_a keeps "
        "Q's cluster structure; random couplings average unrelated samples and collapse towards the "
        "mean. Colours: the class in Q of the target sample each point comes from, as in the "
        "explorer above."
    )


@widgets.page_fragment
def explorer(model: SessionModel, fit: widgets.FitRef) -> None:
    """The browser explorer; a release reruns only this part of the page, once. The fit
    comes by reference: a fragment's arguments live as long as the session."""
    result = fit.get()
    names = list(result.reference_names)
    try:
        state = geodesic_explorer(model, result, key=EXPLORER_KEY)
    except GeovizError as err:  # e.g. weights off the simplex: the last good pick is kept
        widgets.show_error(err)
    else:
        widgets.explorer_notes(model, state)
    weights = model.current_weights(result.a_hat)
    picked_summary(model, result, weights, names)
    if result.image_shape is None and result.target.features.shape[1] in (2, 3):
        try:
            pa = geodesic_services.interpolation(model.scenario, result, weights)
        except GeovizError as err:
            widgets.show_error(err)
            return
        mixup_view(model, result, pa, weights, names)
    # a fragment rerun does not reach the page frame: keep the URL's weights current here
    widgets.sync_url(model)


def main(model: SessionModel) -> None:
    st.title("3 · Generalized geodesic")
    data = dataset_services.scenario_data_if_ready(model.scenario)
    cost = geodesic_services.geodesic_cost_note(model.scenario, data)  # said before a cold fit
    if cost:
        st.caption(cost)
    result = widgets.geodesic_with_status(model)
    if result is None:
        return
    # the explorer first: at a projector's 1280x800 the simplex and the data that move with
    # it fit the first screen only when nothing else sits above them (issue 35); the
    # explanation and the (2,Q) matrix follow below it
    explorer(model, widgets.FitRef(model.scenario, result))
    st.markdown(
        "Every weight vector $a$ on the simplex gives a dataset "
        r"$P_a = \big(\sum_i a_i T_i\big)_\sharp Q$ on the generalized geodesic of the references "
        "with base Q (paper Sec. 3.3). The heatmap shows the objective "
        r"$\mathcal{W}^2(P_a, Q)$; its minimiser $\hat a$ (★) is the projection of Q "
        "onto the geodesic. Drag across the triangle (the segment for two references, the bars "
        "for more; or use the arrow keys): P_a's samples, the embedding and the label mass "
        "beside and below the weights follow in your browser; releasing the pointer picks $a$ "
        "for the other pages."
    )
    two_q_matrix(result)


with widgets.app_page("3 · Geodesic") as model:
    main(model)
