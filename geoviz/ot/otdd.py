"""The optimal-transport dataset distance (OTDD) and its entropic coupling.

Paper Sec. 2.2, eq. (otdd): between a target ``Q = {(x_i, y_i)}`` (``N_Q``
points) and a reference ``P = {(x'_j, y'_j)}`` (``N_P`` points), both with
uniform weights, the ground cost is::

    c((x, y), (x', y')) = lambda_x ||x - x'||^2 + lambda_y W_2^2(alpha_y, alpha_y')

(squared Euclidean, **no** factor 1/2; the label term comes from
:func:`geoviz.ot.labels.label_distances`). We solve the entropic problem with
:class:`geoviz.ot.sinkhorn.Sinkhorn` on a :class:`~geoviz.ot.problem.TransportProblem`.

Relative epsilon, and why the default is 1e-3
---------------------------------------------
``OTDDConfig.epsilon`` is **relative to the mean of the ground-cost matrix**
over all target x reference pairs::

    epsilon_abs = epsilon * mean_{i,j} C_ij
                = epsilon * (lambda_x mean_{i,j} ||x_i - x'_j||^2 + lambda_y p_Q^T W p_P)

(``p_Q``, ``p_P`` class frequencies). The mean is computed in closed form in
float64 (``mean||x||^2 + mean||x'||^2 - 2 xbar . xbar'``) over the *full*
datasets, so it does not depend on the mode (full, batched, streamed) and
batched mode uses the same ``epsilon_abs`` as full mode: the whole problem's cost
(:meth:`OTDDConfig.cost_geometry`, a :class:`~geoviz.ot.geometry.PointCloudCost`
holding the relative epsilon) resolves it once, and every batch is a part of that
geometry that keeps its absolute value. A relative epsilon
keeps one default meaningful across datasets and image sizes; its value decides
how sharp the maps are. Measured on the bundled MNIST -> Fashion-MNIST pair
(N = 2000 per side): ``epsilon`` = 0.05 / 0.01 / 0.002 / **0.001** / 0.0005 gives a
median plan-row perplexity (:attr:`OTDDResult.effective_neighbours`, reference
points averaged per mapped point) of 1135 / 107 / 4.7 / **2.4** / 1.7 and a mean
largest soft label (:attr:`OTDDResult.label_confidence`) of 0.28 / 0.58 / 0.81 /
**0.87** / 0.91. :data:`DEFAULT_EPSILON` = 1e-3 is the largest of these values
with at most a few neighbours and confident labels (the paper's maps, Sec. 4
figures, are sharp); above :data:`BLUR_NEIGHBOURS` neighbours :func:`otdd` warns
(:class:`~geoviz.errors.BlurWarning`).

Modes and memory
----------------
The cost is a geometry (:mod:`geoviz.ot.geometry`) read by the one Sinkhorn
loop of :class:`geoviz.ot.sinkhorn.Sinkhorn`; ``OTDDConfig.solver`` picks its
kernel (``"auto"``: dense while the plan is dense, a truncated sparse kernel
once it is sparse, which at the default epsilon keeps ~150 entries per row).

* **full** (``batch_size=None``): the ``(N_Q, N_P)`` cost is built on the
  device (``||x||^2 + ||x'||^2 - 2 x.x'``, clamped at 0, in row chunks so
  temporaries stay small) and stored (:class:`~geoviz.ot.geometry.DenseCost`);
  the dense kernel needs one more buffer of that size, the sparse kernel
  ~72 bytes per kept entry. The returned coupling (``keep_coupling``) is the
  dense plan of the potentials.
* **batched** (``batch_size=B``, paper appendix "Complexity": batches of ``B``
  target points against the reference): the target is shuffled (seeded) and
  cut into batches; each batch is solved against the reference, or against a
  fresh seeded random subsample of ``reference_subsample`` reference points.
  Memory is bounded by ``~B N_ref * itemsize`` (``N_ref`` = reference size
  used per batch); the cost is the mass-weighted average of the batch costs
  (the minibatch-OT estimator); no global coupling is returned. A batch of
  ``B`` points against ``N_ref > B`` reference points must spread each point's
  mass over at least ``N_ref / B`` of them, so its maps are blurrier than the
  full problem's; ``reference_subsample = B`` keeps batches balanced.
* **streamed** (``stream_reference=True``, with or without batches): the
  ``B x N_ref`` matrix is never materialised
  (:class:`~geoviz.ot.geometry.PointCloudCost`): every pass over the cost
  (support selection, verification, and the iterations of the ``online``
  kernel when the plan is too dense to truncate) recomputes it by row blocks,
  one GEMM each. Memory is ``O(block + (B + N_ref) D)`` plus the sparse support.

The solver receives the class labels as ``groups`` (class-level coarse
correction, see :class:`geoviz.ot.sinkhorn.Sinkhorn`), which removes the slow
inter-class mode caused by unequal class proportions.

Every size is checked with :func:`geoviz.backend.check_memory` before any large
allocation, which raises :class:`~geoviz.errors.ResourceError`.

Debiasing
---------
With ``debiased=True`` the reported ``cost`` is the Sinkhorn divergence
``OT_eps(Q, P) - (OT_eps(Q, Q) + OT_eps(P, P)) / 2`` where ``OT_eps`` is the
regularised optimum ``<f, a> + <g, b>`` (all three with the same
``epsilon_abs``; the self terms use label distances of each dataset with
itself and the averaged symmetric solver). The self problems need an
``N_Q x N_Q`` and an ``N_P x N_P`` cost (per batch: ``B x B`` and
``N_ref x N_ref``; streamed: blocks only). Otherwise ``cost`` is ``<pi, C>``,
the transport cost of the entropic plan.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from geoviz.backend import DiskCache, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import BlurWarning, GeovizError
from geoviz.ot.labels import label_distances
from geoviz.ot.loop import SinkhornCallback
from geoviz.ot.otdd_batches import BatchOut, BatchSolve, reference_columns, run_batches
from geoviz.ot.otdd_cost import (
    BLUR_NEIGHBOURS,
    N_NEIGHBOURS,
    OTDDConfig,
    check_compatible,
    mean_ground_cost,
)
from geoviz.ot.otdd_result import OTDDResult
from geoviz.vocabulary import DEFAULT_EPSILON

__all__ = [
    "ProgressFn",
    "otdd",
]

ProgressFn = Callable[[str, float], None]


#: seconds between two changes of the Sinkhorn stage's iteration count (``"sinkhorn:
#: iteration 1200"``): a reader that redraws on every new text is not flooded
ITERATION_TEXT_SECONDS = 0.5


class _Progress:
    """Forwards ``(stage, fraction)`` with fractions clipped to [0, 1] and monotone per stage.

    The Sinkhorn stages say their iteration (``"sinkhorn: iteration 1200"``, ``"sinkhorn:
    batch 2/4, iteration 300"``), the count renewed at most every
    :data:`ITERATION_TEXT_SECONDS`."""

    def __init__(self, fn: ProgressFn | None) -> None:
        self.fn = fn
        self.last: dict[str, float] = {}

    def __call__(self, stage: str, fraction: float, text: str | None = None) -> None:
        if self.fn is not None:
            frac = max(self.last.get(stage, 0.0), float(min(1.0, max(0.0, fraction))))
            self.last[stage] = frac
            self.fn(stage if text is None else text, frac)

    def sinkhorn_callback(
        self, stage: str, lo: float, hi: float, tol: float
    ) -> SinkhornCallback | None:
        if self.fn is None:
            return None
        first: list[float] = []
        sep = ", " if ":" in stage else ": "
        shown: list[Any] = [-math.inf, stage]  # when the text last changed, the text

        def cb(it: int, err: float) -> None:
            if not first:
                first.append(max(err, tol * 1.0001))
            frac = (
                math.log(first[0] / max(err, tol)) / math.log(first[0] / tol)
                if first[0] > tol
                else 1.0
            )
            now = time.monotonic()
            if now - shown[0] >= ITERATION_TEXT_SECONDS:
                shown[0], shown[1] = now, f"{stage}{sep}iteration {it}"
            self(stage, lo + (hi - lo) * min(1.0, max(0.0, frac)), shown[1])

        return cb


# --------------------------------------------------------------------------- main entry


def otdd(
    target: LabeledDataset,
    reference: LabeledDataset,
    config: OTDDConfig = OTDDConfig(),
    progress: ProgressFn | None = None,
    *,
    barycentric: bool = False,
    keep_coupling: bool = True,
    label_cost: torch.Tensor | None = None,
    cache: DiskCache | None = None,
    batch_cache: DiskCache | None = None,
) -> OTDDResult:
    """Entropic OTDD between ``target`` (Q) and ``reference`` (P), paper eq. (otdd).

    Parameters
    ----------
    target, reference
        Labelled datasets with the same feature dimension; uniform weights.
    config
        See :class:`OTDDConfig` (``epsilon`` is relative to the mean ground cost).
    progress
        ``progress(stage, fraction)`` with stages ``"labels"``, ``"sinkhorn"``,
        ``"debias"``, ``"done"``; ``fraction`` in ``[0, 1]`` within the stage.
    barycentric
        Also compute the barycentric projection of every target point
        (``mapped_features``, ``soft_labels``; paper eq. (bary_map)).
    keep_coupling
        Return the ``(N_Q, N_P)`` coupling in full mode.
    label_cost
        Precomputed ``(C_Q, C_P)`` label distances (default: computed with
        ``config.label_method``).
    cache
        Optional :class:`~geoviz.backend.DiskCache`; the result is stored under
        the fingerprints of both datasets and ``config.cache_params()``, and in
        batched mode each batch too, as it finishes (``batch_cache``).
    batch_cache
        Where each finished batch of a batched solve is stored (namespace
        ``"otdd_batch"``) when ``cache`` is ``None``: for callers that store the
        whole result themselves (:class:`~geoviz.maps.barycentric.BarycentricMap`), so a
        run killed mid-way resumes from its finished batches without a second copy of
        the result on disk.

    Returns
    -------
    OTDDResult

    Raises
    ------
    DatasetError
        Feature dimensions differ.
    ResourceError
        The cost matrix would not fit in memory (use ``batch_size``/``stream_reference``).
    GeovizError
        Invalid configuration.

    Examples
    --------
    The OTDD of a dataset to itself is 0 once debiased (the Sinkhorn divergence):

    >>> import numpy as np
    >>> from geoviz.data.dataset import LabeledDataset
    >>> from geoviz.ot import OTDDConfig, otdd
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(40, 2)), np.arange(40) % 2
    >>> q = LabeledDataset(x + 4 * y[:, None], y, ("a", "b"), name="Q")
    >>> res = otdd(q, q, OTDDConfig(epsilon=0.01, debiased=True))
    >>> res.converged, abs(res.cost) < 1e-4
    (True, True)

    A translated copy: see the example of :mod:`geoviz.ot`.
    """
    if not isinstance(config, OTDDConfig):
        raise GeovizError(f"otdd: config must be an OTDDConfig, got {type(config).__name__}")
    check_compatible(target, reference)

    # what determines every batch's numbers (keep_coupling does not: batches keep no plan)
    problem = {
        "target": target.fingerprint,
        "reference": reference.fingerprint,
        "config": config.cache_params(),
        "barycentric": bool(barycentric),
        "label_cost": label_cost,
    }
    # one set of arguments for both paths; a partial adds no Python frame, so the
    # BlurWarning's stacklevel still names otdd's caller
    solve = functools.partial(
        _otdd,
        target,
        reference,
        config,
        progress,
        barycentric=barycentric,
        keep_coupling=keep_coupling,
        label_cost=label_cost,
        cache=cache if cache is not None else batch_cache,
        cache_params=problem,
    )
    if cache is None:
        return solve()
    params = {**problem, "keep_coupling": bool(keep_coupling)}
    payload = cache.get_or_compute(
        "otdd",
        params,
        lambda: solve().to_payload(),
        expect=OTDDResult.payload_spec(
            target.n_samples,
            reference.n_samples,
            target.n_classes,
            reference.n_classes,
            int(reference.features.shape[1]),
            barycentric=barycentric,
        ),
        check=OTDDResult.from_payload,
    )
    return OTDDResult.from_payload(payload)


def _label_cost(
    target: LabeledDataset,
    reference: LabeledDataset,
    config: OTDDConfig,
    dev: torch.device,
    label_cost: torch.Tensor | None,
) -> torch.Tensor:
    """``(C_Q, C_P)`` label distances: computed (:func:`label_distances`), or the given
    ``label_cost`` checked for its shape."""
    if label_cost is None:
        return label_distances(
            target,
            reference,
            method=config.label_method,
            max_per_class=config.max_per_class,
            seed=config.seed,
            device=dev,
        )
    lab = torch.as_tensor(label_cost, dtype=torch.float64).cpu()
    if tuple(lab.shape) != (target.n_classes, reference.n_classes):
        raise GeovizError(
            f"otdd: label_cost has shape {tuple(lab.shape)}, expected "
            f"({target.n_classes}, {reference.n_classes})"
        )
    return lab


class _Totals:
    """What the batches of one OTDD add up to (each batch weighted by its share of Q)."""

    def __init__(self, n_q: int, dim: int, n_classes_p: int, barycentric: bool) -> None:
        self.mapped = torch.empty((n_q, dim), dtype=torch.float32) if barycentric else None
        self.soft = torch.empty((n_q, n_classes_p), dtype=torch.float32) if barycentric else None
        self.transport = self.regularized = self.debias = 0.0
        self.max_err, self.all_conv, self.iters = 0.0, True, 0
        self.plan: torch.Tensor | None = None
        self.pots: tuple[torch.Tensor, torch.Tensor] | None = None
        self.perplexity = torch.empty(n_q, dtype=torch.float32)
        self.neighbour_index = torch.full((n_q, N_NEIGHBOURS), -1, dtype=torch.long)
        self.neighbour_weight = torch.zeros((n_q, N_NEIGHBOURS), dtype=torch.float32)
        self.truncated, self.modes = 0.0, set[str]()

    def add(self, out: BatchOut, rows: np.ndarray, weight: float) -> None:
        """One batch's solve: costs, errors, diagnostics, its rows of the maps and, in
        debiased mode, its self-transport terms (Feydy et al. 2019)."""
        rows_t = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        self.transport += weight * out.transport
        self.regularized += weight * out.regularized
        self.max_err = max(self.max_err, out.error, out.self_error)
        self.all_conv = self.all_conv and out.converged and out.self_converged
        self.iters += out.n_iter + out.self_iterations
        if math.isfinite(out.self_value):
            self.debias += weight * out.self_value
        self.perplexity[rows_t] = out.perplexity
        k = out.neighbour_index.shape[1]
        self.neighbour_index[rows_t, :k] = out.neighbour_index
        self.neighbour_weight[rows_t, :k] = out.neighbour_weight
        self.truncated = max(self.truncated, out.truncated_mass)
        self.modes.add(out.mode)
        if out.mapped is not None and out.soft is not None:
            assert self.mapped is not None and self.soft is not None
            self.mapped[rows_t] = out.mapped
            self.soft[rows_t] = out.soft


def _warn_if_blurry(
    target: LabeledDataset,
    reference: LabeledDataset,
    config: OTDDConfig,
    effective: float,
    confidence: float,
) -> None:
    if effective > BLUR_NEIGHBOURS:
        warnings.warn(
            f"OTDD {target.name!r} -> {reference.name!r}: each mapped point averages a median of "
            f"{effective:.0f} reference points (label confidence {confidence:.2f}) at epsilon = "
            f"{config.epsilon:g} x mean cost, so the maps are blurred averages; use a smaller "
            f"epsilon (default {DEFAULT_EPSILON:g}) for sharp maps",
            BlurWarning,
            stacklevel=4,
        )


def _batch_stage(batch: int, n_batches: int) -> str:
    """The progress stage of the solves: ``"sinkhorn"``, or ``"sinkhorn: batch k/n"``."""
    return "sinkhorn" if n_batches == 1 else f"sinkhorn: batch {batch}/{n_batches}"


def _otdd(
    target: LabeledDataset,
    reference: LabeledDataset,
    config: OTDDConfig,
    progress: ProgressFn | None,
    *,
    barycentric: bool,
    keep_coupling: bool,
    label_cost: torch.Tensor | None,
    cache: DiskCache | None = None,
    cache_params: dict[str, Any] | None = None,
) -> OTDDResult:
    prog = _Progress(progress)
    dev = resolve_device(config.device)
    prog("labels", 0.0)
    lab = _label_cost(target, reference, config, dev, label_cost)
    prog("labels", 1.0)
    mean_c = mean_ground_cost(
        target, reference, lab, lambda_x=config.lambda_x, lambda_y=config.lambda_y
    )
    # the whole problem's cost: epsilon is resolved on it once, with the closed-form mean,
    # and every batch (a part of it) solves at that absolute value
    whole = config.cost_geometry(target, reference, lab, mean=mean_c, device=dev)
    eps_abs = whole.epsilon_abs
    n_q = target.n_samples
    totals = _Totals(n_q, target.features.shape[1], reference.n_classes, barycentric)
    self_labels = None
    if config.debiased:
        lab_qq, lab_pp = (_label_cost(ds, ds, config, dev, None) for ds in (target, reference))
        self_labels = (lab_qq, lab_pp)
    keep_plan = keep_coupling and not config.batched
    solve = BatchSolve(
        target,
        reference,
        config,
        lab,
        self_labels,
        whole,
        barycentric,
        keep_plan=keep_plan,
        cache=cache if config.batched else None,
        cache_params=cache_params,
    )
    rows = solve.rows
    n_b = len(rows)

    # the potentials (and the plan) are the whole problem's when one batch is all of it
    whole_problem = n_b == 1 and reference_columns(config, reference.n_samples, 0) is None

    def add(out: BatchOut) -> None:
        totals.add(out, rows[out.index], len(rows[out.index]) / n_q)
        if whole_problem:
            totals.plan = out.plan
            totals.pots = (out.f, out.g)

    def callback_for(bi: int, n: int) -> SinkhornCallback | None:
        return prog.sinkhorn_callback(_batch_stage(bi + 1, n), bi / n, (bi + 1) / n, config.tol)

    run_batches(
        solve,
        callback_for=callback_for,
        progress=lambda done, total: prog(_batch_stage(max(done, 1), total), done / total),
        on_result=add,
        on_debias=lambda bi, n: prog("debias", bi / n),
    )
    prog("done", 1.0)
    cost = totals.regularized - totals.debias if config.debiased else totals.transport
    effective = float(totals.perplexity.double().median())
    soft = totals.soft
    confidence = float(soft.max(1).values.double().mean()) if soft is not None else float("nan")
    _warn_if_blurry(target, reference, config, effective, confidence)
    return OTDDResult(
        cost=float(cost),
        marginal_error=float(totals.max_err),
        converged=bool(totals.all_conv),
        n_iter=int(totals.iters),
        epsilon_abs=float(eps_abs),
        label_distances=lab,
        coupling=totals.plan,
        transport_cost=float(totals.transport),
        regularized_cost=float(totals.regularized),
        mean_ground_cost=float(mean_c),
        mapped_features=totals.mapped,
        soft_labels=soft,
        potentials=totals.pots,
        n_batches=n_b,
        effective_neighbours=effective,
        label_confidence=confidence,
        row_perplexity=totals.perplexity,
        neighbour_index=totals.neighbour_index,
        neighbour_weight=totals.neighbour_weight,
        truncated_mass=float(totals.truncated),
        solver_mode="+".join(sorted(totals.modes)),
    )
