"""What a long run will cost here, before it starts, and what it took, after (issue 45 item 1):
sentences the pages show, from the cost model (:mod:`geoviz.backend.cost_model`) calibrated on
this machine and kept in the cache folder."""

from __future__ import annotations

import math
import threading
import warnings
import weakref

from geoviz.app.jobs import BackgroundJob
from geoviz.app.scenario import Scenario
from geoviz.app.services.datasets import ScenarioData
from geoviz.backend.cost_model import (
    CostModel,
    Estimate,
    Step,
    format_seconds,
    load_cost_model,
    remember,
    took_sentence,
)
from geoviz.nn.training import get_preset

__all__ = [
    "LONG_SECONDS",
    "cost_model",
    "evidence_cost_sentence",
    "evidence_estimate",
    "fit_took",
    "geodesic_cost_note",
    "geodesic_cost_sentence",
    "geodesic_estimate",
    "took_text",
]

#: a run estimated above this many seconds is announced before it starts
LONG_SECONDS = 10.0

#: parameters of the Evidence page's classifier (LeNet-5), for the training cost
_CLASSIFIER_PARAMS = 6e4

_LOCK = threading.Lock()
_MODEL: list[CostModel] = []
_REMEMBERED: weakref.WeakSet[BackgroundJob] = weakref.WeakSet()


def cost_model() -> CostModel:
    """This machine's cost model (measured once per process, well under a second, the first
    time; read from the cache folder after)."""
    with _LOCK:
        if not _MODEL:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a corrupt file: measured again
                _MODEL.append(load_cost_model())
        return _MODEL[0].now()  # at the present load


def _uses_encoder(scenario: Scenario, data: ScenarioData) -> bool:
    shape = getattr(data.target, "image_shape", None)
    colour = shape is not None and len(shape) == 3 and shape[0] == 3
    return scenario.features == "encoder" or (scenario.features == "auto" and colour)


_GEODESIC_STEPS: tuple[Step, ...] = ("encoder", "sinkhorn", "labels")


def geodesic_estimate(scenario: Scenario, data: ScenarioData) -> Estimate:
    """The cold fit of ``scenario``'s maps (:meth:`CostModel.geodesic_fit`): the encoder when
    the space is one, one Sinkhorn and label distances per reference, the references' pairs."""
    target, refs = data.target, tuple(data.references)
    encoded = (
        target.n_samples + sum(r.n_samples for r in refs) if _uses_encoder(scenario, data) else 0
    )
    return cost_model().geodesic_fit(
        target.n_samples,
        tuple(r.n_samples for r in refs),
        classes=max([target.n_classes, *(r.n_classes for r in refs)]),
        encoded_images=encoded,
        pixels=int(target.features.shape[1]),
    )


def geodesic_cost_sentence(scenario: Scenario, data: ScenarioData) -> str | None:
    """``"Fitting the maps takes about 40 s on this machine the first time ..."`` when the
    cold fit is estimated above :data:`LONG_SECONDS`; else ``None``."""
    est = geodesic_estimate(scenario, data)
    if est.seconds <= LONG_SECONDS:
        return None
    return (
        f"Fitting this scenario's maps takes {est.sentence()} the first time "
        "(the disk cache keeps them for the next)."
    )


#: what the last fits took, by scenario key: (seconds, estimate), told once on the page
_TOOK: dict[str, tuple[float, Estimate]] = {}


def fit_took(scenario: Scenario, seconds: float, estimate: Estimate) -> None:
    """Record what a fit of ``scenario`` took (:func:`geodesic_cost_note` says it) and teach
    the cost model: a fit much faster than its estimate read its maps from the disk cache,
    and teaches nothing."""
    with _LOCK:
        _TOOK[scenario.key()] = (seconds, estimate)
    if seconds > 0.25 * estimate.seconds:
        remember(estimate, seconds, steps=_GEODESIC_STEPS)
        with _LOCK:
            _MODEL.clear()


def geodesic_cost_note(scenario: Scenario) -> str | None:
    """What the Geodesic page says above the fit: before a cold fit estimated above
    :data:`LONG_SECONDS`, what it will cost; after a fit of this process, what it took;
    ``None`` when there is nothing to say (the datasets not loaded yet, a short fit)."""
    from geoviz.app.services import datasets as dataset_services
    from geoviz.app.services.geodesic import geodesic_if_ready, geodesic_job

    with _LOCK:
        took = _TOOK.get(scenario.key())
    if geodesic_if_ready(scenario) is not None:
        if took is None or took[0] < 1.0:
            return None
        return f"Fitting the maps {took_sentence(took[0], took[1])}."
    data = dataset_services.scenario_data_if_ready(scenario)
    if data is None:
        return None
    job = geodesic_job(scenario)
    if job is not None and not job.done():
        return f"Fitting the maps: {format_seconds(job.estimate or 0)} estimated on this machine."
    return geodesic_cost_sentence(scenario, data)


def evidence_estimate(
    preset: str, resolution: int, n_seeds: int, n_refs: int, *, methods_trained: int = 3
) -> Estimate:
    """The Evidence run's training: per seed, ``methods_trained`` Table-1 methods (OTDD and
    mixup pretrain then fine-tune; few-shot fine-tunes only), then every point of the
    simplex grid (``C(resolution + m - 1, m - 1)`` points) pretrained and fine-tuned."""
    budgets = get_preset(preset)
    model = cost_model()
    points = math.comb(int(resolution) + n_refs - 1, n_refs - 1)

    def one(cfg_iterations: int, batch: int) -> Estimate:
        return model.estimate(
            "training", iterations=cfg_iterations, batch=batch, params=_CLASSIFIER_PARAMS
        )

    pre = one(budgets.pretrain.iterations, budgets.pretrain.batch_size)
    fine = one(budgets.finetune.iterations, budgets.finetune.batch_size)
    per_seed = (methods_trained - 1) * (pre.seconds + fine.seconds) + fine.seconds
    per_seed += points * (pre.seconds + fine.seconds)
    seconds = per_seed * max(int(n_seeds), 1)
    return Estimate("evidence", seconds, (pre.work + fine.work) * points * n_seeds)


def evidence_cost_sentence(preset: str, resolution: int, n_seeds: int, n_refs: int) -> str:
    """``"The training should take about 12 min on this machine (cost model)."``"""
    est = evidence_estimate(preset, resolution, n_seeds, n_refs)
    return f"The training should take {est.sentence()} (the maps, if not fitted yet, add theirs)."


def took_text(job: BackgroundJob, step: Estimate | None = None) -> str:
    """``"Took 38 s (estimated about 40 s)."``, for a finished ``job``; the first time a job is
    told, its time teaches the cost model (``step``: the estimate it was started with)."""
    seconds = job.elapsed
    estimate = (
        step
        if step is not None
        else (Estimate("job", job.estimate) if job.estimate is not None else None)
    )
    with _LOCK:
        first = job not in _REMEMBERED
        _REMEMBERED.add(job)
    if first and step is not None and job.error_ is None:
        steps = _GEODESIC_STEPS if step.step == "geodesic fit" else ("training",)
        remember(step, seconds, steps=steps)
        with _LOCK:
            _MODEL.clear()  # read the learned factors back on the next estimate
    return took_sentence(seconds, estimate).capitalize() + "."


def left_text(job: BackgroundJob) -> str:
    """``"about 12 s left"`` while ``job`` runs (``""`` before anything can be said)."""
    left = job.remaining()
    return "" if left is None or job.done() else f"{format_seconds(left)} left"
