"""Page 3 · Geodesic: W²(P_a, Q) over the weight simplex, pick a, look at P_a."""

from __future__ import annotations

import numpy as np
import streamlit as st

from geoviz import glossary
from geoviz.app import services, widgets
from geoviz.app.state import SessionModel
from geoviz.errors import GeovizError
from geoviz.geodesic.weights import WEIGHT_DECIMALS, display_weights, format_weights
from geoviz.viz.compare import side_by_side_scatter
from geoviz.viz.images import as_display_images, example_indices, image_grid, soft_label_captions
from geoviz.viz.plots import (
    PointSet,
    label_mass_bars,
    otdd_heatmap,
    point_set,
    sample_card,
    scatter_sets,
    selected_samples,
)
from geoviz.viz.ternary import OBJECTIVE_LABEL, geodesic_line, ternary_heatmap, weights_bar
from geoviz.viz.weights import sync_weights, weights_from_selection

CHART_KEY = "geodesic_chart"


def slider_key(i: int) -> str:
    return f"geodesic_w_{i}"


# ---------------------------------------------------------------- callbacks (run before the script)


def on_pick(model: SessionModel, m: int, grid: np.ndarray | None) -> None:
    """A click on the ternary heatmap / line: those weights become the picked ``a``."""
    w = weights_from_selection(st.session_state.get(CHART_KEY), m, grid)
    if w is not None:
        model.set_weights(w)


def on_slider(model: SessionModel, i: int, a_hat: np.ndarray) -> None:
    """Slider ``i`` moved: the others follow so the weights stay on the simplex."""
    current = model.current_weights(a_hat)
    model.set_weights(sync_weights(current, i, float(st.session_state[slider_key(i)])))


def on_reset(model: SessionModel) -> None:
    model.clear_weights()


# ---------------------------------------------------------------- sections


def two_q_matrix(result) -> None:
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
        st.plotly_chart(
            otdd_heatmap(
                mat, names, title="(2,Q) dataset distances", value_label=glossary.W_SYMBOL
            ),
            key="two_q_heatmap",
        )


def weight_picker(model: SessionModel, result, names: list[str], resolution: int) -> np.ndarray:
    m = result.m
    weights = model.current_weights(result.a_hat)
    left, right = st.columns([3, 2])
    with left:
        if m in (2, 3):
            if m == 3:
                grid, values = services.objective_grid(model, result, resolution)
                fig = ternary_heatmap(grid, values, names, a_hat=result.a_hat, picked=weights)
                hint = "Click a point of the triangle to pick its weights. Vertices are the references P_i."
            else:
                grid, t = None, np.linspace(0.0, 1.0, 4 * resolution + 1)
                values = result.objective(np.column_stack([1 - t, t]))
                fig = geodesic_line(t, values, names, a_hat=result.a_hat, picked=weights)
                hint = "Click a point of the curve to pick its weights."
            st.plotly_chart(
                fig,
                on_select=lambda: on_pick(model, m, grid),
                selection_mode="points",
                key=CHART_KEY,
            )
            st.caption(hint)
        else:
            st.info(
                f"m = {m} references: pick the weights with the sliders (they stay on the simplex)."
            )
            st.plotly_chart(weights_bar(weights, names, a_hat=result.a_hat), key="weights_bar_main")
    with right:
        st.markdown("**Weights a** (moving one slider rescales the others)")
        # one rounding rule for sliders, text and bar labels (display_weights)
        shown = display_weights(weights)
        for i, name in enumerate(names):
            st.session_state[slider_key(i)] = float(shown[i])
            st.slider(
                f"a{i + 1} · {name}",
                0.0,
                1.0,
                step=10.0**-WEIGHT_DECIMALS,
                format=f"%.{WEIGHT_DECIMALS}f",
                key=slider_key(i),
                on_change=on_slider,
                args=(model, i, result.a_hat),
            )
        st.button(
            f"Reset to {glossary.A_HAT}", on_click=on_reset, args=(model,), key="reset_weights"
        )
        value = float(result.objective(weights))
        gap = value - result.w2_hat
        st.metric(
            f"{OBJECTIVE_LABEL} at the picked a",
            f"{value:.4g}",
            # a_hat itself is shown rounded to 1e-4: no delta until the user picks other weights
            delta=f"{gap:+.3g} vs {glossary.A_HAT}"
            if model.picked_weights(m) is not None
            else None,
            delta_color="inverse",
        )
        st.markdown(
            f"**{glossary.A_HAT}** = {format_weights(result.a_hat, names)} · "
            f"{glossary.OBJECTIVE_AT_A_HAT} = {result.w2_hat:.4g}"
        )
        if m <= 3:
            st.plotly_chart(
                weights_bar(weights, names, a_hat=result.a_hat, height=280), key="weights_bar"
            )
    return weights


