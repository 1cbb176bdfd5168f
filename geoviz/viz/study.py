"""The figure and tables of the simplex study (paper Figs. "ternary" / "corr", Table "w_stat").

:func:`correlation_figure` draws a :class:`~geoviz.transfer.study.GridStudy`:
``W^2(P_a, Q)`` beside the fine-tuned accuracy over the weight grid, or (``kind="scatter"``)
accuracy against ``W^2(P_a, Q)`` with the seeds' spread as error bars.
:func:`correlation_table` and :func:`objective_table` are the tables of one or more studies
(correlations with their bootstrap intervals; the statistics of ``W^2(P_a, Q)`` beside the
accuracy gain), :func:`correlation_sentence` what a study's numbers say, in one sentence.
Two bootstraps of Pearson ``r``: over the seeds (``GridStudy.statistics``) and over the grid
points (:func:`points_bootstrap_interval`); :func:`nearest_grid_point` and
:func:`a_hat_sentence` place ``a_hat`` on the grid; :func:`budget_warnings` says why a small
run's numbers cannot support a conclusion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from geoviz.errors import GeovizError
from geoviz.glossary import A_HAT, OBJECTIVE
from geoviz.nn.training import PRESETS
from geoviz.transfer.study import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CorrelationEstimate,
    GridStudy,
)
from geoviz.viz.literal import plotly_name

# scipy is imported where a probability is computed (as in geoviz.transfer.study): the app's
# server imports this module at start

__all__ = [
    "a_hat_sentence",
    "budget_warnings",
    "chance_of_strong_r",
    "correlation_figure",
    "correlation_sentence",
    "correlation_table",
    "format_estimate",
    "interval_text",
    "nearest_grid_point",
    "objective_table",
    "points_bootstrap_interval",
]

FigureKind = Literal["auto", "scatter"]

#: ``|r|`` at or above which :func:`correlation_sentence` calls a correlation strong.
STRONG_R = 0.5
#: Fewer grid points than this cannot support a correlation (:func:`budget_warnings`).
MIN_POINTS = 10
#: The paper's grid (resolution 7 on three references), for comparison in the warnings.
PAPER_POINTS = 36
#: Marker of the grid point nearest to ``a_hat``, and of the accuracy-best grid point.
NEAREST_LABEL = f"nearest grid point to {A_HAT}"
BEST_LABEL = "accuracy-best grid point"


def correlation_figure(
    study: GridStudy,
    names: Sequence[str] | None = None,
    *,
    kind: FigureKind = "auto",
    label: str = "",
    a_hat: Sequence[float] | None = None,
) -> Any:
    """Side-by-side plots of ``W^2(P_a, Q)`` (left) and mean accuracy (right).

    ``m = 3``: two ternary plots (vertex ``i`` is ``names[i]``), markers
    coloured by value, each with its colour bar (accuracy on the reversed
    scale, so the negative correlation the paper reports shows as two alike
    pictures: dark = small ``W^2`` / high accuracy). ``m = 2``: two line plots
    against the weight of ``names[1]`` (accuracy with ± std error bars).
    Other ``m``, or ``kind="scatter"``: one scatter plot of mean accuracy (%)
    against ``W^2(P_a, Q)``, each point with ± the sample std over the seeds
    as error bars (paper Fig. "corr"). The title gives the Pearson ``r`` and
    Spearman ``rho``.

    Parameters
    ----------
    study
        A :class:`GridStudy`.
    names
        The ``m`` reference names; default ``study.reference_names``.
    kind
        ``"auto"``: ternaries for ``m = 3``, lines for ``m = 2``, else the
        scatter; ``"scatter"``: the scatter for every ``m``.
    label
        Put before the title (e.g. the target's name); the scatter's title then
        takes two lines, to fit half a page.
    a_hat
        ``a_hat`` of the study's own problem: when given, the :data:`NEAREST_LABEL` and the
        :data:`BEST_LABEL` are marked (ternaries: ``a_hat`` itself too), with a legend.

    Names, ``label`` and the study's note are as typed: the figure draws them escaped
    (:func:`geoviz.viz.literal.plotly_name`; a ``%{...}`` in a name is no placeholder of
    the hover template).

    Returns
    -------
    plotly.graph_objects.Figure
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not study.points:
        raise GeovizError("the study has no points to draw")
    grid = study.weights
    m = grid.shape[1]
    names = [plotly_name(n) for n in (study.vertex_names() if names is None else names)]
    if len(names) != m:
        raise GeovizError(f"correlation_figure needs {m} reference names, got {len(names)}")
    if a_hat is not None and len(a_hat) != m:
        raise GeovizError(f"correlation_figure needs a_hat of {m} weights, got {len(a_hat)}")
    values = study.objectives
    acc = study.mean_accuracies
    std = np.array([p.std_accuracy for p in study.points])
    r_text = "n/a" if not math.isfinite(study.pearson) else f"{study.pearson:.3f}"
    rho_text = "n/a" if not math.isfinite(study.spearman) else f"{study.spearman:.3f}"
    acc_label = f"mean accuracy ({len(study.seeds)} seed{'s' if len(study.seeds) != 1 else ''})"
    title = (
        f"{OBJECTIVE} vs fine-tuned accuracy ({study.method}, preset {study.preset}, "
        f"k={study.k}): Pearson r = {r_text}, Spearman ρ = {rho_text}"
    )
    if label:
        title = (
            f"<b>{plotly_name(label)}</b><br>Pearson r = {r_text}, Spearman ρ = {rho_text} "
            f"({study.method}, preset {study.preset}, k={study.k})"
        )
    if study.note:
        title += f"<br><sub>{plotly_name(study.note)}</sub>"
    hover = "<br>".join(f"{n}: %{{customdata[{i}]:.3f}}" for i, n in enumerate(names))
    custom = np.column_stack([grid, values, acc, std])
    hover_values = (
        f"<br>{OBJECTIVE} = %{{customdata[{m}]:.4g}}"
        f"<br>accuracy = %{{customdata[{m + 1}]:.3f}} ± %{{customdata[{m + 2}]:.3f}}<extra></extra>"
    )

    if m == 3 and kind == "auto":
        fig = make_subplots(
            rows=1,
            cols=2,
            specs=[[{"type": "ternary"}, {"type": "ternary"}]],
            subplot_titles=(OBJECTIVE, f"{acc_label}, r = {r_text}"),
            horizontal_spacing=0.14,
        )
        for col, (vals, label, scale, bar_x) in enumerate(
            [(values, OBJECTIVE, "Viridis", 0.43), (acc, "accuracy", "Viridis_r", 1.0)], start=1
        ):
            fig.add_trace(
                go.Scatterternary(
                    a=grid[:, 0],
                    b=grid[:, 1],
                    c=grid[:, 2],
                    mode="markers",
                    showlegend=False,
                    name=label,
                    customdata=custom,
                    hovertemplate=hover + hover_values,
                    marker={
                        "color": vals,
                        "colorscale": scale,
                        "size": float(np.clip(200.0 / max(study.resolution, 1), 6.0, 30.0)),
                        "symbol": "hexagon",
                        "line": {"width": 0},
                        "colorbar": {
                            "title": {"text": label, "side": "right"},
                            "x": bar_x,
                            "len": 0.75,
                            "thickness": 14,
                        },
                    },
                ),
                row=1,
                col=col,
            )
        axis = {"min": 0, "tickformat": ".1f", "linecolor": "#444"}
        for key in ("ternary", "ternary2"):
            fig.layout[key].update(
                sum=1,
                aaxis={**axis, "title": {"text": f"<b>{names[0]}</b>"}},
                baxis={**axis, "title": {"text": f"<b>{names[1]}</b>"}},
                caxis={**axis, "title": {"text": f"<b>{names[2]}</b>"}},
                bgcolor="#f4f4f4",
            )
        # the subplot titles sit above the top vertex's axis title
        for annotation in fig.layout.annotations:
            annotation.update(y=1.13)
        fig.update_layout(title={"text": title}, height=600, margin={"t": 150, "l": 50, "r": 50})
        if a_hat is not None:
            _mark_ternary(fig, study, a_hat)
        return fig

    if m == 2 and kind == "auto":
        x = grid[:, 1]
        order = np.argsort(x)
        fig = make_subplots(
            rows=1, cols=2, subplot_titles=(OBJECTIVE, f"{acc_label}, r = {r_text}")
        )
        fig.add_trace(
            go.Scatter(
                x=x[order],
                y=values[order],
                mode="lines+markers",
                name=OBJECTIVE,
                customdata=custom[order],
                hovertemplate=hover + hover_values,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=x[order],
                y=acc[order],
                mode="lines+markers",
                name="accuracy",
                error_y={"type": "data", "array": std[order], "visible": True},
                customdata=custom[order],
                hovertemplate=hover + hover_values,
            ),
            row=1,
            col=2,
        )
        x_title = f"weight of {names[1]} (0 = {names[0]}, 1 = {names[1]})"
        fig.update_xaxes(title_text=x_title, range=[-0.03, 1.03])
        fig.update_yaxes(title_text=OBJECTIVE, row=1, col=1)
        fig.update_yaxes(title_text="accuracy", row=1, col=2)
        fig.update_layout(title={"text": title}, height=460, showlegend=False)
        if a_hat is not None:
            _mark_lines(fig, study, a_hat)
        return fig

    percent = 100.0  # accuracies are fractions; the axis reads in percent like the paper's
    fig = go.Figure(
        go.Scatter(
            x=values,
            y=percent * acc,
            name="grid point",
            mode="markers",
            marker={"size": 8, "color": "#5b5b8f"},
            error_y={
                "type": "data",
                "array": percent * std,
                "visible": True,
                "thickness": 1,
                "color": "#9c9cc0",
            },
            customdata=custom,
            hovertemplate=hover + hover_values,
        )
    )
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis_title=OBJECTIVE,
        yaxis_title=f"mean accuracy over {len(study.seeds)} seed(s) (%), ± std",
        height=460,
        margin={"t": 90 if study.note else 60},
    )
    if a_hat is not None:
        _mark_scatter(fig, study, a_hat)
    return fig


