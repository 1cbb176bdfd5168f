"""The app's compute layer: every expensive call, cached per process.

Pages call these functions and only lay out widgets and figures. Results are
kept in one :class:`~geoviz.app_state.ResultStore` created with
``st.cache_resource`` (so they are shared by every page and session of the
server process, and cleared by Streamlit's "Clear cache"), keyed by the
scenario's hash (dataset choices, sizes, seeds, OT options; uploads by the
sha256 of their bytes) plus the call's parameters. The geodesic itself is also
stored on disk by :func:`geoviz.geodesic.fit_geodesic` (keyed by dataset
fingerprints and config), so a restarted app finds it again.

Why not decorate ``fit_geodesic`` with ``st.cache_resource`` directly: the
fit must outlive the page that started it and report progress to whichever
page watches it, so it runs as a :class:`~geoviz.app_state.BackgroundJob`
in the store (:func:`geodesic_with_status`). Pure functions without UI (the
objective grid, the embedding) use ``st.cache_resource`` with explicit
string keys.

Streamlit is imported here and in the pages only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from geoviz.app_state import DatasetChoice, ResultStore, Scenario, SessionModel
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import GeovizError

Progress = Callable[[str, float], None]

__all__ = [
    "ScenarioData",
    "embed_points",
    "embedding",
    "export_payload",
    "geodesic_if_ready",
    "interpolation",
    "map_sharpness",
    "mccann",
    "objective_grid",
    "pairwise_otdd",
    "pairwise_otdd_if_ready",
    "plan_neighbours_figure",
    "plan_neighbours_table",
    "scenario_data",
    "set_epsilon",
    "start_embedding_warm_up",
    "store",
    "teaching_indices",
]


@st.cache_resource(show_spinner=False)
def store() -> ResultStore:
    """The process-wide result store (one per server process)."""
    return ResultStore(max_entries=48)


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

        up = model.upload_for(choice)
        ds = load_upload(up.data, up.filename)
        if ds.n_samples > n:
            ds = stratified_subsample(ds, n, seed=seed)
        return ds
    from geoviz.data.registry import load_dataset

    own_seed = seed if choice.seed is None else int(choice.seed)
    return load_dataset(
        choice.name, split=choice.split, n=int(n), seed=own_seed, **choice.loader_kwargs()
    )


def _unique(datasets: list[LabeledDataset]) -> list[LabeledDataset]:
    from geoviz.geodesic.labels import unique_names

    names = unique_names([ds.name for ds in datasets])
    return [
        ds if ds.name == nm else dataclasses.replace(ds, name=nm)
        for ds, nm in zip(datasets, names, strict=True)
    ]


def scenario_data(model: SessionModel) -> ScenarioData:
    """Load, subsample, harmonise (and few-shot) the scenario's datasets. Cached."""
    scenario = model.scenario

    def compute() -> ScenarioData:
        from geoviz.data.preprocess import few_shot, harmonize

        start = time.perf_counter()
        target = _load_choice(model, scenario.target, scenario.n_target, scenario.seed)
        refs = [
            _load_choice(model, c, scenario.n_reference, scenario.seed) for c in scenario.references
        ]
        datasets = harmonize([target, *refs], size=scenario.image_size, channels=scenario.channels)
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


# --------------------------------------------------------------------------- geodesic


def _geodesic_config(scenario: Scenario) -> Any:
    from geoviz.geodesic.pipeline import GeodesicConfig
    from geoviz.ot.otdd import OTDDConfig

    return GeodesicConfig(otdd=OTDDConfig(epsilon=float(scenario.epsilon), seed=int(scenario.seed)))


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


def map_sharpness(result: Any) -> list[dict[str, Any]]:
    """Per map: ``reference``, ``otdd``, ``epsilon_abs``, ``effective_neighbours``,
    ``label_confidence`` and ``blurry`` (see :meth:`GeodesicResult.map_summaries`)."""
    return result.map_summaries()