def samples_of_pa(model: SessionModel, result, pa) -> None:
    st.subheader("Samples of P_a")
    if pa.image_shape is not None:
        # the same target samples at every a (3 per class of Q): the grid changes only with a
        idx = example_indices(result.target.labels, min(30, pa.n_samples), seed=0)
        st.plotly_chart(
            image_grid(
                as_display_images(pa.features[idx], pa.image_shape),
                soft_label_captions(pa.soft_labels[idx], pa.class_names, two_lines=True),
                ncols=10,
                title="P_a = (Σ a_i T_i)#Q of 30 fixed target samples — caption: top soft label and its mass",
            ),
            key="pa_grid",
        )
    st.plotly_chart(
        label_mass_bars(
            pa.soft_labels, pa.class_names, title="Average soft label of P_a (block total = a_i)"
        ),
        key="pa_mass",
    )


def low_dim_views(model: SessionModel, result, pa, weights: np.ndarray, names: list[str]) -> None:
    st.subheader("The datasets themselves")
    q = result.target
    color_by = st.radio("Colour by", ["dataset", "label"], horizontal=True, key="geo_color")
    pa_set = point_set(pa, name="P_a")
    sets = [point_set(q, name="Q", prefix_labels=True)]
    sets += [
        point_set(r, name=n, prefix_labels=True)
        for r, n in zip(result.references, names, strict=True)
    ]
    st.plotly_chart(
        scatter_sets([*sets, pa_set], color_by=color_by, title="Q, every P_i and P_a"),
        key="geo_scatter",
    )
    st.subheader("OT maps vs naive mixup")
    naive = services.mixup(model, result, weights)
    refs = [
        point_set(r, name=f"{n} samples") for r, n in zip(result.references, names, strict=True)
    ]
    naive_set = point_set(naive, name="naive")
    fig = side_by_side_scatter(
        [
            ("Q", [point_set(q, name="Q")]),
            (
                "P_a with OTDD maps",
                [
                    *refs,
                    PointSet(
                        "P_a",
                        pa_set.points,
                        pa_set.labels,
                        pa_set.confidence,
                        indices=pa_set.indices,
                        hover=pa_set.hover,
                    ),
                ],
            ),
            ("naive mixup (random couplings)", [*refs, naive_set]),
        ],
        faded=[s.name for s in refs],
        title=f"Same weights a = {format_weights(weights)}, different couplings (paper Fig. 3b)",
    )
    st.plotly_chart(fig, key="geo_compare")
    st.caption(
        "With the OTDD maps every sample of Q moves to matching classes of each P_i, so P_a keeps "
        "Q's cluster structure; random couplings average unrelated samples and collapse towards the mean."
    )


