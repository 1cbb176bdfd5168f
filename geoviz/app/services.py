"""The app's services: every computation a page needs, cached, without Streamlit.

Pages (``pages/*.py``) call these functions and :mod:`geoviz.viz`, and only lay
out widgets and figures; :mod:`geoviz.app.widgets` holds the Streamlit parts
they share. Nothing here imports Streamlit, so every service is testable with a
plain :class:`~geoviz.app.state.SessionModel` over a ``dict``.

Caching: one in-memory :class:`~geoviz.app.state.ResultStore` per server process
(:func:`store`), keyed by the scenario's hash (:meth:`Scenario.key`, computed
once per scenario) plus the call's parameters, shared by every page and
session. What must survive a restart goes to the on-disk
:class:`~geoviz.backend.DiskCache` as well: the OTDD maps (by
:func:`geoviz.geodesic.fit_geodesic`), the fitted embedding and the ``P_a``
placements (:func:`embedding`, :func:`place_points`), and uploaded files by
their sha256 (:func:`save_upload`), so a shared URL works on the same server.

The geodesic fit runs as a :class:`~geoviz.app.state.BackgroundJob` in the
store (:func:`start_geodesic`): it outlives the page that started it, and any
page can watch its progress. The scenario's map method (barycentric or neural,
:attr:`~geoviz.app.state.Scenario.map_method`) is part of its key, so both
geodesics of the same data live side by side in the store (and the maps in the
disk cache): the Maps page compares them (:func:`map_pair`,
:func:`side_by_side_figures`, :func:`map_comparison_tables`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from geoviz.app.state import (
    BackgroundJob,
    DatasetChoice,
    ResultStore,
    Scenario,
    SessionModel,
    Upload,
    served_datasets,
)
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError, GeovizError

_log = logging.getLogger("geoviz.app")

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go
    import torch

    from geoviz.backend import DiskCache
    from geoviz.export import ExportFormat, ExportResult, HardLabelRule
    from geoviz.geodesic.pipeline import GeodesicConfig, GeodesicResult
    from geoviz.viz.embedding import Embedding

Progress = Callable[[str, float], None]

__all__ = [
    "MAX_TEACHING_POINTS",
    "NO_PLAN",
    "EvidenceRequest",
    "EvidenceResult",
    "ScenarioData",
    "check_upload",
    "choice_caption",
    "choice_options",
    "companion_scenario",
    "comparison_indices",
    "dataset_projection",
    "distance_caption",
    "embedding",
    "embedding_on_disk",
    "error_text",
    "evidence_if_ready",
    "evidence_job",
    "evidence_scenario",
    "export_payload",
    "export_ready",
    "finish_evidence",
    "finish_geodesic",
    "format_stat",
    "geodesic_if_ready",
    "geodesic_job",
    "hard_label_shares",
    "interpolation",
    "label_agreement",
    "lower_thread_priority",
    "map_comparison_tables",
    "map_pair",
    "map_sharpness",
    "map_table",
    "mccann",
    "mixup",
    "nearest_reference_figure",
    "nearest_reference_ratio",
    "nearest_reference_table",
    "pairwise_otdd",
    "pairwise_otdd_if_ready",
    "place_points",
    "plan_neighbours_figure",
    "plan_neighbours_table",
    "save_export",
    "save_upload",
    "scenario_data",
    "scenario_data_if_ready",
    "set_epsilon",
    "set_map_method",
    "side_by_side_figures",
    "start_embedding",
    "start_embedding_warm_up",
    "start_evidence",
    "start_geodesic",
    "store",
    "stored_upload",
    "teaching_indices",
]

_STORE = ResultStore(max_entries=64)


def store() -> ResultStore:
    """The process-wide result store: the app's one in-memory cache."""
    return _STORE


def _disk() -> DiskCache:
    from geoviz.backend import get_cache

    return get_cache()


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class ScenarioData:
    """The datasets of a scenario, loaded, subsampled and harmonised.

    Attributes
    ----------
    target
        ``Q`` as used by the geodesic (pseudo-labelled when few-shot).
    references
        ``P_1..P_m`` in the same feature space as ``target``.
    target_true
        ``Q`` with its true labels (equal to ``target`` unless few-shot).
    labelled_indices
        Few-shot: indices of ``Q`` whose label was kept; else ``None``.
    pseudo_label_accuracy
        Few-shot: accuracy of the kNN pseudo-labels on the other samples.
    load_seconds
        Time spent loading.
    """

    target: LabeledDataset
    references: tuple[LabeledDataset, ...]
    target_true: LabeledDataset
    labelled_indices: np.ndarray | None
    pseudo_label_accuracy: float | None
    load_seconds: float

    @property
    def datasets(self) -> tuple[LabeledDataset, ...]:
        return (self.target, *self.references)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(ds.name for ds in self.datasets)

    @property
    def reference_names(self) -> tuple[str, ...]:
        return tuple(ds.name for ds in self.references)

    @property
    def is_image(self) -> bool:
        return self.target.is_image

    @property
    def dim(self) -> int:
        return self.target.n_features


def _load_choice(model: SessionModel, choice: DatasetChoice, n: int, seed: int) -> LabeledDataset:
    from geoviz.data.preprocess import stratified_subsample

    if choice.source == "upload":
        from geoviz.data.formats import load_upload

        up = model.uploads.get(str(choice.digest)) or stored_upload(str(choice.digest))
        if up is None:
            raise DatasetError(
                "the uploaded file is neither in this session nor in this server's cache; "
                "upload it again",
                choice.name,
            )
        ds = load_upload(up.data, up.filename)
        if ds.n_samples > n:
            ds = stratified_subsample(ds, n, seed=seed)
        return ds
    if choice.source == "server":
        from geoviz.app.state import served_path
        from geoviz.data.formats import load_path

        ds = load_path(served_path(choice.name, model.settings.data_dirs), split=choice.split)
        if ds.n_samples > n:
            ds = stratified_subsample(ds, n, seed=seed)
        return ds
    from geoviz.data.registry import load_dataset

    own_seed = seed if choice.seed is None else int(choice.seed)
    return load_dataset(
        choice.name,
        split=choice.split,
        n=int(n),
        seed=own_seed,
        allow_paths=False,  # a scenario names registry data; paths come only from served_path
        **choice.loader_kwargs(),
    )


def _unique(datasets: list[LabeledDataset]) -> list[LabeledDataset]:
    from geoviz.geodesic.labels import unique_names

    names = unique_names([ds.name for ds in datasets])
    return [
        ds if ds.name == nm else dataclasses.replace(ds, name=nm)
        for ds, nm in zip(datasets, names, strict=True)
    ]


def scenario_data(model: SessionModel) -> ScenarioData:
    """Load, subsample, harmonise (and few-shot) the scenario's datasets. Cached.

    The scenario is first admitted by the server's settings
    (:meth:`~geoviz.app.state.AppSettings.admit`: data folders, neural budget, memory per
    scenario), whichever way it came (form, link, preset).
    """
    scenario = model.settings.admit(model.scenario)

    def compute() -> ScenarioData:
        from geoviz.app.state import scenario_feature_bytes
        from geoviz.data.preprocess import few_shot, harmonize
        from geoviz.memory import check_bytes, memory_guard

        start = time.perf_counter()
        # loaded, subsampled and harmonised copies live side by side for a moment
        check_bytes(3 * scenario_feature_bytes(scenario), "loading the scenario's datasets")
        with memory_guard("loading the scenario's datasets"):
            target = _load_choice(model, scenario.target, scenario.n_target, scenario.seed)
            refs = [
                _load_choice(model, c, scenario.n_reference, scenario.seed)
                for c in scenario.references
            ]
            datasets = harmonize(
                [target, *refs], size=scenario.image_size, channels=scenario.channels
            )
        datasets = _unique(datasets)
        target, refs = datasets[0], datasets[1:]
        target_true, labelled, acc = target, None, None
        if scenario.few_shot.enabled:
            fs = few_shot(
                target,
                scenario.few_shot.k,
                seed=scenario.seed,
                n_neighbors=scenario.few_shot.n_neighbors,
            )
            target, labelled, acc = fs.dataset, fs.labelled_indices, fs.pseudo_label_accuracy
        return ScenarioData(
            target=target,
            references=tuple(refs),
            target_true=target_true,
            labelled_indices=labelled,
            pseudo_label_accuracy=acc,
            load_seconds=time.perf_counter() - start,
        )

    # the datasets do not depend on epsilon: moving the Maps page's epsilon reloads nothing
    return store().get_or_compute(("data", scenario.data_key()), compute)


