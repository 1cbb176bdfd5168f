"""The batches of one OTDD: each a self-contained task, cached, run on an engine.

Paper appendix "Complexity": at full size (60,000 images per dataset) the OTDD is solved in
batches of ``B`` target points, each against the reference or a seeded subsample of it
(:mod:`geoviz.ot.otdd`, "Modes and memory"). A batch depends only on the datasets, the
configuration and its index, so it is a task (:func:`geoviz.tasks.run_tasks`):

* :class:`BatchSolve` holds everything the batches share (both datasets, the label
  distances, the whole problem's cost geometry, the configuration). It is the task's function:
  :func:`~geoviz.tasks.run_tasks` puts it into Ray's object store **once** and every task
  receives it from there, so the datasets travel to each worker once, not once per batch.
  A batch's memory in its worker is the one checked by :func:`~geoviz.backend.check_memory`
  before its cost is built (``~B x N_ref x itemsize``, or one row block when streamed).
* With a :class:`~geoviz.backend.DiskCache`, every batch's result is an entry of its own,
  written as the batch finishes (namespace ``"otdd_batch"``, keyed by both datasets'
  content fingerprints, the numbers-determining configuration, whether maps are computed,
  given label distances, the batch index and count and the batch's target rows): a run
  that was killed resumes from the batches it had finished, and a second run reads them
  all. :func:`geoviz.ot.otdd.otdd` with ``cache`` or ``batch_cache`` stores them, and so
  does :class:`~geoviz.maps.barycentric.BarycentricMap` (the ``--batch-size`` maps).
* The engine is ``config.backend``: ``"sequential"`` (this process, with the solver's own
  progress inside each batch), ``"ray"`` (one Ray task per batch: a local cluster, or the one
  at ``config.ray_address``) or ``"auto"``. A batch is deterministic (seeded rows and
  columns, the same solver), so every engine gives the same values.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from geoviz.backend import ArraySpec, DiskCache, ValueSpec, check_memory, resolve_device
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import ResourceError
from geoviz.ot.geometry import CostGeometry, PointCloudCost
from geoviz.ot.loop import SinkhornCallback
from geoviz.ot.otdd_cost import N_NEIGHBOURS, OTDDConfig, itemsize
from geoviz.ot.problem import TransportProblem, uniform_measure
from geoviz.ot.result import SinkhornResult
from geoviz.ot.sinkhorn import Sinkhorn
from geoviz.tasks import resolve_backend, run_tasks

__all__ = [
    "BatchOut",
    "BatchSolve",
    "BlockOut",
    "batch_rows",
    "block_cost",
    "run_batches",
    "self_value",
    "solve_block",
]


#: the floats of a batch's self-transport terms (debiased mode), in this order
def batch_rows(config: OTDDConfig, n_q: int) -> tuple[np.ndarray, ...]:
    """The target rows of each batch: all of them at once unless ``config.batched``
    (a seeded shuffle cut into batches of ``config.batch_size``)."""
    if not config.batched:
        return (np.arange(n_q),)
    size = config.batch_size or n_q
    perm = (
        np.arange(n_q) if size >= n_q else np.random.default_rng((config.seed, 1)).permutation(n_q)
    )
    return tuple(perm[i : i + size] for i in range(0, n_q, size))


def reference_columns(config: OTDDConfig, n_p: int, bi: int) -> torch.Tensor | None:
    """Batch ``bi``'s seeded random subsample of the reference, or ``None`` (all of it)."""
    if not (
        config.batched
        and config.reference_subsample is not None
        and config.reference_subsample < n_p
    ):
        return None
    cols = np.random.default_rng((config.seed, 2, bi)).choice(
        n_p, size=config.reference_subsample, replace=False
    )
    return torch.from_numpy(np.sort(cols))


@dataclass(frozen=True)
class BlockOut:
    """What one solved block (a batch, or the one problem) contributes; every tensor on
    the CPU.

    ``transport`` is ``<pi, C>`` of the block's plan and ``regularized`` its dual value,
    both per unit mass; ``error`` the L1 marginal error; ``mapped``/``soft`` the
    barycentric images and soft labels (``None`` without maps); ``f``/``g`` the
    potentials; ``perplexity`` each row's effective neighbours; ``neighbour_index`` /
    ``neighbour_weight`` each row's heaviest reference points; ``plan`` the dense plan
    when it was kept (never stored).
    """

    transport: float
    regularized: float
    error: float
    converged: bool
    n_iter: int
    mapped: torch.Tensor | None
    soft: torch.Tensor | None
    f: torch.Tensor
    g: torch.Tensor
    perplexity: torch.Tensor
    neighbour_index: torch.Tensor
    neighbour_weight: torch.Tensor
    truncated_mass: float
    mode: str
    plan: torch.Tensor | None = None


