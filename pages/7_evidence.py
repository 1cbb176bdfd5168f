"""Page 7 · Evidence: do the weights chosen by W²(P_a, Q) help a model transfer?"""

from __future__ import annotations

from typing import Literal

import streamlit as st

from geoviz import glossary
from geoviz.app import widgets
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services.evidence import (
    EvidenceRequest,
    EvidenceResult,
    evidence_cost_sentence,
    evidence_estimate,
    evidence_failure,
    evidence_if_ready,
    evidence_job,
    finish_evidence,
    start_evidence,
)
from geoviz.app.services.stored_evidence import (
    StoredStudy,
    StoredTable1,
    geodesic_space_sentence,
    meta_sentence,
    mixup_sentence,
    stored_studies,
    table1_provenance,
)
from geoviz.app.session import SessionModel
from geoviz.backend.cost_model import format_seconds
from geoviz.geodesic.weights import format_weights
from geoviz.isolation import WorkerExitedError
from geoviz.nn.training import PRESETS
from geoviz.viz.report import markdown_literal
from geoviz.viz.study import (
    a_hat_sentence,
    budget_warnings,
    correlation_sentence,
    correlation_table,
    grid_points_table,
    interval_text,
    objective_table,
    region_sentence,
)
from geoviz.viz.study_figure import comparison_figure, correlation_figure

PRESET_HELP = {name: preset.note for name, preset in PRESETS.items()}
REQUEST = "evidence_request"


def request_form(model: SessionModel) -> tuple[EvidenceRequest | None, bool]:
    """The form's request (kept for the session) and whether Run was pressed now."""
    with st.form("evidence_form"):
        c1, c2, c3, c4 = st.columns(4)
        k = c1.select_slider("k labelled samples per class of Q", [1, 2, 5, 10, 20], 5)
        preset = c2.selectbox(
            "Training budget",
            list(PRESETS),
            index=list(PRESETS).index("cpu"),
            help=" · ".join(f"{n}: {h}" for n, h in PRESET_HELP.items()),
        )
        resolution = c3.select_slider(
            "Simplex grid resolution R",
            [1, 2, 3, 4, 5, 7],
            3,
            help="(R+1)(R+2)/2 grid points; the paper's study has 36 (R = 7).",
        )
        n_seeds = c4.select_slider("Seeds", [1, 2, 3, 5], 3)
        submitted = st.form_submit_button("Run the transfer experiments", type="primary")
    if submitted:
        st.session_state[REQUEST] = EvidenceRequest(
            k=int(k),
            preset=str(preset),
            resolution=int(resolution),
            seeds=tuple(range(int(n_seeds))),
            backend=model.settings.transfer_backend,
        )
    return st.session_state.get(REQUEST), submitted


@st.fragment(run_every=1.0)
def watch(model: SessionModel, request: EvidenceRequest) -> None:
    """Progress of the background job, polled every second; the page reruns when it is done."""
    job = evidence_job(model.scenario, request)
    if job is None:
        return
    stage, fraction, log = job.snapshot()
    # stages and log lines may name the scenario's datasets: shown as typed
    st.progress(fraction, text=f"{markdown_literal(stage)} · {job.elapsed:.0f} s{job.eta_text()}")
    st.caption("  \n".join(f"`{t:5.1f} s` · {markdown_literal(line)}" for t, line in log))
    if job.done():
        st.rerun()


def comparison_section(result: EvidenceResult) -> None:
    comp = result.comparison
    rows = comp.summary()
    st.subheader(f"Few-shot transfer at {glossary.A_HAT} (paper Table 1)")
    st.caption(
        f"{comp.k}-shot target, accuracy on {result.n_test} test samples of Q, mean ± std over "
        f"{rows[0]['n_seeds']} seed(s), preset “{comp.preset}”; "
        f"a = {format_weights(comp.weights, [markdown_literal(n) for n in result.reference_names])}."
    )
    # accuracies in %, each label above its whisker, rounded at display (issue 45)
    fig = comparison_figure(rows)
    st.plotly_chart(fig, key="evidence_bars")
    st.dataframe(comp.display_frame(), hide_index=True)


def provenance(stored: StoredStudy) -> str:
    """Where a stored study's numbers come from, for its caption."""
    study = stored.study
    return (
        f"**Q = {stored.target}**: {study.k}-shot, preset “{study.preset}”, "
        f"{len(study.seeds)} seeds ({', '.join(map(str, study.seeds))}), grid resolution "
        f"{study.resolution} ({len(study.points)} points), method {study.method}, references "
        f"{', '.join(study.vertex_names())}; file `assets/evidence/{stored.file_name}`."
    )


