"""Page 2 · OTDD maps: how each map T_i moves the target's samples and labels.

The maps are barycentric (entropic plan) or neural (a trained generator); when both
are fitted for the same data the page shows them side by side on the same target points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import streamlit as st

from geoviz import glossary
from geoviz.app import widgets
from geoviz.app.scenario import epsilon_choices
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.services import maps as map_services
from geoviz.app.session import SessionModel
from geoviz.errors import GeovizError
from geoviz.ot.otdd_cost import BLUR_NEIGHBOURS
from geoviz.viz.compare import side_by_side_scatter
from geoviz.viz.fitted_maps import has_plan_neighbours
from geoviz.viz.images import (
    as_display_images,
    example_indices,
    mapped_samples_grid,
    sample_captions,
    soft_label_captions,
)
from geoviz.viz.plots import label_transition, label_transition_heatmap, soft_label_bars
from geoviz.viz.point_sets import PointSet, point_set
from geoviz.viz.report import (
    blur_warning,
    diagnostic_fields,
    field_format,
    field_text,
    field_value,
    map_table,
    map_table_notes,
    markdown_literal,
    nearest_reference_table,
    plan_neighbours_table,
    plotly_literal,
)
from geoviz.vocabulary import DEFAULT_EPSILON, MAP_METHODS, NEURAL_PRESET_NAMES

if TYPE_CHECKING:
    from streamlit.delta_generator import DeltaGenerator

    from geoviz.data.dataset import LabeledDataset
    from geoviz.geodesic import GeodesicResult
    from geoviz.maps.base import MapDiagnostics

EPS_KEY = "maps_eps"
METHOD_KEY = "maps_method"
BUDGET_KEY = "maps_budget"
METHOD_LABELS = {
    "barycentric": "barycentric (entropic plan)",
    "neural": "neural (trained generator)",
}
BUDGET_HELP = {
    "tiny": "tiny: seconds on small data (demos, tests)",
    "cpu": "cpu: minutes per map at 32×32 on a laptop CPU",
    "paper": "paper: the paper's scale (GPU)",
}


def _on_epsilon_change() -> None:
    map_services.set_epsilon(SessionModel(st.session_state), st.session_state[EPS_KEY])


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


def _on_method_change() -> None:
    map_services.set_map_method(
        SessionModel(st.session_state), st.session_state[METHOD_KEY], st.session_state[BUDGET_KEY]
    )


def method_control(model: SessionModel) -> None:
    """Map: barycentric / neural, and the neural training budget (each fitted once, cached)."""
    st.session_state[METHOD_KEY] = model.scenario.map_method
    st.session_state[BUDGET_KEY] = model.scenario.neural_preset
    # halves: the budget's longest choice is whole at a projector's 1280 px (a 2/5 column
    # cut it, issue 45)
    c1, c2 = st.columns(2)
    c1.radio(
        "Map",
        list(MAP_METHODS),
        format_func=lambda m: METHOD_LABELS.get(m, m),
        horizontal=True,
        key=METHOD_KEY,
        on_change=_on_method_change,
        help=(
            "Barycentric: T_i(x) is the plan-weighted average of reference samples (paper eq. "
            "bary_map). Neural: a generator G trained against a critic on the same OTDD cost "
            "(paper Sec. 3.1, max-min); it generates new points instead of averaging. Both are "
            "cached: switching back and forth does not refit."
        ),
    )
    c2.selectbox(
        "Neural budget",
        list(NEURAL_PRESET_NAMES),
        format_func=lambda b: BUDGET_HELP[b],
        key=BUDGET_KEY,
        on_change=_on_method_change,
        help="Training iterations and network sizes of the neural maps.",
    )


def sharpness(result: GeodesicResult) -> None:
    """Each map's headline diagnostics as metrics (a value the map does not have as a
    caption), with a warning when a map is blurry or did not beat the identity map."""
    cols = st.columns(result.m)
    for i, (col, diag) in enumerate(zip(cols, result.diagnostics, strict=True)):
        ref, name = result.references[i], result.reference_names[i]
        # names come from links and uploads: shown as typed, never as Markdown
        shown = markdown_literal(name)
        context = {"reference": shown, "n_reference": ref.n_samples, "n_classes": ref.n_classes}
        with col:
            st.markdown(f"**T{i + 1}: Q → {shown}**")
            absent = []
            for field in diagnostic_fields([diag]):
                fmt = field_format(type(diag), field)
                if not fmt.headline:
                    continue
                text = field_text(diag, field)
                if field_value(diag, field) is None:
                    absent.append(f"{fmt.label}: {text}")
                else:
                    st.metric(fmt.label, text, help=fmt.help.format(**context) or None)
            for line in absent:
                st.caption(line)
            if result.blurry[i]:
                st.warning(
                    blur_warning(
                        i,
                        diag.effective_neighbours,
                        diag.label_confidence,
                        float(result.config.otdd.epsilon),
                        images=result.image_shape is not None,
                        default_epsilon=DEFAULT_EPSILON,
                        blur_neighbours=BLUR_NEIGHBOURS,
                    )
                )
            held = field_value(diag, "heldout_ot")
            identity = field_value(diag, "heldout_ot_identity")
            if held is not None and identity is not None and not held < identity:
                st.info(
                    f"T{i + 1} did not improve the held-out OT cost on the identity map within "
                    "its budget: choose a larger neural budget above."
                )


def summary_table(result: GeodesicResult) -> None:
    """One row per map, one column per diagnostics field; what the columns mean below."""
    # a static table: its headers wrap, so every column shows at a projector's 1280 px (a
    # data frame there scrolled its last columns out of sight, issue 45)
    st.table(map_table(result).set_index("reference P_i"))
    captions, warnings = map_table_notes(result)
    if captions:
        text = "; ".join(captions)
        st.caption(f"{text[0].upper()}{text[1:]}.")
    for warning in warnings:
        st.warning(warning)


def mapped_samples(result: GeodesicResult) -> None:
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
                f"T{i + 1}(x)<br>{plotly_literal(name)}",
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
                    title=f"Soft labels of T{i + 1}(x) over "
                    + plotly_literal(result.reference_names[i]),
                ),
                key=f"maps_bars_{i}",
            )


@widgets.page_fragment
def teaching_panel(model: SessionModel, fit: widgets.FitRef) -> None:
    """A few target points, the reference points they are averaged from, and T_i(x). The
    fit comes by reference: a fragment's arguments live as long as the session."""
    result = fit.get()
    if not has_plan_neighbours(result):
        nearest_panel(model, result)
        return
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
    k = c3.slider("Neighbours shown", 1, k_max, min(6, k_max), key="teach_k")
    idx = _pick_points(q, "teach", c2, c4)
    fig = map_services.plan_neighbours_figure(model.scenario, result, int(i), idx, int(k))
    if fig is not None:
        st.plotly_chart(fig, key="teach_fig")
    with st.expander("Plan weights as a table", expanded=fig is None):
        st.dataframe(
            plan_neighbours_table(result, int(i), idx, int(k)),
            hide_index=True,
            width="stretch",
        )


