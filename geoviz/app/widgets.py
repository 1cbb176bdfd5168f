"""Streamlit parts shared by the app's pages: page frame, navigation, sidebar, progress, errors.

The app is a Streamlit multipage app in the documented ``pages/`` directory
layout: ``app.py`` is the start page and every ``pages/N_name.py`` is a page
Streamlit serves at ``/name``. Each page script runs on its own (also when a
URL such as ``/geodesic`` is the first visit to a fresh server), so each one
opens with :func:`app_page`, which draws everything the pages share: page
config, navigation links, the scenario in the sidebar, and the URL state.

This module and the explorer component's wrapper
(:mod:`geoviz.app.explorer_host.component`) are the only ones that import Streamlit;
computations live in :mod:`geoviz.app.services`.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, cast

import numpy as np
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from geoviz import glossary
from geoviz.app.explorer_host.component import ExplorerState
from geoviz.app.explorer_host.service import embedding_payload_job
from geoviz.app.jobs import LEASE_BEAT_SECONDS, BackgroundJob, CacheLease
from geoviz.app.scenario import Scenario
from geoviz.app.services import caches as cache_services
from geoviz.app.services import datasets as dataset_services
from geoviz.app.services import embeddings as embedding_services
from geoviz.app.services import geodesic as geodesic_services
from geoviz.app.services.errors import error_text
from geoviz.app.session import SessionModel
from geoviz.backend.cost_model import format_seconds
from geoviz.geodesic.weights import format_weights
from geoviz.viz.report import markdown_literal

if TYPE_CHECKING:
    from geoviz.geodesic.result import GeodesicResult

__all__ = [
    "PAGES",
    "PAGE_ICON",
    "PAGE_STYLE",
    "AppPage",
    "FitRef",
    "app_page",
    "data_or_error",
    "explorer_notes",
    "fit_bar_text",
    "geodesic_with_status",
    "loading_preset",
    "page_fragment",
    "show_error",
    "sync_url",
    "throttled_progress",
]

Progress = Callable[[str, float], None]

# a plain emoji as favicon: Material icons (":material/...:") would be fetched from a font CDN,
# and the app must work offline
PAGE_ICON = "🌐"


@dataclass(frozen=True)
class AppPage:
    """One entry of the navigation: script (relative to ``app.py``), label, icon."""

    script: str
    label: str
    icon: str


PAGES: tuple[AppPage, ...] = (
    AppPage("app.py", "Start", ":material/home:"),
    AppPage("pages/1_datasets.py", "1 · Datasets", ":material/database:"),
    AppPage("pages/2_maps.py", "2 · OTDD maps", ":material/route:"),
    AppPage("pages/3_geodesic.py", "3 · Geodesic", ":material/change_history:"),
    AppPage("pages/4_mccann.py", "4 · McCann", ":material/animation:"),
    AppPage("pages/5_export.py", "5 · Export", ":material/download:"),
    AppPage("pages/6_about.py", "6 · About the method", ":material/menu_book:"),
    AppPage("pages/7_evidence.py", "7 · Evidence", ":material/science:"),
)

_URL_RESTORED = "geoviz_url_restored"
_PRESET_LOADING = "geoviz_preset_loading"  # the preset being loaded (loading_preset)

#: the page's own style: the main block's top padding (Streamlit's default is 6rem, which
#: left about 120 px of empty space above every title)
PAGE_STYLE = '<style>[data-testid="stMainBlockContainer"]{padding-top:3.5rem}</style>'


@contextmanager
def app_page(title: str) -> Iterator[SessionModel]:
    """Open a page: config, navigation, URL state; after the page, the sidebar scenario.

    Usage in a page script::

        with app_page("3 · Geodesic") as model:
            ...  # widgets and plots, reading and changing ``model``

    On a session's first run the scenario and picked weights are taken from
    the URL (``?scenario=...&a=...``, see :meth:`SessionModel.restore`); after
    every run the URL is set to the session's, so a reload or a shared link
    shows the same view. The sidebar's scenario box is filled after the page
    ran, so it shows what the page just computed.
    """
    st.set_page_config(page_title=f"{title} · geoviz", page_icon=PAGE_ICON, layout="wide")
    # Streamlit's main block starts about 6rem down (room for a header this app hides): the
    # titles start near the top instead, by a style rule on the block's documented test id
    st.html(PAGE_STYLE)
    # Streamlit types its state's keys as str | int; the app's keys are all str
    model = SessionModel(cast("MutableMapping[str, Any]", st.session_state))
    cache_services.configure_torch(model.settings.torch_threads)  # once per process
    # the session's served files as they are now: a file replaced or broken since the last
    # run changes every key this run reads (its new numbers, or its loader's sentence)
    model.restamp()
    # the keys this run reads are the session's (the store keeps them while it lives),
    # the linked scenario's datasets included: restore() loads them before switching
    with cache_services.session_scope(model):
        if not st.session_state.get(_URL_RESTORED):
            st.session_state[_URL_RESTORED] = True
            with st.spinner("Loading the linked scenario's datasets..."):
                problems = model.restore(
                    st.query_params.to_dict(),
                    load=functools.partial(dataset_services.scenario_data, model),
                )
            for problem in problems:
                st.warning(markdown_literal(problem))  # it may quote the link's names
        _preset_dropped_note()
        with st.sidebar:
            for page in PAGES:
                st.page_link(page.script, label=page.label, icon=page.icon)
            _beat_lease()
        scenario_box = st.sidebar.container()
        try:
            yield model
        finally:
            _scenario_sidebar(scenario_box, model)
            sync_url(model)
            embedding_services.start_embedding_warm_up(model)


def loading_preset(name: str | None) -> None:
    """Mark the preset ``name`` as loading (``None``: its loading ended, loaded or refused).

    A visitor who leaves the Datasets page while a preset loads stops that run: the preset is
    not loaded. The mark is then still there on the next page, which says so
    (:func:`_preset_dropped_note`) instead of dropping the preset silently (issue 45)."""
    if name is None:
        st.session_state.pop(_PRESET_LOADING, None)
    else:
        st.session_state[_PRESET_LOADING] = name


def _preset_dropped_note() -> None:
    """Say that a preset's loading was stopped by leaving its page (see :func:`loading_preset`)."""
    name = st.session_state.pop(_PRESET_LOADING, None)
    if name is not None:
        st.warning(
            f"The preset “{markdown_literal(str(name))}” was still loading when you left the "
            "Datasets page, so it was not loaded: the scenario is the one before. Load it "
            "again on the Datasets page and stay there until it shows."
        )


