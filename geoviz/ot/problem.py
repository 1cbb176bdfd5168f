"""The transport problem of the Sinkhorn solver: cost geometry, marginals, class groups.

:class:`TransportProblem` is a frozen value validated once, at construction; the solver
(:class:`geoviz.ot.sinkhorn.Sinkhorn`) receives it and returns a
:class:`geoviz.ot.result.SinkhornResult` (problem -> solver -> output, as in OTT-JAX).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from geoviz.errors import GeovizError
from geoviz.ot.geometry import CostGeometry

__all__ = ["TransportProblem", "check_marginals", "check_symmetric", "uniform_measure"]


def uniform_measure(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(n,)`` float64 vector of ``1/n``: the uniform measure on ``n`` points.

    The default marginal of :func:`sinkhorn`. (Not interpolation weights: the
    uniform point of the weight simplex is
    :func:`geoviz.geodesic.weights.uniform_weights`.)
    """
    return torch.full((n,), 1.0 / n, dtype=torch.float64, device=device)


# --------------------------------------------------------------------------- inputs


def check_marginals(
    geom: CostGeometry, a: torch.Tensor | None, b: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The marginals ``(a, b)`` as float64 ``(n,)`` and ``(m,)`` on the cost's device
    (uniform where ``None``); refused unless finite, strictly positive and of equal mass."""
    n, m = geom.shape
    dev = geom.device
    out = []
    for name, w, size in (("a", a, n), ("b", b, m)):
        if w is None:
            out.append(uniform_measure(size, dev))
            continue
        w = torch.as_tensor(w).to(device=dev, dtype=torch.float64).reshape(-1)
        if w.numel() != size:
            raise GeovizError(
                f"sinkhorn: weights {name} have {w.numel()} entries but the cost has {size} along that axis"
            )
        if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
            raise GeovizError(f"sinkhorn: weights {name} must be finite and strictly positive")
        out.append(w)
    ma, mb = float(out[0].sum()), float(out[1].sum())
    if abs(ma - mb) > 1e-6 * max(ma, mb):
        raise GeovizError(
            f"sinkhorn: marginals must have equal mass, got sum(a)={ma:.6g}, sum(b)={mb:.6g}"
        )
    return out[0], out[1]


# --------------------------------------------------------------------------- problem


@dataclass(frozen=True)
class TransportProblem:
    """An entropic OT problem: cost geometry (holding epsilon) and marginals.

    Solves ``min <pi, C> + eps KL(pi | a (x) b)`` over ``pi 1 = a``, ``pi^T 1 = b``
    with ``eps = geometry.epsilon_abs`` (module docstring). Validated once, at
    construction: equal-mass positive weights, a finite cost, a resolvable epsilon.

    Attributes
    ----------
    geometry
        The cost (:class:`~geoviz.ot.geometry.CostGeometry`) with its regularisation
        set (:meth:`~geoviz.ot.geometry.CostGeometry.with_epsilon`).
    a, b
        ``(n,)``, ``(m,)`` positive weights of equal mass; stored as float64 on the
        geometry's device (see :func:`uniform_measure` for uniform ones).
    groups
        Optional ``(row_groups (n,), col_groups (m,))`` integer group ids (for OTDD:
        the class labels), used by the class-level coarse correction.
    symmetric
        ``C = C^T`` and ``a = b``: solved with the averaged update of Feydy et al.
    """

    geometry: CostGeometry
    a: torch.Tensor
    b: torch.Tensor
    groups: tuple[torch.Tensor, torch.Tensor] | None = None
    symmetric: bool = False

    def __post_init__(self) -> None:
        geom = self.geometry
        if not isinstance(geom, CostGeometry):
            raise GeovizError(
                f"sinkhorn: the problem needs a CostGeometry, got {type(geom).__name__}"
            )
        a, b = check_marginals(geom, self.a, self.b)
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)
        geom.check_finite()
        _ = geom.epsilon_abs  # resolved (and checked) once, here
        if self.symmetric:
            if geom.shape[0] != geom.shape[1] or not torch.allclose(a, b):
                raise GeovizError("sinkhorn: symmetric=True needs a square cost and a == b")
            check_symmetric(geom)

    @property
    def epsilon_abs(self) -> float:
        """The absolute regularisation (resolved on the geometry)."""
        return self.geometry.epsilon_abs


def check_symmetric(geom: CostGeometry) -> None:
    """Refuse a cost that is not symmetric, checked on up to 4096 sampled entries."""
    n = geom.shape[0]
    gen = torch.Generator().manual_seed(0)
    k = min(4096, n * n)
    ii = torch.randint(0, n, (k,), generator=gen)
    jj = torch.randint(0, n, (k,), generator=gen)
    if geom.matrix is not None:
        c = geom.matrix
        cij = c[ii.to(c.device), jj.to(c.device)]
        cji = c[jj.to(c.device), ii.to(c.device)]
    else:
        pick = torch.unique(ii)[:64]
        rows = torch.stack([geom.row_block(int(i), int(i) + 1)[0] for i in pick])
        cij = rows[:, pick]
        cji = rows[:, pick].T
    scale = float(cij.abs().max()) + 1e-30
    if float((cij - cji).abs().max()) > 1e-4 * scale:
        raise GeovizError("sinkhorn: symmetric=True needs a symmetric cost (C = C^T)")