def stored_column(stored: StoredStudy) -> None:
    """One stored study: how it was made, its scatter with the grid point nearest to â,
    and what its numbers say."""
    sentence = meta_sentence(stored)
    if sentence:
        st.markdown(sentence)
    a_hat = None if stored.region is None else stored.region.a_hat
    st.plotly_chart(
        correlation_figure(stored.study, kind="scatter", label=f"Q = {stored.target}", a_hat=a_hat),
        key=f"stored_study_{stored.target}",
    )
    if a_hat is not None:
        st.caption(
            a_hat_sentence(stored.target, stored.study, a_hat)
            + f" {glossary.A_HAT} is that of this study's own problem (its data, its N)."
        )
    st.markdown(correlation_sentence(stored.target, stored.study))
    if stored.region is not None:
        region = stored.region
        st.markdown(
            region_sentence(
                stored.target,
                stored.study,
                region.inside,
                region.best_index,
                region.replicates,
                region.level,
            )
        )


def stored_simplex(studies: tuple[StoredStudy, ...]) -> None:
    """The stored studies over the simplex (two ternaries each), with â marked."""
    with st.expander(f"{glossary.OBJECTIVE} and accuracy over the simplex, with {glossary.A_HAT}"):
        for stored in studies:
            a_hat = None if stored.region is None else stored.region.a_hat
            st.plotly_chart(
                correlation_figure(stored.study, label=f"Q = {stored.target}", a_hat=a_hat),
                key=f"stored_study_simplex_{stored.target}",
            )


def table1_section(table: StoredTable1) -> None:
    """The measured Table 1 (digit box) beside the paper's numbers, stored with the app."""
    st.subheader(f"Few-shot transfer at {glossary.A_HAT}, measured (paper Table 1)")
    st.markdown(
        f"{table.k}-shot transfer accuracy on Q's test split, every method at its "
        f"target's {glossary.A_HAT}, measured in the {table.space}. "
        f"{mixup_sentence(table)}"
    )
    st.table(table.frame().set_index("target Q"))  # every column shows at 1280 px
    st.caption(
        table1_provenance(table) + f" {glossary.A_HAT} here is each {table.k}-shot task's, "
        "not the stored studies' above."
    )


def stored_section(model: SessionModel) -> None:
    """The measured studies shipped with the app (paper Fig. "corr", Table "w_stat") and
    the measured Table 1."""
    st.header("Stored study (measured)")
    evidence = stored_studies()
    for problem in evidence.problems:
        st.warning(problem)
    if not evidence.studies:
        st.info("No stored study is shipped with this installation (assets/evidence).")
    else:
        studies_part(evidence.studies, model)
    if evidence.table1 is not None:
        table1_section(evidence.table1)


def studies_part(stored_list: tuple[StoredStudy, ...], model: SessionModel) -> None:
    """The stored studies: one column each, the ternaries, the tables and their sources."""
    resamples = stored_list[0].study.statistics.n_resamples
    st.markdown(
        "The paper's simplex study, run once and stored: LeNet-5 pretrained on $P_a$ at every "
        "point of the weight grid, fine-tuned on the few-shot target Q and tested on Q's test "
        "split; each dot is one grid point, its error bar the spread (± std) over the seeds. "
        f"Every r has two 95 % bootstrap intervals (B = {resamples}): **over the seeds** "
        "(the seeds resampled, the grid points fixed: how far training noise moves r) and "
        "**over the points** (the grid points resampled: how far r depends on which points "
        "were drawn, the one to read for what the grid can support)."
    )
    columns = st.columns(len(stored_list))
    for column, stored in zip(columns, stored_list, strict=True):
        with column:
            stored_column(stored)
    st.info(geodesic_space_sentence(model.settings.n_default))
    stored_simplex(stored_list)
    studies = {stored.target: stored.study for stored in stored_list}
    st.subheader(f"Correlation of {glossary.OBJECTIVE} and accuracy")
    # static tables: their headers and intervals wrap, so every column shows at 1280 px (data
    # frames there scrolled their last columns out of sight, issue 45)
    st.table(correlation_table(studies).set_index("target Q"))
    st.caption(
        "Pearson r and Spearman ρ [95% CI]: bootstrap over the seeds; the next column: "
        "Pearson r's bootstrap over the grid points. "
        + " ".join(f"{t}: {interval_text(study)}." for t, study in studies.items())
    )
    st.subheader(f"Statistics of {glossary.OBJECTIVE} over the grid, and the accuracy gain")
    st.table(objective_table(studies).set_index("target Q"))
    st.caption(
        f"As in the paper's appendix Table w_stat: {glossary.OBJECTIVE} over the grid points, in "
        "squared feature units (std over the points). Accuracy gain: the best minus the worst "
        "grid point's mean accuracy, in percentage points (the paper's column is OTDD minus "
        "few-shot accuracy)."
    )
    st.caption("  \n".join(provenance(stored) for stored in stored_list))
    st.caption(
        "Provenance, commands and dataset credits (MNIST, Fashion-MNIST, USPS, KMNIST): "
        "assets/evidence/README.md."
    )