@st.fragment(run_every=LEASE_BEAT_SECONDS)
def _beat_lease() -> None:
    """While this tab is open its browser reruns this (drawing nothing) every
    :data:`~geoviz.app.jobs.LEASE_BEAT_SECONDS`, and the session's lease beats: the results
    its pages read stay. A closed tab stops beating, so they leave once idle, although
    Streamlit keeps its session (:data:`~geoviz.app.jobs.LEASE_GRACE_SECONDS`)."""
    lease = st.session_state.get(cache_services.LEASE_KEY)
    if isinstance(lease, CacheLease):
        lease.beat()


class FitRef:
    """A geodesic fit handed to a fragment (:func:`page_fragment`), held weakly.

    Streamlit keeps a fragment's arguments for as long as its session shows the page, and a
    closed tab's session until it forgets it (at the next disconnect of another tab): a fit
    passed as it is stays in memory per visitor, outside the result store's byte budget
    (four tabs at image size 100 kept about 560 MB each that way, issue 41). The store alone
    decides how long a fit lives: :meth:`get` reads it there again (it stays the most
    recently used), and reruns the page when it has left (the page fits it again, from the
    disk cache).

    Parameters
    ----------
    scenario
        The scenario the fit is of (its map method included).
    result
        The fit, as the page's full run got it.
    """

    def __init__(self, scenario: Scenario, result: GeodesicResult) -> None:
        self.scenario = scenario
        self._result = weakref.ref(result)

    def get(self) -> GeodesicResult:
        """The fit; reruns the whole page (:func:`streamlit.rerun`) when it has left memory."""
        result = geodesic_services.geodesic_if_ready(self.scenario)
        if result is None:
            result = self._result()
        if result is None:  # evicted or swept since the page ran: the page brings it back
            st.rerun(scope="app")
        return result