def geodesic_if_ready(model: SessionModel) -> Any | None:
    """The fitted :class:`GeodesicResult` if already in memory, else ``None`` (never computes).

    A background fit that finished while no page was watching is collected here.
    """
    key = ("geodesic", model.scenario.key())
    ready = store().get(key)
    if ready is None:
        job = store().claim_job(key)
        if job is not None and job.error_ is None:
            ready = job.result_
    return ready


def _fit_job(model: SessionModel, data: ScenarioData) -> Callable[[Progress], Any]:
    """The geodesic fit of the scenario as a function of a progress callback (no Streamlit)."""
    config = _geodesic_config(model.scenario)

    def run(progress: Progress) -> Any:
        from geoviz.backend import get_cache
        from geoviz.geodesic.pipeline import fit_geodesic

        return fit_geodesic(
            data.target, list(data.references), config, progress=progress, cache=get_cache()
        )

    return run


@st.cache_resource(show_spinner=False, max_entries=16)
def _objective_grid(
    key: str, m: int, resolution: int, _result: Any
) -> tuple[np.ndarray, np.ndarray]:
    from geoviz.geodesic.distances import simplex_grid

    grid = simplex_grid(m, resolution)
    return grid, np.asarray(_result.objective(grid), dtype=float)


def objective_grid(
    model: SessionModel, result: Any, resolution: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(grid (K, m), W^2(P_a, Q) (K,))`` on ``simplex_grid(m, resolution)``. Cached."""
    m = len(result.references)
    return _objective_grid(model.scenario.key(), m, int(resolution), result)


def _small_step(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on one torch thread (see :func:`geoviz.backend.few_cpu_threads`)."""
    from geoviz.backend import few_cpu_threads

    with few_cpu_threads(1):
        return fn(*args, **kwargs)


def interpolation(
    model: SessionModel, result: Any, weights: np.ndarray, n: int | None = None, seed: int = 0
) -> SoftLabeledDataset:
    """``P_a`` at ``weights`` (rounded to 1e-4 for the cache key). Cached, cheap to recompute."""
    w = np.asarray(weights, dtype=float)
    key = ("interp", model.scenario.key(), tuple(np.round(w, 4).tolist()), n, seed)
    return store().get_or_compute(key, lambda: _small_step(result.interpolate, w, n=n, seed=seed))


def mccann(model: SessionModel, result: Any, i: int, t: float) -> SoftLabeledDataset:
    """McCann interpolation ``((1-t) Id + t T_i)#Q``. Cached by ``(i, round(t, 3))``."""
    key = ("mccann", model.scenario.key(), int(i), round(float(t), 3))
    return store().get_or_compute(key, lambda: _small_step(result.mccann, int(i), float(t)))


@st.cache_resource(show_spinner=False, max_entries=6)
def _embedding(key: str, per_dataset: int, seed: int, _datasets: tuple[LabeledDataset, ...]) -> Any:
    from geoviz.viz.embedding import fit_embedding

    return fit_embedding(list(_datasets), max_per_dataset=per_dataset, seed=seed)


@st.cache_resource(show_spinner=False)
def start_embedding_warm_up() -> Any:
    """Compile UMAP in a background thread, once per server process.

    Called by ``app.py`` after a page ran, so that a Geodesic page opened
    later does not pay numba's ~7 s compilation in its first UMAP fit.
    Skipped (returns ``None``) when ``GEOVIZ_EMBEDDING=pca``. Returns the
    started thread.
    """
    import threading

    from geoviz.viz.embedding import auto_method, warm_up_umap

    if auto_method() == "pca":
        return None

    thread = threading.Thread(target=warm_up_umap, name="geoviz-umap-warm-up", daemon=True)
    thread.start()
    return thread


def embedding(model: SessionModel, data: ScenarioData) -> Any:
    """UMAP (or PCA fallback) of ``Q`` and every ``P_i``, fitted once per scenario."""
    return _embedding(
        model.scenario.key(), model.settings.embed_per_dataset, model.scenario.seed, data.datasets
    )


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


def _index(a: np.ndarray) -> Any:
    """Indices as an int64 ``torch.Tensor`` (for indexing dataset tensors)."""
    import torch

    return torch.as_tensor(np.asarray(a, dtype=np.int64))


def _teaching_figure(result: Any, i: int, idx: np.ndarray, k: int) -> Any:
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
    model: SessionModel, result: Any, i: int, indices: np.ndarray, k: int
) -> Any | None:
    """Teaching figure for map ``i``: target points, their ``k`` heaviest plan neighbours, ``T_i(x)``.

    Images give a tiled grid (:func:`geoviz.viz.neighbours.plan_neighbours_grid`),
    2-D/3-D vectors a scatter (:func:`~geoviz.viz.neighbours.plan_neighbours_scatter`),
    other data ``None``. Cached by scenario, map, indices and ``k``.
    """
    idx = np.asarray(indices, dtype=np.int64).ravel()
    k = int(min(max(int(k), 1), result.neighbour_index[i].shape[1]))
    key = ("teach", model.scenario.key(), int(i), tuple(idx.tolist()), k)
    return store().get_or_compute(key, lambda: _teaching_figure(result, int(i), idx, k))