def scenario_data_if_ready(scenario: Scenario) -> ScenarioData | None:
    """The loaded datasets of ``scenario`` if already in memory, else ``None`` (never loads)."""
    return store().get(("data", scenario.data_key()))


# --------------------------------------------------------------------------- geodesic


#: what the app shows instead of a plan statistic (effective neighbours, epsilon, marginal
#: error) for neural maps, which generate their points instead of averaging reference points
NO_PLAN = "n/a (generated, no plan)"


def _geodesic_config(scenario: Scenario) -> GeodesicConfig:
    from geoviz.geodesic.pipeline import GeodesicConfig
    from geoviz.ot.otdd import OTDDConfig

    return GeodesicConfig(
        otdd=OTDDConfig(epsilon=float(scenario.epsilon), seed=int(scenario.seed)),
        method=scenario.map_method,
        neural=scenario.neural_preset,
    )


def _geodesic_key(scenario: Scenario) -> tuple[Hashable, ...]:
    return ("geodesic", scenario.key())


def set_epsilon(model: SessionModel, epsilon: float) -> bool:
    """Make ``epsilon`` (relative to the mean ground cost) the scenario's; ``True`` if it changed.

    The new scenario has a new key, so pages fit its geodesic in the
    background; maps fitted before at this epsilon come from the disk cache
    (and the whole geodesic from the process store).

    Raises
    ------
    DatasetError
        ``epsilon`` is not a positive number.
    """
    eps = float(epsilon)
    if eps == float(model.scenario.epsilon):
        return False
    model.scenario = model.scenario.with_(epsilon=eps)
    return True


def set_map_method(model: SessionModel, method: str, preset: str | None = None) -> bool:
    """Make ``method`` (``"barycentric"``/``"neural"``) and, if given, the neural budget
    ``preset`` the scenario's; ``True`` if the scenario changed.

    Like :func:`set_epsilon`: the new scenario has its own key, so its geodesic is
    fitted in the background once (or read back from the store / disk cache).

    Raises
    ------
    DatasetError
        Unknown method or preset.
    """
    changes: dict[str, Any] = {"map_method": str(method)}
    if preset is not None:
        changes["neural_preset"] = str(preset)
    new = model.scenario.with_(**changes)
    if new == model.scenario:
        return False
    model.scenario = new
    return True


def companion_scenario(scenario: Scenario) -> Scenario:
    """The scenario with the *other* map method (same data, OTDD options and neural budget)."""
    other = "neural" if scenario.map_method == "barycentric" else "barycentric"
    return scenario.with_method(other)  # type: ignore[arg-type]


def map_sharpness(result: GeodesicResult) -> list[dict[str, Any]]:
    """Per map: ``reference``, ``otdd``, ``epsilon_abs``, ``effective_neighbours``,
    ``label_confidence`` and ``blurry`` (see :meth:`GeodesicResult.map_summaries`);
    neural maps add their fit details (``heldout_ot``, ``nearest_reference``, ...)."""
    return result.map_summaries()


def _scenario_of(model: SessionModel, scenario: Scenario | None) -> Scenario:
    return model.scenario if scenario is None else scenario


def geodesic_if_ready(
    model: SessionModel, scenario: Scenario | None = None
) -> GeodesicResult | None:
    """The fitted :class:`GeodesicResult` if already in memory, else ``None`` (never computes).

    ``scenario`` defaults to the session's. A background fit that finished while no
    page was watching is collected here.
    """
    key = _geodesic_key(_scenario_of(model, scenario))
    ready = store().get(key)
    if ready is None:
        job = store().claim_job(key)
        if job is not None and job.error_ is None:
            ready = job.result_
    return ready


def start_geodesic(
    model: SessionModel, data: ScenarioData, scenario: Scenario | None = None
) -> BackgroundJob:
    """Start (or join) the background fit of the scenario's geodesic.

    One job per scenario and process: every page and session asking for the
    same scenario watches the same job. Collect the result with
    :func:`finish_geodesic`. ``scenario`` (default: the session's) must describe
    the same datasets as ``data`` (e.g. :func:`companion_scenario`: the other map
    method on the same data). Neural maps report ``"... (classifier)"`` and
    ``"... (adversarial)"`` stages while they train.
    """
    scenario = _scenario_of(model, scenario)
    if scenario.data_key() != model.scenario.data_key():
        raise GeovizError("start_geodesic: the scenario's datasets differ from the loaded ones")
    config = _geodesic_config(scenario)

    def run(progress: Progress) -> GeodesicResult:
        from geoviz.geodesic.pipeline import fit_geodesic

        return fit_geodesic(
            data.target, list(data.references), config, progress=progress, cache=_disk()
        )

    return store().start_job(_geodesic_key(scenario), run)


def geodesic_job(model: SessionModel, scenario: Scenario | None = None) -> BackgroundJob | None:
    """The running or finished (unclaimed) fit of the scenario, if any."""
    return store().job(_geodesic_key(_scenario_of(model, scenario)))


def finish_geodesic(model: SessionModel, scenario: Scenario | None = None) -> BackgroundJob | None:
    """Move the finished job's result into the store; the job, or ``None`` while it runs."""
    return store().claim_job(_geodesic_key(_scenario_of(model, scenario)))


def format_stat(value: Any, spec: str = ".4g", missing: str = NO_PLAN) -> str:
    """``value`` formatted by ``spec``, or ``missing`` for ``None``/NaN (never ``"nan"``)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return missing
    return missing if not np.isfinite(x) else format(x, spec)


def map_table(result: GeodesicResult) -> pd.DataFrame:
    """The Maps page's table: one row per map ``T_i``.

    Barycentric maps: OTDD, ``W^2``, effective neighbours, label confidence,
    ``epsilon_abs``, marginal error and convergence (numbers). Neural maps have no
    plan: those plan columns say :data:`NO_PLAN`, and the fit's own diagnostics
    follow (Monge cost, held-out OT against the identity map, nearest-reference
    ratio, classifier accuracy, iterations, early stopping).
    """
    import pandas as pd

    from geoviz import glossary

    names = list(result.reference_names)
    if result.method != "neural":
        return pd.DataFrame(
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
    details = _details(result)
    return pd.DataFrame(
        {
            "reference P_i": names,
            f"{glossary.OTDD} (Monge cost)": result.otdd,
            glossary.W_TARGET: result.w_to_target,
            "label confidence": result.label_confidence,
            "held-out OT": [format_stat(d.get("heldout_ot"), missing="n/a") for d in details],
            "held-out OT, identity": [
                format_stat(d.get("heldout_ot_identity"), missing="n/a") for d in details
            ],
            "nearest-reference ratio": [
                format_stat(d.get("nearest_reference"), ".2f", missing="n/a") for d in details
            ],
            "classifier accuracy": [
                format_stat(d.get("classifier_accuracy"), ".1%", missing="n/a") for d in details
            ],
            "iterations (best)": [
                f"{int(d.get('iterations_run', 0))} ({int(d.get('best_iteration', 0))})"
                for d in details
            ],
            "stopped early": list(result.converged),
            "effective neighbours": [NO_PLAN] * result.m,
            "ε_abs": [NO_PLAN] * result.m,
            "marginal error": [NO_PLAN] * result.m,
        }
    )


def _details(result: GeodesicResult) -> list[dict[str, Any]]:
    details = list(getattr(result, "map_details", ()) or ())
    return details if len(details) == result.m else [{} for _ in range(result.m)]


def _small_step(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on one torch thread (see :func:`geoviz.backend.few_cpu_threads`)."""
    from geoviz.backend import few_cpu_threads

    with few_cpu_threads(1):
        return fn(*args, **kwargs)