def study_section(result: EvidenceResult) -> None:
    study = result.study
    st.subheader(f"{glossary.OBJECTIVE} and accuracy over the simplex (paper Fig. 5)")
    weights = tuple(float(w) for w in result.comparison.weights)
    # the comparison's weights are the geodesic's a_hat (empty without a geodesic)
    a_hat = weights if len(weights) == len(result.reference_names) else None
    st.plotly_chart(
        correlation_figure(study, result.reference_names, a_hat=a_hat), key="evidence_study"
    )
    c1, c2, c3 = st.columns(3)
    c1.metric("Pearson r", f"{study.pearson:.2f}")
    c2.metric("Spearman ρ", f"{study.spearman:.2f}")
    c3.metric(
        "runs",
        f"{len(study.points) * len(study.seeds)}",
        f"{study.n_loaded} read from checkpoints",
        delta_color="off",
    )
    if study.note:
        st.info(study.note)
    st.caption(f"Pearson r, 95% bootstrap intervals {interval_text(study)}.")
    st.caption(
        f"A negative r means that where {glossary.OBJECTIVE} is small (P_a close to Q) the "
        "fine-tuned model is more accurate: the weights picked on page 3 predict transfer."
    )
    with st.expander("Every grid point"):
        st.dataframe(grid_points_table(study), hide_index=True)


def failure_action(
    model: SessionModel, request: EvidenceRequest
) -> Literal["none", "shown", "restart"]:
    """Show why the last run of ``request`` failed, with a button to start it again:
    ``"restart"`` when that button was pressed now, ``"shown"`` otherwise, ``"none"`` when
    the last run did not fail."""
    failure = evidence_failure(model.scenario, request)
    if failure is None:
        return "none"
    # a worker's exit is already a whole sentence ("The transfer run stopped: ...")
    what = "" if isinstance(failure, WorkerExitedError) else "The transfer experiments failed"
    widgets.show_error(failure, what)
    if st.button("Start the run again", key="evidence_restart", type="primary"):
        return "restart"
    return "shown"


def main(model: SessionModel) -> None:
    st.title("7 · Evidence")
    stored_section(model)
    st.divider()
    st.header("Run the experiments on this scenario")
    st.markdown(
        "Pretrain a small CNN (LeNet-5) on $P_a$, fine-tune it on $k$ labelled samples per class of "
        "Q, test it on Q's test split (paper Sec. 5). The maps are refitted from the $k$-shot "
        "target (the other target samples get pseudo-labels, by label spreading unless the "
        "scenario asks for a kNN vote), so no test label is used. "
        "The job runs in the background, its training in a worker process of its own (Ray "
        "tasks when Ray is installed): leave the page and come back. Should the worker die, "
        "this page says so and the run starts again from its checkpoints."
    )
    data = dataset_services.scenario_data_if_ready(model.scenario)
    if data is not None:
        # the run's maps live where the Geodesic page's do: say which space, and why
        st.info(
            "This scenario's "
            + markdown_literal(dataset_services.space_line(model.scenario, data))
            + ". The run below uses it, as the Geodesic page does."
        )
    request, submitted = request_form(model)
    if request is None:
        st.info("Choose k, the training budget and the grid, then run the experiments.")
        return
    n_refs = len(model.scenario.references)
    st.caption(evidence_cost_sentence(request, n_refs))
    ready = evidence_if_ready(model.scenario, request)
    job = evidence_job(model.scenario, request)
    if ready is None and job is not None and job.done():
        finish_evidence(model.scenario, request)  # an error is remembered there
        ready, job = job.result_, None
    if ready is None and job is None:
        action = "restart" if submitted else failure_action(model, request)
        if action == "none":
            st.info("Press Run to start the experiments for this scenario and these settings.")
        if action != "restart":
            return
        start_evidence(model, request)
        if not submitted:  # the failure drawn above this run's button goes with a new run
            st.rerun()
    if ready is None:
        watch(model, request)
        return
    est = evidence_estimate(request, n_refs)
    st.success(f"Done in {ready.seconds:.0f} s (estimated {format_seconds(est.seconds)}).")
    for warning in budget_warnings(request.preset, len(ready.study.points), len(request.seeds)):
        st.warning(warning)
    comparison_section(ready)
    study_section(ready)


with widgets.app_page("7 · Evidence") as model:
    main(model)