def embedding_view(model: SessionModel, result, pa, weights: np.ndarray, names: list[str]) -> None:
    st.subheader("Embedding of Q, the references and P_a")
    data = services.scenario_data(model)
    with st.spinner("Fitting the embedding (once per scenario, then kept on disk)…"):
        emb = services.embedding(model, data)
    if emb.note:
        st.warning(emb.note)
    q_idx = emb.indices[emb.names[0]]
    pts = services.place_points(model, emb, pa.features[q_idx], ("pa", *weights.tolist()))
    sets = [
        point_set(
            ds,
            emb.points[nm],
            name="Q" if k == 0 else nm,
            prefix_labels=True,
            indices=emb.indices[nm],
        )
        for k, (ds, nm) in enumerate(zip(data.datasets, emb.names, strict=True))
    ]
    sets.append(point_set(pa, pts, name="P_a", indices=q_idx))
    by_name = {
        "Q": data.target,
        **dict(zip(emb.names[1:], data.references, strict=True)),
        "P_a": pa,
    }

    c1, c2, c3, c4 = st.columns([2, 3, 3, 1], vertical_alignment="bottom")
    color_by = c1.radio("Colour by", ["dataset", "label"], horizontal=True, key="emb_color")
    highlight_sets = c2.multiselect(
        "Highlight datasets", [s.name for s in sets], key="emb_sets", placeholder="all"
    )
    classes = sorted({label.split("/", 1)[-1] for s in sets for label in s.labels})
    highlight_classes = c3.multiselect(
        "Highlight classes",
        classes,
        key="emb_classes",
        placeholder="all",
        help="A class name matches it in every dataset (e.g. 3 in MNIST, USPS and P_a).",
    )
    hide = c4.checkbox("Hide others", key="emb_hide")
    chart = st.plotly_chart(
        scatter_sets(
            sets,
            color_by=color_by,
            title=f"{emb.method.upper()} of Q, P_i and P_a (fitted once; P_a placed by its neighbours)",
            axis_titles=emb.axis_titles,
            marker_size=5,
            highlight_sets=highlight_sets,
            highlight_classes=highlight_classes,
            hide_others=hide,
            emphasis="P_a",
        ),
        key="geo_embedding",
        on_select="rerun",
        selection_mode="points",
    )
    st.caption(
        "Hover a point for its dataset, class and (for P_a) top soft labels; click points "
        "(shift-click for several) to see their images. P_a is outlined and follows the weights."
    )
    picked = selected_samples(chart)[:6]
    if picked:
        cols = st.columns(min(len(picked), 3))
        for k, (name, index) in enumerate(picked):
            ds = by_name.get(name)
            if ds is None or not 0 <= index < ds.n_samples:
                continue
            image = (
                as_display_images(ds.features[index : index + 1], ds.image_shape)[0]
                if ds.image_shape is not None
                else None
            )
            soft = getattr(ds, "soft_labels", None)
            cols[k % len(cols)].plotly_chart(
                sample_card(
                    image,
                    f"{name} · sample #{index}",
                    None if soft is None else soft[index],
                    ds.class_names if soft is not None else [ds.classes[int(ds.labels[index])]],
                ),
                key=f"emb_card_{k}",
            )


@st.fragment
def explorer(model: SessionModel, result) -> None:
    """Weights, P_a and its views: a click or slider step reruns only this part of the page."""
    names = list(result.reference_names)
    weights = weight_picker(model, result, names, model.settings.grid_resolution)
    try:
        pa = services.interpolation(model, result, weights)
    except GeovizError as err:
        st.error(str(err))
        return
    samples_of_pa(model, result, pa)
    if pa.image_shape is None and pa.features.shape[1] in (2, 3):
        low_dim_views(model, result, pa, weights, names)
    else:
        embedding_view(model, result, pa, weights, names)
    # a fragment rerun does not reach the page frame: keep the URL's weights current here
    widgets.sync_url(model)


def main(model: SessionModel) -> None:
    st.title("3 · Generalized geodesic")
    st.markdown(
        "Every weight vector $a$ on the simplex gives a dataset "
        r"$P_a = \big(\sum_i a_i T_i\big)_\sharp Q$ on the generalized geodesic of the references "
        "with base Q (paper Sec. 3.3). The heatmap shows the objective "
        r"$\mathcal{W}^2(P_a, Q)$; its minimiser $\hat a$ (★) is the projection of Q "
        "onto the geodesic. Click the triangle or move the sliders to pick $a$."
    )
    result = widgets.geodesic_with_status(model)
    if result is None:
        return
    two_q_matrix(result)
    explorer(model, result)


with widgets.app_page("3 · Geodesic") as model:
    main(model)