def _weights_key(weights: np.ndarray) -> tuple[float, ...]:
    # weights reach services already validated and rounded (SessionModel.set_weights /
    # entry_weights), so the key is the exact vector P_a is computed with
    return tuple(float(x) for x in np.asarray(weights, dtype=float).ravel())


def interpolation(
    model: SessionModel,
    result: GeodesicResult,
    weights: np.ndarray,
    n: int | None = None,
    seed: int = 0,
) -> SoftLabeledDataset:
    """``P_a = (sum_i a_i T_i)#Q`` (paper Sec. 3.3) at ``weights`` from
    :func:`~geoviz.app.state.entry_weights`. Cached by the exact weights."""
    key = ("interp", model.scenario.key(), _weights_key(weights), n, seed)
    w = np.asarray(weights, dtype=float)
    return store().get_or_compute(key, lambda: _small_step(result.interpolate, w, n=n, seed=seed))


def mixup(model: SessionModel, result: GeodesicResult, weights: np.ndarray) -> SoftLabeledDataset:
    """The Mixup baseline at ``weights``: references combined through random pairings
    instead of the OTDD maps (same ``N_Q`` samples as ``P_a``). Cached."""
    from geoviz.geodesic.mixup import mixup_interpolation

    key = ("mixup", model.scenario.key(), _weights_key(weights))
    w = np.asarray(weights, dtype=float)
    return store().get_or_compute(
        key,
        lambda: mixup_interpolation(
            result.target, list(result.references), w, seed=model.scenario.seed
        ),
    )


def mccann(model: SessionModel, result: GeodesicResult, i: int, t: float) -> SoftLabeledDataset:
    """McCann interpolation ``((1-t) Id + t T_i)#Q``. Cached by ``(i, round(t, 3))``."""
    key = ("mccann", model.scenario.key(), int(i), round(float(t), 3))
    return store().get_or_compute(key, lambda: _small_step(result.mccann, int(i), float(t)))


# --------------------------------------------------------------------------- embedding

_WARM_UP: dict[str, threading.Thread | None] = {}
_WARM_UP_LOCK = threading.Lock()

#: how much nicer (Linux thread niceness) a background fit that no page waits for runs
BACKGROUND_NICENESS = 10


def lower_thread_priority(increment: int = BACKGROUND_NICENESS) -> bool:
    """Make the calling thread (only it, and the threads it starts) nicer by ``increment``.

    On 2 cores the browser drawing the page and the page's own script compete with
    background fits (UMAP compiling, an embedding nobody looks at yet); a niced
    thread takes the CPU only when they leave it. Linux sets niceness per thread
    (``setpriority`` on the thread's id); elsewhere this does nothing. Returns
    ``True`` when the priority was lowered.
    """
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + int(increment)))
    except (AttributeError, OSError):  # not Linux, or not allowed
        return False
    return True


def _warm_up_in_background() -> float | None:
    from geoviz.viz.embedding import warm_up_umap

    lower_thread_priority()
    return warm_up_umap()


def start_embedding_warm_up(model: SessionModel | None = None) -> threading.Thread | None:
    """Compile UMAP in a background thread (niced), once per server process, if needed.

    Called after a page ran, so that a Geodesic page opened later does not
    pay numba's compilation in its first UMAP fit. Skipped (returns ``None``)
    when ``GEOVIZ_EMBEDDING=pca``, and, with ``model``, while the scenario's
    embedding needs no fit: it is in memory, on disk (a restarted server reads
    it back without importing UMAP at all) or being fitted by
    :func:`start_embedding`. Returns the started thread.
    """
    from geoviz.viz.embedding import auto_method

    if model is not None and _embedding_needs_no_fit(model):
        return None
    with _WARM_UP_LOCK:
        if "thread" not in _WARM_UP:
            thread = None
            if auto_method() != "pca":
                thread = threading.Thread(
                    target=_warm_up_in_background, name="geoviz-umap-warm-up", daemon=True
                )
                thread.start()
            _WARM_UP["thread"] = thread
        return _WARM_UP["thread"]


def _embedding_params(model: SessionModel) -> dict[str, Any]:
    from geoviz.viz.embedding import auto_method

    return {
        "data": model.scenario.data_key(),
        "per_dataset": int(model.settings.embed_per_dataset),
        "seed": int(model.scenario.seed),
        "method": auto_method(),
    }


def _embedding_key(params: dict[str, Any]) -> tuple[Hashable, ...]:
    return ("embedding", *params.values())


def embedding_on_disk(model: SessionModel) -> bool:
    """Whether the scenario's fitted embedding is in the disk cache (nothing is read)."""
    from geoviz.backend import cache_key

    disk = _disk()
    if not disk.enabled:
        return False
    params = _embedding_params(model)
    return disk.path_for("app-embedding", cache_key("app-embedding", params)).is_file()


def _embedding_needs_no_fit(model: SessionModel) -> bool:
    key = _embedding_key(_embedding_params(model))
    return key in store() or store().job(key) is not None or embedding_on_disk(model)


def start_embedding(model: SessionModel, data: ScenarioData) -> BackgroundJob | None:
    """Start fitting the scenario's embedding in the background; ``None`` if it is ready.

    The embedding depends on the datasets only, not on the maps, so the app
    starts it together with the geodesic fit (:func:`start_geodesic`): UMAP's
    compilation and fit then overlap with the OTDD couplings (the explorer's
    payload needs both). An embedding on disk is read back (no UMAP import).
    """
    from geoviz.viz.embedding import Embedding, fit_embedding

    params = _embedding_params(model)
    key = _embedding_key(params)
    if key in store():
        return None

    def run(progress: Progress) -> Embedding:
        progress("embedding", 0.0)
        payload = _disk().get_or_compute(
            "app-embedding",
            params,
            lambda: fit_embedding(
                list(data.datasets),
                max_per_dataset=params["per_dataset"],
                seed=params["seed"],
                method=params["method"],
            ).to_payload(),
        )
        return Embedding.from_payload(payload)

    return store().start_job(key, run)


def embedding(model: SessionModel, data: ScenarioData) -> Embedding:
    """UMAP (or PCA) of ``Q`` and every ``P_i``: fitted once per scenario, kept on disk.

    The disk cache key is the scenario's *data* key (epsilon does not move the
    datasets), the points per dataset, the seed and the method; a restarted
    server reads the embedding back instead of refitting it. Joins the
    background fit of :func:`start_embedding` when one runs.
    """
    key = _embedding_key(_embedding_params(model))
    ready = store().get(key)
    if ready is not None:
        return ready
    job = start_embedding(model, data)
    if job is None:  # stored meanwhile
        return store().get(key)
    job.wait()
    store().claim_job(key)
    if job.error_ is not None:
        raise job.error_
    return job.result_


def dataset_projection(model: SessionModel, data: ScenarioData) -> Embedding:
    """PCA of ``Q`` and every ``P_i`` (1000 points each) for the Datasets page. Cached."""
    from geoviz.viz.embedding import fit_embedding

    return store().get_or_compute(
        ("projection", model.scenario.data_key()),
        lambda: fit_embedding(list(data.datasets), method="pca", max_per_dataset=1000),
    )


def place_points(
    model: SessionModel, emb: Embedding, features: Any, tag: tuple[Hashable, ...]
) -> np.ndarray:
    """``emb.place(features)`` cached in memory and on disk under ``tag`` (e.g. the weights of ``P_a``)."""
    params = {**_embedding_params(model), "scenario": model.scenario.key(), "tag": list(tag)}

    def compute() -> np.ndarray:
        payload = _disk().get_or_compute(
            "app-placement", params, lambda: {"points": emb.place(features)}
        )
        return np.asarray(payload["points"], dtype=np.float64)

    return store().get_or_compute(("place", model.scenario.key(), *tag), compute)


# --------------------------------------------------------------------------- plan neighbours (teaching)

