"""Page 1 · Datasets: choose Q and the references, look at them, compare them by OTDD."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import streamlit as st

from geoviz.app import widgets
from geoviz.app.scenario import Scenario
from geoviz.app.services import datasets as dataset_services
from geoviz.app.session import SessionModel, sync_form_state
from geoviz.app.settings import preset_scenarios
from geoviz.data.choice import DatasetChoice, FewShotOptions
from geoviz.errors import GeovizError
from geoviz.viz.images import as_display_images, example_indices, image_grid, sample_captions
from geoviz.viz.plots import class_histograms, otdd_heatmap
from geoviz.viz.point_sets import point_set
from geoviz.viz.report import markdown_literal
from geoviz.viz.scatter import scatter_sets
from geoviz.vocabulary import DEFAULT_EPSILON, MAP_METHODS, NEURAL_PRESET_NAMES

SIZES = [16, 28, 32, 64]
FORM_SYNCED = "geoviz_form_synced"  # key of the scenario the form widgets were last written from


def form_values(scenario: Scenario) -> dict[str, object]:
    """What each widget of the scenario form shows for ``scenario`` (widget key -> value)."""
    return {
        "form_target": scenario.target.token,
        "form_split": scenario.target.split,
        "form_refs": [r.token for r in scenario.references],
        "form_nq": int(scenario.n_target),
        "form_np": int(scenario.n_reference),
        "form_size": scenario.image_size if scenario.image_size in SIZES else SIZES[-1],
        "form_few": bool(scenario.few_shot.enabled),
        "form_k": int(scenario.few_shot.k),
        "form_nn": int(scenario.few_shot.n_neighbors),
        "form_eps": float(scenario.epsilon),
        "form_seed": int(scenario.seed),
        "form_method": scenario.map_method,
        "form_budget": scenario.neural_preset,
        "form_features": scenario.features,
    }


def dataset_widgets(options: dict[str, DatasetChoice]) -> tuple[Any, dict[str, Any]]:
    """Q, its split and the references; returns Q's column (the feature space goes under
    it) and the values by name."""
    tokens = list(options)
    c1, c2 = st.columns([2, 3])
    target_tok = c1.selectbox(
        "Target dataset Q",
        tokens,
        format_func=lambda t: dataset_services.choice_caption(options[t]),
        key="form_target",
    )
    target_split = c1.radio(
        "Split of Q",
        ["train", "test"],
        horizontal=True,
        key="form_split",
        help="Registry datasets only; use the test split to keep Q disjoint from a reference.",
    )
    ref_toks = c2.multiselect(
        "Reference datasets P_i (at least 2)",
        tokens,
        format_func=lambda t: dataset_services.choice_caption(options[t]),
        key="form_refs",
    )
    return c1, {"target_tok": target_tok, "target_split": target_split, "ref_toks": ref_toks}


def sample_widgets(image_size_shown: bool, image_size: int) -> dict[str, Any]:
    """The sample sizes, the image size (only when ``image_size_shown``: the scenario's data
    are images; vector data keep ``image_size``, which nothing reads) and the few-shot
    options."""
    c3, c4, c5 = st.columns(3)
    n_target = c3.number_input(
        "Samples in Q", min_value=10, max_value=100_000, step=100, key="form_nq"
    )
    n_ref = c4.number_input(
        "Samples per reference", min_value=10, max_value=100_000, step=100, key="form_np"
    )
    size: Any = image_size
    if image_size_shown:
        size = c5.selectbox(
            "Common image size",
            SIZES,
            key="form_size",
            help="Images are resized to size×size (harmonize).",
        )
    c6, c7, c8 = st.columns(3)
    few = c6.checkbox(
        "Few-shot target",
        key="form_few",
        help=(
            "Keep k labels per class of Q and pseudo-label the rest by label spreading on "
            "Q's nearest-neighbour graph (a link may ask for the kNN vote instead)."
        ),
    )
    k = c7.number_input("k labels per class", min_value=1, max_value=1000, key="form_k")
    nn = c8.number_input("kNN neighbours", min_value=1, max_value=50, key="form_nn")
    return {
        "n_target": n_target,
        "n_ref": n_ref,
        "image_size": size,
        "few": few,
        "k": k,
        "nn": nn,
    }


def advanced_widgets() -> dict[str, Any]:
    """Epsilon, the seed, the map method and the neural budget (folded away)."""
    with st.expander("Advanced"):
        a1, a2 = st.columns(2)
        epsilon = a1.number_input(
            "Entropic ε (relative to mean cost)",
            min_value=0.0001,
            max_value=10.0,
            step=0.0005,
            format="%.4f",
            key="form_eps",
            help=(
                f"ε_abs = ε × mean(‖x − x′‖² + W₂²). Default {DEFAULT_EPSILON:g}: sharp maps "
                "(a few reference samples per mapped point); 0.05 averages about half the "
                "reference (blurred maps). Also on the OTDD maps page."
            ),
        )
        seed = a2.number_input("Seed", min_value=0, max_value=2**31 - 1, key="form_seed")
        a3, a4 = st.columns(2)
        method = a3.radio(
            "Map",
            list(MAP_METHODS),
            horizontal=True,
            key="form_method",
            help=(
                "barycentric: T_i(x) averages reference samples with the entropic plan's "
                "weights; neural: a generator trained on the same OTDD cost (slower; the "
                "OTDD maps page can fit the other one too and compare them)."
            ),
        )
        budget = a4.selectbox(
            "Neural budget",
            list(NEURAL_PRESET_NAMES),
            key="form_budget",
            help="tiny: seconds on small data; cpu: minutes per map at 32×32; paper: GPU.",
        )
    return {"epsilon": epsilon, "seed": seed, "method": method, "budget": budget}


def apply_form(
    model: SessionModel, options: dict[str, DatasetChoice], values: dict[str, Any]
) -> None:
    """Apply the submitted form: the new scenario once its datasets load, else an error
    and the current scenario kept."""
    scenario = model.scenario
    target = options[values["target_tok"]]
    if target.source == "registry":
        target = dataclasses.replace(target, split=values["target_split"])
    try:
        # the datasets load before the scenario replaces the session's: one that cannot
        # work here leaves the working scenario in place
        scenario_new = Scenario(
            target=target,
            references=tuple(options[t] for t in values["ref_toks"]),
            n_target=int(values["n_target"]),
            n_reference=int(values["n_ref"]),
            few_shot=FewShotOptions(
                enabled=bool(values["few"]),
                k=int(values["k"]),
                n_neighbors=int(values["nn"]),
                pseudo_labels=scenario.few_shot.pseudo_labels,
            ),
            image_size=int(values["image_size"]),
            channels=scenario.channels,
            epsilon=float(values["epsilon"]),
            seed=int(values["seed"]),
            map_method=values["method"],
            neural_preset=values["budget"],
            features=values["features"],
            encoder_preset=model.settings.encoder_preset,
        )
        with st.spinner("Loading the scenario's datasets…"):
            dataset_services.apply_scenario(model, scenario_new)
    except Exception as err:  # a sentence for the visitor; tracebacks go to the log
        widgets.show_error(err, "The scenario was not applied (the current one is kept)")
    else:
        reset_form()
        st.rerun()


def scenario_form(model: SessionModel, data: dataset_services.ScenarioData | None) -> None:
    """The scenario's form; ``data`` (the scenario's datasets, ``None`` if they did not
    load) says whether "Common image size" is shown: only for images (issue 45)."""
    scenario = model.scenario
    options = dataset_services.choice_options(model)
    # the widgets take their values from session state (no defaults passed): written here
    # whenever the scenario changed outside the form (preset, epsilon on the Maps page)
    sync_form_state(st.session_state, scenario, form_values(scenario), marker=FORM_SYNCED)
    with st.form("scenario_form"):
        first_column, values = dataset_widgets(options)
        values |= sample_widgets(data is None or data.is_image, scenario.image_size)
        values |= advanced_widgets()
        values["features"] = first_column.selectbox(
            "Feature space of the costs",
            list(dataset_services.feature_space_names()),
            key="form_features",
            help=dataset_services.FEATURE_SPACE_HELP,
        )
        submitted = st.form_submit_button("Apply scenario", type="primary")
    note = dataset_services.unavailable_note()
    if note:
        st.caption(note)
    if submitted:
        apply_form(model, options, values)


def reset_form() -> None:
    """Make the next run rewrite every form widget from the (new) scenario.

    Deleting the widget keys is not enough: the browser still holds the old values and
    sends them back, so the form is re-synced through session state instead."""
    st.session_state.pop(FORM_SYNCED, None)


UPLOAD_KEY = "dataset_upload"  # one uploader, one key: a new file replaces the last one
UPLOAD_TAKEN = "geoviz_upload_taken"  # file_id of the file in the box the store already has
UPLOAD_NOTE = "geoviz_upload_note"  # what the last accepted upload was
UPLOAD_ERROR = "geoviz_upload_error"  # why the last file was refused, shown once

#: clicks the uploader's own remove button (×) once the server has the file: the browser then
#: asks Streamlit to delete its copy of the bytes, as when the visitor removes a file (Streamlit
#: has no server-side call for it; a new key or a cleared session-state entry leaves the bytes
#: in memory until the tab's session ends: benchmarks/bench_uploads.py measures both). Should
#: the button not be found, the next file still replaces this one (one key).
_RELEASE_SCRIPT = """<script>
(() => {
  let tries = 0;
  const timer = setInterval(() => {
    const box = document.querySelector(".st-key-__KEY__");
    const remove = box && box.querySelector(
      '[data-testid="stFileChipDeleteBtn"] button, button[data-testid="stFileChipDeleteBtn"]');
    if (remove) { remove.click(); clearInterval(timer); }
    else if (++tries > 100) { clearInterval(timer); }
  }, 100);
})();
</script>""".replace("__KEY__", UPLOAD_KEY)


def upload_limit_mb(model: SessionModel) -> int:
    """The largest file the box takes, MB: Streamlit's ``server.maxUploadSize`` (from
    ``.streamlit/config.toml`` or the command line), at most the upload store's disk quota."""
    return max(1, min(int(st.get_option("server.maxUploadSize")), model.settings.upload_disk_mb))