def plan_neighbours_table(result: Any, i: int, indices: np.ndarray, k: int) -> Any:
    """``pandas.DataFrame``: one row per (target point, plan neighbour) of map ``i``.

    Columns: ``target #``, ``target class``, ``effective neighbours``, ``rank``,
    ``reference #``, ``reference class``, ``weight`` (row-normalised plan weight);
    padding entries are left out.
    """
    import pandas as pd

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


# --------------------------------------------------------------------------- OTDD between all pairs


def pairwise_otdd_if_ready(model: SessionModel) -> np.ndarray | None:
    return store().get(("pairwise", model.scenario.key()))


def pairwise_otdd(model: SessionModel, progress: Progress | None = None) -> np.ndarray:
    """Symmetric ``(m+1, m+1)`` OTDD ``d^2`` between ``Q, P_1, ..., P_m``. Cached.

    ``progress(pair description, fraction done)`` is called before each pair.
    """
    scenario = model.scenario
    data = scenario_data(model)

    def compute() -> np.ndarray:
        from geoviz.backend import get_cache
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
            res = otdd(ds[i], ds[j], config, sub, keep_coupling=False, cache=get_cache())
            mat[i, j] = mat[j, i] = float(res.cost)
        if progress is not None:
            progress("done", 1.0)
        return mat

    return store().get_or_compute(("pairwise", scenario.key()), compute)


# --------------------------------------------------------------------------- export


def export_payload(
    model: SessionModel,
    ds: SoftLabeledDataset,
    fmt: str,
    rule: str = "block-sample",
    seed: int = 0,
) -> tuple[bytes, str, str]:
    """``export_bytes(ds, fmt, hard_label_rule=rule, hard_label_seed=seed)``, cached by
    the dataset's fingerprint and name, the format, the hard-label rule and seed
    (key ``("export", fingerprint, name, fmt, rule, seed)``)."""
    from geoviz.export import export_bytes

    key = ("export", ds.fingerprint, ds.name, fmt, rule, int(seed))
    return store().get_or_compute(
        key,
        lambda: export_bytes(ds, fmt, hard_label_rule=rule, hard_label_seed=seed),
    )


def error_text(err: BaseException) -> str:
    """What the app shows for an exception: the library's message for input errors."""
    if isinstance(err, GeovizError):
        return str(err)
    return f"{type(err).__name__}: {err}"


# --------------------------------------------------------------------------- UI helpers for pages


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


def data_or_error(model: SessionModel) -> ScenarioData | None:
    """:func:`scenario_data` with a spinner; shows the error inline and returns ``None``."""
    try:
        if ("data", model.scenario.data_key()) in store():
            return scenario_data(model)
        with st.spinner("Loading datasets…"):
            return scenario_data(model)
    except GeovizError as err:
        st.error(f"Could not load the scenario's datasets: {err}")
    return None