#: most target points the teaching panel shows at once
MAX_TEACHING_POINTS = 8


def teaching_indices(n_target: int, n: int, seed: int, text: str = "") -> np.ndarray:
    """Target points for the teaching panel: parsed from ``text`` or ``n`` seeded random ones.

    Parameters
    ----------
    n_target
        ``N_Q``.
    n
        How many random points (``1..MAX_TEACHING_POINTS``) when ``text`` is empty.
    seed
        Seed of the random choice.
    text
        Optional comma- or space-separated sample indices of ``Q`` (at most
        ``MAX_TEACHING_POINTS``; repeats dropped).

    Returns
    -------
    np.ndarray
        ``(n',)`` int64 indices in ``0..n_target-1``.

    Raises
    ------
    GeovizError
        ``text`` holds something other than indices in range, or too many.
    """
    parts = [p for p in str(text).replace(",", " ").split() if p]
    if not parts:
        k = int(min(max(int(n), 1), MAX_TEACHING_POINTS, n_target))
        return np.random.default_rng(int(seed)).choice(int(n_target), size=k, replace=False)
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise GeovizError(
            f"target indices must be whole numbers separated by commas, got {text!r}"
        ) from None
    bad = [v for v in values if not 0 <= v < n_target]
    if bad:
        raise GeovizError(f"target indices must be in 0..{n_target - 1}; out of range: {bad}")
    values = list(dict.fromkeys(values))
    if len(values) > MAX_TEACHING_POINTS:
        raise GeovizError(f"at most {MAX_TEACHING_POINTS} target points at once, got {len(values)}")
    return np.asarray(values, dtype=np.int64)


def _index(a: np.ndarray) -> torch.Tensor:
    """Indices as an int64 ``torch.Tensor`` (for indexing dataset tensors)."""
    import torch

    return torch.as_tensor(np.asarray(a, dtype=np.int64))


def _teaching_figure(result: GeodesicResult, i: int, idx: np.ndarray, k: int) -> go.Figure | None:
    from geoviz.viz.images import as_display_images, sample_captions, soft_label_captions
    from geoviz.viz.neighbours import plan_neighbours_grid, plan_neighbours_scatter

    q, ref = result.target, result.references[i]
    name = result.reference_names[i] if result.reference_names else ref.name
    nb_idx, nb_w, perp = result.neighbours(i, idx)
    nb_idx, nb_w = nb_idx[:, :k], nb_w[:, :k]
    n = len(idx)
    flat = _index(np.where(nb_idx >= 0, nb_idx, 0).reshape(-1))  # padding: any image, drawn blank
    rows = _index(idx)
    map_name = f"T{i + 1}(x)"
    title = f"Where {map_name} comes from: the {k} largest plan weights over {name}"
    if q.is_image and ref.is_image:
        shape = q.image_shape
        nb_images = as_display_images(ref.features[flat], shape)
        q_classes = sample_captions(q.labels[rows], q.classes, 9)
        nb_classes = sample_captions(ref.labels[flat], ref.classes, 10)
        return plan_neighbours_grid(
            as_display_images(q.features[rows], shape),
            [f"#{int(t)} · {c}" for t, c in zip(idx, q_classes, strict=True)],
            nb_images.reshape(n, k, *nb_images.shape[1:]),
            nb_w,
            as_display_images(result.mapped_features[i][rows], shape),
            perp,
            neighbour_captions=[nb_classes[r * k : (r + 1) * k] for r in range(n)],
            mapped_captions=soft_label_captions(result.soft_labels[i][rows], ref.classes, width=10),
            map_name=map_name,
            title=title,
        )
    if q.n_features in (2, 3):
        return plan_neighbours_scatter(
            q.features[rows, :2].numpy(),
            ref.features[flat, :2].numpy().reshape(n, k, 2),
            nb_w,
            result.mapped_features[i][rows, :2].numpy(),
            perp,
            reference_points=ref.features[:, :2].numpy(),
            target_labels=[f"#{int(t)}" for t in idx],
            reference_name=name,
            map_name=map_name,
            title=title,
            axis_titles=("x₁", "x₂") if q.n_features == 2 else ("x₁ (of 3)", "x₂ (of 3)"),
        )
    return None


def plan_neighbours_figure(
    model: SessionModel, result: GeodesicResult, i: int, indices: np.ndarray, k: int
) -> go.Figure | None:
    """Teaching figure for map ``i``: target points, their ``k`` heaviest plan neighbours, ``T_i(x)``.

    Images give a tiled grid (:func:`geoviz.viz.neighbours.plan_neighbours_grid`),
    2-D/3-D vectors a scatter (:func:`~geoviz.viz.neighbours.plan_neighbours_scatter`),
    other data ``None``. Cached by scenario, map, indices and ``k``.
    """
    _require_plan(result)
    idx = np.asarray(indices, dtype=np.int64).ravel()
    k = int(min(max(int(k), 1), result.neighbour_index[i].shape[1]))
    key = ("teach", model.scenario.key(), int(i), tuple(idx.tolist()), k)
    return store().get_or_compute(key, lambda: _teaching_figure(result, int(i), idx, k))


def plan_neighbours_table(
    result: GeodesicResult, i: int, indices: np.ndarray, k: int
) -> pd.DataFrame:
    """``pandas.DataFrame``: one row per (target point, plan neighbour) of map ``i``.

    Columns: ``target #``, ``target class``, ``effective neighbours``, ``rank``,
    ``reference #``, ``reference class``, ``weight`` (row-normalised plan weight);
    padding entries are left out.
    """
    import pandas as pd

    _require_plan(result)
    idx = np.asarray(indices, dtype=np.int64).ravel()
    q, ref = result.target, result.references[i]
    nb_idx, nb_w, perp = result.neighbours(i, idx)
    rows = []
    for r, t in enumerate(idx):
        for j in range(min(int(k), nb_idx.shape[1])):
            if nb_idx[r, j] < 0:
                continue
            rows.append(
                {
                    "target #": int(t),
                    "target class": q.classes[int(q.labels[int(t)])],
                    "effective neighbours": float(perp[r]),
                    "rank": j + 1,
                    "reference #": int(nb_idx[r, j]),
                    "reference class": ref.classes[int(ref.labels[int(nb_idx[r, j])])],
                    "weight": float(nb_w[r, j]),
                }
            )
    return pd.DataFrame(rows)


def _require_plan(result: GeodesicResult) -> None:
    if result.method == "neural":
        raise GeovizError(
            "neural maps have no plan neighbours; use nearest_reference_figure / "
            "nearest_reference_table (the closest real reference samples) instead"
        )


# --------------------------------------------------------------------------- nearest references (neural maps)


def _name(result: GeodesicResult, i: int) -> str:
    return result.reference_names[i] if result.reference_names else result.references[i].name


def _axis_titles(dim: int) -> tuple[str, str]:
    return ("x₁", "x₂") if dim == 2 else (f"x₁ (of {dim})", f"x₂ (of {dim})")


def distance_caption(d: float) -> str:
    """``"d 1.23"``: distance of a mapped point to a reference sample (3 significant digits)."""
    return f"d {float(d):.3g}"


