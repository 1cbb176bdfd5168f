"""Page 2 · OTDD maps: how each map T_i moves the target's samples and labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from geoviz import app_compute as compute
from geoviz.app_state import SessionModel
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


def summary_table(result) -> None:
    names = list(result.reference_names)
    df = pd.DataFrame(
        {
            "reference P_i": names,
            "OTDD d²(Q, P_i)": result.otdd,
            "W²₂,Q(P_i, Q)": result.w_to_target,
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
                f"OTDD d²(Q, {result.reference_names[i]}) = **{result.otdd[i]:.4g}** · "
                f"marginal error **{result.marginal_errors[i]:.2e}** · "
                f"{'converged' if result.converged[i] else 'not converged'}"
            )


def main() -> None:
    compute.ensure_navigation()
    model = SessionModel(st.session_state)
    st.title("2 · OTDD maps")
    st.markdown(
        r"For every reference $P_i$ an entropic OTDD coupling $\pi^*$ between Q and $P_i$ gives the "
        r"barycentric map $T_i(x, y) = [N_Q\,\pi^* X_{P_i},\; N_Q\,\pi^* Y_{P_i}]$ (paper Sec. 3.1)"
        ": each target sample becomes a weighted average of reference samples, "
        "with a soft label over the reference's classes."
    )
    result = compute.geodesic_with_status(model)
    if result is None:
        return
    summary_table(result)
    mapped_samples(result)
    transitions(result)


main()
