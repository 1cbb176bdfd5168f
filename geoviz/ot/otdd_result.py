"""The outcome of :func:`geoviz.ot.otdd.otdd`: :class:`OTDDResult` (frozen), with the coupling,
the barycentric map and soft labels, the distances and every map diagnostic."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from geoviz.backend import ArraySpec
from geoviz.ot.otdd_cost import BLUR_NEIGHBOURS

__all__ = ["OTDDResult"]


_SCALARS = (
    "effective_neighbours",
    "label_confidence",
    "truncated_mass",
    "cost",
    "marginal_error",
    "converged",
    "n_iter",
    "epsilon_abs",
    "transport_cost",
    "regularized_cost",
    "mean_ground_cost",
    "n_batches",
)


@dataclass(frozen=True)
class OTDDResult:
    """Outcome of :func:`otdd`.

    Attributes
    ----------
    cost
        ``<pi, C>`` of the entropic plan, or the Sinkhorn divergence when
        ``config.debiased`` (batched: mass-weighted mean over batches).
    marginal_error
        Largest L1 marginal error over the solves (``||pi 1 - a||_1 + ||pi^T 1 - b||_1``).
    converged
        Every solve reached ``tol``.
    n_iter
        Sinkhorn iterations, summed over batches.
    epsilon_abs
        Absolute regularisation ``epsilon * mean(C)``.
    label_distances
        ``(C_Q, C_P)`` float64 CPU ``W_2^2`` between target and reference classes.
    coupling
        ``(N_Q, N_P)`` float32 CPU plan (rows sum to ``1/N_Q``); ``None`` in
        batched/streamed mode or when not kept.
    transport_cost
        ``<pi, C>`` (equals ``cost`` unless debiased).
    regularized_cost
        ``OT_eps = <f, a> + <g, b>`` of the cross problem (batched: mean).
    mean_ground_cost
        ``mean(C)`` used for ``epsilon_abs``.
    mapped_features
        ``(N_Q, D)`` float32 CPU barycentric projection (paper eq. (bary_map)),
        when requested.
    soft_labels
        ``(N_Q, C_P)`` float32 CPU, rows sum to 1, when requested.
    potentials
        ``(f (N_Q,), g (N_P,))`` float64 CPU dual potentials when the problem was
        solved in one piece against the whole reference (full mode, or streamed
        / batched with a single batch and no reference subsample);
        ``pi = (a (x) b) exp((f (+) g - C)/epsilon_abs)``.
    n_batches
        Number of target batches (1 in full mode).
    effective_neighbours
        **Sharpness**: median over target points of the plan-row perplexity
        ``exp(H(pi_i. / sum_j pi_ij))``, the number of reference points a mapped
        point effectively averages (1: a one-to-one map; ``N_P``: the mean
        image). Above :data:`BLUR_NEIGHBOURS` the maps are blurry.
    label_confidence
        Mean over target points of the largest soft-label entry (1: every
        mapped point gets one reference class; ``1/C_P``: uniform soft labels);
        ``nan`` without barycentric outputs.
    row_perplexity
        ``(N_Q,)`` float32 CPU per-point perplexity (see ``effective_neighbours``).
    neighbour_index, neighbour_weight
        ``(N_Q, 8)`` int64 reference indices and float32 row-normalised plan
        weights of the largest entries of every plan row, descending (index
        ``-1``, weight 0 where a row has fewer entries): which reference points
        each mapped point is made of.
    truncated_mass
        Sparse solver: mass of the dense entropic plan outside the kept support
        (largest over batches; 0 for the dense solver).
    solver_mode
        Kernel of the final Sinkhorn stage (``"dense"``, ``"sparse"``, ``"online"``).
    """

    cost: float
    marginal_error: float
    converged: bool
    n_iter: int
    epsilon_abs: float
    label_distances: torch.Tensor
    coupling: torch.Tensor | None = None
    transport_cost: float = float("nan")
    regularized_cost: float = float("nan")
    mean_ground_cost: float = float("nan")
    mapped_features: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    soft_labels: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    potentials: tuple[torch.Tensor, torch.Tensor] | None = dataclasses.field(
        default=None, repr=False
    )
    n_batches: int = 1
    effective_neighbours: float = float("nan")
    label_confidence: float = float("nan")
    row_perplexity: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    neighbour_index: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    neighbour_weight: torch.Tensor | None = dataclasses.field(default=None, repr=False)
    truncated_mass: float = 0.0
    solver_mode: str = "dense"

    @property
    def is_blurry(self) -> bool:
        """``effective_neighbours > BLUR_NEIGHBOURS``."""
        return bool(self.effective_neighbours > BLUR_NEIGHBOURS)

    def summary(self) -> dict[str, Any]:
        """Plain-Python scalars (for manifests, the CLI and the app)."""
        return {
            "cost": self.cost,
            "transport_cost": self.transport_cost,
            "regularized_cost": self.regularized_cost,
            "marginal_error": self.marginal_error,
            "converged": self.converged,
            "n_iter": self.n_iter,
            "epsilon_abs": self.epsilon_abs,
            "mean_ground_cost": self.mean_ground_cost,
            "n_batches": self.n_batches,
            "effective_neighbours": self.effective_neighbours,
            "label_confidence": self.label_confidence,
            "truncated_mass": self.truncated_mass,
            "solver_mode": self.solver_mode,
        }

    def to_payload(self) -> dict[str, Any]:
        """Tensors and scalars for :class:`~geoviz.backend.DiskCache` (inverse: :meth:`from_payload`)."""
        payload: dict[str, Any] = {k: getattr(self, k) for k in _SCALARS}
        payload["label_distances"] = self.label_distances
        payload["solver_mode"] = self.solver_mode
        for key in (
            "coupling",
            "mapped_features",
            "soft_labels",
            "row_perplexity",
            "neighbour_index",
            "neighbour_weight",
        ):
            value = getattr(self, key)
            if value is not None:
                payload[key] = value
        if self.potentials is not None:
            payload["f"], payload["g"] = self.potentials
        return payload

    @staticmethod
    def payload_spec(
        n_target: int | str,
        n_reference: int | str,
        target_classes: int,
        reference_classes: int,
        dim: int,
        *,
        barycentric: bool,
    ) -> dict[str, Any]:
        """What a cached :meth:`to_payload` must hold (``expect`` of
        :meth:`geoviz.backend.DiskCache.get_or_compute`): the plan is ``n_target x
        n_reference``, the projection ``n_target x dim`` with ``reference_classes`` soft
        labels (required with ``barycentric``), all finite; the other arrays sized by the
        same counts. A ``str`` count is a name: any size, the same in every array."""

        n, m = n_target, n_reference
        spec: dict[str, Any] = {k: (float, int, bool) for k in _SCALARS}
        spec["solver_mode"] = str
        spec["label_distances"] = ArraySpec((target_classes, reference_classes), finite=False)
        spec["coupling"] = ArraySpec((n, m), optional=True)
        spec["mapped_features"] = ArraySpec((n, dim), optional=not barycentric)
        spec["soft_labels"] = ArraySpec((n, reference_classes), optional=not barycentric)
        spec["row_perplexity"] = ArraySpec((n,), finite=False, optional=True)
        spec["neighbour_index"] = ArraySpec((n, "neighbours"), optional=True)
        spec["neighbour_weight"] = ArraySpec((n, "neighbours"), optional=True)
        spec["f"] = ArraySpec((n,), finite=False, optional=True)
        spec["g"] = ArraySpec((m,), finite=False, optional=True)
        return spec

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> OTDDResult:
        """Rebuild a result stored with :meth:`to_payload`."""
        pots = (payload["f"], payload["g"]) if "f" in payload else None
        return cls(
            cost=float(payload["cost"]),
            marginal_error=float(payload["marginal_error"]),
            converged=bool(payload["converged"]),
            n_iter=int(payload["n_iter"]),
            epsilon_abs=float(payload["epsilon_abs"]),
            label_distances=payload["label_distances"],
            coupling=payload.get("coupling"),
            transport_cost=float(payload["transport_cost"]),
            regularized_cost=float(payload["regularized_cost"]),
            mean_ground_cost=float(payload["mean_ground_cost"]),
            mapped_features=payload.get("mapped_features"),
            soft_labels=payload.get("soft_labels"),
            potentials=pots,
            n_batches=int(payload["n_batches"]),
            effective_neighbours=float(payload["effective_neighbours"]),
            label_confidence=float(payload["label_confidence"]),
            row_perplexity=payload.get("row_perplexity"),
            neighbour_index=payload.get("neighbour_index"),
            neighbour_weight=payload.get("neighbour_weight"),
            truncated_mass=float(payload["truncated_mass"]),
            solver_mode=str(payload["solver_mode"]),
        )
