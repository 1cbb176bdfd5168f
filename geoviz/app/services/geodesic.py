"""Geodesic page: the background fit of the maps, its bootstrap, ``P_a`` and the mixup baseline."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Hashable
from typing import Any

import numpy as np
import torch

from geoviz.app.jobs import BackgroundJob
from geoviz.app.lru import nbytes_of
from geoviz.app.scenario import Scenario
from geoviz.app.services.caches import Progress, disk_cache, store
from geoviz.app.services.datasets import ScenarioData
from geoviz.backend import ArraySpec, DiskCache
from geoviz.backend.cost_model import (
    fit_estimate,
    format_seconds,
    record_took,
    remember_iterations,
)
from geoviz.data.dataset import SoftLabeledDataset
from geoviz.errors import GeovizError
from geoviz.geodesic.mixup import mixup_interpolation
from geoviz.geodesic.result import GeodesicResult
from geoviz.geodesic.spec import fit_spec
from geoviz.geodesic.uncertainty import GeodesicBootstrap
from geoviz.geodesic.weights import SimplexWeights


def geodesic_key(scenario: Scenario) -> tuple[Hashable, ...]:
    return ("geodesic", scenario.key())


def geodesic_if_ready(scenario: Scenario) -> GeodesicResult | None:
    """The fitted :class:`GeodesicResult` of ``scenario`` if already in memory, else ``None``
    (never computes). A background fit that finished while no page was watching is
    collected here."""
    key = geodesic_key(scenario)
    ready: GeodesicResult | None = store().get(key)
    if ready is None:
        job = store().claim_job(key)
        if job is not None and job.error_ is None:
            ready = job.result_
    return ready


def start_geodesic(scenario: Scenario, data: ScenarioData, workers: int = 1) -> BackgroundJob:
    """Start (or join) the background fit of the scenario's geodesic.

    One job per scenario and process: every page and session asking for the
    same scenario watches the same job. Collect the result with
    :func:`finish_geodesic`. ``scenario`` must describe the datasets loaded in ``data``
    (e.g. :func:`~geoviz.app.services.maps.companion_scenario`: the other map method on
    the same data). Neural maps report ``"... (classifier)"`` and ``"... (adversarial)"``
    stages while they train. ``workers``: threads for the fit's independent parts
    (:func:`~geoviz.geodesic.pipeline.fit_geodesic`; the pages pass
    :meth:`~geoviz.app.settings.AppSettings.fit_workers_used`); a visitor who joins a
    running job joins it as started. The fit keeps room in the result store's fit tier while
    it runs (:data:`FIT_ROOM_PER_DATA_BYTE` times its datasets' bytes: what its result will
    take), so the fits already kept make way when it starts, not once it is done.
    """
    if scenario.data_key() != data.data_key:
        raise GeovizError("start_geodesic: the scenario's datasets differ from the loaded ones")
    spec = scenario.spec

    # the time left starts from the cost model's estimate
    estimate = fit_estimate(data.target, data.references, features=scenario.features)

    def run(progress: Progress) -> GeodesicResult:
        started = time.perf_counter()
        fitted = fit_spec(spec, data, progress=progress, cache=disk_cache(), workers=workers)
        record_took(time.perf_counter() - started, estimate)
        if fitted.config.method == "barycentric":  # Sinkhorn's iterations, learned per space
            remember_iterations(fitted.features_name, [d.iterations for d in fitted.diagnostics])
        return fitted

    room = FIT_ROOM_PER_DATA_BYTE * nbytes_of(data)
    return store().start_job(
        geodesic_key(scenario), run, reserve_bytes=room, estimate=estimate.seconds
    )


#: a fit's result holds its datasets and, per reference, the target's mapped copy (with its
#: soft labels): about twice the datasets' bytes (559 MB for 305 MB of datasets at image
#: size 100, N 2000, three references), the room it keeps in the fit tier while it runs
FIT_ROOM_PER_DATA_BYTE = 2


#: a cold fit estimated above this many seconds is announced before it starts
LONG_FIT_SECONDS = 10.0


def geodesic_cost_note(scenario: Scenario, data: ScenarioData | None) -> str | None:
    """What the Geodesic page says above the fit (issue 45 item 1): before a cold fit
    estimated above :data:`LONG_FIT_SECONDS`, what it will cost on this machine (the cost
    model, :mod:`geoviz.backend.cost_model`); ``None`` when there is nothing to say
    (``data`` not loaded yet, a short fit, the maps ready: what the fit took is said by the
    toast that announces them, which takes no room above the explorer at a projector)."""
    if geodesic_if_ready(scenario) is not None:
        return None
    if data is None:
        return None
    job = geodesic_job(scenario)
    if job is not None and not job.done() and job.estimate is not None:
        return f"Fitting the maps: {format_seconds(job.estimate)} estimated on this machine."
    est = fit_estimate(data.target, data.references, features=scenario.features)
    if est.seconds <= LONG_FIT_SECONDS:
        return None
    return (
        f"Fitting this scenario's maps takes {est.sentence()} the first time "
        "(the disk cache keeps them for the next)."
    )


def geodesic_job(scenario: Scenario) -> BackgroundJob | None:
    """The running or finished (unclaimed) fit of the scenario, if any."""
    return store().job(geodesic_key(scenario))


def finish_geodesic(scenario: Scenario) -> BackgroundJob | None:
    """Move the finished job's result into the fit tier; the job, or ``None`` while it runs."""
    return store().claim_job(geodesic_key(scenario))


#: Q-resampling replicates behind the explorer's intervals and region (issue 23)
EXPLORER_REPLICATES = 200