def _nearest_figure(result: GeodesicResult, i: int, idx: np.ndarray, k: int) -> go.Figure:
    import plotly.graph_objects as go

    from geoviz.viz.images import (
        as_display_images,
        image_grid,
        sample_captions,
        soft_label_captions,
    )

    q, ref = result.target, result.references[i]
    name = _name(result, i)
    nb_idx, nb_d = result.nearest_references(i, idx, k=k)
    k = nb_idx.shape[1]
    n = len(idx)
    rows = _index(idx)
    map_name = f"T{i + 1}(x)"
    title = f"{map_name} next to real data: the {k} closest samples of {name}"
    if q.is_image and ref.is_image:
        shape = q.image_shape
        x_img = as_display_images(q.features[rows], shape)
        t_img = as_display_images(result.mapped_features[i][rows], shape)
        nb_img = as_display_images(ref.features[_index(nb_idx.reshape(-1))], shape)
        nb_img = nb_img.reshape(n, k, *nb_img.shape[1:])
        q_caps = sample_captions(q.labels[rows], q.classes, 9)
        nb_caps = sample_captions(ref.labels[_index(nb_idx.reshape(-1))], ref.classes, 10)
        t_caps = soft_label_captions(result.soft_labels[i][rows], ref.classes, width=10)
        images, captions = [], []
        for r in range(n):
            images.append(x_img[r])
            captions.append(f"#{int(idx[r])} · {q_caps[r]}")
            images.append(t_img[r])
            captions.append(f"generated<br>{t_caps[r]}")
            for j in range(k):
                images.append(nb_img[r, j])
                captions.append(f"{nb_caps[r * k + j]}<br>{distance_caption(nb_d[r, j])}")
        return image_grid(
            np.stack(images),
            captions,
            ncols=k + 2,
            title=title,
            column_titles=["x ∈ Q", map_name, *(f"#{j + 1}" for j in range(k))],
            tile_px=84,
            captions_below=True,
        )
    x = q.features[rows, :2].numpy().astype(float)
    t = result.mapped_features[i][rows, :2].numpy().astype(float)
    nb = ref.features[_index(nb_idx.reshape(-1)), :2].numpy().astype(float).reshape(n, k, 2)
    refs = ref.features[:, :2].numpy().astype(float)
    fig = go.Figure()
    fig.add_trace(
        go.Scattergl(
            x=refs[:, 0],
            y=refs[:, 1],
            mode="markers",
            name=name,
            marker={"size": 4, "color": "rgba(150,150,150,0.35)"},
            hoverinfo="skip",
        )
    )
    seg_x: list[float | None] = []
    seg_y: list[float | None] = []
    for r in range(n):
        seg_x += [x[r, 0], t[r, 0], None]
        seg_y += [x[r, 1], t[r, 1], None]
    fig.add_trace(
        go.Scatter(
            x=seg_x,
            y=seg_y,
            mode="lines",
            name="x → T(x)",
            line={"color": "rgba(31,119,180,0.5)", "width": 1, "dash": "dot"},
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=nb[..., 0].ravel(),
            y=nb[..., 1].ravel(),
            mode="markers",
            name=f"closest samples of {name}",
            marker={"size": 8, "color": "#2ca02c", "symbol": "circle-open", "line": {"width": 2}},
            text=[
                f"#{int(nb_idx[r, j])} · {distance_caption(nb_d[r, j])}"
                for r in range(n)
                for j in range(k)
            ],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x[:, 0],
            y=x[:, 1],
            mode="markers+text",
            name="x ∈ Q",
            marker={"size": 9, "color": "#222", "symbol": "x"},
            text=[f"#{int(t_)}" for t_ in idx],
            textposition="top center",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=t[:, 0],
            y=t[:, 1],
            mode="markers",
            name=map_name,
            marker={"size": 11, "color": "#d62728", "symbol": "star"},
        )
    )
    ax = _axis_titles(q.n_features)
    fig.update_layout(
        title=title, height=460, xaxis_title=ax[0], yaxis_title=ax[1], legend={"orientation": "h"}
    )
    return fig


def nearest_reference_figure(
    model: SessionModel, result: GeodesicResult, i: int, indices: np.ndarray, k: int
) -> go.Figure | None:
    """The teaching figure for maps without a plan (neural): per target point ``x``,
    ``T_i(x)`` and the ``k`` closest *real* samples of ``P_i`` with their distances.

    Images give a tiled grid, vectors a scatter of the first two coordinates; ``None``
    for data with a single feature. Works for barycentric results too. Cached by
    scenario, map, indices and ``k``.
    """
    idx = np.asarray(indices, dtype=np.int64).ravel()
    k = int(min(max(int(k), 1), result.references[int(i)].n_samples))
    if not result.target.is_image and result.target.n_features < 2:
        return None
    key = ("nearest-fig", model.scenario.key(), int(i), tuple(idx.tolist()), k)
    return store().get_or_compute(key, lambda: _nearest_figure(result, int(i), idx, k))


def nearest_reference_table(
    result: GeodesicResult, i: int, indices: np.ndarray, k: int
) -> pd.DataFrame:
    """One row per (target point, close reference sample) of map ``i``.

    Columns: ``target #``, ``target class``, ``T(x) top label``, ``rank``,
    ``reference #``, ``reference class``, ``distance`` (``||T_i(x) - x'||``).
    """
    import pandas as pd

    idx = np.asarray(indices, dtype=np.int64).ravel()
    q, ref = result.target, result.references[int(i)]
    nb_idx, nb_d = result.nearest_references(int(i), idx, k=int(k))
    top = result.soft_labels[int(i)][_index(idx)].argmax(dim=1).numpy()
    rows = []
    for r, t in enumerate(idx):
        for j in range(nb_idx.shape[1]):
            rows.append(
                {
                    "target #": int(t),
                    "target class": q.classes[int(q.labels[int(t)])],
                    "T(x) top label": ref.classes[int(top[r])],
                    "rank": j + 1,
                    "reference #": int(nb_idx[r, j]),
                    "reference class": ref.classes[int(ref.labels[int(nb_idx[r, j])])],
                    "distance": float(nb_d[r, j]),
                }
            )
    return pd.DataFrame(rows)


def nearest_reference_ratio(result: GeodesicResult, i: int, max_points: int = 2000) -> float:
    """Median distance from ``T_i(x)`` to its nearest sample of ``P_i``, divided by the
    median nearest-neighbour distance inside ``P_i`` (about 1: mapped points sit among
    the reference samples; much larger: off the data, e.g. blurred averages).

    The neural fit reports the same statistic (``map_details[i]["nearest_reference"]``);
    this computes it for any result (seeded subsample of at most ``max_points``) with
    :func:`geoviz.maps.base.nearest_reference_ratio`.
    """
    from geoviz.maps.base import nearest_reference_ratio as ratio

    return ratio(
        result.mapped_features[int(i)],
        result.references[int(i)].features,
        np.random.default_rng(0),
        max_mapped=max_points,
        max_reference=max_points,
    )


# --------------------------------------------------------------------------- barycentric vs neural


def map_pair(
    model: SessionModel,
) -> tuple[GeodesicResult | None, GeodesicResult | None]:
    """``(barycentric, neural)`` geodesics of the scenario's data and OTDD options, each
    the one in memory or ``None`` (never computes). The neural one uses the scenario's
    neural budget."""
    scenario = model.scenario
    return (
        geodesic_if_ready(model, scenario.with_method("barycentric")),
        geodesic_if_ready(model, scenario.with_method("neural")),
    )


def _check_pair(bary: GeodesicResult, neural: GeodesicResult) -> None:
    if bary.method != "barycentric" or neural.method != "neural":
        raise GeovizError("expected a barycentric and a neural result, in this order")
    if bary.target.fingerprint != neural.target.fingerprint or [
        r.fingerprint for r in bary.references
    ] != [r.fingerprint for r in neural.references]:
        raise GeovizError("the two results were fitted on different datasets")


def comparison_indices(result: GeodesicResult, n: int, seed: int = 0) -> np.ndarray:
    """``n`` target points, one class after the other (seeded): the same points are
    shown under both maps."""
    from geoviz.viz.images import example_indices

    q = result.target
    return example_indices(q.labels, int(min(max(int(n), 1), q.n_samples)), seed=int(seed))


def label_agreement(bary: GeodesicResult, neural: GeodesicResult) -> np.ndarray:
    """``(m,)``: share of target points whose hard label (argmax of the soft label over
    ``P_i``'s classes) is the same under the barycentric and the neural ``T_i``."""
    _check_pair(bary, neural)
    return np.array(
        [
            float((b.argmax(dim=1) == n.argmax(dim=1)).float().mean())
            for b, n in zip(bary.soft_labels, neural.soft_labels, strict=True)
        ]
    )


