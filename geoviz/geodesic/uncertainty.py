"""How sure is ``a_hat``? Bootstraps of ``W_i``, ``W_ij``; intervals of ``W_i``, ``W^2(P_a, Q)``, ``a_hat``.

Every number of the projection (paper Sec. 3.3) comes from samples: ``W_i = W^2_{2,Q}(P_i,
Q)`` and ``W_ij = W^2_{2,Q}(P_i, P_j)`` (Def. 2) are means over ``Q``'s samples of the
summands ``w_i(z)``, ``w_ij(z)`` once the maps ``T_i`` are fitted, the objective ``W^2(P_a,
Q) = sum_i a_i W_i - 1/2 sum_{i != j} a_i a_j W_ij`` (eq. (ds_eq)) is a quadratic in those
means, and ``a_hat`` (eq. (hat_a)) its minimiser on the simplex. Two bootstraps:

* **Q-resampling** (:func:`bootstrap_q`, ``method="q-resample"``): the maps stay fixed and
  ``Q``'s samples are drawn again with replacement. A replicate is a multinomial weighting of
  the rows of :attr:`TwoQDistances.per_sample_to_target` and
  :attr:`~TwoQDistances.per_sample_between`: ``B`` replicates cost ``O(B N m^2)`` flops and
  ``B`` small QPs, no transport.
* **Refits** (:func:`geoviz.geodesic.refit.bootstrap_refit`, ``method="refit"``): ``Q`` and
  every ``P_i`` are drawn again and the maps refitted, each replicate a task of
  :func:`geoviz.tasks.run_tasks` (Ray or sequential). It also sees the maps' own sampling
  noise and bias.

Both give a :class:`GeodesicBootstrap`: percentile intervals (level ``1 - alpha``, the
``alpha/2`` and ``1 - alpha/2`` quantiles of the replicates), the bootstrap estimate of the
bias (mean of the replicates minus the estimate) and the bias-corrected interval (the
percentile interval shifted by minus the bias). The **region as good as a_hat** is the set
of weights ``a`` whose paired difference ``f_b(a) - f_b(a_hat)`` (``f_b`` the objective of
replicate ``b``, ``a_hat`` the estimate) has an interval that contains 0; the cloud of the
replicates' own minimisers is :attr:`GeodesicBootstrap.a_hat_replicates`.

Units: every distance is a squared distance (``||x - x'||^2``, not ``1/2 ||x - x'||^2``) in
the space the maps live in, weighted by the OTDD's ``lambda_x`` and ``lambda_y``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from geoviz import limits
from geoviz.errors import GeovizError, ResourceError
from geoviz.geodesic.distances import TwoQDistances, objective, optimal_weights
from geoviz.geodesic.weights import check_weights
from geoviz.memory import memory_limit_bytes

__all__ = [
    "BOOTSTRAP_METHODS",
    "DEFAULT_LEVEL",
    "MAX_REPLICATES",
    "MIN_REPLICATES",
    "BootstrapMethod",
    "GeodesicBootstrap",
    "bootstrap_q",
    "check_replicates",
]

BootstrapMethod = Literal["q-resample", "refit"]
BOOTSTRAP_METHODS: tuple[str, ...] = ("q-resample", "refit")

#: nominal coverage of every interval unless a call asks for another
DEFAULT_LEVEL = 0.95
#: fewer replicates cannot place the 2.5% and 97.5% quantiles anywhere useful
MIN_REPLICATES = 20
#: more replicates only move the third decimal of a 95% interval; bounds memory and QP time
MAX_REPLICATES = 20_000
#: replicates whose multinomial weights are drawn at once (bounds the (chunk, N) matrix)
_CHUNK = 64
#: the objective is flat on the simplex when its spread is below this fraction of its scale
_FLAT_RTOL = 1e-12


def check_replicates(replicates: Any, what: str = "bootstrap replicates") -> int:
    """``replicates`` as an int in ``MIN_REPLICATES..MAX_REPLICATES``, or a clear error."""
    return int(limits.check_int(replicates, what, MIN_REPLICATES, MAX_REPLICATES))


def _check_level(level: Any) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)):
        raise GeovizError(f"the interval level must be a number in (0, 1), got {level!r}")
    value = float(level)
    if not (math.isfinite(value) and 0.5 <= value < 1.0):
        raise GeovizError(f"the interval level must be in [0.5, 1), got {value}")
    return value


def _quantiles(values: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``(1 - level)/2`` and ``(1 + level)/2`` quantiles along axis 0 (percentile interval)."""
    alpha = 1.0 - level
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2], axis=0)
    return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval of one estimated quantity (arrays of the quantity's shape).

    Attributes
    ----------
    estimate
        The estimate from all samples.
    low, high
        The percentile interval: the ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of
        the replicates.
    bias
        Bootstrap estimate of the estimator's bias: mean of the replicates minus ``estimate``.
    level
        Nominal coverage.
    """

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    bias: np.ndarray
    level: float

    @property
    def corrected(self) -> tuple[np.ndarray, np.ndarray]:
        """The bias-corrected interval ``(low - bias, high - bias)``."""
        return self.low - self.bias, self.high - self.bias

    @property
    def width(self) -> np.ndarray:
        """``high - low``."""
        width: np.ndarray = self.high - self.low
        return width


@dataclass(frozen=True)
class GeodesicBootstrap:
    """Bootstrap replicates of the projection's numbers, and intervals read off them.

    Attributes
    ----------
    method
        ``"q-resample"`` (maps fixed, ``Q`` resampled) or ``"refit"`` (``Q`` and the
        ``P_i`` resampled, maps refitted).
    seed
        Seed of the resampling (replicate ``b`` uses ``numpy.random.default_rng([seed, b])``
        for refits; Q-resampling draws all from ``default_rng(seed)``).
    n_samples
        ``N``, target samples behind the estimate.
    w_to_target, w_between, a_hat
        The estimates ``(m,)``, ``(m, m)``, ``(m,)`` from all samples.
    w_to_target_replicates, w_between_replicates, a_hat_replicates
        ``(B, m)``, ``(B, m, m)``, ``(B, m)`` the replicates (``a_hat_replicates``: each
        replicate's own minimiser, the cloud drawn on the simplex).
    level
        Default nominal coverage of the intervals.
    """

    method: BootstrapMethod
    seed: int
    n_samples: int
    w_to_target: np.ndarray
    w_between: np.ndarray
    a_hat: np.ndarray
    w_to_target_replicates: np.ndarray = field(repr=False)
    w_between_replicates: np.ndarray = field(repr=False)
    a_hat_replicates: np.ndarray = field(repr=False)
    level: float = DEFAULT_LEVEL

    def __post_init__(self) -> None:
        if self.method not in BOOTSTRAP_METHODS:
            raise GeovizError(
                f"bootstrap method must be one of {', '.join(BOOTSTRAP_METHODS)}, "
                f"got {self.method!r}"
            )
        _check_level(self.level)
        m = self.w_to_target.shape[0]
        b = self.w_to_target_replicates.shape[0]
        shapes = {
            "w_between": (self.w_between.shape, (m, m)),
            "a_hat": (self.a_hat.shape, (m,)),
            "w_to_target_replicates": (self.w_to_target_replicates.shape, (b, m)),
            "w_between_replicates": (self.w_between_replicates.shape, (b, m, m)),
            "a_hat_replicates": (self.a_hat_replicates.shape, (b, m)),
        }
        for name, (got, want) in shapes.items():
            if tuple(got) != want:
                raise GeovizError(f"bootstrap {name} has shape {tuple(got)}, expected {want}")

    # ------------------------------------------------------------------ sizes
    @property
    def m(self) -> int:
        """Number of references."""
        return int(self.w_to_target.shape[0])

    @property
    def replicates(self) -> int:
        """``B``."""
        return int(self.w_to_target_replicates.shape[0])

    def _level(self, level: float | None) -> float:
        return self.level if level is None else _check_level(level)

    def _interval(self, estimate: np.ndarray, reps: np.ndarray, level: float | None) -> Interval:
        lvl = self._level(level)
        low, high = _quantiles(reps, lvl)
        bias = reps.mean(axis=0) - estimate
        return Interval(np.asarray(estimate, dtype=np.float64), low, high, bias, lvl)

    # ------------------------------------------------------------------ intervals
    def w_to_target_interval(self, level: float | None = None) -> Interval:
        """Interval of each ``W_i = W^2_{2,Q}(P_i, Q)``, shape ``(m,)``."""
        return self._interval(self.w_to_target, self.w_to_target_replicates, level)

    def a_hat_interval(self, level: float | None = None) -> Interval:
        """Interval of each weight of ``a_hat``, shape ``(m,)`` (quantiles of the cloud)."""
        return self._interval(self.a_hat, self.a_hat_replicates, level)

    def objective_replicates(self, weights: Any) -> np.ndarray:
        """``(B, K)`` (or ``(B,)`` for one ``a``): ``W^2(P_a, Q)`` of every replicate.

        Eq. (ds_eq) with each replicate's ``W_i``, ``W_ij``:
        ``f_b(a) = sum_i a_i W_i^b - 1/2 sum_{i != j} a_i a_j W_ij^b``.
        """
        a = check_weights(weights, m=self.m)
        single = a.ndim == 1
        a2 = a[None, :] if single else a
        lin = self.w_to_target_replicates @ a2.T  # (B, K)
        quad = np.einsum("ki,bij,kj->bk", a2, self.w_between_replicates, a2)
        out: np.ndarray = lin - 0.5 * quad
        return out[:, 0] if single else out

    def objective_interval(self, weights: Any, level: float | None = None) -> Interval:
        """Interval of ``W^2(P_a, Q)`` at each ``a`` (``(K,)`` arrays, or scalars' ``()``)."""
        estimate = objective(weights, self.w_to_target, self.w_between)
        return self._interval(np.asarray(estimate), self.objective_replicates(weights), level)

    def gap_interval(self, weights: Any, level: float | None = None) -> Interval:
        """Interval of ``W^2(P_a, Q) - W^2(P_a_hat, Q)`` at each ``a``, paired by replicate.

        The estimate is ``>= 0`` everywhere (``a_hat`` minimises the estimated objective);
        a replicate's difference may be negative where another ``a`` beats ``a_hat`` in
        that resample.
        """
        reps = self.objective_replicates(weights)
        at_hat = self.objective_replicates(self.a_hat)
        gaps = reps - (at_hat[:, None] if reps.ndim == 2 else at_hat)
        estimate = np.asarray(objective(weights, self.w_to_target, self.w_between)) - float(
            objective(self.a_hat, self.w_to_target, self.w_between)
        )
        return self._interval(estimate, gaps, level)

    @property
    def flat(self) -> bool:
        """``True`` when the estimated objective is constant on the simplex (identical
        references as seen from ``Q``: equal ``W_i`` and ``W_ij = 0``); then every weight is
        as good as ``a_hat`` and there is no region to draw."""
        scale = max(float(np.abs(self.w_to_target).max()), float(np.abs(self.w_between).max()))
        spread = float(np.ptp(self.w_to_target)) + float(np.abs(self.w_between).max())
        return spread <= _FLAT_RTOL * max(scale, 1e-300) or scale == 0.0

    def as_good_as_a_hat(self, weights: Any, level: float | None = None) -> np.ndarray:
        """``bool`` per ``a``: the interval of :meth:`gap_interval` contains 0.

        Raises
        ------
        GeovizError
            The objective is flat (:attr:`flat`): every ``a`` is as good, no region exists.
        """
        if self.flat:
            raise GeovizError(
                "the references are identical as seen from Q (equal W_i and every W_ij = 0): "
                "every weight vector is as good as â, so there is no region to draw"
            )
        gap = self.gap_interval(weights, level)
        return np.asarray(gap.low <= 0.0)

    def manifest(self, level: float | None = None) -> dict[str, Any]:
        """The ``uncertainty`` object of an export's manifest (JSON-able)."""
        lvl = self._level(level)
        a_int = self.a_hat_interval(lvl)
        w_int = self.w_to_target_interval(lvl)
        return {
            "method": self.method,
            "replicates": self.replicates,
            "level": lvl,
            "seed": self.seed,
            "n_samples": self.n_samples,
            "a_hat_low": a_int.low.tolist(),
            "a_hat_high": a_int.high.tolist(),
            "w_to_target_low": w_int.low.tolist(),
            "w_to_target_high": w_int.high.tolist(),
            "w_to_target_bias": w_int.bias.tolist(),
            "w_to_target_corrected_low": w_int.corrected[0].tolist(),
            "w_to_target_corrected_high": w_int.corrected[1].tolist(),
        }


def _check_memory(replicates: int, n: int, m: int) -> None:
    """Refuse a bootstrap whose arrays would not fit (replicates, chunk weights, QPs)."""
    need = 8 * (replicates * (2 * m + m * m) + _CHUNK * n + n * m * m)
    room = memory_limit_bytes()
    if room is not None and 2 * need > room:
        raise ResourceError(
            f"{replicates} bootstrap replicates of {n} samples and {m} references need about "
            f"{need / 2**20:.0f} MiB but only {room / 2**20:.0f} MiB is free; use fewer replicates"
        )


def bootstrap_q(
    distances: TwoQDistances,
    replicates: int = 200,
    *,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    qp_solver: str | None = None,
    a_hat: np.ndarray | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> GeodesicBootstrap:
    """Q-resampling bootstrap: the maps fixed, ``Q``'s samples drawn again with replacement.

    Replicate ``b`` weights the ``N`` per-sample summands by multinomial counts
    ``c_b ~ Mult(N, 1/N)``: ``W_i^b = sum_n c_bn w_i(z_n) / N`` and likewise ``W_ij^b``;
    its ``a_hat^b`` is :func:`~geoviz.geodesic.distances.optimal_weights` of those.

    Parameters
    ----------
    distances
        From :func:`~geoviz.geodesic.distances.two_q_distances` (it keeps the per-sample
        summands).
    replicates
        ``B``, in ``MIN_REPLICATES..MAX_REPLICATES``.
    seed
        Seed of the multinomial draws (same seed, same replicates).
    level
        Nominal coverage of the intervals, in ``[0.5, 1)``.
    qp_solver
        Passed to :func:`~geoviz.geodesic.distances.optimal_weights`.
    a_hat
        The estimate's minimiser if already known (default: solved here).
    progress
        ``progress(stage, fraction)`` while the replicates' QPs are solved.

    Raises
    ------
    GeovizError
        ``distances`` without per-sample summands, ``B`` out of range, a bad level.
    ResourceError
        The replicates would not fit in memory.
    """
    per_t, per_b = distances.per_sample_to_target, distances.per_sample_between
    if per_t is None or per_b is None:
        raise GeovizError(
            "these (2,Q) distances kept no per-sample terms; compute them with two_q_distances"
        )
    b_count = check_replicates(replicates)
    seed = limits.check_int(seed, "bootstrap seed", 0, limits.MAX_SEED)
    level = _check_level(level)
    n, m = per_t.shape
    if n < 2:
        raise GeovizError(f"a bootstrap over Q needs at least 2 target samples, got {n}")
    _check_memory(b_count, n, m)
    rng = np.random.default_rng(seed)
    flat_b = per_b.reshape(n, m * m)
    w_t = np.empty((b_count, m))
    w_b = np.empty((b_count, m * m))
    for start in range(0, b_count, _CHUNK):
        stop = min(start + _CHUNK, b_count)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=stop - start).astype(np.float64)
        counts /= n
        w_t[start:stop] = counts @ per_t
        w_b[start:stop] = counts @ flat_b
    w_b3 = w_b.reshape(b_count, m, m)
    hats = np.empty((b_count, m))
    for k in range(b_count):
        hats[k] = optimal_weights(w_t[k], w_b3[k], solver=qp_solver)
        if progress is not None and (k % _CHUNK == 0 or k == b_count - 1):
            progress(f"bootstrap: {k + 1}/{b_count} replicates", (k + 1) / b_count)
    estimate = (
        optimal_weights(distances.w_to_target, distances.w_between, solver=qp_solver)
        if a_hat is None
        else check_weights(a_hat, m=m)
    )
    return GeodesicBootstrap(
        method="q-resample",
        seed=seed,
        n_samples=n,
        w_to_target=np.asarray(distances.w_to_target, dtype=np.float64),
        w_between=np.asarray(distances.w_between, dtype=np.float64),
        a_hat=np.asarray(estimate, dtype=np.float64),
        w_to_target_replicates=w_t,
        w_between_replicates=w_b3,
        a_hat_replicates=hats,
        level=level,
    )