@dataclass(frozen=True)
class BatchOut(BlockOut):
    """A batch's :class:`BlockOut` with its index and, in the debiased mode, its
    self-transport terms: ``self_value`` is ``(OT_eps(B, B) + OT_eps(R, R)) / 2`` (``nan``
    otherwise). ``neighbour_index`` indexes the whole reference."""

    index: int = 0
    self_value: float = math.nan
    self_error: float = 0.0
    self_converged: bool = True
    self_iterations: int = 0

    @classmethod
    def of_block(cls, block: BlockOut, **changes: Any) -> BatchOut:
        """``block``'s fields with ``changes`` (the index, remapped neighbours, self terms)."""
        values = {f.name: getattr(block, f.name) for f in dataclasses.fields(BlockOut)}
        return cls(**{**values, **changes})

    def to_payload(self) -> dict[str, Any]:
        """A :class:`~geoviz.backend.DiskCache` payload (tensors and plain values; no
        plan, and no maps when there are none)."""
        payload = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "plan"
        }
        if self.mapped is None or self.soft is None:
            del payload["mapped"], payload["soft"]
        return payload

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> BatchOut:
        """The batch stored by :meth:`to_payload` (its plain values cast to their types)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name == "plan":
                continue
            value = payload.get(f.name)
            cast = _PLAIN_CASTS.get(str(f.type))
            values[f.name] = cast(value) if cast is not None else value
        return cls(**values)


#: how the plain fields of a stored :class:`BatchOut` are read back (by annotation)
_PLAIN_CASTS: dict[str, Callable[[Any], Any]] = {
    "float": float,
    "int": int,
    "bool": bool,
    "str": str,
}


def block_cost(cloud: PointCloudCost, *, stream: bool, what: str) -> CostGeometry:
    """The OTDD cost of one block: ``cloud`` itself (streamed) or stored, memory checked first."""
    n, m = cloud.shape
    item = itemsize(cloud.dtype)
    if stream:
        block = min(64 * 2**20, n * m * item)  # one row block of the cost
        check_memory(block, cloud.device, f"the streamed {what}")
        return cloud
    try:
        check_memory(n * m * item, cloud.device, f"the {what} ({n} x {m})")
    except ResourceError as err:
        raise ResourceError(
            f"{err}; or solve it as one problem in bounded memory with stream_reference=True "
            "(CLI: --stream)"
        ) from None
    return cloud.stored()


def solve_block(
    problem: TransportProblem,
    solver: Sinkhorn,
    callback: SinkhornCallback | None,
    *,
    map_onto: tuple[torch.Tensor, torch.Tensor, int] | None,
) -> BlockOut:
    """Entropic OTDD of one target block against the reference (paper eq. (otdd)).

    ``map_onto``: ``(reference features (m, D), reference labels (m,), n_classes)`` for
    the barycentric outputs (eq. (bary_map)), or ``None``.
    """
    res = solver(problem, callback=callback)
    mapped = soft = None
    if map_onto is not None:
        # barycentric projection, eq. (bary_map): rows of the plan renormalised
        xp, yp, n_classes = map_onto
        geom = problem.geometry
        onehot = torch.nn.functional.one_hot(yp.to(geom.device), n_classes)
        values = torch.cat([xp.to(device=geom.device, dtype=geom.dtype), onehot.to(geom.dtype)], 1)
        bary = res.apply(values)
        d = xp.shape[1]
        mapped = bary[:, :d].float().cpu()
        soft = bary[:, d:]
        soft = (soft / soft.sum(1, keepdim=True)).float().cpu()
    idx, wts = res.top_neighbours(N_NEIGHBOURS)
    out_plan = res.plan().to(device="cpu", dtype=torch.float32) if solver.keep_plan else None
    return BlockOut(
        transport=res.transport_cost(),
        regularized=res.dual_value(),
        error=res.marginal_error,
        converged=res.converged,
        n_iter=res.n_iter,
        plan=out_plan,
        mapped=mapped,
        soft=soft,
        f=res.f.cpu(),
        g=res.g.cpu(),
        perplexity=res.row_perplexity().float().cpu(),
        neighbour_index=idx,
        neighbour_weight=wts.float(),
        truncated_mass=res.truncated_mass,
        mode=res.mode,
    )


def self_value(
    x: torch.Tensor,
    y: torch.Tensor,
    label_cost: torch.Tensor,
    config: OTDDConfig,
    epsilon_abs: float,
    device: torch.device,
) -> SinkhornResult:
    """``OT_eps`` of a point cloud with itself (debiasing term), averaged symmetric solver."""
    cloud = config.point_cloud(
        (x, y), (x, y), label_cost, device, epsilon=epsilon_abs, relative_epsilon=False
    )
    geom = block_cost(
        cloud, stream=config.stream_reference, what="OTDD self-cost matrix for debiasing"
    )
    n = geom.shape[0]
    weights = uniform_measure(n, geom.device)
    problem = TransportProblem(geom, weights, weights, symmetric=True)
    return config.sinkhorn_solver()(problem)


@dataclass(frozen=True)
class BatchSolve:
    """The task of one batch: ``solve(bi)`` is batch ``bi``'s :class:`BatchOut`.

    Parameters
    ----------
    target, reference
        ``Q`` (``N_Q`` points) and ``P`` (``N_P``), features on the CPU.
    config
        The OTDD configuration (its ``epsilon`` is resolved on the whole problem).
    label_cost
        ``(C_Q, C_P)`` label distances ``W_2^2(alpha_y, alpha_y')``.
    self_label_costs
        ``(C_Q x C_Q, C_P x C_P)`` for the debiased mode, else ``None``.
    cost
        The whole problem's ground cost, built once by :func:`geoviz.ot.otdd.otdd` (its
        mean in closed form): every batch solves a part of it at its ``epsilon_abs``.
    barycentric
        Also return the batch's barycentric maps (paper eq. (bary_map)).
    keep_plan
        Return the batch's dense plan (single-problem mode only).
    cache, cache_params
        Where each batch is stored, and the parameters that determine the whole
        problem's numbers (each batch's key adds its index, the count and its rows).
    """

    target: LabeledDataset
    reference: LabeledDataset
    config: OTDDConfig
    label_cost: torch.Tensor
    self_label_costs: tuple[torch.Tensor, torch.Tensor] | None
    cost: PointCloudCost
    barycentric: bool
    keep_plan: bool = False
    cache: DiskCache | None = None
    cache_params: dict[str, Any] | None = None

    def task_memory_bytes(self) -> int:
        """What one batch holds in its worker: both datasets, and the batch's stored cost
        and dense kernel (``B x N_ref``, twice, with room for temporaries), or its
        streamed row blocks and support."""
        config = self.config
        item = 8 if config.dtype == "float64" else 4
        rows = max(len(r) for r in self.rows)
        cols = config.reference_subsample or self.reference.n_samples
        cols = min(cols, self.reference.n_samples)
        data = (self.target.n_samples + self.reference.n_samples) * self.target.n_features * 4
        if config.stream_reference:
            per_row = config.max_support_per_row or cols
            solve = rows * min(per_row, cols) * 100 + 512 * cols * item * 4
        else:
            solve = 3 * rows * cols * item
        return int(data + solve)

    @functools.cached_property
    def rows(self) -> tuple[np.ndarray, ...]:  # one seeded shuffle, not one per batch
        return batch_rows(self.config, self.target.n_samples)

    def __call__(self, bi: int) -> BatchOut:
        return self.solve(bi)

    def solve(
        self,
        bi: int,
        callback: SinkhornCallback | None = None,
        on_debias: Callable[[], None] | None = None,
    ) -> BatchOut:
        """Batch ``bi`` (from the cache when it holds it); ``callback`` follows Sinkhorn,
        ``on_debias`` is called before the self-transport terms."""
        if self.cache is None or self.cache_params is None or self.keep_plan:
            return self._solve(bi, callback, on_debias)
        rows = self.rows[bi]
        params = {
            **self.cache_params,
            "batch": int(bi),
            "n_batches": len(self.rows),
            "rows": np.asarray(rows, dtype=np.int64),
        }
        payload = self.cache.get_or_compute(
            "otdd_batch",
            params,
            lambda: self._solve(bi, callback, on_debias).to_payload(),
            expect=self._payload_spec(len(rows)),
            check=BatchOut.from_payload,
        )
        return BatchOut.from_payload(payload)

    def _payload_spec(self, n_rows: int) -> dict[str, ValueSpec]:
        """What a stored batch of ``n_rows`` target rows must hold (``expect`` of
        :meth:`~geoviz.backend.DiskCache.get_or_compute`): maps sized by its rows, the
        features' dimension and the reference's classes; ``g`` over the columns it
        saw."""
        maps = not self.barycentric
        return {
            "mapped": ArraySpec((n_rows, self.target.n_features), optional=maps),
            "soft": ArraySpec((n_rows, self.reference.n_classes), optional=maps),
            "f": ArraySpec((n_rows,), finite=False),
            "g": ArraySpec(("columns",), finite=False),
            "perplexity": ArraySpec((n_rows,), finite=False),
            "neighbour_index": ArraySpec((n_rows, "neighbours")),
            "neighbour_weight": ArraySpec((n_rows, "neighbours")),
        }

    def _solve(
        self,
        bi: int,
        callback: SinkhornCallback | None,
        on_debias: Callable[[], None] | None,
    ) -> BatchOut:
        config = self.config
        dev = resolve_device(config.device)
        target, reference = self.target, self.reference
        n_q, n_p = target.n_samples, reference.n_samples
        rows = self.rows[bi]
        rows_t = torch.tensor(np.asarray(rows), dtype=torch.int64)  # a copy: Ray's are read-only
        cols_t = reference_columns(config, n_p, bi)
        whole_target = len(rows) == n_q
        xq, yq, xp, yp = target.features, target.labels, reference.features, reference.labels
        bxq, byq = (xq, yq) if whole_target else (xq[rows_t], yq[rows_t])
        bxp, byp = (xp, yp) if cols_t is None else (xp[cols_t], yp[cols_t])
        whole = self.cost
        if whole.device != dev:  # a worker on another device (Ray): the same cost there
            whole = config.cost_geometry(
                target, reference, self.label_cost, mean=whole.mean(), device=dev
            )
        # a part has its own mean (for the schedule) and the whole's epsilon_abs
        part = (
            whole
            if whole_target and cols_t is None
            else whole.subset(None if whole_target else rows_t, cols_t)
        )
        geom = block_cost(part, stream=config.stream_reference, what="OTDD cost matrix")
        problem = TransportProblem(
            geom,
            uniform_measure(geom.shape[0], geom.device),
            uniform_measure(geom.shape[1], geom.device),
            groups=(byq, byp),
        )
        solver = config.sinkhorn_solver(keep_plan=self.keep_plan)
        block = solve_block(
            problem,
            solver,
            callback,
            map_onto=(bxp, byp, reference.n_classes) if self.barycentric else None,
        )
        neighbours = block.neighbour_index
        if cols_t is not None:  # indices into the subsample -> into the reference
            neighbours = torch.where(neighbours >= 0, cols_t[neighbours.clamp_min(0)], -1)
        self_terms: dict[str, Any] = {}
        if self.self_label_costs is not None:
            if on_debias is not None:
                on_debias()
            lab_qq, lab_pp = self.self_label_costs
            eps_abs = whole.epsilon_abs
            self_q = self_value(bxq, byq, lab_qq, config, eps_abs, dev)
            self_p = self_value(bxp, byp, lab_pp, config, eps_abs, dev)
            self_terms = {
                "self_value": 0.5 * (self_q.dual_value() + self_p.dual_value()),
                "self_error": max(self_q.marginal_error, self_p.marginal_error),
                "self_converged": bool(self_q.converged and self_p.converged),
                "self_iterations": int(self_q.n_iter + self_p.n_iter),
            }
        return BatchOut.of_block(block, index=int(bi), neighbour_index=neighbours, **self_terms)


def run_batches(
    solve: BatchSolve,
    *,
    callback_for: Callable[[int, int], SinkhornCallback | None],
    progress: Callable[[int, int], None],
    on_result: Callable[[BatchOut], None],
    on_debias: Callable[[int, int], None] | None = None,
) -> int:
    """Every batch of ``solve`` on ``solve.config.backend``; returns the number of batches.

    Each result goes to ``on_result`` as it arrives (so the caller adds it up and no list
    of all batches is kept beyond the engine's); ``progress(done, total)`` counts finished
    batches. In this process (one batch, or the sequential engine) ``callback_for(bi,
    n_batches)`` also follows the solver inside each batch.
    """
    n_batches = len(solve.rows)
    if n_batches == 1 or resolve_backend(solve.config.backend) == "sequential":
        progress(0, n_batches)
        for bi in range(n_batches):
            debias = None if on_debias is None else functools.partial(on_debias, bi, n_batches)
            on_result(solve.solve(bi, callback_for(bi, n_batches), debias))
            progress(bi + 1, n_batches)
        return n_batches
    run_tasks(
        solve,
        list(range(n_batches)),
        backend=solve.config.backend,
        address=solve.config.ray_address,
        progress=progress,
        on_result=lambda _i, out: on_result(out),
        memory_per_task=solve.task_memory_bytes(),
    )
    return n_batches
