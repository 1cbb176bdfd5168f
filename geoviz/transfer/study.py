"""The simplex study: ``W^2(P_a, Q)`` against fine-tuned accuracy over a weight grid.

Paper Sec. 5.1, Figs. "ternary" / "corr" and appendix Table "w_stat":
discretise the simplex (``simplex_grid(m, R)``; the paper's 36 points for
``m = 3`` are ``R = 7``), pre-train a classifier on every ``P_a``, fine-tune it
on the few-shot target ``Q`` and correlate its test accuracy with the objective
``W^2(P_a, Q)`` of eq. (ds_eq). The paper finds a negative correlation for most
targets.

:func:`run_grid` runs one :func:`~geoviz.transfer.experiment.run_method` per
(grid point, seed), each one task of :func:`~geoviz.tasks.run_tasks`
(Ray or sequential: the same results); with ``checkpoint_dir`` every finished
run is stored at once (:mod:`geoviz.transfer.checkpoints`). The result, a
:class:`GridStudy`, carries its :class:`StudyStatistics` (:func:`study_statistics`):
Pearson and Spearman ``r`` with their p-values and a bootstrap interval over the
seeds, and the paper's table of ``W^2(P_a, Q)`` beside the accuracy gain. The
figure is :func:`geoviz.viz.study.correlation_figure`.
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from geoviz.errors import GeovizError
from geoviz.geodesic.distances import simplex_grid
from geoviz.glossary import OBJECTIVE
from geoviz.nn.training import TransferPreset
from geoviz.tasks import Backend, run_tasks
from geoviz.transfer.checkpoints import (
    CheckpointStore,
    checkpoint_key,
    preset_spec,
    result_record,
    study_scenario,
)
from geoviz.transfer.experiment import run_method

# scipy.stats is imported where a statistic is computed, not here: it takes ~0.5 s to
# import, and the app's server imports this module at start (the Evidence page)

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "CorrelationEstimate",
    "GridPoint",
    "GridStudy",
    "ObjectiveSummary",
    "StudyStatistics",
    "bootstrap_interval",
    "correlations",
    "run_grid",
    "study_statistics",
]

#: Resamples of the seeds in the bootstrap interval of ``r`` (issue 18).
BOOTSTRAP_RESAMPLES = 2000
#: Seed of the :class:`numpy.random.Generator` that draws them (a study's interval is fixed).
BOOTSTRAP_SEED = 0
#: Weights closer than this to ``a_hat`` (each entry) make that grid point "at a_hat".
_A_HAT_TOLERANCE = 1e-9

CorrelationMethod = Literal["pearson", "spearman"]


# --------------------------------------------------------------------------- results


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(float(x)) else None


def _float_or_nan(x: Any) -> float:
    return float("nan") if x is None else float(x)


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


@dataclass(frozen=True)
class GridStudy:
    """Result of :func:`run_grid`.

    Attributes
    ----------
    points
        One :class:`GridPoint` per grid row, in ``simplex_grid`` order.
    pearson, spearman
        Correlation between ``objective`` and ``mean_accuracy`` over the
        points; ``nan`` when undefined (then :attr:`note` says why).
    preset
        Name of the training preset.
    k
        Few-shot samples per class of the target.
    seeds
        The training seeds.
    resolution
        Grid resolution ``R`` (weights are multiples of ``1/R``).
    method
        The transfer method trained on every ``P_a`` (``"otdd"`` by default).
    reference_names
        The ``m`` reference names (vertex ``i`` is ``reference_names[i]``).
    note
        Why a correlation is ``nan``; empty otherwise.
    n_computed, n_loaded
        Runs trained by this call, and runs read from checkpoints.
    a_hat
        The geodesic's ``a_hat`` (eq. (hat_a)) when known, for
        :attr:`StudyStatistics.accuracy_at_a_hat`.
    """

    points: tuple[GridPoint, ...]
    pearson: float
    spearman: float
    preset: str
    k: int
    seeds: tuple[int, ...]
    resolution: int
    method: str = "otdd"
    reference_names: tuple[str, ...] = ()
    note: str = ""
    n_computed: int = 0
    n_loaded: int = 0
    a_hat: tuple[float, ...] | None = None

    @functools.cached_property
    def statistics(self) -> StudyStatistics:
        """The :class:`StudyStatistics` of the points (computed once, from the points)."""
        return study_statistics(self.points, self.a_hat)

    @property
    def weights(self) -> np.ndarray:
        """``(K, m)`` grid weights."""
        return np.array([p.weights for p in self.points], dtype=float)

    @property
    def objectives(self) -> np.ndarray:
        """``(K,)`` ``W^2(P_a, Q)``."""
        return np.array([p.objective for p in self.points], dtype=float)

    @property
    def mean_accuracies(self) -> np.ndarray:
        """``(K,)`` mean accuracy over the seeds."""
        return np.array([p.mean_accuracy for p in self.points], dtype=float)

    def vertex_names(self) -> list[str]:
        """The name of every simplex vertex: :attr:`reference_names`, else ``P1 .. Pm``."""
        m = len(self.points[0].weights) if self.points else len(self.reference_names)
        if len(self.reference_names) == m:
            return list(self.reference_names)
        return [f"P{i + 1}" for i in range(m)]

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per point.

        Columns: ``index``, ``a_<reference>`` (one per reference),
        ``objective``, ``accuracy_mean``, ``accuracy_std``,
        ``accuracy_seed<s>`` (one per seed) and ``seconds``.
        """
        import pandas as pd

        names = self.vertex_names()
        rows = []
        for p in self.points:
            row: dict[str, Any] = {"index": p.index}
            row.update({f"a_{n}": w for n, w in zip(names, p.weights, strict=True)})
            row["objective"] = p.objective
            row["accuracy_mean"] = p.mean_accuracy
            row["accuracy_std"] = p.std_accuracy
            row.update(
                {f"accuracy_seed{s}": a for s, a in zip(self.seeds, p.accuracies, strict=True)}
            )
            row["seconds"] = p.seconds
            rows.append(row)
        columns = [
            "index",
            *(f"a_{n}" for n in names),
            "objective",
            "accuracy_mean",
            "accuracy_std",
            *(f"accuracy_seed{s}" for s in self.seeds),
            "seconds",
        ]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able content (``nan`` correlations become ``None``), with the
        :attr:`statistics` under ``"statistics"`` (recomputed from the points on load)."""
        return {
            "method": self.method,
            "preset": self.preset,
            "k": self.k,
            "seeds": list(self.seeds),
            "resolution": self.resolution,
            "reference_names": list(self.reference_names),
            "pearson": _finite_or_none(self.pearson),
            "spearman": _finite_or_none(self.spearman),
            "note": self.note,
            "n_computed": self.n_computed,
            "n_loaded": self.n_loaded,
            "points": [
                {
                    "index": p.index,
                    "weights": list(p.weights),
                    "objective": _finite_or_none(p.objective),
                    "accuracies": [_finite_or_none(a) for a in p.accuracies],
                    "accuracy_mean": _finite_or_none(p.mean_accuracy),
                    "accuracy_std": _finite_or_none(p.std_accuracy),
                    "seconds": p.seconds,
                }
                for p in self.points
            ],
            "a_hat": None if self.a_hat is None else list(self.a_hat),
            "statistics": self.statistics.to_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> GridStudy:
        """Inverse of :meth:`to_json`; also reads files written before ``a_hat`` and
        ``statistics`` were stored (the statistics always come from the points)."""
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GridStudy:
        """Inverse of :meth:`to_dict`."""
        a_hat = d.get("a_hat")
        points = tuple(
            GridPoint(
                index=int(p["index"]),
                weights=tuple(float(w) for w in p["weights"]),
                objective=_float_or_nan(p["objective"]),
                accuracies=tuple(_float_or_nan(a) for a in p["accuracies"]),
                seconds=float(p["seconds"]),
            )
            for p in d["points"]
        )
        return cls(
            points=points,
            pearson=_float_or_nan(d["pearson"]),
            spearman=_float_or_nan(d["spearman"]),
            preset=str(d["preset"]),
            k=int(d["k"]),
            seeds=tuple(int(s) for s in d["seeds"]),
            resolution=int(d["resolution"]),
            method=str(d.get("method", "otdd")),
            reference_names=tuple(d.get("reference_names", ())),
            note=str(d.get("note", "")),
            n_computed=int(d.get("n_computed", 0)),
            n_loaded=int(d.get("n_loaded", 0)),
            a_hat=None if a_hat is None else tuple(float(a) for a in a_hat),
        )


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
            "r": _finite_or_none(self.r),
            "p_value": _finite_or_none(self.p_value),
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
            name: _finite_or_none(getattr(self, name))
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
            "accuracy_gain": _finite_or_none(self.accuracy_gain),
            "accuracy_at_a_hat": (
                None if self.accuracy_at_a_hat is None else _finite_or_none(self.accuracy_at_a_hat)
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


def _run_point(
    task: Any,
    geodesic: Any,
    preset: TransferPreset | str,
    method: Literal["otdd", "mixup"],
    item: tuple[int, tuple[float, ...], int],
) -> Any:
    """One (point, seed) run: the body of every task of :func:`run_grid`."""
    _, weights, seed = item
    return run_method(
        task,
        method,
        geodesic=geodesic,
        weights=np.asarray(weights, dtype=float),
        preset=preset,
        seed=seed,
    )


def run_grid(
    task: Any,
    geodesic: Any,
    *,
    resolution: int,
    seeds: Sequence[int],
    preset: TransferPreset | str,
    checkpoint_dir: Path | str | None = None,
    backend: Backend = "auto",
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    method: Literal["otdd", "mixup"] = "otdd",
) -> GridStudy:
    """Train ``method`` on ``P_a`` for every ``a`` of a simplex grid and every seed.

    Parameters
    ----------
    task
        The :class:`~geoviz.transfer.experiment.TransferTask` (target splits,
        references, ``k``).
    geodesic
        The fitted :class:`~geoviz.geodesic.pipeline.GeodesicResult` whose
        ``P_a`` are trained on; ``geodesic.objective`` gives ``W^2(P_a, Q)``.
    resolution
        Grid resolution ``R``: ``simplex_grid(geodesic.m, R)``, e.g. 7 for the
        paper's 36 points with 3 references.
    seeds
        Training seeds (at least one, distinct); accuracies are averaged over them.
    preset
        Training preset, a name of :data:`geoviz.nn.training.PRESETS` or a
        :class:`~geoviz.nn.training.TransferPreset`.
    checkpoint_dir
        Folder of the per-(point, seed) JSON checkpoints
        (:class:`~geoviz.transfer.checkpoints.CheckpointStore`, created when
        needed); existing ones are loaded and not recomputed. ``None``: none.
    backend, address
        See :func:`geoviz.tasks.run_tasks`; each (point, seed) is one task.
    progress
        ``progress(done, total)`` over all ``K x len(seeds)`` runs (loaded
        checkpoints count as done from the start).
    method
        ``"otdd"`` (pretrain on ``P_a``) or ``"mixup"`` (the Mixup set of the
        same weights), see :func:`~geoviz.transfer.experiment.run_method`.

    Returns
    -------
    GridStudy

    Raises
    ------
    GeovizError
        Bad ``resolution``, ``seeds``, preset or method (only ``"otdd"`` and
        ``"mixup"`` depend on the weights); ``ExportError`` when a
        checkpoint cannot be written. Errors of the runs propagate.
    """
    if method not in ("otdd", "mixup"):
        raise GeovizError(
            f"the simplex study trains on P_a: method must be 'otdd' or 'mixup', got {method!r}"
        )
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise GeovizError("run_grid needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise GeovizError(f"seeds must be distinct, got {list(seeds)}")
    if geodesic.m != len(task.references):
        raise GeovizError(
            f"the geodesic has {geodesic.m} references but the task {len(task.references)}"
        )
    preset_name, _ = preset_spec(preset)
    grid = simplex_grid(geodesic.m, resolution)
    values = np.asarray(geodesic.objective(grid), dtype=float).reshape(-1)
    scenario = study_scenario(task, geodesic, preset, method)
    store = None if checkpoint_dir is None else CheckpointStore(Path(checkpoint_dir), method)

    items: list[tuple[int, tuple[float, ...], int]] = [
        (i, tuple(float(w) for w in grid[i]), seed) for i in range(grid.shape[0]) for seed in seeds
    ]
    keys = [checkpoint_key(scenario, weights, seed) for _, weights, seed in items]
    records: list[dict[str, Any] | None] = [None] * len(items)
    if store is not None:
        for j, (key, (_, _, seed)) in enumerate(zip(keys, items, strict=True)):
            records[j] = store.load(seed, key)
    todo = [j for j, rec in enumerate(records) if rec is None]
    n_loaded = len(items) - len(todo)
    total = len(items)

    def save(position: int, result: Any) -> None:
        j = todo[position]
        _, weights, seed = items[j]
        record = result_record(result, keys[j], weights, seed)
        records[j] = record
        if store is not None:
            store.save(record)

    report = None if progress is None else (lambda done, _t: progress(n_loaded + done, total))
    if todo:
        run_tasks(
            functools.partial(_run_point, task, geodesic, preset, method),
            [items[j] for j in todo],
            backend=backend,
            address=address,
            progress=report,
            on_result=save,
        )
    elif progress is not None:
        progress(total, total)

    points = []
    n_seeds = len(seeds)
    for i in range(grid.shape[0]):
        recs = [rec for rec in records[i * n_seeds : (i + 1) * n_seeds] if rec is not None]
        assert len(recs) == n_seeds  # every run was loaded or computed
        points.append(
            GridPoint(
                index=i,
                weights=tuple(float(w) for w in grid[i]),
                objective=float(values[i]),
                accuracies=tuple(float(r["accuracy"]) for r in recs),
                seconds=float(sum(float(r["seconds"]) for r in recs)),
            )
        )
    pearson, spearman, note = correlations(
        [p.objective for p in points], [p.mean_accuracy for p in points]
    )
    names = tuple(geodesic.reference_names) or tuple(ref.name for ref in geodesic.references)
    a_hat = getattr(geodesic, "a_hat", None)
    return GridStudy(
        points=tuple(points),
        pearson=pearson,
        spearman=spearman,
        preset=preset_name,
        k=int(task.k),
        seeds=seeds,
        resolution=int(resolution),
        method=str(method),
        reference_names=names,
        note=note,
        n_computed=len(todo),
        n_loaded=n_loaded,
        a_hat=None if a_hat is None else tuple(float(a) for a in np.asarray(a_hat).reshape(-1)),
    )