def throttled_progress(bar: Any, *, min_interval: float = 0.2) -> Progress:
    """A ``progress(stage, fraction)`` callback for an ``st.progress`` bar.

    Sinkhorn reports every iteration; this forwards an update only when the
    stage changes, the bar moves by 1 %, or ``min_interval`` seconds passed,
    so the browser is not flooded.
    """
    state = {"stage": None, "fraction": -1.0, "time": 0.0}

    def progress(stage: str, fraction: float) -> None:
        now = time.perf_counter()
        frac = float(np.clip(fraction, 0.0, 1.0))
        if (
            stage != state["stage"]
            or frac - state["fraction"] >= 0.01
            or now - state["time"] >= min_interval
        ):
            bar.progress(frac, text=stage)
            state.update(stage=stage, fraction=frac, time=now)

    return progress


def geodesic_with_status(model: SessionModel, poll_seconds: float = 0.1) -> Any | None:
    """The scenario's geodesic, computed in the background with an ``st.status`` box.

    The fit runs in a :class:`~geoviz.app_state.BackgroundJob` shared by every
    page and session of the process; this function shows its stages and
    progress until it is done. Leaving the page stops only the watching, not
    the fit: coming back (to any page that needs it) shows the same job,
    further along. Returns ``None`` (after showing the error inline) when the
    inputs are invalid.
    """
    ready = geodesic_if_ready(model)
    if ready is not None:
        return ready
    data = data_or_error(model)
    if data is None:
        return None
    key = ("geodesic", model.scenario.key())
    job = store().start_job(key, _fit_job(model, data))
    status = st.status("Computing OTDD maps and (2,Q) distances…", expanded=True)
    with status:
        bar = st.progress(0.0, text="starting")
        log_box = st.empty()
        shown: tuple[Any, ...] = ()
        while True:
            finished = job.wait(poll_seconds)
            stage, fraction, log = job.snapshot()
            if (stage, round(fraction, 2), len(log)) != shown:
                shown = (stage, round(fraction, 2), len(log))
                bar.progress(fraction, text=stage)
                log_box.markdown("  \n".join(f"`{t:5.1f} s` · {line}" for t, line in log))
            if finished:
                break
    store().claim_job(key)
    if job.error_ is not None:
        status.update(label="OTDD maps failed", state="error", expanded=True)
        if isinstance(job.error_, GeovizError):
            st.error(str(job.error_))
            return None
        raise job.error_
    status.update(label=f"OTDD maps ready ({job.elapsed:.1f} s)", state="complete", expanded=False)
    return job.result_


def embed_points(model: SessionModel, emb: Any, features: Any, tag: tuple[Any, ...]) -> np.ndarray:
    """``emb.transform(features)`` cached under ``tag`` (e.g. the rounded weights of ``P_a``)."""
    key = ("embed", model.scenario.key(), emb.method, *tag)
    return store().get_or_compute(key, lambda: _small_step(emb.transform, features))


def ensure_navigation() -> None:
    """Make a page that Streamlit ran without ``app.py`` render through ``app.py``.

    Because the app keeps its pages in ``pages/``, Streamlit starts in its
    legacy "pages directory" mode and may run a page script *directly*: for
    the first session that opens a page URL (``/geodesic``) on a fresh server,
    and in ``streamlit.testing`` on every rerun. ``app.py`` (wide layout,
    sidebar scenario, page titles) would then not run. ``app.py``'s
    ``st.navigation`` leaves that mode, so a page that finds itself in it runs
    ``app.py`` in place (which runs this page again, now normally) and stops.
    Unlike a rerun this keeps the widget event that started the run (a
    button click). Relies on Streamlit's ``PagesManager.uses_pages_directory``
    flag; if that internal moves, pages still work, without ``app.py``'s sidebar.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
        from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
    except ImportError:  # pragma: no cover - internal layout changed
        return
    if not getattr(PagesManager, "uses_pages_directory", None):
        return
    ctx = get_script_run_ctx()
    main_script = getattr(ctx, "main_script_path", None)
    if not main_script:
        return
    import runpy

    PagesManager.uses_pages_directory = False
    runpy.run_path(str(main_script), run_name="__main__")
    st.stop()
