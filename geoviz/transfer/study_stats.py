"""Statistics of the simplex study: correlations of ``W^2(P_a, Q)`` with accuracy.

Paper Sec. 5.1, Fig. "corr" and appendix Table "w_stat" (issue 18): Pearson
and Spearman ``r`` with their p-values (:func:`correlations`), a percentile
bootstrap interval of ``r`` over the seeds (:func:`bootstrap_interval`), and
the paper's summary of ``W^2(P_a, Q)`` beside the accuracy gain, gathered in
:class:`StudyStatistics` by :func:`study_statistics` from the points of a
:class:`~geoviz.transfer.study.GridStudy`. Re-exported by
:mod:`geoviz.transfer.study`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from geoviz.errors import GeovizError
from geoviz.glossary import OBJECTIVE

# scipy.stats is imported where a statistic is computed, not here: it takes ~0.5 s to
# import, and the app's server imports this module at start (the Evidence page)

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "CorrelationEstimate",
    "CorrelationMethod",
    "GridPoint",
    "ObjectiveSummary",
    "StudyStatistics",
    "bootstrap_interval",
    "correlations",
    "finite_or_none",
    "study_statistics",
]

#: Resamples of the seeds in the bootstrap interval of ``r`` (issue 18).
BOOTSTRAP_RESAMPLES = 2000
#: Seed of the :class:`numpy.random.Generator` that draws them (a study's interval is fixed).
BOOTSTRAP_SEED = 0
#: Weights closer than this to ``a_hat`` (each entry) make that grid point "at a_hat".
_A_HAT_TOLERANCE = 1e-9

CorrelationMethod = Literal["pearson", "spearman"]


@dataclass(frozen=True)
class GridPoint:
    """One weight vector ``a`` of the study.

    Attributes
    ----------
    index
        Row of ``simplex_grid(m, resolution)``.
    weights
        ``a`` (``m`` entries summing to 1).
    objective
        ``W^2(P_a, Q)`` (``geodesic.objective(a)``).
    accuracies
        Fine-tuned test accuracy in ``[0, 1]``, one per seed (``GridStudy.seeds`` order).
    seconds
        Total run time of those runs, as recorded when each ran (also for
        results loaded from checkpoints).
    """

    index: int
    weights: tuple[float, ...]
    objective: float
    accuracies: tuple[float, ...]
    seconds: float

    @property
    def mean_accuracy(self) -> float:
        """Mean of :attr:`accuracies`."""
        return float(np.mean(self.accuracies)) if self.accuracies else float("nan")

    @property
    def std_accuracy(self) -> float:
        """Sample standard deviation (``ddof=1``) of :attr:`accuracies`; 0 for one seed."""
        if len(self.accuracies) < 2:
            return 0.0
        return float(np.std(self.accuracies, ddof=1))


def finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(float(x)) else None


def correlations(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, str]:
    """Pearson and Spearman correlation of ``x`` and ``y`` (``scipy.stats``).

    Pairs with a non-finite value are dropped. Returns ``(pearson, spearman,
    note)``: both ``nan`` with a note when fewer than 2 pairs remain or either
    side is constant (then a correlation is undefined); ``note`` is empty otherwise.
    """
    xs = np.asarray(x, dtype=float).ravel()
    ys = np.asarray(y, dtype=float).ravel()
    if xs.shape != ys.shape:
        raise GeovizError(f"correlations need equal lengths, got {xs.size} and {ys.size}")
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    nan = float("nan")
    if xs.size < 2:
        return nan, nan, f"correlation undefined: {xs.size} point(s) with finite values"
    constant = [name for name, v in ((OBJECTIVE, xs), ("mean accuracy", ys)) if np.ptp(v) == 0.0]
    if constant:
        return (
            nan,
            nan,
            "correlation undefined: all values of " + " and ".join(constant) + " are equal",
        )
    from scipy import stats  # on use: see the note at the imports

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # near-constant input warnings: the value is still defined
        pearson = float(stats.pearsonr(xs, ys)[0])
        spearman = float(stats.spearmanr(xs, ys)[0])
    return pearson, spearman, ""


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class CorrelationEstimate:
    """One correlation between ``W^2(P_a, Q)`` and mean accuracy over the grid points.

    Attributes
    ----------
    method
        ``"pearson"`` or ``"spearman"`` (:func:`scipy.stats.pearsonr` /
        :func:`scipy.stats.spearmanr`).
    r
        The coefficient; ``nan`` when undefined.
    p_value
        Two-sided p-value of ``r = 0`` (scipy's); ``nan`` when undefined.
    interval
        ``(low, high)``: the percentile bootstrap 95 % interval of ``r`` over
        the seeds (:func:`bootstrap_interval`), or ``None`` when it is not
        available (then :attr:`interval_note` says why).
    interval_note
        Why there is no interval, or which resamples were left out; empty otherwise.
    """

    method: CorrelationMethod
    r: float
    p_value: float
    interval: tuple[float, float] | None
    interval_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able content (``nan`` as ``None``)."""
        return {
            "method": self.method,
            "r": finite_or_none(self.r),
            "p_value": finite_or_none(self.p_value),
            "interval": None if self.interval is None else list(self.interval),
            "interval_note": self.interval_note,
        }


@dataclass(frozen=True)
class ObjectiveSummary:
    """The paper's statistics of ``W^2(P_a, Q)`` over the grid points (appendix Table "w_stat").

    Units: those of ``W^2`` (the OTDD ground cost, squared feature units).
    ``std`` is the population standard deviation (``ddof = 0``: the grid points
    are all the points there are).
    """

    mean: float
    median: float
    min: float
    max: float
    std: float

    @property
    def range(self) -> float:
        """``max - min`` (the paper's "range of W(P_a, Q)")."""
        return self.max - self.min

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able content (``nan`` as ``None``), with the range."""
        return {
            name: finite_or_none(getattr(self, name))
            for name in ("mean", "median", "min", "max", "std", "range")
        }


@dataclass(frozen=True)
class StudyStatistics:
    """What a study says about ``W^2(P_a, Q)`` and accuracy (issue 18; paper Sec. 5.1, Table "w_stat").

    Attributes
    ----------
    pearson, spearman
        The two :class:`CorrelationEstimate`.
    objective
        :class:`ObjectiveSummary` of ``W^2(P_a, Q)`` over the points.
    accuracy_gain
        ``max - min`` of the points' mean accuracies (fraction in ``[0, 1]``):
        what choosing ``a`` on this grid can change.
    accuracy_at_a_hat
        Mean accuracy of the grid point at the geodesic's ``a_hat`` when the
        study recorded ``a_hat`` and it is a grid point; ``None`` otherwise.
    n_points, n_seeds
        Grid points with finite values used, and seeds.
    n_resamples, bootstrap_seed
        Bootstrap resamples and the seed of their generator.
    """

    pearson: CorrelationEstimate
    spearman: CorrelationEstimate
    objective: ObjectiveSummary
    accuracy_gain: float
    accuracy_at_a_hat: float | None
    n_points: int
    n_seeds: int
    n_resamples: int = BOOTSTRAP_RESAMPLES
    bootstrap_seed: int = BOOTSTRAP_SEED

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able content (``nan`` as ``None``)."""
        return {
            "pearson": self.pearson.to_dict(),
            "spearman": self.spearman.to_dict(),
            "objective": self.objective.to_dict(),
            "accuracy_gain": finite_or_none(self.accuracy_gain),
            "accuracy_at_a_hat": (
                None if self.accuracy_at_a_hat is None else finite_or_none(self.accuracy_at_a_hat)
            ),
            "n_points": self.n_points,
            "n_seeds": self.n_seeds,
            "n_resamples": self.n_resamples,
            "bootstrap_seed": self.bootstrap_seed,
        }


def _rowwise_pearson(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Pearson ``r`` of ``x`` ``(K,)`` with every row of ``ys`` ``(B, K)``; ``nan`` for a constant row."""
    xc = x - x.mean()
    yc = ys - ys.mean(axis=1, keepdims=True)
    denominator = np.sqrt((yc * yc).sum(axis=1)) * math.sqrt(float(xc @ xc))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (yc @ xc) / denominator
    r[~(denominator > 0)] = np.nan
    clipped: np.ndarray = np.clip(r, -1.0, 1.0)
    return clipped


def bootstrap_interval(
    objectives: Sequence[float] | np.ndarray,
    accuracies: np.ndarray,
    method: CorrelationMethod = "pearson",
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> tuple[tuple[float, float] | None, str]:
    """Percentile bootstrap interval of ``r`` over the seeds.

    Each of ``n_resamples`` resamples draws ``S`` seeds with replacement (one
    draw for all points: a seed is one training run per point), recomputes every
    point's mean accuracy and the correlation ``r`` with the objectives; the
    interval is the ``(1 - level) / 2`` and ``(1 + level) / 2`` percentiles of
    those ``r``. The seeds' variation is the only randomness resampled: the grid
    points are fixed by design.

    Parameters
    ----------
    objectives
        ``(K,)`` ``W^2(P_a, Q)``, finite.
    accuracies
        ``(K, S)`` accuracy of point ``k`` at seed ``s``, finite.
    method
        ``"pearson"`` or ``"spearman"`` (Pearson ``r`` of the ranks).
    n_resamples, seed
        Resamples and the seed of their :func:`numpy.random.default_rng`.
    level
        Coverage in ``(0, 1)``.

    Returns
    -------
    (interval, note)
        ``interval`` is ``None`` with a ``note`` saying why when it is not
        available (one seed, fewer than 3 points, no resample with a defined
        ``r``); ``note`` also says how many resamples were left out for an
        undefined ``r`` (constant mean accuracies).
    """
    x = np.asarray(objectives, dtype=float).reshape(-1)
    acc = np.asarray(accuracies, dtype=float)
    if acc.ndim != 2 or acc.shape[0] != x.size:
        raise GeovizError(
            f"bootstrap_interval needs accuracies of shape ({x.size}, n_seeds), got {acc.shape}"
        )
    if not (0.0 < level < 1.0):
        raise GeovizError(f"level must lie in (0, 1), got {level!r}")
    n_points, n_seeds = acc.shape
    if n_seeds < 2:
        return None, f"bootstrap interval over seeds not available: {n_seeds} seed"
    if n_points < 3:
        return None, f"bootstrap interval not available: {n_points} point(s)"
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_seeds, size=(n_resamples, n_seeds))
    means = acc[:, draws].mean(axis=2).T  # (B, K)
    if method == "spearman":
        from scipy import stats  # on use: see the note at the imports

        x = stats.rankdata(x)
        means = stats.rankdata(means, axis=1)
    elif method != "pearson":
        raise GeovizError(f"method must be 'pearson' or 'spearman', got {method!r}")
    r = _rowwise_pearson(x, means)
    defined = r[np.isfinite(r)]
    if defined.size == 0:
        return None, "bootstrap interval not available: r is undefined in every resample"
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(defined, [tail, 100.0 - tail])
    note = ""
    if defined.size < n_resamples:
        note = (
            f"{n_resamples - defined.size} of {n_resamples} resamples had constant mean "
            "accuracies (r undefined) and were left out"
        )
    return (float(low), float(high)), note


def _test(x: np.ndarray, y: np.ndarray, method: CorrelationMethod) -> tuple[float, float]:
    """``(r, p_value)`` of scipy, ``nan`` when undefined (fewer than 3 pairs or constant input)."""
    if x.size < 3 or np.ptp(x) == 0.0 or np.ptp(y) == 0.0:
        return float("nan"), float("nan")
    from scipy import stats  # on use: see the note at the imports

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # near-constant input: the value is still defined
        result = stats.pearsonr(x, y) if method == "pearson" else stats.spearmanr(x, y)
    return float(result[0]), float(result[1])


def study_statistics(
    points: Sequence[GridPoint],
    a_hat: Sequence[float] | None = None,
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    bootstrap_seed: int = BOOTSTRAP_SEED,
) -> StudyStatistics:
    """The :class:`StudyStatistics` of a study's points (issue 18).

    Points whose objective or any accuracy is not finite are left out of
    every statistic. ``a_hat``: the geodesic's ``a_hat``, for
    :attr:`StudyStatistics.accuracy_at_a_hat`.
    """
    keep = [
        p
        for p in points
        if math.isfinite(p.objective) and p.accuracies and all(map(math.isfinite, p.accuracies))
    ]
    x = np.array([p.objective for p in keep], dtype=float)
    n_seeds = min((len(p.accuracies) for p in keep), default=0)
    acc = np.array([p.accuracies[:n_seeds] for p in keep], dtype=float).reshape(len(keep), n_seeds)
    y = acc.mean(axis=1) if n_seeds else np.zeros(0)
    estimates = []
    methods: tuple[CorrelationMethod, ...] = ("pearson", "spearman")
    for method in methods:
        r, p_value = _test(x, y, method)
        interval: tuple[float, float] | None = None
        note = "bootstrap interval not available: r is undefined"
        if math.isfinite(r):
            interval, note = bootstrap_interval(
                x, acc, method, n_resamples=n_resamples, seed=bootstrap_seed
            )
        estimates.append(CorrelationEstimate(method, r, p_value, interval, note))
    nan = float("nan")
    objective = (
        ObjectiveSummary(
            mean=float(x.mean()),
            median=float(np.median(x)),
            min=float(x.min()),
            max=float(x.max()),
            std=float(x.std()),
        )
        if x.size
        else ObjectiveSummary(nan, nan, nan, nan, nan)
    )
    at_a_hat = None
    if a_hat is not None:
        target = np.asarray(a_hat, dtype=float)
        for p in keep:
            if len(p.weights) == target.size and np.all(
                np.abs(np.asarray(p.weights) - target) <= _A_HAT_TOLERANCE
            ):
                at_a_hat = p.mean_accuracy
                break
    return StudyStatistics(
        pearson=estimates[0],
        spearman=estimates[1],
        objective=objective,
        accuracy_gain=float(np.ptp(y)) if y.size else nan,
        accuracy_at_a_hat=at_a_hat,
        n_points=len(keep),
        n_seeds=n_seeds,
        n_resamples=int(n_resamples),
        bootstrap_seed=int(bootstrap_seed),
    )


# --------------------------------------------------------------------------- the study
