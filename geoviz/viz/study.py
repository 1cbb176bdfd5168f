"""The figure and tables of the simplex study (paper Figs. "ternary" / "corr", Table "w_stat").

:func:`correlation_figure` draws a :class:`~geoviz.transfer.study.GridStudy`:
``W^2(P_a, Q)`` beside the fine-tuned accuracy over the weight grid, or (``kind="scatter"``)
accuracy against ``W^2(P_a, Q)`` with the seeds' spread as error bars.
:func:`correlation_table` and :func:`objective_table` are the tables of one or more studies
(correlations with their bootstrap intervals; the statistics of ``W^2(P_a, Q)`` beside the
accuracy gain), :func:`correlation_sentence` what a study's numbers say, in one sentence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from geoviz.errors import GeovizError
from geoviz.glossary import OBJECTIVE
from geoviz.transfer.study import CorrelationEstimate, GridStudy
from geoviz.viz.literal import plotly_name

__all__ = [
    "correlation_figure",
    "correlation_sentence",
    "correlation_table",
    "format_estimate",
    "objective_table",
]

FigureKind = Literal["auto", "scatter"]


def correlation_figure(
    study: GridStudy,
    names: Sequence[str] | None = None,
    *,
    kind: FigureKind = "auto",
    label: str = "",
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
        return fig

    percent = 100.0  # accuracies are fractions; the axis reads in percent like the paper's
    fig = go.Figure(
        go.Scatter(
            x=values,
            y=percent * acc,
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
    return fig


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
    (:func:`format_estimate`), the grid points and seeds used, k and the preset.

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
    strong, ``>= 0.3`` moderate, else weak) and whether its 95 % bootstrap interval over
    the seeds excludes 0. A negative ``r`` is the paper's claim (smaller ``W^2``, higher
    accuracy).
    """
    stats = study.statistics
    estimate = stats.pearson
    budget = f"{study.k}-shot, {stats.n_points} points, {stats.n_seeds} seed(s)"
    if not math.isfinite(estimate.r):
        return f"{target}: no correlation can be computed ({study.note or estimate.interval_note})."
    size = abs(estimate.r)
    strength = "strong" if size >= 0.5 else "moderate" if size >= 0.3 else "weak"
    sign = "negative" if estimate.r < 0 else "positive"
    meaning = (
        f"a smaller {OBJECTIVE} goes with a higher accuracy, as the paper claims"
        if estimate.r < 0
        else f"a smaller {OBJECTIVE} goes with a lower accuracy, against the paper's claim"
    )
    if estimate.interval is None:
        return (
            f"{target}: {strength} {sign} correlation (r = {estimate.r:+.3f}, {budget}); "
            f"{meaning}, but with no interval over seeds it is not established."
        )
    low, high = estimate.interval
    if low > 0.0 or high < 0.0:
        return (
            f"{target}: {strength} {sign} correlation (r = {estimate.r:+.3f}, 95% interval "
            f"[{low:+.3f}, {high:+.3f}] excludes 0, {budget}): {meaning}."
        )
    return (
        f"{target}: no correlation shown at this budget (r = {estimate.r:+.3f}, 95% interval "
        f"[{low:+.3f}, {high:+.3f}] includes 0, {budget})."
    )


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
