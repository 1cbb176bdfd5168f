"""(2,Q)-dataset distances, the projection objective and its minimiser on the simplex.

Paper Sec. 3.3 ("Projection onto generalized geodesic of datasets"):

* Def. 2 — the squared (2,Q)-dataset distance between two datasets mapped from
  the same target ``Q`` by OTDD maps ``T_i(z) = [x_i; y_i]``::

      W^2_{2,Q}(P_i, P_j) = E_{z~Q} [ ||x_i - x_j||^2 + W_2^2(alpha_{y_i}, alpha_{y_j}) ]

  and ``W^2_{2,Q}(P_i, Q)`` is the same with ``T_j = Id``. With barycentric
  (soft) labels the label term is evaluated *linearly* in the soft labels:
  ``W_2^2(alpha_{y_i}, alpha_{y_j}) ~ y_i^T M_ij y_j`` with
  ``M_ij[c, c'] = W_2^2(alpha_c, alpha_{c'})`` the class-conditional distances
  (:func:`geoviz.ot.labels.label_distances`). For one-hot labels this is exact.
* eq. (ds_eq) — the analogue of Prop. 1::

      W^2(P_a, Q) = sum_i a_i W_i - 1/2 sum_{i != j} a_i a_j W_ij

  with ``W_i = W^2_{2,Q}(P_i, Q)`` and ``W_ij = W^2_{2,Q}(P_i, P_j)``.
* eq. (hat_a) — ``a_hat = argmin_{a in simplex} W^2(P_a, Q)``, a quadratic
  programme (:func:`optimal_weights`).

Costs are squared Euclidean with no 1/2 (project convention); everything here
is computed in float64.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from geoviz import limits
from geoviz.errors import GeovizError, WeightsError
from geoviz.geodesic.weights import check_weights, project_to_simplex

__all__ = [
    "TwoQDistances",
    "check_qp_solver",
    "objective",
    "optimal_weights",
    "simplex_compositions",
    "simplex_grid",
    "two_q_distances",
]

#: Largest ``m`` for which a non-convex objective is minimised by exact
#: enumeration of the simplex faces (``2^m - 1`` small linear solves).
MAX_ENUMERATION_M = 14


# --------------------------------------------------------------------------- simplex grid


def simplex_compositions(m: int, resolution: int) -> np.ndarray:
    """All ``(K, m)`` non-negative integer vectors ``k`` with ``sum(k) = resolution``: the
    nodes of :func:`simplex_grid` before the division by ``resolution`` (the explorer's
    payload ships them as integers). Same bounds and order as :func:`simplex_grid`."""
    if int(m) != m or m < 1:
        raise WeightsError(f"simplex_grid needs m >= 1 references, got {m}")
    m = int(m)
    # resolution in [1, MAX_GRID_RESOLUTION] and at most MAX_GRID_POINTS points, checked
    # before anything is enumerated
    r = limits.check_grid(resolution, m, error=WeightsError)
    if m == 1:
        return np.full((1, 1), r, dtype=np.int64)
    # stars and bars: choose m-1 bar positions among r+m-1 slots
    bars = np.array(list(itertools.combinations(range(r + m - 1), m - 1)), dtype=np.int64)
    bars = bars.reshape(-1, m - 1)
    padded = np.concatenate(
        [np.full((bars.shape[0], 1), -1), bars, np.full((bars.shape[0], 1), r + m - 1)], axis=1
    )
    counts: np.ndarray = np.diff(padded, axis=1) - 1
    return counts


def simplex_grid(m: int, resolution: int) -> np.ndarray:
    """All points of ``Delta_{m-1}`` with coordinates in ``{0, 1/r, ..., 1}``.

    Parameters
    ----------
    m
        Dimension (number of references), ``m >= 1``.
    resolution
        ``1 <= r <= geoviz.limits.MAX_GRID_RESOLUTION``; the grid has
        ``binom(r + m - 1, m - 1)`` points (at most
        :data:`geoviz.limits.MAX_GRID_POINTS`), including the ``m`` vertices and, for
        ``r`` even, the edge midpoints.

    Returns
    -------
    np.ndarray
        ``(K, m)`` float64 rows ``k / r`` for every ``k in N^m`` with
        ``sum(k) = r`` (so each row sums to 1 up to rounding); the first row is
        the vertex ``e_m`` and the last ``e_1``.

    Examples
    --------
    >>> from geoviz.geodesic import simplex_grid
    >>> simplex_grid(3, 2)  # the 3 vertices and the 3 edge midpoints
    array([[0. , 0. , 1. ],
           [0. , 0.5, 0.5],
           [0. , 1. , 0. ],
           [0.5, 0. , 0.5],
           [0.5, 0.5, 0. ],
           [1. , 0. , 0. ]])
    """
    counts = simplex_compositions(m, resolution)
    return counts.astype(np.float64) / int(resolution)


# --------------------------------------------------------------------------- objective


def _check_two_q(w_to_target: Any, w_between: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate a (2,Q) pair; returns float64 ``(W_i (m,), W_ij (m, m))``, symmetric, zero diagonal."""
    w_t = np.asarray(
        w_to_target.detach().cpu().numpy()
        if isinstance(w_to_target, torch.Tensor)
        else w_to_target,
        dtype=np.float64,
    )
    w_b = np.asarray(
        w_between.detach().cpu().numpy() if isinstance(w_between, torch.Tensor) else w_between,
        dtype=np.float64,
    )
    if w_t.ndim != 1 or w_t.shape[0] < 1:
        raise GeovizError(f"w_to_target must be a vector (m,), got shape {w_t.shape}")
    m = w_t.shape[0]
    if w_b.shape != (m, m):
        raise GeovizError(
            f"w_between must have shape ({m}, {m}) to match w_to_target, got {w_b.shape}"
        )
    if not (np.isfinite(w_t).all() and np.isfinite(w_b).all()):
        raise GeovizError("(2,Q) distances contain NaN or infinite values")
    scale = max(float(np.abs(w_b).max(initial=0.0)), float(np.abs(w_t).max(initial=0.0)), 1e-300)
    if not np.allclose(w_b, w_b.T, rtol=1e-6, atol=1e-9 * scale):
        raise GeovizError("w_between must be symmetric (W_ij = W_ji)")
    if (w_t < -1e-9 * scale).any() or (w_b < -1e-9 * scale).any():
        raise GeovizError("(2,Q) squared distances must be non-negative")
    w_b = 0.5 * (w_b + w_b.T)
    np.fill_diagonal(w_b, 0.0)
    return w_t, w_b