def upload_box(model: SessionModel) -> None:
    limit_mb = upload_limit_mb(model)
    with st.expander("Upload a dataset (.npz, .csv, .zip of an ImageFolder or MNIST-M folder)"):
        st.caption(dataset_services.upload_notice(model.settings, limit_mb))
        up = st.file_uploader(
            "Dataset file",
            type=["npz", "csv", "gz", "zip"],
            key=UPLOAD_KEY,
            max_upload_size=limit_mb,
            help="npz keys x/y, images/labels, x_train/y_train…; CSV with a header and a label column.",
        )
        if up is not None and st.session_state.get(UPLOAD_TAKEN) == up.file_id:
            # the store has this file (or refused it): the box lets it go
            st.html(_RELEASE_SCRIPT, unsafe_allow_javascript=True)
            up = None
        if up is None:
            error = st.session_state.pop(UPLOAD_ERROR, None)
            if error is not None:
                widgets.show_error(error)
            note = st.session_state.get(UPLOAD_NOTE)
            if note:
                st.success(markdown_literal(note))  # it quotes the upload's name
            if model.uploads:
                st.caption(
                    "Uploaded this session: "
                    + ", ".join(markdown_literal(u.filename) for u in model.uploads.values())
                )
            return
        st.session_state[UPLOAD_TAKEN] = up.file_id
        try:
            _, ds = dataset_services.add_upload(model, up.name, up.getvalue())
        except Exception as err:  # a sentence for the visitor; tracebacks go to the log
            st.session_state[UPLOAD_ERROR] = err
            st.session_state.pop(UPLOAD_NOTE, None)
        else:
            shape = f"images {ds.image_shape}" if ds.is_image else f"{ds.n_features} features"
            st.session_state[UPLOAD_NOTE] = (
                f"{up.name}: {ds.n_samples} samples, {ds.n_classes} classes, {shape}. "
                "It is now listed in the dataset choices below."
            )
        st.rerun()


