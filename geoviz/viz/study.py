"""The figure and tables of the simplex study (paper Figs. "ternary" / "corr", Table "w_stat").

:func:`~geoviz.viz.study_figure.correlation_figure` (:mod:`geoviz.viz.study_figure`) draws a
:class:`~geoviz.transfer.study.GridStudy`: ``W^2(P_a, Q)`` beside the fine-tuned accuracy
over the weight grid, or (``kind="scatter"``) accuracy against ``W^2(P_a, Q)`` with the
seeds' spread as error bars.
:func:`correlation_table` and :func:`objective_table` are the tables of one or more studies
(correlations with their bootstrap intervals; the statistics of ``W^2(P_a, Q)`` beside the
accuracy gain), :func:`correlation_sentence` what a study's numbers say, in one sentence.
Two bootstraps of Pearson ``r``: over the seeds (``GridStudy.statistics``) and over the grid
points (:func:`points_bootstrap_interval`);
:func:`~geoviz.viz.study_grid.nearest_grid_point` (:mod:`geoviz.viz.study_grid`) and :func:`a_hat_sentence` place ``a_hat``
on the grid; :func:`budget_warnings` says why a small run's numbers cannot support a
conclusion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from geoviz.errors import GeovizError
from geoviz.glossary import A_HAT, OBJECTIVE
from geoviz.nn.training import PRESETS
from geoviz.transfer.study import GridStudy
from geoviz.transfer.study_stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CorrelationEstimate
from geoviz.viz.study_grid import (
    BEST_LABEL,
    NEAREST_LABEL,
    best_grid_point,
    nearest_grid_point,
    weights_text,
)

if TYPE_CHECKING:
    import pandas as pd

# pandas and scipy are imported where a table or a probability is made (as in
# geoviz.transfer.study): the app's server imports this module at start

__all__ = [
    "a_hat_sentence",
    "budget_warnings",
    "chance_of_strong_r",
    "correlation_sentence",
    "correlation_table",
    "format_estimate",
    "grid_points_table",
    "interval_text",
    "objective_table",
    "points_bootstrap_interval",
]

#: ``|r|`` at or above which :func:`correlation_sentence` calls a correlation strong.
STRONG_R = 0.5
#: Fewer grid points than this cannot support a correlation (:func:`budget_warnings`).
MIN_POINTS = 10
#: The paper's grid (resolution 7 on three references), for comparison in the warnings.
PAPER_POINTS = 36


def format_estimate(estimate: CorrelationEstimate) -> str:
    """``"r [low, high] (p = ...)"``: the coefficient, its 95 % bootstrap interval over the
    seeds and its p-value; ``"n/a"`` for an undefined ``r``, ``"no interval"`` when the
    study cannot give one (one seed)."""
    if not math.isfinite(estimate.r):
        return "n/a"
    interval = (
        "no interval"
        if estimate.interval is None
        else f"[{estimate.interval[0]:+.3f}, {estimate.interval[1]:+.3f}]"
    )
    return f"{estimate.r:+.3f} {interval} (p = {estimate.p_value:.2g})"


def correlation_table(studies: Mapping[str, GridStudy]) -> pd.DataFrame:
    """One row per study (keyed by its target's name): Pearson ``r`` and Spearman ``rho``
    with their 95 % bootstrap intervals over the seeds and p-values
    (:func:`format_estimate`), Pearson ``r``'s 95 % bootstrap interval over the grid points
    (:func:`study_points_interval`), the grid points and seeds used, k and the preset.

    Returns
    -------
    pandas.DataFrame
    """
    import pandas as pd

    rows = []
    for target, study in studies.items():
        stats = study.statistics
        rows.append(
            {
                "target Q": target,
                "Pearson r [95% CI] (p)": format_estimate(stats.pearson),
                "Spearman ρ [95% CI] (p)": format_estimate(stats.spearman),
                "Pearson r: 95% CI over the points": _interval(study_points_interval(study)[0]),
                "points": stats.n_points,
                "seeds": stats.n_seeds,
                "k": study.k,
                "preset": study.preset,
            }
        )
    return pd.DataFrame(rows)


def grid_points_table(study: GridStudy) -> pd.DataFrame:
    """Every grid point of ``study`` as the Evidence page shows it: the weights, ``W^2`` and
    the accuracies **in %** (mean, std over the seeds, each seed), rounded for display — the
    page's other accuracies are percentages too; :meth:`GridStudy.to_frame` keeps the
    fractions for files (issue 45)."""
    frame = study.to_frame()
    names = {"accuracy_mean": "mean accuracy (%)", "accuracy_std": "std (pp)"}
    names |= {f"accuracy_seed{s}": f"seed {s} (%)" for s in study.seeds}
    for column in names:
        frame[column] = (100.0 * frame[column].astype(float)).round(1)
    weights = [c for c in frame.columns if str(c).startswith("a_")]
    frame[weights] = frame[weights].astype(float).round(3)
    frame["objective"] = frame["objective"].astype(float).round(4)
    frame["seconds"] = frame["seconds"].astype(float).round(1)
    return frame.rename(columns={**names, "objective": OBJECTIVE})


def objective_table(studies: Mapping[str, GridStudy]) -> pd.DataFrame:
    """The paper's appendix Table "w_stat" for each study: mean, median, min, max, range and
    (population) std of ``W^2(P_a, Q)`` over the grid, beside the accuracy gain in percentage
    points (``max - min`` of the points' mean accuracies: what choosing ``a`` on this grid can
    change; the paper's last column is OTDD minus few-shot accuracy instead).

    Returns
    -------
    pandas.DataFrame
        Columns ``target Q``, ``W² mean`` .. ``W² std`` (squared feature units, rounded to
        2 decimals) and ``accuracy gain (pp)``.
    """
    import pandas as pd

    rows = []
    for target, study in studies.items():
        summary = study.statistics.objective
        row: dict[str, str | float] = {"target Q": target}
        row.update(
            {
                f"W² {name}": round(float(getattr(summary, name)), 2)
                for name in ("mean", "median", "min", "max", "range", "std")
            }
        )
        row["accuracy gain (pp)"] = round(100.0 * study.statistics.accuracy_gain, 2)
        rows.append(row)
    return pd.DataFrame(rows)


def correlation_sentence(target: str, study: GridStudy) -> str:
    """What the study's Pearson ``r`` says about ``W^2(P_a, Q)`` and transfer, in one sentence.

    Read off the numbers, never assumed: the sign and size of ``r`` (``|r| >= 0.5``
    strong, ``>= 0.3`` moderate, else weak) and whether its 95 % bootstrap intervals over
    the seeds and over the grid points (:func:`interval_text`) exclude 0; a correlation is
    shown only when both do. A negative ``r`` is the paper's claim (smaller ``W^2``,
    higher accuracy).
    """
    stats = study.statistics
    estimate = stats.pearson
    budget = f"{study.k}-shot, {stats.n_points} points, {_count(stats.n_seeds, 'seed')}"
    if not math.isfinite(estimate.r):
        return f"{target}: no correlation can be computed ({study.note or estimate.interval_note})."
    size = abs(estimate.r)
    strength = "strong" if size >= STRONG_R else "moderate" if size >= 0.3 else "weak"
    sign = "negative" if estimate.r < 0 else "positive"
    meaning = (
        f"a smaller {OBJECTIVE} goes with a higher accuracy, as the paper claims"
        if estimate.r < 0
        else f"a smaller {OBJECTIVE} goes with a lower accuracy, against the paper's claim"
    )
    points, _ = study_points_interval(study)
    if estimate.interval is None:
        return (
            f"{target}: {strength} {sign} correlation (r = {estimate.r:+.3f}, {budget}; 95% "
            f"interval over the points {_interval(points)}); {meaning}, but with no interval "
            "over seeds it is not established."
        )
    excluded = [_excludes_zero(estimate.interval), points is not None and _excludes_zero(points)]
    if all(excluded):
        return (
            f"{target}: {strength} {sign} correlation (r = {estimate.r:+.3f}; 95% interval "
            f"{interval_text(study)}, each excludes 0; {budget}): {meaning}."
        )
    said = ["excludes 0" if e else "includes 0" for e in excluded]
    return (
        f"{target}: no correlation shown at this budget (r = {estimate.r:+.3f}; 95% interval "
        f"over the seeds {_interval(estimate.interval)} {said[0]}, over the points "
        f"{_interval(points)} {said[1]}; {budget})."
    )


def _excludes_zero(interval: tuple[float, float]) -> bool:
    return interval[0] > 0.0 or interval[1] < 0.0


def region_sentence(
    target: str,
    study: GridStudy,
    inside: Sequence[bool],
    best_index: int,
    replicates: int,
    level: float,
) -> str:
    """Whether the study's accuracy-best grid point lies in the region as good as â (issue 23).

    ``inside`` flags each grid point (the study's order) whose interval of
    ``W^2(P_a, Q) - W^2(P_â, Q)`` holds 0, from ``replicates`` Q-resampling replicates.
    """
    best = study.points[best_index]
    weights = ", ".join(f"{w:.2f}" for w in best.weights)
    n_in = sum(bool(v) for v in inside)
    where = "inside" if inside[best_index] else "outside"
    return (
        f"{target}: the accuracy-best grid point a = ({weights}) (mean accuracy "
        f"{100 * best.mean_accuracy:.1f}%) lies {where} the region as good as â "
        f"({n_in} of {len(inside)} grid points; {round(100 * level)}% bootstrap of Q's samples, "
        f"B = {replicates}, maps fixed)."
    )


# --------------------------------------------------------------------------- â on the grid


def _count(n: int, noun: str) -> str:
    """``"1 seed"``, ``"5 seeds"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _accuracy_text(study: GridStudy, index: int) -> str:
    """``"81.2 ± 1.3 %"``: grid point ``index``'s mean accuracy (± std over the seeds)."""
    point = study.points[index]
    spread = f" ± {100 * point.std_accuracy:.1f}" if len(point.accuracies) > 1 else ""
    return f"{100 * point.mean_accuracy:.1f}{spread} %"


def a_hat_sentence(target: str, study: GridStudy, a_hat: Sequence[float]) -> str:
    """Where ``a_hat`` falls on the study's grid, in one sentence: the nearest grid point to
    ``a_hat`` and its mean accuracy (± std over the seeds) beside the accuracy-best grid
    point's. ``a_hat`` must be that of the study's own problem (same data, same N)."""
    near = nearest_grid_point(study.weights, a_hat)
    best = best_grid_point(study)
    near_point, best_point = study.points[near], study.points[best]
    gap = 100 * (best_point.mean_accuracy - near_point.mean_accuracy)
    same = " (the same point)" if near == best else f", {gap:.1f} points higher"
    return (
        f"{target}: {A_HAT} = {weights_text(a_hat)}; the {NEAREST_LABEL}, "
        f"a = {weights_text(near_point.weights)}, reaches {_accuracy_text(study, near)} "
        f"({OBJECTIVE} = {near_point.objective:.1f}); the {BEST_LABEL}, "
        f"a = {weights_text(best_point.weights)}, {_accuracy_text(study, best)} "
        f"({OBJECTIVE} = {best_point.objective:.1f}){same}. Accuracy: mean ± std over "
        f"{_count(len(study.seeds), 'seed')}."
    )


# --------------------------------------------------------------------------- bootstrap over points


def _paired_pearson(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Pearson ``r`` of every row pair of ``xs`` and ``ys`` ``(B, K)``; ``nan`` where a row
    is constant (``r`` undefined)."""
    xc = xs - xs.mean(axis=1, keepdims=True)
    yc = ys - ys.mean(axis=1, keepdims=True)
    denominator = np.sqrt((xc * xc).sum(axis=1) * (yc * yc).sum(axis=1))
    constant = (np.ptp(xs, axis=1) == 0.0) | (np.ptp(ys, axis=1) == 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(axis=1) / denominator
    r[constant | ~(denominator > 0)] = np.nan
    clipped: np.ndarray = np.clip(r, -1.0, 1.0)
    return clipped


def points_bootstrap_interval(
    objectives: Sequence[float] | np.ndarray,
    accuracies: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = 0.95,
) -> tuple[tuple[float, float] | None, str]:
    """Percentile bootstrap interval of Pearson ``r`` over the grid points.

    Each of ``n_resamples`` resamples draws ``K`` of the ``K`` pairs
    ``(W^2(P_a, Q), mean accuracy)`` with replacement and recomputes ``r``. The interval of
    ``GridStudy.statistics`` resamples the seeds with the points fixed; this one says how
    much ``r`` depends on which points were drawn, which is what ``K`` points can support.

    Parameters
    ----------
    objectives, accuracies
        ``(K,)`` each: ``W^2(P_a, Q)`` and the mean accuracy of every point, finite.
    n_resamples, seed
        Resamples and the seed of their :func:`numpy.random.default_rng`.
    level
        Coverage in ``(0, 1)``.

    Returns
    -------
    (interval, note)
        ``interval`` is ``None`` with a ``note`` saying why (fewer than 3 points, ``r``
        undefined in every resample); ``note`` also says how many resamples were left out
        for an undefined ``r`` (a resample of one repeated point).
    """
    x = np.asarray(objectives, dtype=float).reshape(-1)
    y = np.asarray(accuracies, dtype=float).reshape(-1)
    if x.size != y.size:
        raise GeovizError(f"{x.size} objectives but {y.size} accuracies")
    if not (0.0 < level < 1.0):
        raise GeovizError(f"level must lie in (0, 1), got {level!r}")
    if x.size < 3:
        return None, f"bootstrap interval over the points not available: {x.size} point(s)"
    draws = np.random.default_rng(seed).integers(0, x.size, size=(n_resamples, x.size))
    r = _paired_pearson(x[draws], y[draws])
    defined = r[np.isfinite(r)]
    if defined.size == 0:
        return None, "bootstrap interval over the points not available: r is undefined"
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(defined, [tail, 100.0 - tail])
    note = ""
    if defined.size < n_resamples:
        note = f"{n_resamples - defined.size} of {n_resamples} resamples had r undefined"
    return (float(low), float(high)), note


def study_points_interval(study: GridStudy) -> tuple[tuple[float, float] | None, str]:
    """:func:`points_bootstrap_interval` of a study's finite points (mean accuracies)."""
    x, y = study.objectives, study.mean_accuracies
    keep = np.isfinite(x) & np.isfinite(y)
    return points_bootstrap_interval(x[keep], y[keep])


def _interval(interval: tuple[float, float] | None) -> str:
    return "none" if interval is None else f"[{interval[0]:+.3f}, {interval[1]:+.3f}]"


def interval_text(study: GridStudy) -> str:
    """Both 95 % bootstrap intervals of Pearson ``r``, each named by what it resamples:
    ``"over the 5 seeds: [..]; over the 36 points: [..]"``."""
    stats = study.statistics
    points, _ = study_points_interval(study)
    return (
        f"over the {_count(stats.n_seeds, 'seed')}: {_interval(stats.pearson.interval)}; "
        f"over the {stats.n_points} points: {_interval(points)}"
    )


# --------------------------------------------------------------------------- small budgets


def chance_of_strong_r(n_points: int, threshold: float = STRONG_R) -> float:
    """Probability that ``|r| >= threshold`` when the accuracies are unrelated to ``W^2``.

    Under independence with Gaussian noise the null distribution of Pearson's ``r`` of
    ``n`` pairs has density ``(1 - r^2)^((n-4)/2) / B(1/2, (n-2)/2)``, so
    ``P(|r| >= t) = I_{1 - t^2}((n - 2) / 2, 1 / 2)`` (the regularized incomplete beta
    function). ``n = 3`` gives ``1 - (2/pi) asin(t)``: 2/3 for ``t = 0.5``.

    Raises
    ------
    GeovizError
        ``n_points < 3`` (``r`` of two points is always ``±1``) or ``threshold`` outside
        ``[0, 1]``.
    """
    if n_points < 3:
        raise GeovizError(f"r needs 3 points or more, got {n_points}")
    if not 0.0 <= threshold <= 1.0:
        raise GeovizError(f"threshold must lie in [0, 1], got {threshold!r}")
    from scipy import special  # on use: see the note at the imports

    return float(special.betainc((n_points - 2) / 2.0, 0.5, 1.0 - threshold**2))


def _points_warning(n_points: int) -> str:
    if n_points < 3:
        return (
            f"{_count(n_points, 'grid point')} cannot support a correlation: r of two points "
            "is always ±1, and of fewer it is undefined."
        )
    chance = chance_of_strong_r(n_points)
    paper = chance_of_strong_r(PAPER_POINTS)
    return (
        f"{n_points} grid points cannot support a correlation: even if {OBJECTIVE} and accuracy "
        f"were unrelated (independent Gaussian noise), |r| ≥ {STRONG_R} would come out in "
        f"{100 * chance:.0f} % of such studies (with the paper's {PAPER_POINTS} points: "
        f"{100 * paper:.1f} %)."
    )


def budget_warnings(preset: str, n_points: int, n_seeds: int) -> list[str]:
    """Why a run's numbers cannot support a conclusion, one sentence per reason; empty
    when none applies. Reasons: the ``tiny`` training preset (a smoke test), fewer than
    :data:`MIN_POINTS` grid points, one seed."""
    out = []
    if preset == "tiny":
        tiny = PRESETS["tiny"]
        out.append(
            f"The “tiny” training budget (pretraining {tiny.pretrain.iterations} and fine-tuning "
            f"{tiny.finetune.iterations} iterations) only checks that the code runs: its "
            "accuracies are meaningless, and so are the bars and r computed from them."
        )
    if n_points < MIN_POINTS:
        out.append(_points_warning(n_points))
    if n_seeds == 1:
        out.append(
            "With 1 seed every accuracy is a single training run: nothing separates "
            "run-to-run noise from the differences between grid points or methods, and r has "
            "no interval over seeds."
        )
    return out