def bootstrap_key(scenario: Scenario) -> tuple[Hashable, ...]:
    return ("bootstrap", scenario.key(), EXPLORER_REPLICATES)


def explorer_bootstrap(
    scenario: Scenario, result: GeodesicResult, wait_seconds: float | None = 0.0
) -> tuple[GeodesicBootstrap | None, BaseException | None]:
    """``(bootstrap, None)`` when done; ``(None, None)`` while its background job runs (started
    or joined here: :data:`EXPLORER_REPLICATES` Q-resampling replicates, seed 0; waited for
    up to ``wait_seconds``, ``None``: until done); ``(None, error)`` when it failed
    (remembered, so a failing bootstrap is not restarted on every rerun). The explorer is
    usable before it arrives."""

    def run(progress: Progress) -> GeodesicBootstrap:
        return cached_bootstrap(result, EXPLORER_REPLICATES, disk_cache(), progress=progress)

    done, error = store().job_result(bootstrap_key(scenario), run, wait_seconds)
    return done, error


#: disk-cache namespace of :func:`cached_bootstrap`
BOOTSTRAP_NAMESPACE = "geodesic_bootstrap"

#: version of the stored bootstrap (bumped when bootstrap_q's values change)
BOOTSTRAP_CACHE_VERSION = 1


def bootstrap_for_export(
    scenario: Scenario,
    result: GeodesicResult,
    boot: GeodesicBootstrap | None,
    error: BaseException | None,
) -> GeodesicBootstrap | None:
    """The explorer's bootstrap for an export, waited for when it is still running (a file
    written now carries the intervals the Geodesic page shows); ``None`` when it failed.
    ``boot``/``error``: what :func:`explorer_bootstrap` already said on this run."""
    if boot is not None or error is not None:
        return boot
    ready, _ = explorer_bootstrap(scenario, result, wait_seconds=None)
    return ready


def cached_bootstrap(
    result: GeodesicResult,
    replicates: int,
    cache: DiskCache,
    *,
    seed: int = 0,
    progress: Progress | None = None,
) -> GeodesicBootstrap:
    """:meth:`GeodesicResult.bootstrap` (default level), kept in the disk cache under
    everything it reads: the per-sample (2,Q) terms, ``a_hat``, the QP solver, ``replicates``
    and ``seed`` (arrays are keyed by their content, :func:`geoviz.backend.fingerprint`). A
    restarted server reads it back (~10 ms) instead of solving ``replicates`` QPs again while
    its first visitor's page loads (~0.4 s of Python on 2 cores; issue 26)."""
    dist = result.distances
    params = {
        "v": BOOTSTRAP_CACHE_VERSION,
        "per_sample_to_target": dist.per_sample_to_target,
        "per_sample_between": dist.per_sample_between,
        "w_to_target": dist.w_to_target,
        "w_between": dist.w_between,
        "a_hat": result.a_hat,
        "qp_solver": result.config.qp_solver,
        "replicates": int(replicates),
        "seed": int(seed),
    }

    def compute() -> dict[str, Any]:
        boot = result.bootstrap(replicates, seed=seed, progress=progress)
        return dataclasses.asdict(boot)

    def rebuild(stored: dict[str, Any]) -> GeodesicBootstrap:
        # the cache stores arrays as tensors; the bootstrap's fields are NumPy arrays
        fields: dict[str, Any] = {
            k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in stored.items()
        }
        return GeodesicBootstrap(**fields)

    def check(stored: dict[str, Any]) -> None:
        boot = rebuild(stored)
        # the estimates are the result's own: a stored bootstrap of other numbers is not this one
        for name in ("w_to_target", "w_between", "a_hat"):
            if not np.allclose(getattr(boot, name), np.asarray(params[name]), equal_nan=True):
                raise GeovizError(f"its {name} is not the result's")

    m, b = len(result.references), int(replicates)
    expect = {
        "w_to_target_replicates": ArraySpec((b, m), finite=False),
        "w_between_replicates": ArraySpec((b, m, m), finite=False),
        "a_hat_replicates": ArraySpec((b, m), finite=False),
    }
    stored = cache.get_or_compute(BOOTSTRAP_NAMESPACE, params, compute, expect=expect, check=check)
    return rebuild(stored)


def bootstrap_job(scenario: Scenario) -> BackgroundJob | None:
    """The running or finished (unclaimed) bootstrap of the scenario, if any."""
    return store().job(bootstrap_key(scenario))


def interpolation(
    scenario: Scenario,
    result: GeodesicResult,
    weights: SimplexWeights,
    n: int | None = None,
    seed: int = 0,
) -> SoftLabeledDataset:
    """``P_a = (sum_i a_i T_i)#Q`` (paper Sec. 3.3) at ``weights``, validated once where
    they entered (:meth:`SimplexWeights.from_input`). Cached by the exact weights
    (derived tier: many weights never evict the fit they come from)."""
    key = ("interp", scenario.key(), weights.key(), n, seed)
    return store().get_or_compute(
        key, lambda: result.interpolate(weights, n=n, seed=seed), tier="derived"
    )


def mixup(
    scenario: Scenario, result: GeodesicResult, weights: SimplexWeights
) -> SoftLabeledDataset:
    """The Mixup baseline at ``weights``: references combined through random pairings
    instead of the OTDD maps (same ``N_Q`` samples as ``P_a``). Cached (derived tier)."""
    key = ("mixup", scenario.key(), weights.key())
    return store().get_or_compute(
        key,
        lambda: mixup_interpolation(
            result.target, list(result.references), weights, seed=scenario.seed
        ),
        tier="derived",
    )