def role_title(role: str, name: str) -> str:
    """``"P1: fashion_mnist"``; just ``"P1"`` where the dataset is named by its role (the
    vector presets' P1, P2, P3 and Q), not ``"P1: P1"`` (issue 45). The name is a link's or
    an upload's as typed (Markdown-escaped)."""
    if name == role.split(" ")[0]:
        return role
    return f"{role}: {markdown_literal(name)}"


def dataset_views(model: SessionModel, data: dataset_services.ScenarioData) -> None:
    roles = ["Q (target)"] + [f"P{i + 1}" for i in range(len(data.references))]
    cols = st.columns(len(data.datasets))
    for col, role, ds in zip(cols, roles, data.datasets, strict=True):
        shape = "×".join(map(str, ds.image_shape[1:])) if ds.is_image else f"D={ds.n_features}"
        # the count alone as the value (a unit there was cut to "2000 sa…" in narrow columns)
        # and the shape as a grey caption without the ↑ of a change (issue 26, item 6)
        col.metric(
            role_title(role, ds.name),
            f"{ds.n_samples:,}",
            f"samples · {ds.n_classes} classes · {shape}",
            delta_color="off",
            delta_arrow="off",
        )
    # which space the costs live in, and why when it was chosen from these data
    st.info(markdown_literal(dataset_services.space_line(model.scenario, data)))
    caveat = dataset_services.space_caveat(model.scenario, data)
    if caveat is not None:
        st.warning(markdown_literal(caveat))
    if data.labelled_indices is not None:
        st.info(
            f"Few-shot target: {len(data.labelled_indices)} labelled samples of Q; the other "
            f"{data.target.n_samples - len(data.labelled_indices)} carry "
            f"{dataset_services.pseudo_label_words(model.scenario.few_shot.pseudo_labels)} "
            f"(accuracy {data.pseudo_label_accuracy:.1%} against the true labels)."
        )

    st.subheader("Samples")
    if data.is_image:
        tabs = st.tabs([role_title(r, ds.name) for r, ds in zip(roles, data.datasets, strict=True)])
        for tab, ds in zip(tabs, data.datasets, strict=True):
            idx = example_indices(ds.labels, min(30, ds.n_samples), seed=0)
            with tab:
                fig = image_grid(
                    as_display_images(ds.features[idx], ds.image_shape),
                    sample_captions(ds.labels[idx], ds.classes),
                    ncols=10,
                )
                st.plotly_chart(fig, key=f"grid_{ds.name}")
    else:
        color_by = st.radio("Colour by", ["label", "dataset"], horizontal=True, key="ds_color")
        if data.dim in (2, 3):
            sets = [point_set(ds, prefix_labels=True) for ds in data.datasets]
            axis = ("x₁", "x₂", "x₃")
            note = None
        else:
            emb = dataset_services.dataset_projection(data)
            sets = [
                point_set(ds, emb.points[nm], name=nm, prefix_labels=True, indices=emb.indices[nm])
                for ds, nm in zip(data.datasets, emb.names, strict=True)
            ]
            axis = emb.axis_titles
            note = f"{data.dim}-D vectors shown by their first two principal components."
        st.plotly_chart(
            scatter_sets(sets, color_by=color_by, title="Q and the references", axis_titles=axis),
            key="ds_scatter",
        )
        if note:
            st.caption(note)

    st.subheader("Class histograms")
    st.plotly_chart(class_histograms(list(data.datasets)), key="class_hist")


