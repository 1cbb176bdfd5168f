"""Page 2 · OTDD maps: how each map T_i moves the target's samples and labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from geoviz import glossary
from geoviz.app import services, widgets
from geoviz.app.state import SessionModel, epsilon_choices
from geoviz.errors import GeovizError
from geoviz.ot.otdd import BLUR_NEIGHBOURS, DEFAULT_EPSILON
from geoviz.viz.compare import side_by_side_scatter
from geoviz.viz.images import (
    as_display_images,
    example_indices,
    mapped_samples_grid,
    sample_captions,
    soft_label_captions,
)
from geoviz.viz.plots import (
    PointSet,
    label_transition,
    label_transition_heatmap,
    point_set,
    soft_label_bars,
)

EPS_KEY = "maps_eps"


def _on_epsilon_change() -> None:
    services.set_epsilon(SessionModel(st.session_state), st.session_state[EPS_KEY])


def epsilon_control(model: SessionModel) -> None:
    """The relative ε of the scenario: changing it refits the maps in the background."""
    # the scenario is the source of truth (the Datasets page may have changed it)
    st.session_state[EPS_KEY] = float(model.scenario.epsilon)
    st.select_slider(
        "Entropic ε (× mean ground cost) — sharp ← → blurry",
        options=epsilon_choices(model.scenario.epsilon),
        format_func=lambda e: f"{e:g}",
        key=EPS_KEY,
        on_change=_on_epsilon_change,
        help=(
            "ε_abs = ε × mean(‖x − x′‖² + W₂²) over all pairs of Q and P_i. Small ε: each T_i(x) "
            "averages a few reference samples (sharp images, confident labels), Sinkhorn needs "
            "more iterations. Large ε: each T_i(x) averages many (blurred mean images, mixed "
            f"labels). Default {DEFAULT_EPSILON:g}."
        ),
    )
    st.caption(
        f"ε = {model.scenario.epsilon:g} × mean cost (default {DEFAULT_EPSILON:g}). Changing it "
        "refits every map; values computed before are read back from the cache."
    )


def sharpness(result) -> None:
    """Effective neighbours and label confidence of every map, with a warning when blurry."""
    cols = st.columns(result.m)
    for i, (col, info) in enumerate(zip(cols, services.map_sharpness(result), strict=True)):
        with col:
            st.markdown(f"**T{i + 1}: Q → {info['reference']}**")
            st.metric(
                "effective neighbours",
                f"{info['effective_neighbours']:.1f}",
                help=(
                    "How many reference samples a mapped point T(x) averages: the median over x "
                    "of exp(entropy of x's normalised plan row). 1 = a one-to-one map; "
                    f"N_P = {result.references[i].n_samples} = every x maps to the mean image."
                ),
            )
            st.metric(
                "label confidence",
                f"{info['label_confidence']:.2f}",
                help=(
                    "Mean over x of the largest entry of T(x)'s soft label: 1 = each mapped point "
                    f"gets one class of {info['reference']}; "
                    f"1/{result.references[i].n_classes} = uniform labels."
                ),
            )
            if info["blurry"]:
                st.warning(
                    f"**Blurry map.** Each T{i + 1}(x) averages a median of "
                    f"{info['effective_neighbours']:.0f} reference samples (more than "
                    f"{BLUR_NEIGHBOURS:g}), so mapped images look like a blurred mean and their "
                    f"labels mix classes (confidence {info['label_confidence']:.2f}). "
                    f"Lower ε above (default {DEFAULT_EPSILON:g}) for a sharp map."
                )


def summary_table(result) -> None:
    names = list(result.reference_names)
    df = pd.DataFrame(
        {
            "reference P_i": names,
            glossary.OTDD: result.otdd,
            glossary.W_TARGET: result.w_to_target,
            "effective neighbours": result.effective_neighbours,
            "label confidence": result.label_confidence,
            "ε_abs": result.epsilon_abs,
            "marginal error": result.marginal_errors,
            "converged": list(result.converged),
        }
    )
    st.dataframe(df, hide_index=True, width="stretch")
    if not all(result.converged):
        st.warning("Some Sinkhorn solves stopped before their tolerance: see the marginal errors.")


def mapped_samples(result) -> None:
    q = result.target
    st.subheader("Target samples under each map")
    c1, c2 = st.columns(2)
    n_show = c1.slider("Samples", 2, 10, 5, key="maps_n")
    seed = c2.number_input("Sample seed", 0, 10_000, 0, key="maps_seed")
    idx = example_indices(q.labels, n_show, seed=int(seed))
    names = [f"#{int(i)} ({q.classes[int(q.labels[i])]})" for i in idx]
    if q.is_image:
        mapped = [
            (
                f"T{i + 1}(x)<br>{name}",
                as_display_images(result.mapped_features[i][idx], q.image_shape),
                soft_label_captions(result.soft_labels[i][idx], ref.classes),
            )
            for i, (name, ref) in enumerate(
                zip(result.reference_names, result.references, strict=True)
            )
        ]
        fig = mapped_samples_grid(
            as_display_images(q.features[idx], q.image_shape),
            sample_captions(q.labels[idx], q.classes),
            mapped,
            title="Each row: a target sample x and its images T_i(x) (caption: top soft label)",
        )
        st.plotly_chart(fig, key="maps_grid")
    elif q.n_features in (2, 3):
        panels = [("Q", [point_set(q, name="Q")])]
        for i, (name, ref) in enumerate(
            zip(result.reference_names, result.references, strict=True)
        ):
            soft = result.soft_labels[i].numpy()
            top = soft.argmax(axis=1)
            mapped = PointSet(
                f"T{i + 1}#Q",
                result.mapped_features[i].numpy().astype(float),
                tuple(f"{name}/{ref.classes[k]}" for k in top),
                soft[np.arange(len(top)), top],
            )
            panels.append(
                (f"T{i + 1}#Q → {name}", [point_set(ref, name=f"{name} samples"), mapped])
            )
        faded = [f"{n} samples" for n in result.reference_names]
        st.plotly_chart(
            side_by_side_scatter(
                panels, faded=faded, title="Q and its images under each map (grey: P_i)"
            ),
            key="maps_scatter",
        )
    tabs = st.tabs([f"Soft labels of T{i + 1}(x)" for i in range(len(result.references))])
    for i, ref in enumerate(result.references):
        with tabs[i]:
            st.plotly_chart(
                soft_label_bars(
                    result.soft_labels[i][idx],
                    [f"{result.reference_names[i]}/{c}" for c in ref.classes],
                    names,
                    title=f"Soft labels of T{i + 1}(x) over {result.reference_names[i]}",
                ),
                key=f"maps_bars_{i}",
            )


@st.fragment
def teaching_panel(model: SessionModel, result) -> None:
    """A few target points, the reference points they are averaged from, and T_i(x)."""
    q = result.target
    st.subheader("Where does a mapped point come from?")
    st.caption(
        "The barycentric map sends x to T_i(x) = Σ_j w_j x′_j with w_j = π_xj / Σ_j π_xj (row of "
        "the plan π). Each row below shows a target sample x, the reference samples with the "
        "largest weights (weight under each) and the result T_i(x) with its effective number of "
        "neighbours. One or two neighbours: T_i(x) looks like a real reference sample. Hundreds: "
        "a blurred mean. Move ε above to see the difference."
    )
    names = list(result.reference_names)
    k_max = int(result.neighbour_index[0].shape[1])
    c1, c2, c3, c4 = st.columns(4)
    i = c1.selectbox(
        "Map",
        list(range(result.m)),
        format_func=lambda j: f"T{j + 1}: Q → {names[j]}",
        key="teach_map",
    )
    n = c2.slider("Target points", 1, services.MAX_TEACHING_POINTS, 3, key="teach_n")
    k = c3.slider("Neighbours shown", 1, k_max, min(6, k_max), key="teach_k")
    seed = c4.number_input("Random points seed", 0, 10_000, 0, key="teach_seed")
    text = st.text_input(
        "…or these target samples (indices of Q, comma-separated)",
        key="teach_indices",
        placeholder=f"e.g. 0, 17, 42 (0 … {q.n_samples - 1})",
    )
    try:
        idx = services.teaching_indices(q.n_samples, n, int(seed), text)
    except GeovizError as err:
        st.warning(f"{err}; showing random points instead.")
        idx = services.teaching_indices(q.n_samples, n, int(seed))
    fig = services.plan_neighbours_figure(model, result, int(i), idx, int(k))
    if fig is not None:
        st.plotly_chart(fig, key="teach_fig")
    with st.expander("Plan weights as a table", expanded=fig is None):
        st.dataframe(
            services.plan_neighbours_table(result, int(i), idx, int(k)),
            hide_index=True,
            width="stretch",
        )


def transitions(result) -> None:
    q = result.target
    st.subheader("Label transition per reference")
    st.caption(
        "Mass of each Q class sent to each P_i class, Y_Qᵀ S_i / N (rows normalised). "
        "A sharp row means the map sends that class of Q to one class of P_i."
    )
    tabs = st.tabs([f"P{i + 1}: {n}" for i, n in enumerate(result.reference_names)])
    for i, (tab, ref) in enumerate(zip(tabs, result.references, strict=True)):
        with tab:
            mat = label_transition(q.labels, result.soft_labels[i], q.n_classes)
            st.plotly_chart(
                label_transition_heatmap(
                    mat,
                    q.classes,
                    ref.classes,
                    target_name=f"Q ({q.name})",
                    reference_name=result.reference_names[i],
                ),
                key=f"maps_transition_{i}",
            )
            st.markdown(
                f"{glossary.OTDD_SHORT}(Q, {result.reference_names[i]}) = **{result.otdd[i]:.4g}** · "
                f"marginal error **{result.marginal_errors[i]:.2e}** · "
                f"{'converged' if result.converged[i] else 'not converged'}"
            )


def main(model: SessionModel) -> None:
    st.title("2 · OTDD maps")
    st.markdown(
        r"For every reference $P_i$ an entropic OTDD coupling $\pi^*$ between Q and $P_i$ gives the "
        r"barycentric map $T_i(x, y) = [N_Q\,\pi^* X_{P_i},\; N_Q\,\pi^* Y_{P_i}]$ (paper Sec. 3.1)"
        ": each target sample becomes a weighted average of reference samples, "
        "with a soft label over the reference's classes. The entropic ε sets how many: "
        "small ε gives sharp maps, large ε blurred averages."
    )
    epsilon_control(model)
    result = widgets.geodesic_with_status(model)
    if result is None:
        return
    sharpness(result)
    summary_table(result)
    mapped_samples(result)
    teaching_panel(model, result)
    transitions(result)


with widgets.app_page("2 · OTDD maps") as model:
    main(model)
