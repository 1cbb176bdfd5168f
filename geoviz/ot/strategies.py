"""How the Sinkhorn solver runs: its kernel policy, its epsilon schedule, its supports.

Settings of :class:`~geoviz.ot.sinkhorn.Sinkhorn` (module docstring of
:mod:`geoviz.ot.sinkhorn`, "One loop"), frozen and validated on construction:

* :class:`KernelPolicy` — which kernel evaluates the log-sum-exps (``dense``,
  ``sparse`` by truncation, ``online``; :mod:`geoviz.ot.kernels`) and the truncation;
* :class:`EpsilonScaling` — the geometric schedule of regularisations down to ``eps``;
* :class:`SupportSource` — where one solve's truncated supports are chosen under the
  policy: a pass over the cost each time, or among each row's candidates.

The third strategy, :class:`~geoviz.ot.sinkhorn.MultiscaleStart`, solves a coarse problem
with the solver itself, so it stays beside it in :mod:`geoviz.ot.sinkhorn`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from geoviz.errors import GeovizError
from geoviz.ot.geometry import CostGeometry
from geoviz.ot.support import Candidates, Support, select_support

__all__ = ["EpsilonScaling", "KernelPolicy", "SinkhornMode", "SupportSource"]

SinkhornMode = Literal["auto", "dense", "sparse", "online"]

#: candidates per row found in one pass for each entry a streamed support may keep
_CANDIDATES_PER_CAP = 2


@dataclass(frozen=True)
class KernelPolicy:
    """Which kernel evaluates the log-sum-exps (:mod:`geoviz.ot.sinkhorn`, "One loop").

    Attributes
    ----------
    mode
        ``"auto"``, ``"dense"``, ``"sparse"`` or ``"online"``.
    truncation
        Sparse kernel: keep entries within ``truncation`` (in units of ``eps``) of
        their row's best, i.e. drop entries carrying less than ``exp(-truncation)``
        of the row's largest entry.
    max_density
        Auto mode: use the sparse kernel when the support keeps at most this
        fraction of the ``n m`` entries.
    absorb_threshold
        Absorb scalings into the kernel when ``|log u|`` or ``|log v|`` exceeds it.
    max_per_row
        Sparse kernel: keep at most this many entries per row (each row's largest), or
        ``None`` (no cap). Bounds the support at ``n * max_per_row`` entries when the
        truncation window holds thousands of points per row (large ``m``); the dropped
        mass is measured at verification like the rest of the truncation.
    """

    mode: SinkhornMode = "auto"
    truncation: float = 20.0
    max_density: float = 0.1
    absorb_threshold: float = 30.0
    max_per_row: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "dense", "sparse", "online"):
            raise GeovizError(
                f"sinkhorn: mode must be 'auto', 'dense', 'sparse' or 'online', got {self.mode!r}"
            )
        if not (self.truncation > 0):
            raise GeovizError(f"sinkhorn: truncation must be > 0, got {self.truncation!r}")
        if not (0.0 < self.max_density <= 1.0):
            raise GeovizError(f"sinkhorn: max_density must be in (0, 1], got {self.max_density!r}")
        if self.max_per_row is not None and (
            isinstance(self.max_per_row, bool)
            or not isinstance(self.max_per_row, int)
            or self.max_per_row < 1
        ):
            raise GeovizError(
                f"sinkhorn: max_per_row must be a positive integer or None, got {self.max_per_row!r}"
            )


@dataclass(frozen=True)
class EpsilonScaling:
    """Annealing: a geometric schedule of regularisations down to ``eps``.

    Attributes
    ----------
    ratio
        Ratio in ``(0, 1)`` between successive regularisations.
    start
        First regularisation (default: the mean cost).
    stage_iter
        Iteration budget of each intermediate regularisation.
    """

    ratio: float = 0.25
    start: float | None = None
    stage_iter: int = 30

    def __post_init__(self) -> None:
        if not (0.0 < self.ratio < 1.0):
            raise GeovizError(
                f"sinkhorn: eps_scaling must be in (0, 1) or None, got {self.ratio!r}"
            )
        if int(self.stage_iter) < 1:
            raise GeovizError(f"sinkhorn: stage_iter must be >= 1, got {self.stage_iter!r}")

    def stages(self, eps: float, geom: CostGeometry, max_iter: int) -> list[float]:
        """``[start, ..., eps]`` with ratio :attr:`ratio`; ``[eps]`` if ``max_iter`` is too small."""
        start = float(self.start) if self.start is not None else geom.mean()
        schedule = [eps]
        e = eps
        while e / self.ratio < start:
            e = e / self.ratio
            schedule.append(e)
        schedule = schedule[::-1]
        if max_iter < 2 * len(schedule):
            schedule = [eps]  # too small a budget to anneal: every stage but the last would eat it
        return schedule


class SupportSource:
    """Where a solve's truncated supports are chosen: a pass over the cost each time, or,
    with a cap per row (streamed or stored), among each row's candidates found in one pass
    (:class:`~geoviz.ot.support.Candidates`, :data:`_CANDIDATES_PER_CAP` per kept entry)."""

    def __init__(self, geom: CostGeometry, policy: KernelPolicy) -> None:
        self.geom, self.policy = geom, policy
        self.use_candidates = self.capped
        self.candidates: Candidates | None = None

    @property
    def capped(self) -> bool:
        """Whether supports keep at most a fixed number of entries per row."""
        return self.policy.max_per_row is not None and self.policy.max_per_row < self.geom.shape[1]

    @property
    def candidates_k(self) -> int | None:
        """Candidates per row (``None`` when supports are chosen by full passes)."""
        if not self.use_candidates or self.policy.max_per_row is None:
            return None
        return _CANDIDATES_PER_CAP * self.policy.max_per_row

    def refresh(self, G: torch.Tensor, eps: float) -> None:
        """Find the candidates around the column potential ``G`` (one pass)."""
        assert self.candidates_k is not None
        self.candidates = Candidates.scan(self.geom, G, eps, self.candidates_k)

    def choose(
        self,
        G: torch.Tensor,
        eps: float,
        truncation: float,
        max_nnz: int,
        F: torch.Tensor | None = None,
        log_a: torch.Tensor | None = None,
        log_b: torch.Tensor | None = None,
    ) -> Support | None:
        """:func:`~geoviz.ot.support.select_support`'s support (``None``: above ``max_nnz``)."""
        cap = self.policy.max_per_row
        if not self.use_candidates or cap is None:
            support, _ = select_support(
                self.geom,
                G,
                eps,
                truncation,
                max_nnz,
                F=F,
                log_a=log_a,
                log_b=log_b,
                max_per_row=cap,
            )
            return support
        if self.candidates is None:
            self.refresh(G, eps)
        assert self.candidates is not None
        support = self.candidates.select(G, eps, truncation, cap, F=F, log_a=log_a, log_b=log_b)
        return support if support.nnz <= max_nnz else None