def pairwise_section(model: SessionModel, data: dataset_services.ScenarioData) -> None:
    st.subheader("OTDD between all pairs")
    st.caption(
        "Optimal-transport dataset distance d²_OT (features and labels, entropic, "
        f"ε = {model.scenario.epsilon} × mean cost) between every pair of Q, P_1, …, P_m."
    )
    mat = dataset_services.pairwise_otdd_if_ready(model.scenario)
    if mat is None:
        n = len(data.datasets)
        if st.button(f"Compute OTDD for all {n * (n - 1) // 2} pairs", key="pairwise_btn"):
            bar = st.progress(0.0, text="starting")
            try:
                mat = dataset_services.pairwise_otdd(model, widgets.throttled_progress(bar))
            except GeovizError as err:
                widgets.show_error(err)
                return
            st.rerun()  # redraw without the button
    if mat is not None:
        st.plotly_chart(otdd_heatmap(mat, list(data.names)), key="pairwise_heatmap")
        closest = int(np.argmin(mat[0, 1:])) + 1
        st.caption(
            f"Closest single reference to Q by OTDD: **{markdown_literal(data.names[closest])}** "
            f"(d² = {mat[0, closest]:.4g})."
        )


def main(model: SessionModel) -> None:
    st.title("1 · Datasets")
    st.markdown(
        "Pick the **target** dataset Q (the task you care about) and **m ≥ 2 reference** datasets "
        "P_i (candidate pretraining data). Every other page works on this scenario."
    )
    presets = preset_scenarios(model.settings)
    p1, p2 = st.columns([4, 1], vertical_alignment="bottom")
    preset = p1.selectbox("Preset scenarios", list(presets), key="preset_name")
    if p2.button("Load preset", key="load_preset"):
        # left if this run is stopped (the visitor left the page): the next page says so
        widgets.loading_preset(preset)
        try:
            with st.spinner("Loading the preset's datasets…"):
                dataset_services.apply_scenario(model, presets[preset])
        except Exception as err:  # a sentence for the visitor; tracebacks go to the log
            widgets.loading_preset(None)
            widgets.show_error(err, "The preset was not loaded (the current scenario is kept)")
        else:
            widgets.loading_preset(None)
            reset_form()
            st.rerun()
    upload_box(model)
    # the form is filled once the data are loaded (it asks whether they are images), in its
    # place above them
    form_slot = st.container()
    data = widgets.data_or_error(model)
    with form_slot:
        scenario_form(model, data)
    if data is None:
        return
    dataset_views(model, data)
    pairwise_section(model, data)


with widgets.app_page("1 · Datasets") as model:
    main(model)