def _pair_key(model: SessionModel, what: str, *extra: Hashable) -> tuple[Hashable, ...]:
    s = model.scenario
    return (what, s.with_method("barycentric").key(), s.with_method("neural").key(), *extra)


def map_comparison_tables(
    model: SessionModel, bary: GeodesicResult, neural: GeodesicResult
) -> list[pd.DataFrame]:
    """One small table per map ``T_i``: rows ``quantity``, columns ``barycentric`` and
    ``neural`` (text, so a missing value reads :data:`NO_PLAN` or ``n/a``, never NaN).

    Rows: OTDD (entropic plan) / Monge cost of the trained map, label confidence,
    effective neighbours (barycentric only), nearest-reference ratio, held-out OT
    (neural: trained map vs identity), and the share of target points whose hard
    labels agree under both maps. Cached per pair of scenarios.
    """
    import pandas as pd

    _check_pair(bary, neural)

    def compute() -> list[pd.DataFrame]:
        agree = label_agreement(bary, neural)
        details = _details(neural)
        out = []
        for i in range(bary.m):
            d = details[i]
            held = format_stat(d.get("heldout_ot"), missing="n/a")
            ident = format_stat(d.get("heldout_ot_identity"), missing="n/a")
            rows = [
                (
                    "OTDD d² (plan) / Monge cost (neural)",
                    format_stat(bary.otdd[i]),
                    format_stat(neural.otdd[i]),
                ),
                (
                    "label confidence",
                    format_stat(bary.label_confidence[i], ".2f"),
                    format_stat(neural.label_confidence[i], ".2f"),
                ),
                ("effective neighbours", format_stat(bary.effective_neighbours[i], ".1f"), NO_PLAN),
                (
                    "nearest-reference ratio",
                    format_stat(nearest_reference_ratio(bary, i), ".2f"),
                    format_stat(d.get("nearest_reference"), ".2f"),
                ),
                (
                    "held-out OT (identity map)",
                    "n/a (not trained)",
                    f"{held} ({ident})",
                ),
                ("hard labels agree", f"{agree[i]:.0%}", f"{agree[i]:.0%}"),
            ]
            out.append(pd.DataFrame(rows, columns=["quantity", "barycentric", "neural"]))
        return out

    return store().get_or_compute(_pair_key(model, "compare-tables"), compute)


def _side_by_side_images(
    bary: GeodesicResult, neural: GeodesicResult, idx: np.ndarray, tile_px: int
) -> list[go.Figure]:
    from geoviz.viz.images import (
        as_display_images,
        mapped_samples_grid,
        sample_captions,
        soft_label_captions,
    )

    q = bary.target
    rows = _index(idx)
    shape = q.image_shape
    x_img = as_display_images(q.features[rows], shape)
    x_caps = [
        f"#{int(t)} · {c}"
        for t, c in zip(idx, sample_captions(q.labels[rows], q.classes, 9), strict=True)
    ]
    figs = []
    for i in range(bary.m):
        ref = bary.references[i]
        columns = []
        for label, res in (("barycentric", bary), ("neural", neural)):
            columns.append(
                (
                    f"{label}<br>T{i + 1}(x)",
                    as_display_images(res.mapped_features[i][rows], shape),
                    soft_label_captions(res.soft_labels[i][rows], ref.classes, width=10),
                )
            )
        figs.append(
            mapped_samples_grid(
                x_img,
                x_caps,
                columns,
                title=f"P{i + 1}: {_name(bary, i)}",
                tile_px=tile_px,
            )
        )
    return figs


def _side_by_side_scatter(
    bary: GeodesicResult, neural: GeodesicResult, idx: np.ndarray
) -> list[go.Figure]:
    import plotly.graph_objects as go

    q = bary.target
    rows = _index(idx)
    x = q.features[rows, :2].numpy().astype(float)
    ax = _axis_titles(q.n_features)
    figs = []
    styles = (
        ("barycentric", bary, "#1f77b4", "circle"),
        ("neural", neural, "#ff7f0e", "diamond"),
    )
    for i in range(bary.m):
        ref = bary.references[i]
        refs = ref.features[:, :2].numpy().astype(float)
        fig = go.Figure()
        fig.add_trace(
            go.Scattergl(
                x=refs[:, 0],
                y=refs[:, 1],
                mode="markers",
                name=f"{_name(bary, i)} samples",
                marker={"size": 4, "color": "rgba(150,150,150,0.35)"},
                hoverinfo="skip",
            )
        )
        for label, res, color, symbol in styles:
            pts = res.mapped_features[i][:, :2].numpy().astype(float)
            top = res.soft_labels[i].argmax(dim=1).numpy()
            fig.add_trace(
                go.Scattergl(
                    x=pts[:, 0],
                    y=pts[:, 1],
                    mode="markers",
                    name=f"{label} T{i + 1}#Q",
                    marker={"size": 5, "color": color, "symbol": symbol, "opacity": 0.55},
                    text=[str(ref.classes[int(k)]) for k in top],
                    hovertemplate="%{text}<extra>" + label + "</extra>",
                )
            )
        seg: dict[str, list[float | None]] = {"x": [], "y": []}
        for label, res, color, symbol in styles:
            t = res.mapped_features[i][rows, :2].numpy().astype(float)
            for r in range(len(idx)):
                seg["x"] += [x[r, 0], t[r, 0], None]
                seg["y"] += [x[r, 1], t[r, 1], None]
            fig.add_trace(
                go.Scatter(
                    x=t[:, 0],
                    y=t[:, 1],
                    mode="markers",
                    name=f"{label} T{i + 1}(x), chosen x",
                    marker={
                        "size": 11,
                        "color": color,
                        "symbol": symbol,
                        "line": {"width": 1.5, "color": "#222"},
                    },
                    showlegend=False,
                )
            )
        fig.add_trace(
            go.Scatter(
                x=seg["x"],
                y=seg["y"],
                mode="lines",
                line={"color": "rgba(40,40,40,0.5)", "width": 1, "dash": "dot"},
                showlegend=False,
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x[:, 0],
                y=x[:, 1],
                mode="markers+text",
                name="chosen x ∈ Q",
                marker={"size": 10, "color": "#222", "symbol": "x"},
                text=[f"#{int(t)}" for t in idx],
                textposition="top center",
            )
        )
        fig.update_layout(
            title=f"P{i + 1}: {_name(bary, i)}",
            height=420,
            xaxis_title=ax[0],
            yaxis_title=ax[1],
            legend={"orientation": "h", "y": -0.2},
            margin={"l": 10, "r": 10, "t": 40, "b": 10},
        )
        figs.append(fig)
    return figs


def side_by_side_figures(
    model: SessionModel,
    bary: GeodesicResult,
    neural: GeodesicResult,
    indices: np.ndarray,
    tile_px: int = 96,
) -> list[go.Figure]:
    """One figure per reference ``P_i`` comparing both maps on the SAME target points.

    Images: rows ``[x | barycentric T_i(x) | neural T_i(x)]`` (captions: the class of
    ``x``, the top soft label of each image). Vectors: a scatter of the first two
    coordinates with ``P_i`` (grey), both pushforwards ``T_i#Q`` and, for the chosen
    points, segments ``x -> T_i(x)`` to both images. ``tile_px``: on-screen size of one
    image tile. Cached by the pair, the indices and ``tile_px``.
    """
    _check_pair(bary, neural)
    idx = np.asarray(indices, dtype=np.int64).ravel()

    def compute() -> list[go.Figure]:
        if bary.target.is_image:
            return _side_by_side_images(bary, neural, idx, int(tile_px))
        return _side_by_side_scatter(bary, neural, idx)

    key = _pair_key(model, "compare-figs", tuple(idx.tolist()), int(tile_px))
    return store().get_or_compute(key, compute)


# --------------------------------------------------------------------------- OTDD between all pairs


def pairwise_otdd_if_ready(model: SessionModel) -> np.ndarray | None:
    return store().get(("pairwise", model.scenario.otdd_key()))