P = ParamSpec("P")


def page_fragment(
    fn: Callable[Concatenate[SessionModel, P], None],
) -> Callable[Concatenate[SessionModel, P], None]:
    """:func:`streamlit.fragment` for a page's part whose first argument is the session's
    model: its reruns run in the session's scope (:func:`~geoviz.app.services.caches.session_scope`),
    like the page, so the results they read are the session's (kept while its tab is open)."""

    @functools.wraps(fn)
    def scoped(model: SessionModel, /, *args: P.args, **kwargs: P.kwargs) -> None:
        with cache_services.session_scope(model):
            fn(model, *args, **kwargs)

    return st.fragment(scoped)


def sync_url(model: SessionModel) -> None:
    """Write the session's scenario and picked weights into the URL (only when they changed)."""
    wanted = model.query_state()
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)


def _scenario_sidebar(box: DeltaGenerator, model: SessionModel) -> None:
    with box:
        st.markdown("### Current scenario")
        data = dataset_services.scenario_data_if_ready(model.scenario)
        # counts of the already loaded (cached) datasets: nothing is reloaded here
        counts = None if data is None else [ds.n_samples for ds in data.datasets]
        space = None if data is None else dataset_services.space_line(model.scenario, data)
        for line in model.scenario.describe(
            is_image=None if data is None else data.is_image, n_samples=counts, space=space
        ):
            st.markdown(line)
        caveat = None if data is None else dataset_services.space_caveat(model.scenario, data)
        if caveat is not None:
            st.warning(markdown_literal(caveat))
        result = geodesic_services.geodesic_if_ready(model.scenario)
        if result is not None:
            names = [markdown_literal(n) for n in result.reference_names]
            st.markdown(f"**{glossary.A_HAT}** = {format_weights(result.a_hat, names)}")
        else:
            st.caption("OTDD maps not computed yet (pages 2–5 compute them).")
        st.caption("The page URL holds the scenario and picked weights: reload or share it.")


def show_error(err: BaseException, what: str = "") -> None:
    """Show an exception inline: the library's message for input errors, else its type too."""
    # the message may quote what a visitor named (an upload, a link's dataset): as text
    text = markdown_literal(error_text(err))
    st.error(f"{what}: {text}" if what else text)


def data_or_error(model: SessionModel) -> dataset_services.ScenarioData | None:
    """:func:`~geoviz.app.services.datasets.scenario_data` with a spinner; shows the error
    inline and returns ``None``."""
    try:
        if dataset_services.scenario_data_if_ready(model.scenario) is not None:
            return dataset_services.scenario_data(model)
        with st.spinner("Loading datasets…"):
            return dataset_services.scenario_data(model)
    except Exception as err:  # shown as a sentence; tracebacks go to the server log only
        show_error(err, "Could not load the scenario's datasets")
    return None


def throttled_progress(bar: DeltaGenerator, *, min_interval: float = 0.2) -> Progress:
    """A ``progress(stage, fraction)`` callback for an ``st.progress`` bar.

    Sinkhorn reports every iteration; this forwards an update only when the
    stage changes, the bar moves by 1 %, or ``min_interval`` seconds passed,
    so the browser is not flooded.
    """
    shown_stage: str | None = None
    shown_fraction = -1.0
    shown_time = 0.0

    def progress(stage: str, fraction: float) -> None:
        nonlocal shown_stage, shown_fraction, shown_time
        now = time.perf_counter()
        frac = float(np.clip(fraction, 0.0, 1.0))
        if (
            stage != shown_stage
            or frac - shown_fraction >= 0.01
            or now - shown_time >= min_interval
        ):
            bar.progress(frac, text=markdown_literal(stage))  # stages name datasets
            shown_stage, shown_fraction, shown_time = stage, frac, now

    return progress