def _pick_points(
    q: LabeledDataset, prefix: str, n_col: DeltaGenerator, seed_col: DeltaGenerator
) -> np.ndarray:
    """Target points of a panel: random (seeded) or typed indices; the count and seed
    widgets go into the given columns."""
    n = n_col.slider("Target points", 1, map_services.MAX_TEACHING_POINTS, 3, key=f"{prefix}_n")
    seed = seed_col.number_input("Random points seed", 0, 10_000, 0, key=f"{prefix}_seed")
    text = st.text_input(
        "…or these target samples (indices of Q, comma-separated)",
        key=f"{prefix}_indices",
        placeholder=f"e.g. 0, 17, 42 (0 … {q.n_samples - 1})",
    )
    try:
        return map_services.teaching_indices(q.n_samples, n, int(seed), text)
    except GeovizError as err:
        st.warning(f"{markdown_literal(str(err))}; showing random points instead.")
        return map_services.teaching_indices(q.n_samples, n, int(seed))


def nearest_panel(model: SessionModel, result: GeodesicResult) -> None:
    """Maps without a plan (neural): each generated T_i(x) next to the closest real samples
    of P_i."""
    q = result.target
    st.subheader("What does a generated point look like?")
    st.caption(
        "These maps generate T_i(x) (a neural map: T_i(x) = G(x, y)) instead of averaging "
        "reference samples, so there are no plan weights to show. Each row shows a target "
        "sample x, its image T_i(x) and the closest real samples of P_i (Euclidean distance "
        "d under each). Close, similar-looking neighbours: the generator produces points like "
        "the reference data."
    )
    names = list(result.reference_names)
    c1, c3 = st.columns(2)
    i = c1.selectbox(
        "Map",
        list(range(result.m)),
        format_func=lambda j: f"T{j + 1}: Q → {names[j]}",
        key="near_map",
    )
    k = c3.slider("Closest samples shown", 1, 8, 4, key="near_k")
    idx = _pick_points(q, "near", *st.columns(2))
    fig = map_services.nearest_reference_figure(model.scenario, result, int(i), idx, int(k))
    if fig is not None:
        st.plotly_chart(fig, key="near_fig")
    with st.expander("Closest reference samples as a table", expanded=fig is None):
        st.dataframe(
            nearest_reference_table(result, int(i), idx, int(k)),
            hide_index=True,
            width="stretch",
        )