def objective(weights: Any, w_to_target: Any, w_between: Any) -> np.ndarray:
    """``W^2(P_a, Q)`` of eq. (ds_eq) for one or many weight vectors.

    Parameters
    ----------
    weights
        ``(..., m)`` points of the simplex (validated by
        :func:`~geoviz.geodesic.weights.check_weights`), e.g. a whole :func:`simplex_grid`.
    w_to_target
        ``(m,)`` ``W_i = W^2_{2,Q}(P_i, Q)``.
    w_between
        ``(m, m)`` ``W_ij = W^2_{2,Q}(P_i, P_j)``, symmetric; its diagonal is ignored.

    Returns
    -------
    np.ndarray
        ``(...)`` values ``sum_i a_i W_i - 1/2 sum_{i != j} a_i a_j W_ij``
        (a 0-d array for a single weight vector).

    Examples
    --------
    Maps that translate ``Q`` by ``+e`` and by ``-e`` with ``|e| = 1`` (``W_1 = W_2 = 1``,
    ``W_12 = |2e|^2 = 4``): ``P_a`` is ``Q`` translated by ``(a_1 - a_2) e``, so
    ``W^2(P_a, Q) = (a_1 - a_2)^2``:

    >>> from geoviz.geodesic import objective, simplex_grid
    >>> objective(simplex_grid(2, 4), [1.0, 1.0], [[0.0, 4.0], [4.0, 0.0]])
    array([1.  , 0.25, 0.  , 0.25, 1.  ])
    >>> float(objective([0.5, 0.5], [1.0, 1.0], [[0.0, 4.0], [4.0, 0.0]]))
    0.0
    """
    w_t, w_b = _check_two_q(w_to_target, w_between)
    a = check_weights(weights, w_t.shape[0])
    value: np.ndarray = a @ w_t - 0.5 * np.einsum("...i,ij,...j->...", a, w_b, a)
    return value