def explorer_notes(model: SessionModel, state: ExplorerState) -> None:
    """Below the explorer: why the intervals or the embedding view will not come, or how far
    their background jobs have got (they appear in the explorer by themselves when done)."""
    if state.bootstrap_error is not None:
        st.caption(f"No intervals: {markdown_literal(error_text(state.bootstrap_error))}")
    if state.embedding_error is not None:
        st.caption(f"No embedding view: {markdown_literal(error_text(state.embedding_error))}")
    jobs = {
        "intervals": (
            geodesic_services.bootstrap_job(model.scenario),
            "Intervals and the region as good as â",
        ),
        "embedding": (embedding_payload_job(model), "The embedding view of P_a"),
    }
    for part in state.pending:
        job, what = jobs[part]
        if job is not None and not job.done():
            stage, fraction, _log = job.snapshot()
            st.progress(
                fraction, text=f"{what}: {stage}, in the background; it appears above when ready"
            )


def fit_bar_text(stage: str, job: BackgroundJob) -> str:
    """The fit bar's text: the stage (escaped: stages name datasets) and the time left
    (:meth:`~geoviz.app.jobs.BackgroundJob.eta_text`, ``" · about 40 s left"``; from the cost
    model's estimate at first)."""
    return markdown_literal(stage) + job.eta_text()


def geodesic_with_status(
    model: SessionModel, poll_seconds: float = 0.5, scenario: Scenario | None = None
) -> GeodesicResult | None:
    """The scenario's geodesic, computed in the background with an ``st.status`` box
    (replaced by a toast when the maps are ready; kept, expanded, when they failed).

    The fit runs in a :class:`~geoviz.app.jobs.BackgroundJob` shared by every page and
    session of the process (:func:`~geoviz.app.services.geodesic.start_geodesic`); this
    function shows its stages and progress until it is done (neural maps: the classifier
    and adversarial training of each map). Leaving the page stops only the watching, not
    the fit: coming back (to any page that needs it) shows the same job, further along.
    ``scenario`` (default: the session's) may be another map method on the same data
    (:func:`~geoviz.app.services.maps.companion_scenario`). Returns ``None`` (after showing
    the error inline) when the inputs are invalid.
    """
    scenario = model.scenario if scenario is None else scenario
    ready = geodesic_services.geodesic_if_ready(scenario)
    if ready is not None:
        return ready
    data = data_or_error(model)
    if data is None:
        return None
    # the embedding is not started alongside: on 2 cores it slowed the maps the first view
    # waits for by half (issue 26); the explorer asks for it once the maps are there
    job = geodesic_services.start_geodesic(scenario, data, model.settings.fit_workers_used())
    # the scenario's configuration names the maps ("barycentric", "neural (tiny budget)")
    # in a placeholder: once the maps are ready the box goes (a toast says so), so that the
    # page's content starts where it does on every later visit (a projector's first screen)
    box = st.empty()
    status = box.status(
        f"Fitting {scenario.map_label} OTDD maps and (2,Q) distances…", expanded=True
    )
    with status:
        bar = st.progress(0.0, text="starting")
        log_box = st.empty()
        shown_bar: tuple[str, float] | None = None
        shown_lines = 0
        while True:
            finished = job.wait(poll_seconds)
            stage, fraction, log = job.snapshot()
            # each update is redrawn by the visitor's browser, which on a small machine
            # shares the cores with the fit: only what changed is sent (the time left is
            # rounded, by format_seconds, to what a person reads: it changes every few seconds)
            text = fit_bar_text(stage, job)
            if (text, round(fraction, 2)) != shown_bar:
                shown_bar = (text, round(fraction, 2))
                bar.progress(fraction, text=text)
            if len(log) != shown_lines:
                shown_lines = len(log)
                log_box.markdown(
                    "  \n".join(f"`{t:5.1f} s` · {markdown_literal(line)}" for t, line in log)
                )
            if finished:
                break
    geodesic_services.finish_geodesic(scenario)
    maps = f"{scenario.map_label[:1].upper()}{scenario.map_label[1:]} OTDD maps"
    if job.error_ is not None:
        status.update(label=f"{maps} failed", state="error", expanded=True)
        show_error(job.error_)
        return None
    box.empty()
    estimated = f", estimated {format_seconds(job.estimate)}" if job.estimate is not None else ""
    st.toast(f"{maps} ready ({job.elapsed:.1f} s{estimated})", icon=":material/check_circle:")
    fitted: GeodesicResult = job.result_
    return fitted