def pairwise_otdd(model: SessionModel, progress: Progress | None = None) -> np.ndarray:
    """Symmetric ``(m+1, m+1)`` OTDD ``d^2`` between ``Q, P_1, ..., P_m``. Cached.

    ``progress(pair description, fraction done)`` is called before each pair.
    """
    scenario = model.scenario
    data = scenario_data(model)

    def compute() -> np.ndarray:
        from geoviz.ot.otdd import OTDDConfig, otdd

        config = OTDDConfig(epsilon=float(scenario.epsilon), seed=int(scenario.seed))
        ds = data.datasets
        n = len(ds)
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        mat = np.zeros((n, n))
        for k, (i, j) in enumerate(pairs):
            stage = f"OTDD {ds[i].name} ↔ {ds[j].name}"

            def sub(inner: str, fraction: float, k: int = k, stage: str = stage) -> None:
                if progress is not None:
                    progress(f"{stage} ({inner})", (k + float(fraction)) / len(pairs))

            sub("start", 0.0)
            res = otdd(ds[i], ds[j], config, sub, keep_coupling=False, cache=_disk())
            mat[i, j] = mat[j, i] = float(res.cost)
        if progress is not None:
            progress("done", 1.0)
        return mat

    # OTDD between the datasets themselves: the same for barycentric and neural maps
    return store().get_or_compute(("pairwise", scenario.otdd_key()), compute)


# --------------------------------------------------------------------------- export


def export_payload(
    ds: SoftLabeledDataset, fmt: ExportFormat, rule: HardLabelRule = "block-sample", seed: int = 0
) -> tuple[bytes, str, str]:
    """``(bytes, file name, MIME type)`` of ``ds`` in ``fmt`` with hard labels by ``rule``
    (:func:`geoviz.export.export_bytes`). Cached by the dataset's fingerprint and name,
    the format, the rule and the seed."""
    from geoviz.export import export_bytes

    return store().get_or_compute(
        _export_key(ds, fmt, rule, seed),
        lambda: export_bytes(ds, fmt, hard_label_rule=rule, hard_label_seed=seed),
    )


def _export_key(ds: SoftLabeledDataset, fmt: str, rule: str, seed: int) -> tuple[Hashable, ...]:
    return ("export", ds.fingerprint, ds.name, fmt, rule, int(seed))


def export_ready(ds: SoftLabeledDataset, fmt: ExportFormat, rule: HardLabelRule, seed: int) -> bool:
    """Whether :func:`export_payload` has these bytes in memory already (no work done)."""
    return _export_key(ds, fmt, rule, seed) in store()


def export_folder(root: Path, subfolder: str = "") -> Path:
    """The folder of a server-side export: ``root`` or one sanitised sub-folder of it.

    ``subfolder`` is what a visitor typed: reduced to one safe name
    (:func:`geoviz.export.safe_name`; ``/``, ``..`` and ``~`` cannot survive it), created
    inside ``root`` if missing, and the resolved folder must still be inside ``root`` (a
    symlink planted there cannot lead out). Nothing is created anywhere else.

    Raises
    ------
    ExportError
        The folder would be outside ``root``, or ``root`` is not a folder.
    """
    from geoviz.errors import ExportError
    from geoviz.export import safe_name

    base = Path(root).resolve()
    if not base.is_dir():
        raise ExportError("the server's export folder does not exist; ask its operator")
    text = str(subfolder).strip()
    folder = base / safe_name(text, fallback="exports") if text else base
    if folder != base and not folder.is_symlink():
        folder.mkdir(exist_ok=True)  # one level, inside root: base exists
    if not folder.resolve().is_relative_to(base) or not folder.is_dir():
        raise ExportError(f"{folder.name!r} is not a folder inside the server's export folder")
    return folder.resolve()


def save_export(
    ds: SoftLabeledDataset,
    root: Path,
    fmt: ExportFormat,
    *,
    subfolder: str = "",
    overwrite: bool,
    rule: HardLabelRule,
    seed: int,
) -> ExportResult:
    """Write ``ds`` as ``<safe name>.<ext>`` into :func:`export_folder` ``(root, subfolder)``
    with :func:`geoviz.export.export_dataset`.

    ``root`` is the operator's ``GEOVIZ_EXPORT_ROOT`` (:attr:`AppSettings.export_root`);
    without one the app offers only the browser download.

    Raises
    ------
    ExportExistsError
        The file exists and ``overwrite`` is false (nothing is written).
    GeovizError, OSError
        Invalid input, or the folder cannot be written.
    """
    from geoviz.export import export_dataset, safe_name

    ext = {"npz": ".npz", "pt": ".pt", "parquet": ".parquet", "imagefolder": ".zip"}[fmt]
    target = export_folder(root, subfolder) / (safe_name(ds.name, fallback="synthetic") + ext)
    return export_dataset(
        ds, target, format=fmt, overwrite=overwrite, hard_label_rule=rule, hard_label_seed=seed
    )


def hard_label_shares(
    result: GeodesicResult, pa: SoftLabeledDataset, rule: HardLabelRule, seed: int
) -> pd.DataFrame:
    """Per reference ``i``: weight ``a_i``, soft-label mass of its block and the share of
    hard labels under ``rule`` and under ``"argmax"`` (blocks from ``result.block_slices``).

    With ``"block-sample"`` the share is a multinomial draw with probabilities
    ``a``, so it matches ``a_i`` within sampling error; ``"argmax"`` favours the
    largest weights.
    """
    import pandas as pd

    from geoviz.export import dataset_hard_labels

    soft = pa.soft_labels.numpy()
    weights = np.asarray(pa.metadata["weights"], dtype=float)
    n = max(len(soft), 1)
    chosen, _ = dataset_hard_labels(pa, rule, seed)  # exactly the exported labels
    top = soft.argmax(axis=1)
    columns = np.arange(soft.shape[1])
    rows = []
    for i, (name, block) in enumerate(
        zip(result.reference_names, result.block_slices, strict=True)
    ):
        cols = columns[block]
        rows.append(
            {
                "reference": name,
                "weight a_i": float(weights[i]),
                "soft-label mass": float(soft[:, cols].sum() / n),
                f"hard-label share ({rule})": float(np.isin(chosen, cols).mean()),
                "hard-label share (argmax)": float(np.isin(top, cols).mean()),
            }
        )
    return pd.DataFrame(rows)


def error_text(err: BaseException) -> str:
    """What the app shows a visitor for an exception: one sentence, never a traceback.

    Input errors (:class:`~geoviz.errors.GeovizError`) carry the library's message, written
    for users. Anything else may hold server paths or file contents: the visitor reads only
    its kind, and the full traceback goes to the server's log (``geoviz.app`` logger).
    """
    if isinstance(err, GeovizError):
        return str(err)
    if isinstance(err, MemoryError):
        return "The server ran out of memory for this request; try fewer samples."
    _log.error("unexpected error shown to a visitor as a sentence", exc_info=err)
    if isinstance(err, OSError):
        return "The server could not read or write a file for this request (details in its log)."
    return f"Something went wrong on the server ({type(err).__name__}); details are in its log."


# --------------------------------------------------------------------------- dataset choices and uploads


def choice_options(model: SessionModel) -> dict[str, DatasetChoice]:
    """Datasets a user can pick, ``token -> choice``: the scenario's own choices
    first (presets may use seeds/options), then every registry dataset (train
    split), then the session's uploads."""
    from geoviz.data.registry import list_datasets

    out: dict[str, DatasetChoice] = {}
    for c in model.scenario.choices:
        out.setdefault(c.token, c)
    for info in list_datasets():
        c = DatasetChoice(info.name)
        out.setdefault(c.token, c)
    for up in model.uploads.values():
        c = DatasetChoice.from_upload(up)
        out.setdefault(c.token, c)
    for name in served_datasets(model.settings.data_dirs):  # only with GEOVIZ_DATA_DIRS
        c = DatasetChoice(name, source="server")
        out.setdefault(c.token, c)
    return out