# --------------------------------------------------------------------------- minimiser
#
# The objective is the quadratic f(a) = lin^T a + 1/2 a^T quad a with the linear
# coefficients lin = W_i and the quadratic matrix quad = -W_ij (zero diagonal);
# the names avoid p / q, which are the paper's datasets P and Q.


def _reduced(lin: np.ndarray, quad: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eliminate ``a_m = 1 - sum(u)``: ``a = e_m + B u`` with ``B = [I; -1^T]``.

    Returns ``(basis, hess, grad)`` = ``(B, H, g)`` with
    ``f(e_m + B u) = f(e_m) + g^T u + 1/2 u^T H u`` for
    ``f(a) = lin^T a + 1/2 a^T quad a``. ``H = B^T quad B`` is the Hessian
    restricted to the tangent space ``{v : 1^T v = 0}`` of the simplex (in the basis B).
    """
    m = lin.shape[0]
    basis = np.vstack([np.eye(m - 1), -np.ones((1, m - 1))])
    e_m = np.zeros(m)
    e_m[-1] = 1.0
    hess = basis.T @ quad @ basis
    grad = basis.T @ (lin + quad @ e_m)
    return basis, 0.5 * (hess + hess.T), grad


def _value(a: np.ndarray, lin: np.ndarray, quad: np.ndarray) -> float:
    return float(lin @ a + 0.5 * a @ quad @ a)


def _face_minimiser(
    lin: np.ndarray, quad: np.ndarray, support: Sequence[int], tol: float
) -> np.ndarray | None:
    """Stationary point of ``f`` on the affine hull of the face ``support``.

    Returns it (as a full ``(m,)`` vector) if the restricted Hessian is positive
    definite there and the point lies in the (closed) face, else ``None``.
    """
    s = np.asarray(support)
    a = np.zeros(lin.shape[0])
    if s.size == 1:
        a[s[0]] = 1.0
        return a
    basis, hess, grad = _reduced(lin[s], quad[np.ix_(s, s)])
    eig = np.linalg.eigvalsh(hess)
    if eig[0] <= tol * max(1.0, float(np.abs(eig).max())):
        # not strictly convex on this face: any minimum over the closed face is
        # attained on its relative boundary, i.e. on a smaller face (see optimal_weights)
        return None
    u = np.linalg.solve(hess, -grad)
    a_s = basis @ u
    a_s[-1] += 1.0
    if (a_s < -1e-12).any():
        return None
    a[s] = np.clip(a_s, 0.0, None)
    a /= a.sum()
    return a


def _enumerate_faces(lin: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """Exact global minimiser of ``lin^T a + 1/2 a^T quad a`` on the simplex, any ``quad``.

    A global minimiser lies in the relative interior of some face ``F`` (a
    vertex counts). There it is a local minimiser of the quadratic on
    ``aff(F)``, so it is a stationary point with restricted Hessian PSD. If that
    Hessian is singular, the quadratic is constant along a line through the
    point, which leaves ``F`` through its boundary at the same value; so the
    global minimum is always attained at the stationary point of a face with a
    positive-definite restricted Hessian. Enumerating the ``2^m - 1`` faces
    therefore finds it exactly.
    """
    m = lin.shape[0]
    best_a, best_v = None, np.inf
    for k in range(1, m + 1):
        for support in itertools.combinations(range(m), k):
            a = _face_minimiser(lin, quad, support, tol=1e-12)
            if a is None:
                continue
            v = _value(a, lin, quad)
            if best_a is None or v < best_v - 1e-15 * max(1.0, abs(best_v)):
                best_a, best_v = a, v
    assert best_a is not None  # vertices are always candidates
    return best_a


def _local_search(
    lin: np.ndarray, quad: np.ndarray, starts: np.ndarray, iters: int = 2000
) -> np.ndarray:
    """Projected gradient descent from several starts; the best end point (heuristic)."""
    lip = max(float(np.abs(np.linalg.eigvalsh(quad)).max()), 1e-12)
    best_a, best_v = None, np.inf
    for a0 in starts:
        a = a0.copy()
        for _ in range(iters):
            new = project_to_simplex(a - (lin + quad @ a) / lip)
            if np.abs(new - a).max() < 1e-12:
                a = new
                break
            a = new
        a = _polish(a, lin, quad)
        v = _value(a, lin, quad)
        if v < best_v:
            best_a, best_v = a, v
    assert best_a is not None
    return best_a


def _polish(a: np.ndarray, lin: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """Snap a numerical solution onto its face: re-solve the KKT system on the support.

    Interior-point/ADMM solvers return e.g. ``1e-6`` instead of an exact 0 at a
    vertex or edge minimiser; solving the stationarity equations on
    ``{i : a_i > tau}`` for a few thresholds ``tau`` recovers the exact face
    point. The best feasible candidate (never worse than ``a``) is returned.
    """
    a = np.clip(a, 0.0, None)
    a = a / a.sum()
    best, best_v = a, _value(a, lin, quad)
    for tau in (1e-9, 1e-7, 1e-5, 1e-3):
        support = np.nonzero(a > tau * a.max())[0]
        cand = _face_minimiser(lin, quad, support.tolist(), tol=1e-12)
        if cand is not None:
            v = _value(cand, lin, quad)
            if v <= best_v + 1e-13 * max(1.0, abs(best_v)):
                best, best_v = cand, v
    return best


def _kkt_optimal(a: np.ndarray, lin: np.ndarray, quad: np.ndarray, rtol: float = 1e-8) -> bool:
    """KKT conditions of ``min f`` on the simplex at ``a`` (sufficient when f is convex).

    With ``g = grad f(a)``: ``g_i = lambda`` on the support and ``g_j >= lambda``
    off it.
    """
    grad = lin + quad @ a
    scale = max(1.0, float(np.abs(lin).max()), float(np.abs(quad).max()))
    support = a > 0
    lam = float(grad[support].mean())
    return bool(
        np.all(np.abs(grad[support] - lam) <= rtol * scale)
        and np.all(grad[~support] >= lam - rtol * scale)
    )


def _default_solver() -> str | None:
    try:
        import qpsolvers
    except ImportError:  # pragma: no cover - qpsolvers is a hard dependency
        return None
    for name in ("quadprog", "clarabel", "osqp"):
        if name in qpsolvers.available_solvers:
            return name
    return qpsolvers.available_solvers[0] if qpsolvers.available_solvers else None


def _solve_convex_qp(lin: np.ndarray, quad: np.ndarray, solver: str) -> np.ndarray | None:
    """Minimise on the simplex with qpsolvers, in the reduced coordinates ``u``."""
    import qpsolvers

    m = lin.shape[0]
    basis, hess, grad = _reduced(lin, quad)
    scale = max(float(np.abs(hess).max()), float(np.abs(grad).max()), 1e-300)
    # Normalise the scale (solvers' tolerances are absolute) and add a tiny ridge
    # so that quadprog, which needs a strictly positive-definite matrix, accepts
    # a merely semidefinite H; the shift in the minimiser is O(1e-10).
    hess_s = hess / scale
    lam_min = float(np.linalg.eigvalsh(hess_s)[0])
    hess_s = hess_s + (max(0.0, -lam_min) + 1e-10) * np.eye(m - 1)
    grad_s = grad / scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            # min 1/2 u^T hess u + grad^T u  s.t.  sum(u) <= 1, 0 <= u <= 1
            u = qpsolvers.solve_qp(
                hess_s,
                grad_s,
                G=np.ones((1, m - 1)),
                h=np.array([1.0]),
                lb=np.zeros(m - 1),
                ub=np.ones(m - 1),
                solver=solver,
            )
        except Exception:  # solver failure: caller falls back to enumeration
            return None
    if u is None or not np.all(np.isfinite(u)):
        return None
    a = basis @ np.asarray(u, dtype=np.float64)
    a[-1] += 1.0
    return a


def check_qp_solver(solver: str | None) -> None:
    """Refuse a QP solver name for :func:`optimal_weights` that is not installed.

    ``None`` (the default solver) and ``"enumerate"`` are always accepted.

    Raises
    ------
    GeovizError
        ``solver`` is neither of those nor one of ``qpsolvers.available_solvers``.
    """
    if solver is None or solver == "enumerate":
        return
    try:
        import qpsolvers

        available = list(qpsolvers.available_solvers)
    except ImportError:  # pragma: no cover
        available = []
    if not isinstance(solver, str) or solver not in available:
        raise GeovizError(
            f"unknown QP solver {solver!r}: available are {', '.join([*available, 'enumerate'])}"
        )


def optimal_weights(w_to_target: Any, w_between: Any, solver: str | None = None) -> np.ndarray:
    """``a_hat = argmin_{a in simplex} W^2(P_a, Q)`` (paper eq. (hat_a)).

    The objective is ``f(a) = lin^T a + 1/2 a^T quad a`` with ``lin = W_i``
    (``w_to_target``) and ``quad = -W_ij`` (``-w_between``, zero diagonal).
    ``quad`` is indefinite in general, but only
    its restriction to the simplex's tangent space ``{v : 1^T v = 0}`` matters
    (equivalently one may add ``c 11^T``, constant on the simplex). We eliminate
    ``a_m = 1 - sum_{i<m} a_i`` and look at the reduced Hessian ``H``:

    * ``H`` PSD (always the case when ``W_ij`` is a squared-distance matrix
      of points in a Hilbert space, e.g. the feature part of Def. 2:
      ``v^T(-W_ij)v = 2||sum_i v_i T_i||^2`` for ``1^T v = 0``) — the problem is
      convex and solved with ``qpsolvers`` (``solver``), then *polished*: the
      KKT system is re-solved exactly on the detected support so vertex and
      edge minimisers come out exact. If the polished point still fails the
      KKT conditions (an inaccurate solver), the exact enumeration below is used.
    * ``H`` not PSD (possible through the label term, ``W_2^2`` between class
      conditionals is not Hilbertian) — the problem is non-convex and has no
      unique minimiser in general. For ``m <= MAX_ENUMERATION_M`` the global
      minimum is found *exactly* by enumerating all faces of the simplex (see
      ``_enumerate_faces``); for larger ``m`` a multi-start projected-gradient
      search (starts: vertices, barycentre, edge midpoints) is used and a
      ``UserWarning`` says the result may be a local minimum.

    In every case the returned point is compared with the ``m`` vertices and the
    best is kept, so a failing numerical solver cannot return something worse
    than the best single reference.

    Parameters
    ----------
    w_to_target
        ``(m,)`` ``W^2_{2,Q}(P_i, Q)``.
    w_between
        ``(m, m)`` symmetric ``W^2_{2,Q}(P_i, P_j)``; diagonal ignored.
    solver
        A ``qpsolvers`` solver name (``"clarabel"``, ``"quadprog"``, ``"osqp"``,
        ...), ``None`` for the first available of quadprog, clarabel, osqp, or ``"enumerate"``
        to force exact face enumeration (``m <= MAX_ENUMERATION_M``).

    Returns
    -------
    np.ndarray
        ``(m,)`` float64 weights on the simplex (non-negative, summing to 1).

    Examples
    --------
    On a line, ``P_1`` is ``Q`` moved by 2 and ``P_2`` by -1 (``W_1 = 4``, ``W_2 = 1``,
    ``W_12 = 3^2``): ``P_a`` is ``Q`` moved by ``2 a_1 - a_2``, which is 0 at
    ``a = (1/3, 2/3)``, where ``W^2(P_a, Q) = 0``:

    >>> from geoviz.geodesic import objective, optimal_weights
    >>> a_hat = optimal_weights([4.0, 1.0], [[0.0, 9.0], [9.0, 0.0]])
    >>> a_hat.round(4)
    array([0.3333, 0.6667])
    >>> round(float(objective(a_hat, [4.0, 1.0], [[0.0, 9.0], [9.0, 0.0]])), 12)
    0.0

    When ``Q`` is nearer to one reference than any mixture is, ``a_hat`` is that vertex:

    >>> optimal_weights([1.0, 4.0], [[0.0, 1.0], [1.0, 0.0]])
    array([1., 0.])
    """
    lin, w_b = _check_two_q(w_to_target, w_between)
    m = lin.shape[0]
    if m == 1:
        return np.ones(1)
    quad = -w_b
    check_qp_solver(solver)
    if solver == "enumerate":
        if m > MAX_ENUMERATION_M:
            raise GeovizError(
                f"solver='enumerate' supports m <= {MAX_ENUMERATION_M} references, got {m}"
            )
        return _enumerate_faces(lin, quad)

    _, hess, _ = _reduced(lin, quad)
    eig = np.linalg.eigvalsh(hess)
    convex = eig[0] >= -1e-9 * max(1.0, float(np.abs(eig).max()))
    a: np.ndarray | None = None  # the solver's answer, None until one is trusted
    if convex:
        name = solver or _default_solver()
        if name is not None:
            a = _solve_convex_qp(lin, quad, name)
        if a is not None:
            a = _polish(a, lin, quad)
            if not _kkt_optimal(a, lin, quad) and m <= MAX_ENUMERATION_M:
                a = None  # inaccurate solver output: use the exact enumeration
    if a is None:
        if m <= MAX_ENUMERATION_M:
            a = _enumerate_faces(lin, quad)
        else:
            warnings.warn(
                f"the projection objective is not convex on the simplex (m={m}); a_hat comes from a "
                f"multi-start local search and may be a local minimum",
                stacklevel=2,
            )
            eye = np.eye(m)
            mids = [0.5 * (eye[i] + eye[j]) for i in range(m) for j in range(i + 1, m)]
            starts = np.vstack([eye, np.full((1, m), 1.0 / m), *mids])
            a = _local_search(lin, quad, starts)
    vertex = int(np.argmin(lin))  # f(e_i) = lin_i = W_i
    if lin[vertex] < _value(a, lin, quad):
        a = np.eye(m)[vertex]
    a = np.clip(a, 0.0, None)
    weights: np.ndarray = a / a.sum()
    return weights


# --------------------------------------------------------------------------- Def. 2


@dataclass(frozen=True)
class TwoQDistances:
    """(2,Q)-dataset distances of ``m`` references (paper Def. 2), split by term.

    All arrays float64; ``w = feature + label`` (with ``lambda`` weights applied).

    Attributes
    ----------
    w_to_target
        ``(m,)`` ``W^2_{2,Q}(P_i, Q)``.
    w_between
        ``(m, m)`` ``W^2_{2,Q}(P_i, P_j)``, symmetric with zero diagonal.
    feature_to_target, label_to_target
        ``(m,)`` the two (unweighted) terms of ``w_to_target``.
    feature_between, label_between
        ``(m, m)`` the two (unweighted) terms of ``w_between``.
    per_sample_to_target
        ``(N, m)`` the summand of ``W_i`` at each target sample (weighted terms), so
        ``w_to_target == per_sample_to_target.mean(axis=0)``; ``None`` when not kept. With
        the maps fixed, resampling these rows resamples ``Q``
        (:func:`geoviz.geodesic.uncertainty.bootstrap_q`).
    per_sample_between
        ``(N, m, m)`` the summand of ``W_ij`` at each target sample, or ``None``.
    """

    w_to_target: np.ndarray
    w_between: np.ndarray
    feature_to_target: np.ndarray
    label_to_target: np.ndarray
    feature_between: np.ndarray
    label_between: np.ndarray
    per_sample_to_target: np.ndarray | None = field(default=None, repr=False)
    per_sample_between: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_samples(self) -> int | None:
        """``N``, the target samples the means run over (``None``: per-sample terms not kept)."""
        return None if self.per_sample_to_target is None else self.per_sample_to_target.shape[0]


def _f64(t: torch.Tensor | np.ndarray) -> torch.Tensor:
    return torch.as_tensor(t).detach().to(device="cpu", dtype=torch.float64)


def _clean_label_matrix(
    mat: torch.Tensor, row_mass: torch.Tensor, col_mass: torch.Tensor, what: str
) -> torch.Tensor:
    """Zero the NaN entries of a label-distance matrix that carry no mass.

    :func:`geoviz.ot.labels.label_distances` marks classes without samples with
    NaN rows/columns; such a class has zero mass in the (soft) labels, so its
    entries never contribute. A NaN entry whose row and column both carry
    mass is an error.
    """
    nan = torch.isnan(mat)
    if not bool(nan.any()):
        return mat
    used = (row_mass[:, None] > 0) & (col_mass[None, :] > 0)
    if bool((nan & used).any()):
        r, c = (int(v) for v in torch.nonzero(nan & used)[0])
        raise GeovizError(
            f"{what}: the label distance [{r}, {c}] is NaN but both classes carry mass"
        )
    return torch.where(nan, torch.zeros_like(mat), mat)


def two_q_distances(
    target_features: torch.Tensor,
    target_labels: torch.Tensor,
    mapped_features: Sequence[torch.Tensor],
    soft_labels: Sequence[torch.Tensor],
    label_to_target: Sequence[torch.Tensor],
    label_between: Mapping[tuple[int, int], torch.Tensor],
    *,
    lambda_x: float = 1.0,
    lambda_y: float = 1.0,
) -> TwoQDistances:
    """(2,Q) distances of Def. 2 from the mapped target samples.

    Expectations over ``Q`` are empirical means over the ``N`` target samples
    ``z = (x, y_Q)``, whose images are ``T_i(z) = (x_i, y_i)``::

        W_i  = mean_n  lx ||x - x_i||^2     + ly sum_c y_i[c] M_Qi[y_Q, c]
        W_ij = mean_n  lx ||x_i - x_j||^2   + ly y_i^T M_ij y_j

    Parameters
    ----------
    target_features
        ``(N, D)`` target features ``x``.
    target_labels
        ``(N,)`` int target labels ``y_Q`` in ``0..C_Q-1``.
    mapped_features
        ``m`` tensors ``(N, D)``: ``x_i = T_i(x)``.
    soft_labels
        ``m`` tensors ``(N, C_i)``: ``y_i``, rows summing to 1.
    label_to_target
        ``m`` tensors ``(C_Q, C_i)``: ``M_Qi = W_2^2`` between the class
        conditionals of ``Q`` and of ``P_i`` (``label_distances(Q, P_i)``).
    label_between
        ``{(i, j): M_ij}`` for every ``i < j`` (``(C_i, C_j)``,
        ``label_distances(P_i, P_j)``); ``(j, i)`` may be given instead, in
        which case its transpose is used.
    lambda_x, lambda_y
        Weights of the feature and label terms (Def. 2 uses 1 and 1; pass the
        OTDD ones to stay consistent with the cost the maps were fitted with).

    Returns
    -------
    TwoQDistances
    """
    m = len(mapped_features)
    if len(soft_labels) != m or len(label_to_target) != m:
        raise GeovizError(
            f"need one soft-label matrix and one label-distance matrix per mapped dataset "
            f"({m}), got {len(soft_labels)} and {len(label_to_target)}"
        )
    x = _f64(target_features)
    y_q = torch.as_tensor(target_labels).to(device="cpu", dtype=torch.long)
    n = x.shape[0]
    xs = [_f64(t) for t in mapped_features]
    ys = [_f64(t) for t in soft_labels]
    for i in range(m):
        if xs[i].shape != x.shape:
            raise GeovizError(
                f"mapped features {i} have shape {tuple(xs[i].shape)}, expected {tuple(x.shape)}"
            )
        if ys[i].ndim != 2 or ys[i].shape[0] != n:
            raise GeovizError(
                f"soft labels {i} have shape {tuple(ys[i].shape)}, expected ({n}, C_{i})"
            )
    feat_t = np.zeros(m)
    lab_t = np.zeros(m)
    feat_b = np.zeros((m, m))
    lab_b = np.zeros((m, m))
    # per-sample summands (weighted), for the bootstrap over Q's samples
    per_t = np.zeros((n, m))
    per_b = np.zeros((n, m, m))
    for i in range(m):
        mq = _f64(label_to_target[i])
        if mq.ndim != 2 or mq.shape[1] != ys[i].shape[1] or mq.shape[0] <= int(y_q.max()):
            raise GeovizError(
                f"label distances to the target for reference {i} have shape {tuple(mq.shape)}, "
                f"expected (C_Q, {ys[i].shape[1]})"
            )
        q_mass = torch.bincount(y_q, minlength=mq.shape[0]).to(torch.float64)
        mq = _clean_label_matrix(
            mq, q_mass, ys[i].sum(dim=0), f"label distances target-reference {i}"
        )
        feat_rows = ((x - xs[i]) ** 2).sum(dim=1)
        lab_rows = (mq[y_q] * ys[i]).sum(dim=1)
        feat_t[i] = float(feat_rows.mean())
        lab_t[i] = float(lab_rows.mean())
        per_t[:, i] = (lambda_x * feat_rows + lambda_y * lab_rows).numpy()
    for i in range(m):
        for j in range(i + 1, m):
            if (i, j) in label_between:
                mij = _f64(label_between[(i, j)])
            elif (j, i) in label_between:
                mij = _f64(label_between[(j, i)]).T
            else:
                raise GeovizError(f"missing label distances between references {i} and {j}")
            if mij.shape != (ys[i].shape[1], ys[j].shape[1]):
                raise GeovizError(
                    f"label distances between references {i} and {j} have shape {tuple(mij.shape)}, "
                    f"expected ({ys[i].shape[1]}, {ys[j].shape[1]})"
                )
            mij = _clean_label_matrix(
                mij,
                ys[i].sum(dim=0),
                ys[j].sum(dim=0),
                f"label distances between references {i} and {j}",
            )
            feat_rows = ((xs[i] - xs[j]) ** 2).sum(dim=1)
            lab_rows = ((ys[i] @ mij) * ys[j]).sum(dim=1)
            feat_b[i, j] = feat_b[j, i] = float(feat_rows.mean())
            lab_b[i, j] = lab_b[j, i] = float(lab_rows.mean())
            per_b[:, i, j] = per_b[:, j, i] = (lambda_x * feat_rows + lambda_y * lab_rows).numpy()
    w_t = lambda_x * feat_t + lambda_y * lab_t
    w_b = lambda_x * feat_b + lambda_y * lab_b
    return TwoQDistances(w_t, w_b, feat_t, lab_t, feat_b, lab_b, per_t, per_b)