#: Plotly marker of each marked point (the grid point nearest to ``a_hat``, the best one,
#: ``a_hat`` itself on a ternary).
_MARKERS: dict[str, dict[str, Any]] = {
    NEAREST_LABEL: {"symbol": "circle-open", "size": 20, "color": "#d62728", "line": {"width": 3}},
    BEST_LABEL: {"symbol": "diamond-open", "size": 17, "color": "#2ca02c", "line": {"width": 3}},
    A_HAT: {"symbol": "x", "size": 12, "color": "#d62728"},
}


def _marked(study: GridStudy, a_hat: Sequence[float]) -> list[tuple[str, int]]:
    """``(label, grid index)`` of the nearest grid point to ``a_hat`` and the best one."""
    return [
        (NEAREST_LABEL, nearest_grid_point(study.weights, a_hat)),
        (BEST_LABEL, best_grid_point(study)),
    ]


def _hover(label: str, weights: Sequence[float]) -> str:
    return f"{plotly_name(label)}<br>a = {_weights_text(weights)}<extra></extra>"


def _mark_scatter(fig: Any, study: GridStudy, a_hat: Sequence[float]) -> None:
    """The marked grid points on the accuracy-vs-``W^2`` scatter, with a legend below."""
    import plotly.graph_objects as go

    for label, i in _marked(study, a_hat):
        point = study.points[i]
        fig.add_trace(
            go.Scatter(
                x=[point.objective],
                y=[100.0 * point.mean_accuracy],
                mode="markers",
                name=label,
                marker=_MARKERS[label],
                hovertemplate=_hover(label, point.weights),
            )
        )
    fig.update_layout(
        showlegend=True,
        legend={"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0.0},
        margin={"b": 110},
    )


def _mark_ternary(fig: Any, study: GridStudy, a_hat: Sequence[float]) -> None:
    """``a_hat`` and the marked grid points on both ternaries (one legend entry each)."""
    import plotly.graph_objects as go

    marks = [(A_HAT, tuple(float(w) for w in a_hat))]
    marks += [(label, study.points[i].weights) for label, i in _marked(study, a_hat)]
    for col in (1, 2):
        for label, w in marks:
            fig.add_trace(
                go.Scatterternary(
                    a=[w[0]],
                    b=[w[1]],
                    c=[w[2]],
                    mode="markers",
                    name=label,
                    legendgroup=label,
                    showlegend=col == 1,
                    marker=_MARKERS[label],
                    hovertemplate=_hover(label, w),
                ),
                row=1,
                col=col,
            )
    fig.update_layout(
        showlegend=True,
        legend={"orientation": "h", "yanchor": "top", "y": -0.12, "x": 0.0},
        margin={"b": 90},
    )


def _mark_lines(fig: Any, study: GridStudy, a_hat: Sequence[float]) -> None:
    """The marked grid points on both line panels (``m = 2``), with a legend."""
    import plotly.graph_objects as go

    for label, i in _marked(study, a_hat):
        point = study.points[i]
        for col, y in ((1, point.objective), (2, point.mean_accuracy)):
            fig.add_trace(
                go.Scatter(
                    x=[point.weights[1]],
                    y=[y],
                    mode="markers",
                    name=label,
                    legendgroup=label,
                    showlegend=col == 1,
                    marker=_MARKERS[label],
                    hovertemplate=_hover(label, point.weights),
                ),
                row=1,
                col=col,
            )
    fig.update_layout(showlegend=True)


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


def correlation_table(studies: Mapping[str, GridStudy]) -> Any:
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


def objective_table(studies: Mapping[str, GridStudy]) -> Any:
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
        row: dict[str, Any] = {"target Q": target}
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


def nearest_grid_point(
    weights: np.ndarray | Sequence[Sequence[float]], point: Sequence[float]
) -> int:
    """Index of the grid row closest to ``point`` (Euclidean; the first of equals).

    Parameters
    ----------
    weights
        ``(K, m)`` grid weights (``GridStudy.weights``).
    point
        ``m`` weights, e.g. ``a_hat``.

    Raises
    ------
    GeovizError
        An empty grid, or ``point`` of another length than the grid's rows.
    """
    grid = np.asarray(weights, dtype=float)
    target = np.asarray(point, dtype=float).reshape(-1)
    if grid.ndim != 2 or grid.shape[0] == 0 or grid.shape[1] != target.size:
        raise GeovizError(
            f"nearest_grid_point needs a (K, {target.size}) grid, got shape {grid.shape}"
        )
    return int(np.argmin(np.linalg.norm(grid - target, axis=1)))


def best_grid_point(study: GridStudy) -> int:
    """Index of the point with the highest mean accuracy over the seeds (the first of equals)."""
    if not study.points:
        raise GeovizError("the study has no points")
    return int(np.nanargmax(study.mean_accuracies))


def _count(n: int, noun: str) -> str:
    """``"1 seed"``, ``"5 seeds"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _weights_text(weights: Sequence[float]) -> str:
    return "(" + ", ".join(f"{w:.2f}" for w in weights) + ")"


def _accuracy_text(study: GridStudy, index: int) -> str:
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
        f"{target}: {A_HAT} = {_weights_text(a_hat)}; the {NEAREST_LABEL}, "
        f"a = {_weights_text(near_point.weights)}, reaches {_accuracy_text(study, near)} "
        f"({OBJECTIVE} = {near_point.objective:.1f}); the {BEST_LABEL}, "
        f"a = {_weights_text(best_point.weights)}, {_accuracy_text(study, best)} "
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
