"""The simplex study's figure (paper Figs. "ternary" / "corr"): :func:`correlation_figure`.

``W^2(P_a, Q)`` beside the fine-tuned accuracy over the weight grid of a
:class:`~geoviz.transfer.study.GridStudy` (two ternaries for three references, two line
panels for two), or accuracy against ``W^2(P_a, Q)`` with the seeds' spread as error bars;
``a_hat``, the grid point nearest to it and the accuracy-best one marked
(:mod:`geoviz.viz.study_grid`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import numpy as np
from numpy.typing import NDArray

from geoviz.errors import GeovizError
from geoviz.glossary import A_HAT, OBJECTIVE
from geoviz.transfer.study import GridStudy
from geoviz.viz.literal import plotly_name
from geoviz.viz.study_grid import (
    BEST_LABEL,
    NEAREST_LABEL,
    best_grid_point,
    nearest_grid_point,
    weights_text,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go

# plotly is imported where a figure is drawn: the app's server imports this module at start

__all__ = ["PERCENT", "FigureKind", "comparison_figure", "correlation_figure"]

FigureKind = Literal["auto", "scatter"]

#: accuracies are fractions in the studies; every figure reads them in percent, as the
#: paper's tables and the Evidence page's do
PERCENT = 100.0

#: the comparison bars' colours, one per method in the paper's order
_BAR_COLOURS = ("#5b5b8f", "#b07aa1", "#9c9c9c", "#c8c8c8", "#7f7fb0")


def comparison_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """The paper's Table 1 for one task as bars: each method's mean test accuracy (%) with
    its ± std over the seeds as a whisker, and its value written *above the whisker* (a
    label drawn at the bar's top sat on the whisker, issue 45), rounded to one decimal.

    Parameters
    ----------
    rows
        :meth:`geoviz.transfer.table.MethodComparison.summary`'s rows (``title``, ``mean``,
        ``std`` in %).
    """
    import plotly.graph_objects as go

    means = [float(r["mean"]) for r in rows]
    stds = [float(r["std"]) for r in rows]
    titles = [plotly_name(str(r["title"])) for r in rows]
    fig = go.Figure(
        go.Bar(
            x=titles,
            y=means,
            error_y={"type": "data", "array": stds, "visible": True},
            marker_color=[_BAR_COLOURS[i % len(_BAR_COLOURS)] for i in range(len(rows))],
            hovertemplate="%{x}<br>%{y:.1f} ± %{error_y.array:.1f} %<extra></extra>",
        )
    )
    for title, mean, std in zip(titles, means, stds, strict=True):
        spread = f" ± {std:.1f}" if std > 0 else ""
        fig.add_annotation(
            x=title,
            y=mean + std,  # the whisker's top; the label stands above it
            yshift=4,
            yanchor="bottom",
            text=f"{mean:.1f}{spread} %",
            showarrow=False,
        )
    top = max([m + s for m, s in zip(means, stds, strict=True)] + [100.0])
    fig.update_layout(
        yaxis={"title": {"text": "test accuracy (%)"}, "range": [0, top + 12]},
        height=380,
        margin={"t": 30},
    )
    return fig


def correlation_figure(
    study: GridStudy,
    names: Sequence[str] | None = None,
    *,
    kind: FigureKind = "auto",
    label: str = "",
    a_hat: Sequence[float] | None = None,
) -> go.Figure:
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
    if not study.points:
        raise GeovizError("the study has no points to draw")
    m = study.weights.shape[1]
    names = [plotly_name(n) for n in (study.vertex_names() if names is None else names)]
    if len(names) != m:
        raise GeovizError(f"correlation_figure needs {m} reference names, got {len(names)}")
    if a_hat is not None and len(a_hat) != m:
        raise GeovizError(f"correlation_figure needs a_hat of {m} weights, got {len(a_hat)}")
    panels = _Panels.of(study, names, label)
    if m == 3 and kind == "auto":
        fig = _ternaries(study, panels)
        if a_hat is not None:
            _mark_ternary(fig, study, a_hat)
    elif m == 2 and kind == "auto":
        fig = _lines(study, panels)
        if a_hat is not None:
            _mark_lines(fig, study, a_hat)
    else:
        fig = _accuracy_scatter(study, panels)
        if a_hat is not None:
            _mark_scatter(fig, study, a_hat)
    return fig


@dataclass(frozen=True)
class _Panels:
    """What every kind of the figure draws: the grid's values, the title and the hover.

    Attributes
    ----------
    grid
        ``(K, m)`` weights of the grid points.
    values, accuracies, stds
        ``(K,)`` each: ``W^2(P_a, Q)``, the mean accuracy and its std over the seeds.
    names
        The ``m`` reference names, escaped.
    title
        The figure's title: Pearson ``r`` and Spearman ``rho``, the study's budget and note.
    accuracy_title, r_text
        The accuracy panel's title (``"mean accuracy (5 seeds)"``) and ``r`` (``"n/a"``
        when undefined).
    customdata, hover
        ``(K, m + 3)`` weights, value, accuracy and std of each point, and the hover
        template that shows them.
    """

    grid: NDArray[np.float64]
    values: NDArray[np.float64]
    accuracies: NDArray[np.float64]
    stds: NDArray[np.float64]
    names: list[str]
    title: str
    accuracy_title: str
    r_text: str
    customdata: NDArray[np.float64]
    hover: str

    @classmethod
    def of(cls, study: GridStudy, names: list[str], label: str) -> _Panels:
        """The panels of ``study`` with its ``m`` escaped reference ``names``; ``label``
        (as typed) heads the title when given."""
        grid = study.weights
        m = grid.shape[1]
        values = study.objectives
        # accuracies in percent, as everywhere on the Evidence page (issue 45)
        acc = PERCENT * study.mean_accuracies
        std = PERCENT * np.array([p.std_accuracy for p in study.points])
        r_text = "n/a" if not math.isfinite(study.pearson) else f"{study.pearson:.3f}"
        rho_text = "n/a" if not math.isfinite(study.spearman) else f"{study.spearman:.3f}"
        seeds = len(study.seeds)
        acc_label = f"mean accuracy (%, {seeds} seed{'s' if seeds != 1 else ''})"
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
        hover += (
            f"<br>{OBJECTIVE} = %{{customdata[{m}]:.4g}}"
            f"<br>accuracy = %{{customdata[{m + 1}]:.1f}} ± %{{customdata[{m + 2}]:.1f}} %"
            "<extra></extra>"
        )
        custom = np.column_stack([grid, values, acc, std])
        return cls(grid, values, acc, std, names, title, acc_label, r_text, custom, hover)


def _ternaries(study: GridStudy, panels: _Panels) -> go.Figure:
    """``m = 3``: ``W^2(P_a, Q)`` and the accuracy on two ternaries, coloured by value."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    grid, names = panels.grid, panels.names
    fig = make_subplots(
        rows=1,
        cols=2,
        specs=[[{"type": "ternary"}, {"type": "ternary"}]],
        subplot_titles=(OBJECTIVE, f"{panels.accuracy_title}, r = {panels.r_text}"),
        horizontal_spacing=0.14,
    )
    sides = [
        (panels.values, OBJECTIVE, "Viridis", 0.43),
        (panels.accuracies, "accuracy (%)", "Viridis_r", 1.0),
    ]
    for col, (vals, label, scale, bar_x) in enumerate(sides, start=1):
        fig.add_trace(
            go.Scatterternary(
                a=grid[:, 0],
                b=grid[:, 1],
                c=grid[:, 2],
                mode="markers",
                showlegend=False,
                name=label,
                customdata=panels.customdata,
                hovertemplate=panels.hover,
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
    fig.update_layout(title={"text": panels.title}, height=600, margin={"t": 150, "l": 50, "r": 50})
    return fig


def _lines(study: GridStudy, panels: _Panels) -> go.Figure:
    """``m = 2``: ``W^2(P_a, Q)`` and the accuracy (± std) against the weight of ``P_2``."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = panels.names
    x = panels.grid[:, 1]
    order = np.argsort(x)
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(OBJECTIVE, f"{panels.accuracy_title}, r = {panels.r_text}"),
    )
    fig.add_trace(
        go.Scatter(
            x=x[order],
            y=panels.values[order],
            mode="lines+markers",
            name=OBJECTIVE,
            customdata=panels.customdata[order],
            hovertemplate=panels.hover,
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=x[order],
            y=panels.accuracies[order],
            mode="lines+markers",
            name="accuracy",
            error_y={"type": "data", "array": panels.stds[order], "visible": True},
            customdata=panels.customdata[order],
            hovertemplate=panels.hover,
        ),
        row=1,
        col=2,
    )
    x_title = f"weight of {names[1]} (0 = {names[0]}, 1 = {names[1]})"
    fig.update_xaxes(title_text=x_title, range=[-0.03, 1.03])
    fig.update_yaxes(title_text=OBJECTIVE, row=1, col=1)
    fig.update_yaxes(title_text="accuracy (%)", row=1, col=2)
    fig.update_layout(title={"text": panels.title}, height=460, showlegend=False)
    return fig


def _accuracy_scatter(study: GridStudy, panels: _Panels) -> go.Figure:
    """Any ``m``: mean accuracy (%) against ``W^2(P_a, Q)``, ± std over the seeds."""
    import plotly.graph_objects as go

    fig = go.Figure(
        go.Scatter(
            x=panels.values,
            y=panels.accuracies,
            name="grid point",
            mode="markers",
            marker={"size": 8, "color": "#5b5b8f"},
            error_y={
                "type": "data",
                "array": panels.stds,
                "visible": True,
                "thickness": 1,
                "color": "#9c9cc0",
            },
            customdata=panels.customdata,
            hovertemplate=panels.hover,
        )
    )
    fig.update_layout(
        title={"text": panels.title, "font": {"size": 14}},
        xaxis_title=OBJECTIVE,
        yaxis_title=f"mean accuracy over {len(study.seeds)} seed(s) (%), ± std",
        height=460,
        margin={"t": 90 if study.note else 60},
    )
    return fig


class _Marker(TypedDict, total=False):
    """A marked point's Plotly ``marker``."""

    symbol: str
    size: int
    color: str
    line: dict[str, int]


#: Plotly marker of each marked point (the grid point nearest to ``a_hat``, the best one,
#: ``a_hat`` itself on a ternary).
_MARKERS: dict[str, _Marker] = {
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
    """A marked point's hover: its label and weights."""
    return f"{plotly_name(label)}<br>a = {weights_text(weights)}<extra></extra>"


def _mark_scatter(fig: go.Figure, study: GridStudy, a_hat: Sequence[float]) -> None:
    """The marked grid points on the accuracy-vs-``W^2`` scatter, with a legend below."""
    import plotly.graph_objects as go

    for label, i in _marked(study, a_hat):
        point = study.points[i]
        fig.add_trace(
            go.Scatter(
                x=[point.objective],
                y=[PERCENT * point.mean_accuracy],
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


def _mark_ternary(fig: go.Figure, study: GridStudy, a_hat: Sequence[float]) -> None:
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


def _mark_lines(fig: go.Figure, study: GridStudy, a_hat: Sequence[float]) -> None:
    """The marked grid points on both line panels (``m = 2``), with a legend."""
    import plotly.graph_objects as go

    for label, i in _marked(study, a_hat):
        point = study.points[i]
        for col, y in ((1, point.objective), (2, PERCENT * point.mean_accuracy)):
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
