"""Evidence page: the transfer experiments of a scenario (Table 1 at ``a_hat`` and the
simplex study) as one background job. The stored studies are read by
:mod:`geoviz.app.services.stored_evidence` (import its names from there)."""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from geoviz.app.jobs import BackgroundJob
from geoviz.app.scenario import Scenario
from geoviz.app.services.caches import Progress, disk_cache, store
from geoviz.app.services.datasets import ScenarioData, load_choice, scenario_data
from geoviz.app.services.geodesic import geodesic_if_ready, geodesic_key
from geoviz.app.session import SessionModel
from geoviz.backend import default_cache_dir
from geoviz.backend.cost_model import Estimate, training_estimate
from geoviz.data.choice import FewShotOptions
from geoviz.data.dataset import LabeledDataset
from geoviz.data.preprocess import harmonize
from geoviz.errors import DatasetError
from geoviz.geodesic.result import GeodesicResult
from geoviz.geodesic.spec import fit_spec
from geoviz.isolation import run_in_child
from geoviz.nn.training import get_preset
from geoviz.tasks import Backend
from geoviz.transfer.experiment import TransferTask, make_task
from geoviz.transfer.study import GridStudy, run_grid
from geoviz.transfer.table import MethodComparison, compare_methods

__all__ = [
    "GCS_RECONNECT_S",
    "RESTART_ADVICE",
    "EvidenceRequest",
    "EvidenceResult",
    "evidence_failure",
    "evidence_if_ready",
    "evidence_job",
    "evidence_scenario",
    "finish_evidence",
    "start_evidence",
    "transfer_runs",
]


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
        :class:`~geoviz.transfer.study.GridStudy` (``W^2(P_a, Q)`` and accuracy per grid point).
    reference_names
        Names of ``P_1..P_m``.
    n_test
        Target test samples the accuracies are measured on.
    seconds
        Wall time of the whole job.
    """

    comparison: MethodComparison
    study: GridStudy
    reference_names: tuple[str, ...]
    n_test: int
    seconds: float


def evidence_scenario(scenario: Scenario, k: int) -> Scenario:
    """The scenario with a ``k``-shot target: the maps only see ``k`` labels per class of Q
    (the others are pseudo-labelled as the scenario says: label spreading by default, or a
    kNN vote), as in the paper's transfer experiments."""
    few = scenario.few_shot
    return scenario.with_(
        few_shot=FewShotOptions(
            enabled=True,
            k=int(k),
            n_neighbors=int(few.n_neighbors),
            pseudo_labels=few.pseudo_labels,
        )
    )


def _evidence_key(scenario: Scenario, request: EvidenceRequest) -> tuple[Hashable, ...]:
    return ("evidence", scenario.key(), dataclasses.astuple(request))


def evidence_if_ready(scenario: Scenario, request: EvidenceRequest) -> EvidenceResult | None:
    """The collected evidence for the scenario and ``request``, else ``None`` (never computes)."""
    key = _evidence_key(evidence_scenario(scenario, request.k), request)
    return cast("EvidenceResult | None", store().get(key))


#: The last failures of evidence jobs, by job key, so that every session watching a job
#: that failed sees why until someone starts it again (bounded: oldest out).
_FAILURES: OrderedDict[Hashable, BaseException] = OrderedDict()
_FAILURES_LOCK = threading.Lock()
_MAX_FAILURES = 32


def finish_evidence(scenario: Scenario, request: EvidenceRequest) -> BackgroundJob | None:
    """Collect the finished job: its result goes to the store, its error (also kept on the
    job) is remembered for :func:`evidence_failure`."""
    key = _evidence_key(evidence_scenario(scenario, request.k), request)
    job = store().claim_job(key)
    if job is not None and job.error_ is not None:
        with _FAILURES_LOCK:
            _FAILURES[key] = job.error_
            _FAILURES.move_to_end(key)
            while len(_FAILURES) > _MAX_FAILURES:
                _FAILURES.popitem(last=False)
    return job


def evidence_failure(scenario: Scenario, request: EvidenceRequest) -> BaseException | None:
    """Why the last evidence job for the scenario and ``request`` failed, until it is
    started again (:func:`start_evidence`); ``None`` when it did not."""
    key = _evidence_key(evidence_scenario(scenario, request.k), request)
    with _FAILURES_LOCK:
        return _FAILURES.get(key)


def evidence_job(scenario: Scenario, request: EvidenceRequest) -> BackgroundJob | None:
    """The running (or finished, unclaimed) evidence job, if any."""
    return store().job(_evidence_key(evidence_scenario(scenario, request.k), request))


#: The sentence a failed run ends with: the simplex study's finished grid points are
#: checkpointed in the disk cache, so a new run reads them back.
RESTART_ADVICE = "Start it again to resume from the checkpoints."
#: Seconds a Ray driver in the job's worker waits for a lost coordinator (Ray's default 60)
#: before it exits, so that a run whose cluster died fails soon.
GCS_RECONNECT_S = 15