def choice_caption(choice: DatasetChoice) -> str:
    """Label for select boxes, flagging datasets that need a download.

    Registry entries with ``offline=False`` (torchvision downloads) are marked
    ``"(needs internet: download fails offline)"`` so nobody picks them on an
    offline machine expecting them to load.
    """
    if choice.source == "upload":
        return choice.label
    from geoviz.data.registry import dataset_info

    try:
        info = dataset_info(choice.name)
    except GeovizError:
        return choice.label
    if info.offline:
        return choice.label
    return f"{choice.label} (needs internet: download fails offline)"


def check_upload(filename: str, data: bytes) -> LabeledDataset:
    """Parse an upload with :func:`geoviz.data.formats.load_upload` (cached by content).

    Raises the library's :class:`~geoviz.errors.GeovizError` for invalid files.
    """
    import hashlib

    from geoviz.data.formats import load_upload

    key = ("upload", hashlib.sha256(data).hexdigest(), filename)
    return store().get_or_compute(key, lambda: load_upload(data, filename))


def save_upload(upload: Upload) -> None:
    """Keep an uploaded file on this server's disk cache, by the sha256 of its bytes.

    A URL naming the upload (:func:`~geoviz.app.state.scenario_to_token`) then
    works in any later session on the same server, after a restart too.
    """
    import torch

    key = _upload_key(upload.digest)
    if _disk().load("app-upload", key) is None:
        data = torch.frombuffer(bytearray(upload.data), dtype=torch.uint8)
        _disk().store("app-upload", key, {"filename": upload.filename, "data": data})


def _upload_key(digest: str) -> str:
    from geoviz.backend import cache_key

    return cache_key("app-upload", {"digest": str(digest)})


def stored_upload(digest: str) -> Upload | None:
    """The upload with this sha256 from the disk cache (:func:`save_upload`), or ``None``."""
    payload = _disk().load("app-upload", _upload_key(digest))
    if payload is None:
        return None
    data = bytes(payload["data"].numpy().tobytes())
    up = Upload(filename=str(payload["filename"]), data=data)
    return up if up.digest == digest else None


# --------------------------------------------------------------------------- evidence (transfer)


@dataclass(frozen=True)
class EvidenceRequest:
    """What the Evidence page runs: ``k``-shot target, training preset, grid and seeds."""

    k: int = 5
    preset: str = "cpu"
    resolution: int = 3
    seeds: tuple[int, ...] = (0, 1, 2)
    backend: str = "auto"


@dataclass(frozen=True)
class EvidenceResult:
    """Table-1 comparison at ``a_hat`` and the simplex study for one scenario.

    Attributes
    ----------
    comparison
        :class:`~geoviz.transfer.table.MethodComparison` (every method, every seed).
    study
        :class:`~geoviz.transfer.grid.GridStudy` (``W^2(P_a, Q)`` and accuracy per grid point).
    reference_names
        Names of ``P_1..P_m``.
    n_test
        Target test samples the accuracies are measured on.
    seconds
        Wall time of the whole job.
    """

    comparison: Any
    study: Any
    reference_names: tuple[str, ...]
    n_test: int
    seconds: float


def evidence_scenario(model: SessionModel, k: int) -> Scenario:
    """The scenario with a ``k``-shot target: the maps only see ``k`` labels per class of Q
    (the others are kNN pseudo-labels), as in the paper's transfer experiments."""
    from geoviz.app.state import FewShotOptions

    few = model.scenario.few_shot
    return model.scenario.with_(
        few_shot=FewShotOptions(enabled=True, k=int(k), n_neighbors=int(few.n_neighbors))
    )


def _evidence_key(scenario: Scenario, request: EvidenceRequest) -> tuple[Hashable, ...]:
    return ("evidence", scenario.key(), dataclasses.astuple(request))


def evidence_if_ready(model: SessionModel, request: EvidenceRequest) -> EvidenceResult | None:
    """The collected evidence for the scenario and ``request``, else ``None`` (never computes)."""
    return store().get(_evidence_key(evidence_scenario(model, request.k), request))


def finish_evidence(model: SessionModel, request: EvidenceRequest) -> BackgroundJob | None:
    """Collect the finished job (its result goes to the store; an error stays on the job)."""
    return store().claim_job(_evidence_key(evidence_scenario(model, request.k), request))


def evidence_job(model: SessionModel, request: EvidenceRequest) -> BackgroundJob | None:
    """The running (or finished, unclaimed) evidence job, if any."""
    return store().job(_evidence_key(evidence_scenario(model, request.k), request))


def start_evidence(model: SessionModel, request: EvidenceRequest) -> BackgroundJob:
    """Run the transfer experiments of the scenario in the background (one job per request).

    Steps: the ``k``-shot scenario's datasets and geodesic (from the caches when
    fitted before), the target's test split, then every method and seed at
    ``a_hat`` (:func:`geoviz.transfer.table.compare_methods`) and the simplex
    study (:func:`geoviz.transfer.grid.run_grid`, checkpointed per grid point in
    the disk cache folder, so an interrupted job resumes). Runs as Ray tasks when
    Ray is installed (``request.backend``), else sequentially.
    """
    from geoviz.app.state import SessionModel as _Model

    scenario = evidence_scenario(model, request.k)
    sub = _Model({}, model.settings)
    sub.uploads.update(model.uploads)
    sub.scenario = scenario
    key = _evidence_key(scenario, request)

    def run(progress: Progress) -> EvidenceResult:
        from geoviz.backend import default_cache_dir
        from geoviz.geodesic.pipeline import fit_geodesic
        from geoviz.transfer.experiment import make_task
        from geoviz.transfer.grid import run_grid
        from geoviz.transfer.table import compare_methods

        start = time.perf_counter()
        progress("loading datasets", 0.0)
        data = scenario_data(sub)
        geodesic = geodesic_if_ready(sub)
        if geodesic is None:
            geodesic = fit_geodesic(
                data.target,
                list(data.references),
                _geodesic_config(scenario),
                progress=lambda stage, f: progress(f"maps ({stage})", 0.25 * f),
                cache=_disk(),
            )
            store().put(_geodesic_key(scenario), geodesic)
        test = _target_test_split(sub, data)
        task = make_task(
            data.target_true,
            test,
            list(data.references),
            request.k,
            seed=scenario.seed,
            n_neighbors=scenario.few_shot.n_neighbors,
        )

        def runs(stage: str, start: float, span: float) -> Callable[[int, int], None]:
            return lambda done, n: progress(f"{stage} ({done}/{n} runs)", start + span * done / n)

        # the same task, preset, seeds and backend for the table and the simplex study
        common = {"seeds": request.seeds, "preset": request.preset, "backend": request.backend}
        comparison = compare_methods(
            task, geodesic, progress=runs("Table 1 at a_hat", 0.25, 0.25), **common
        )
        study = run_grid(
            task,
            geodesic,
            resolution=request.resolution,
            checkpoint_dir=default_cache_dir() / "transfer" / scenario.key(),
            progress=runs("simplex study", 0.5, 0.5),
            **common,
        )
        progress("done", 1.0)
        return EvidenceResult(
            comparison=comparison,
            study=study,
            reference_names=tuple(geodesic.reference_names),
            n_test=int(test.n_samples),
            seconds=time.perf_counter() - start,
        )

    return store().start_job(key, run)


def _target_test_split(model: SessionModel, data: ScenarioData) -> LabeledDataset:
    """The scenario target's test split, in the same feature space as ``data``.

    Raises
    ------
    DatasetError
        The target is an upload (one split only): transfer accuracy needs held-out data.
    """
    from geoviz.data.preprocess import harmonize

    scenario = model.scenario
    choice = scenario.target
    if choice.source == "upload":
        raise DatasetError(
            "transfer experiments need the target's test split; an uploaded target has only "
            "one split (choose a registry dataset as Q)",
            choice.name,
        )
    test_choice = dataclasses.replace(choice, split="test")
    test = _load_choice(model, test_choice, scenario.n_target, scenario.seed)
    test = harmonize(
        [data.target_true, test], size=scenario.image_size, channels=scenario.channels
    )[1]
    return dataclasses.replace(test, name=f"{data.target_true.name} (test)")
