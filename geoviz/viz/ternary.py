"""Figures of the objective ``W^2(P_a, Q)`` over the weight simplex.

``W^2(P_a, Q) = sum_i a_i W^2_{2,Q}(P_i, Q) - 1/2 sum_{i != j} a_i a_j W^2_{2,Q}(P_i, P_j)``
(paper Sec. 3.3, eq. (ds_eq)); its minimiser ``a_hat`` defines the projection
``P_hat_a`` of ``Q`` onto the generalized geodesic. For ``m = 3`` it is drawn
as a ternary heatmap (paper Fig. "Relationship between W^2(P_a, Q) and the
accuracy": the training datasets sit on the vertices), for ``m = 2`` as a line.

Every marker carries its weight vector in ``customdata`` so that a click,
returned by ``st.plotly_chart(on_select="rerun")``, maps back to weights with
:func:`geoviz.viz.weights.weights_from_selection`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from geoviz.errors import WeightsError
from geoviz.viz.weights import WEIGHT_DECIMALS, display_weights, format_weights

__all__ = ["OBJECTIVE_LABEL", "geodesic_line", "ternary_heatmap", "weights_bar"]

#: Axis / colour-bar title for the objective, plain text so every renderer shows it.
OBJECTIVE_LABEL = "W²(P_a, Q)"
_COLORSCALE = "Viridis"
_AHAT_COLOR = "#e4572e"
_PICK_COLOR = "#ffffff"
#: The picked ``a`` is a hollow ring drawn around the ``a_hat`` star: when the two
#: coincide (the default, and after "Reset to a_hat") both stay visible.
_PICK_SYMBOL = "diamond-open"
_AHAT_SIZE = 16
_BAR_MARKER_SIZE = 14
_PICK_SIZE = 28


def _grid_resolution(grid: np.ndarray) -> int:
    """Recover ``resolution`` from a ``simplex_grid`` (smallest positive entry ``1/resolution``)."""
    pos = grid[grid > 1e-9]
    if pos.size == 0:
        return 1
    return max(1, round(1.0 / float(pos.min())))


def _check_names(names: Sequence[str], m: int) -> list[str]:
    names = [str(n) for n in names]
    if len(names) != m:
        raise WeightsError(f"{m} weights per point but {len(names)} dataset names")
    return names


def ternary_heatmap(
    grid: np.ndarray,
    values: np.ndarray,
    names: Sequence[str],
    *,
    a_hat: np.ndarray | None = None,
    picked: np.ndarray | None = None,
    title: str | None = None,
    value_label: str = OBJECTIVE_LABEL,
    marker_size: float | None = None,
    height: int = 560,
) -> go.Figure:
    """Ternary heatmap of a function over the 2-simplex, as a marker grid.

    Parameters
    ----------
    grid
        ``(K, 3)`` weights, e.g. ``simplex_grid(3, resolution)``; vertex ``i``
        (``a_i = 1``) is the reference ``names[i]``.
    values
        ``(K,)`` the function at each grid point, e.g. ``result.objective(grid)``.
    names
        The three reference dataset names, shown at the vertices.
    a_hat
        ``(3,)`` the minimiser; marked with a star and listed in the legend.
    picked
        ``(3,)`` the weights currently chosen by the user; marked with a hollow
        diamond, larger than the ``a_hat`` star so the star stays visible inside it.
    marker_size
        Marker diameter in px; by default chosen from the grid spacing so the
        markers tile the triangle.

    Returns
    -------
    plotly.graph_objects.Figure
        Trace 0 is the heatmap (``customdata[:, :3]`` = weights,
        ``customdata[:, 3]`` = value), then ``a_hat`` and ``picked`` traces.
    """
    grid = np.asarray(grid, dtype=float)
    values = np.asarray(values, dtype=float).ravel()
    if grid.ndim != 2 or grid.shape[1] != 3:
        raise WeightsError(f"a ternary plot needs (K, 3) weights, got shape {grid.shape}")
    if values.shape[0] != grid.shape[0]:
        raise WeightsError(f"{grid.shape[0]} grid points but {values.shape[0]} values")
    names = _check_names(names, 3)
    res = _grid_resolution(grid)
    size = marker_size if marker_size is not None else float(np.clip(430.0 / res, 4.0, 40.0))

    custom = np.column_stack([grid, values])
    fig = go.Figure()
    fig.add_trace(
        go.Scatterternary(
            a=grid[:, 0],
            b=grid[:, 1],
            c=grid[:, 2],
            mode="markers",
            name=value_label,
            showlegend=False,
            customdata=custom,
            # a click selects a marker: keep the heatmap fully visible afterwards
            selected={"marker": {"opacity": 1.0}},
            unselected={"marker": {"opacity": 1.0}},
            marker={
                "color": values,
                "colorscale": _COLORSCALE,
                "size": size,
                "symbol": "hexagon",
                "line": {"width": 0},
                "colorbar": {
                    "title": {"text": value_label, "side": "right"},
                    "thickness": 16,
                    "len": 0.8,
                },
            },
            hovertemplate=(
                f"{names[0]}: %{{a:.2f}}<br>{names[1]}: %{{b:.2f}}<br>{names[2]}: %{{c:.2f}}"
                f"<br>{value_label} = %{{customdata[3]:.4g}}<extra>click to pick</extra>"
            ),
        )
    )
    _add_marker(
        fig,
        a_hat,
        values_at=None,
        name="â (minimiser)",
        symbol="star",
        color=_AHAT_COLOR,
        size=_AHAT_SIZE,
    )
    _add_marker(
        fig,
        picked,
        values_at=None,
        name="picked a",
        symbol=_PICK_SYMBOL,
        color=_PICK_COLOR,
        size=_PICK_SIZE,
    )

    axis = {
        "showgrid": True,
        "gridcolor": "rgba(255,255,255,0.35)",
        "linecolor": "#444",
        "ticks": "outside",
        "tickformat": ".1f",
        "min": 0,
    }
    fig.update_layout(
        ternary={
            "sum": 1,
            "aaxis": {**axis, "title": {"text": f"<b>{names[0]}</b>"}},
            "baxis": {**axis, "title": {"text": f"<b>{names[1]}</b>"}},
            "caxis": {**axis, "title": {"text": f"<b>{names[2]}</b>"}},
            "bgcolor": "#f4f4f4",
        },
        title={"text": title or f"{value_label} over the weight simplex"},
        height=height,
        margin={"l": 60, "r": 60, "t": 90, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": -0.12, "x": 0.0},
        clickmode="event+select",
    )
    return fig


def _add_marker(
    fig: go.Figure,
    weights: np.ndarray | None,
    *,
    values_at: float | None,
    name: str,
    symbol: str,
    color: str,
    size: float,
) -> None:
    if weights is None:
        return
    w = np.asarray(weights, dtype=float).ravel()
    if w.shape[0] != 3:
        raise WeightsError(f"marker weights must have 3 entries, got {w.shape[0]}")
    fig.add_trace(
        go.Scatterternary(
            a=[w[0]],
            b=[w[1]],
            c=[w[2]],
            mode="markers",
            name=f"{name} = {format_weights(w)}",
            customdata=[w.tolist()],
            marker=_marker_style(symbol, color, size),
            hovertemplate=f"{name}<br>(%{{a:.3f}}, %{{b:.3f}}, %{{c:.3f}})<extra></extra>",
        )
    )


def _marker_style(symbol: str, color: str, size: float) -> dict:
    """Filled markers get a dark outline; open ones (the picked ring) a thick stroke."""
    if symbol.endswith("-open"):
        return {"symbol": symbol, "size": size, "color": color, "line": {"width": 3}}
    return {"symbol": symbol, "size": size, "color": color, "line": {"width": 2, "color": "#111"}}


def geodesic_line(
    t: np.ndarray,
    values: np.ndarray,
    names: Sequence[str],
    *,
    a_hat: np.ndarray | None = None,
    picked: np.ndarray | None = None,
    title: str | None = None,
    value_label: str = OBJECTIVE_LABEL,
    height: int = 420,
) -> go.Figure:
    """``W^2(P_a, Q)`` along the geodesic between two references (``m = 2``).

    The x axis is ``a_2`` (weight of ``names[1]``), so ``a = (1 - x, x)``;
    ``x = 0`` is ``P_1`` and ``x = 1`` is ``P_2``.

    Parameters
    ----------
    t
        ``(K,)`` values of ``a_2`` in ``[0, 1]``.
    values
        ``(K,)`` objective at ``a = (1 - t, t)``.
    names
        The two reference names.
    a_hat, picked
        ``(2,)`` weights to mark.
    """
    t = np.asarray(t, dtype=float).ravel()
    values = np.asarray(values, dtype=float).ravel()
    if t.shape != values.shape:
        raise WeightsError(f"{t.shape[0]} positions but {values.shape[0]} values")
    names = _check_names(names, 2)
    custom = np.column_stack([1.0 - t, t, values])
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=t,
            y=values,
            mode="lines+markers",
            name=value_label,
            customdata=custom,
            selected={"marker": {"opacity": 1.0}},
            unselected={"marker": {"opacity": 1.0}},
            marker={"size": 7, "color": values, "colorscale": _COLORSCALE, "showscale": False},
            line={"color": "#5b5b8f", "width": 2},
            hovertemplate=(
                f"{names[0]}: %{{customdata[0]:.2f}}<br>{names[1]}: %{{customdata[1]:.2f}}"
                f"<br>{value_label} = %{{y:.4g}}<extra>click to pick</extra>"
            ),
        )
    )
    for w, label, color, symbol, size in (
        (a_hat, "â (minimiser)", _AHAT_COLOR, "star", _AHAT_SIZE),
        (picked, "picked a", "#5b5b8f", _PICK_SYMBOL, _PICK_SIZE),
    ):
        if w is None:
            continue
        w = np.asarray(w, dtype=float).ravel()
        x = float(w[1])
        y = float(np.interp(x, t, values)) if t.size > 1 else float(values[0])
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[y],
                mode="markers",
                name=f"{label} = {format_weights(w)}",
                customdata=[[w[0], w[1], y]],
                marker=_marker_style(symbol, color, size),
            )
        )
    fig.update_layout(
        title={"text": title or f"{value_label} along the geodesic {names[0]} → {names[1]}"},
        xaxis={
            "title": {"text": f"a₂ = weight of {names[1]}   (a₁ = 1 − a₂ for {names[0]})"},
            "range": [-0.03, 1.03],
        },
        yaxis={"title": {"text": value_label}},
        height=height,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0.0},
        margin={"t": 100},
        clickmode="event+select",
    )
    fig.add_annotation(
        x=0,
        y=0,
        yref="paper",
        yshift=-12,
        text=f"<b>{names[0]}</b>",
        showarrow=False,
        xanchor="left",
    )
    fig.add_annotation(
        x=1,
        y=0,
        yref="paper",
        yshift=-12,
        text=f"<b>{names[1]}</b>",
        showarrow=False,
        xanchor="right",
    )
    return fig


def weights_bar(
    weights: np.ndarray,
    names: Sequence[str],
    *,
    a_hat: np.ndarray | None = None,
    title: str = "Interpolation weights a",
    height: int = 320,
) -> go.Figure:
    """Bar chart of the chosen weights, with ``a_hat`` overlaid as diamonds.

    The value labels are annotations placed above both the bar and the
    ``a_hat`` marker of each reference (never underneath a marker), rounded
    with :func:`geoviz.viz.weights.display_weights` like the sliders.
    """
    w = np.asarray(weights, dtype=float).ravel()
    names = _check_names(names, w.shape[0])
    shown = display_weights(w)
    fig = go.Figure(
        go.Bar(
            x=names,
            y=w,
            name="picked a",
            marker={"color": "#5b8db8"},
            hovertemplate="%{x}: %{y:.3f}<extra>picked a</extra>",
        )
    )
    top = w.copy()
    if a_hat is not None:
        ah = np.asarray(a_hat, dtype=float).ravel()
        if ah.shape != w.shape:
            raise WeightsError(
                f"a_hat has {ah.shape[0]} entries but there are {w.shape[0]} weights"
            )
        top = np.maximum(top, ah)
        fig.add_trace(
            go.Scatter(
                x=names,
                y=ah,
                mode="markers",
                name="â (minimiser)",
                customdata=display_weights(ah),
                hovertemplate=f"%{{x}}: â = %{{customdata:.{WEIGHT_DECIMALS}f}}<extra></extra>",
                marker={
                    "symbol": "diamond",
                    "size": _BAR_MARKER_SIZE,
                    "color": _AHAT_COLOR,
                    "line": {"width": 1, "color": "#111"},
                },
            )
        )
    for name, y, value in zip(names, top, shown, strict=True):
        fig.add_annotation(
            x=name,
            y=float(y),
            text=f"{value:.{WEIGHT_DECIMALS}f}",
            showarrow=False,
            yanchor="bottom",
            # clear of the diamond (half its size) sitting on top of the bar
            yshift=_BAR_MARKER_SIZE // 2 + 3,
        )
    fig.update_layout(
        title={"text": title},
        xaxis={"title": {"text": "reference dataset P_i"}},
        yaxis={"title": {"text": "weight a_i"}, "range": [0, 1.25]},
        height=height,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0.0},
        margin={"t": 80},
        showlegend=True,
    )
    return fig