def start_evidence(model: SessionModel, request: EvidenceRequest) -> BackgroundJob:
    """Run the transfer experiments of the scenario in the background (one job per request).

    Steps: the ``k``-shot scenario's datasets and geodesic (from the caches when
    fitted before), the target's test split, then every method and seed at
    ``a_hat`` (:func:`geoviz.transfer.table.compare_methods`) and the simplex
    study (:func:`geoviz.transfer.study.run_grid`, checkpointed per grid point in
    the disk cache folder, so an interrupted job resumes). Runs as Ray tasks when
    Ray is installed (``request.backend``), else sequentially.

    The training runs (and Ray's driver and cluster) are in a child process the job
    supervises (:func:`geoviz.isolation.run_in_child`): Ray ends the process of a driver
    whose cluster died, and that must never be the server. When the child dies, the job
    fails with a :class:`~geoviz.isolation.WorkerExitedError` sentence ending with
    :data:`RESTART_ADVICE`; the server and every other page go on.
    """
    scenario = evidence_scenario(model.scenario, request.k)
    sub = SessionModel({}, model.settings)
    sub.uploads.update(model.uploads)
    sub.scenario = scenario
    key = _evidence_key(scenario, request)
    with _FAILURES_LOCK:
        _FAILURES.pop(key, None)

    def run(progress: Progress) -> EvidenceResult:
        start = time.perf_counter()
        progress("loading datasets", 0.0)
        data = scenario_data(sub)
        if data.data_key != scenario.data_key():  # a served file changed since the page ran
            raise DatasetError(
                "a served dataset of this scenario changed on the server; load the page again"
            )
        geodesic = geodesic_if_ready(scenario)
        if geodesic is None:
            geodesic = fit_spec(
                scenario.spec,
                data,
                progress=lambda stage, f: progress(f"maps ({stage})", 0.25 * f),
                cache=disk_cache(),
            )
            store().put(geodesic_key(scenario), geodesic, tier="fit")
        test = _target_test_split(sub, data)
        task = make_task(
            data.target_true,
            test,
            list(data.references),
            request.k,
            seed=scenario.seed,
            n_neighbors=scenario.few_shot.n_neighbors,
        )
        runs = functools.partial(
            transfer_runs,
            task,
            geodesic,
            request,
            default_cache_dir() / "transfer" / scenario.key(),
        )
        progress("starting the training worker", 0.25)
        comparison, study = run_in_child(
            runs,
            progress=progress,
            what="The transfer run",
            advice=RESTART_ADVICE,
            env={"RAY_gcs_rpc_server_reconnect_timeout_s": str(GCS_RECONNECT_S)},
        )
        progress("done", 1.0)
        return EvidenceResult(
            comparison=comparison,
            study=study,
            reference_names=tuple(geodesic.reference_names),
            n_test=int(test.n_samples),
            seconds=time.perf_counter() - start,
        )

    est = evidence_estimate(request, len(scenario.references))  # the time left starts from it
    return store().start_job(key, run, estimate=est.seconds)


def evidence_estimate(request: EvidenceRequest, n_refs: int) -> Estimate:
    """The cost model's estimate of the run's training (:mod:`geoviz.backend.cost_model`):
    Table 1's trained methods and the ``C(R + m - 1, m - 1)`` grid points, every seed."""
    budgets = get_preset(request.preset)
    return training_estimate(
        (budgets.pretrain.iterations, budgets.pretrain.batch_size),
        (budgets.finetune.iterations, budgets.finetune.batch_size),
        points=math.comb(int(request.resolution) + n_refs - 1, n_refs - 1),
        seeds=len(request.seeds),
    )


def evidence_cost_sentence(request: EvidenceRequest, n_refs: int) -> str:
    """``"The training should take about 12 min on this machine ..."``, said before a run."""
    est = evidence_estimate(request, n_refs)
    return f"The training should take {est.sentence()} (the maps, if not fitted yet, add theirs)."


def transfer_runs(
    task: TransferTask,
    geodesic: GeodesicResult,
    request: EvidenceRequest,
    checkpoint_dir: Path,
    progress: Progress,
) -> tuple[MethodComparison, GridStudy]:
    """Table 1 at ``a_hat`` and the simplex study of ``task``: the job's training runs.

    Runs in the job's child process (:func:`start_evidence`); the same task, preset, seeds
    and backend for the table and the study, whose grid points are checkpointed in
    ``checkpoint_dir``. Progress fractions go from 0.25 to 1 (the datasets and maps before).
    """

    def runs(stage: str, start: float, span: float) -> Callable[[int, int], None]:
        return lambda done, n: progress(f"{stage} ({done}/{n} runs)", start + span * done / n)

    backend = cast("Backend", request.backend)
    comparison = compare_methods(
        task,
        geodesic,
        seeds=request.seeds,
        preset=request.preset,
        backend=backend,
        progress=runs("Table 1 at a_hat", 0.25, 0.25),
    )
    study = run_grid(
        task,
        geodesic,
        resolution=request.resolution,
        seeds=request.seeds,
        preset=request.preset,
        backend=backend,
        checkpoint_dir=checkpoint_dir,
        progress=runs("simplex study", 0.5, 0.5),
    )
    return comparison, study


def _target_test_split(model: SessionModel, data: ScenarioData) -> LabeledDataset:
    """The scenario target's test split, in the same feature space as ``data``.

    Raises
    ------
    DatasetError
        The target is an upload (one split only): transfer accuracy needs held-out data.
    """
    scenario = model.scenario
    choice = scenario.target
    if choice.source == "upload":
        raise DatasetError(
            "transfer experiments need the target's test split; an uploaded target has only "
            "one split (choose a registry dataset as Q)",
            choice.name,
        )
    test_choice = dataclasses.replace(choice, split="test")
    test = load_choice(model, test_choice, scenario.n_target, scenario.seed)
    test = harmonize(
        [data.target_true, test], size=scenario.image_size, channels=scenario.channels
    )[1]
    return dataclasses.replace(test, name=f"{data.target_true.name} (test)")