def transitions(result: GeodesicResult) -> None:
    q = result.target
    st.subheader("Label transition per reference")
    st.caption(
        "Mass of each Q class sent to each P_i class, Y_Qᵀ S_i / N (rows normalised). "
        "A sharp row means the map sends that class of Q to one class of P_i."
    )
    tabs = st.tabs(
        [f"P{i + 1}: {markdown_literal(n)}" for i, n in enumerate(result.reference_names)]
    )
    for i, (tab, ref) in enumerate(zip(tabs, result.references, strict=True)):
        with tab:
            mat = label_transition(q.labels, result.soft_labels[i], q.n_classes)
            st.plotly_chart(
                label_transition_heatmap(
                    mat,
                    q.classes,
                    ref.classes,
                    target_name=f"Q ({plotly_literal(q.name)})",
                    reference_name=plotly_literal(result.reference_names[i]),
                ),
                key=f"maps_transition_{i}",
            )
            diag = result.diagnostics[i]
            name = markdown_literal(result.reference_names[i])
            st.markdown(
                f"{glossary.OTDD_SHORT}(Q, {name}) = {_stat(diag, 'otdd')} · "
                f"marginal error {_stat(diag, 'marginal_error')} · "
                f"{field_text(diag, 'converged')}"
            )


def _stat(diag: MapDiagnostics, field: str) -> str:
    """A diagnostics value in bold with its note (``**0.51** (Monge cost)``), or the
    field's text for a value the map does not have."""
    text = field_text(diag, field)
    if field_value(diag, field) is None:
        return text
    note = field_format(type(diag), field).note
    return f"**{text}**" + (f" ({note})" if note else "")


def comparison(model: SessionModel, result: GeodesicResult) -> None:
    """The maps of every method on the same data side by side (or a button to fit the other)."""
    title = " vs ".join(MAP_METHODS)
    st.subheader(f"{title[0].upper()}{title[1:]} maps")
    pair = map_services.map_pair(model.scenario)
    if any(r is None for r in pair):
        other = map_services.companion_scenario(model.scenario)
        have = METHOD_LABELS.get(result.method, result.method)
        missing = METHOD_LABELS.get(other.map_method, other.map_method)
        st.caption(
            f"Only the {have} maps of this scenario are fitted. Fit the "
            f"{missing} maps of the same data to compare both on the same "
            "target points (neural budget: the one chosen above). The fit runs in the background: "
            "you can leave the page and come back."
        )
        running = geodesic_services.geodesic_job(other) is not None
        if not running and not st.button("Fit the other map (background)", key="maps_fit_other"):
            return
        if widgets.geodesic_with_status(model, scenario=other) is None:
            return
        st.rerun()  # redraw the section without the button and the progress box
    side_by_side(
        model,
        *(
            widgets.FitRef(model.scenario.with_method(method), fit)
            for method, fit in zip(MAP_METHODS, pair, strict=True)
            if fit is not None
        ),
    )


@widgets.page_fragment
def side_by_side(
    model: SessionModel, first_fit: widgets.FitRef, second_fit: widgets.FitRef
) -> None:
    """Both fits side by side (by reference: a fragment's arguments live as long as the
    session)."""
    first, second = first_fit.get(), second_fit.get()
    st.caption(
        "The same target points x under both maps T_i: a barycentric image averages reference "
        "samples (entropic plan), a neural one is generated. Caption under each image: its "
        "top soft label. Tables: the cost of each map, label confidence, how close the mapped "
        "points are to real reference data, and how often both maps give x the same hard label."
    )
    q = first.target
    c1, c2 = st.columns(2)
    n = c1.slider("Target points", 1, map_services.MAX_TEACHING_POINTS, 4, key="cmp_n")
    seed = c2.number_input("Sample seed", 0, 10_000, 0, key="cmp_seed")
    idx = map_services.comparison_indices(first, int(n), int(seed))
    per_row = min(first.m, 3 if q.is_image else 2)
    figs = map_services.side_by_side_figures(
        model.scenario, first, second, idx, tile_px=130 if per_row <= 2 else 96
    )
    tables = map_services.map_comparison_tables(model.scenario, first, second)
    for start in range(0, first.m, per_row):
        cols = st.columns(per_row)
        for col, i in zip(cols, range(start, min(start + per_row, first.m)), strict=False):
            with col:
                st.plotly_chart(figs[i], key=f"cmp_fig_{i}")
                # a static table: every cell's text in full (no scrolling grid)
                st.table(tables[i].set_index("quantity"))


def main(model: SessionModel) -> None:
    st.title("2 · OTDD maps")
    st.markdown(
        r"For every reference $P_i$ an entropic OTDD coupling $\pi^*$ between Q and $P_i$ gives the "
        r"barycentric map $T_i(x, y) = [N_Q\,\pi^* X_{P_i},\; N_Q\,\pi^* Y_{P_i}]$ (paper Sec. 3.1)"
        ": each target sample becomes a weighted average of reference samples, "
        "with a soft label over the reference's classes. The entropic ε sets how many: "
        "small ε gives sharp maps, large ε blurred averages. The **neural** map instead trains "
        "a generator on the same OTDD cost and generates T_i(x); with both fitted, the last "
        "section compares them."
    )
    method_control(model)
    epsilon_control(model)
    result = widgets.geodesic_with_status(model)
    if result is None:
        return
    sharpness(result)
    summary_table(result)
    mapped_samples(result)
    teaching_panel(model, widgets.FitRef(model.scenario, result))
    transitions(result)
    comparison(model, result)


with widgets.app_page("2 · OTDD maps") as model:
    main(model)
