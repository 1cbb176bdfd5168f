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
from geoviz.geodesic.weights import WEIGHT_DECIMALS, display_weights, format_weights
from geoviz.glossary import OBJECTIVE

__all__ = [
    "OBJECTIVE_LABEL",
    "contour_levels",
    "geodesic_line",
    "simplex_contours",
    "ternary_heatmap",
    "weights_bar",
]

#: Axis / colour-bar title for the objective, plain text so every renderer shows it
#: (:data:`geoviz.glossary.OBJECTIVE`, also printed by the CLI).
OBJECTIVE_LABEL = OBJECTIVE
_COLORSCALE = "Viridis"
_AHAT_COLOR = "#e4572e"
_PICK_COLOR = "#ffffff"
#: The picked ``a`` is a hollow ring drawn around the ``a_hat`` star: when the two
#: coincide (the default, and after "Reset to a_hat") both stay visible.
_PICK_SYMBOL = "diamond-open"
_AHAT_SIZE = 16
_BAR_MARKER_SIZE = 14
_PICK_SIZE = 28
#: Iso-lines of the objective on the heatmap: thin, semi-transparent, dark.
_CONTOUR_COLOR = "rgba(20,20,20,0.55)"
_CONTOUR_TEXT = "#111111"


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


def contour_levels(values: np.ndarray, n: int) -> np.ndarray:
    """``n`` evenly spaced levels strictly inside the range of the finite ``values``.

    Empty when ``n <= 0`` or the values are (numerically) constant.
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if int(n) <= 0 or v.size == 0:
        return np.zeros(0)
    lo, hi = float(v.min()), float(v.max())
    if hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi)):
        return np.zeros(0)
    return np.linspace(lo, hi, int(n) + 2)[1:-1]


def _simplex_triangles(grid: np.ndarray) -> np.ndarray:
    """``(T, 3)`` row indices of the small triangles of a regular simplex grid.

    With ``r`` the resolution and integer coordinates ``(i, j)`` (``a = i/r``,
    ``b = j/r``): upward triangles ``(i, j), (i+1, j), (i, j+1)`` and downward
    ones ``(i+1, j), (i, j+1), (i+1, j+1)``. Triangles with a corner missing
    from ``grid`` (or off the regular lattice) are left out.
    """
    res = _grid_resolution(grid)
    scaled = grid * res
    ij = np.rint(scaled).astype(np.int64)
    on = np.all(np.abs(scaled - ij) < 1e-6, axis=1) & (np.abs(grid.sum(axis=1) - 1.0) < 1e-6)
    lookup: dict[tuple[int, int], int] = {}
    for k in np.flatnonzero(on):
        lookup.setdefault((int(ij[k, 0]), int(ij[k, 1])), int(k))
    tris = []
    for i in range(res):
        for j in range(res - i):
            a, b, c = lookup.get((i, j)), lookup.get((i + 1, j)), lookup.get((i, j + 1))
            if a is not None and b is not None and c is not None:
                tris.append((a, b, c))
            d = lookup.get((i + 1, j + 1)) if i + j <= res - 2 else None
            if b is not None and c is not None and d is not None:
                tris.append((b, c, d))
    return np.asarray(tris, dtype=np.int64).reshape(-1, 3)


def _level_segments(
    grid: np.ndarray, values: np.ndarray, tris: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """Marching triangles for one level.

    A corner is "above" when its value is ``> level``; in a triangle whose
    corners are not all on one side exactly two edges change side, and the
    iso-line crosses each at the linear interpolation
    ``p = g_lo + t (g_hi - g_lo)``, ``t = (level - v_lo) / (v_hi - v_lo)``
    (edges oriented from the lower to the higher grid index, so the shared
    edge of two triangles gives the same point bit for bit).

    Returns ``(S, 2, 3)`` segment end points and ``(S, 2)`` edge ids
    (``lo * K + hi``) identifying each end point.
    """
    v = values[tris]
    above = v > level
    n_above = above.sum(axis=1)
    active = np.all(np.isfinite(v), axis=1) & (n_above > 0) & (n_above < 3)
    tri, abv = tris[active], above[active]
    if tri.shape[0] == 0:
        return np.zeros((0, 2, 3)), np.zeros((0, 2), dtype=np.int64)
    edges = ((0, 1), (1, 2), (2, 0))
    cross = np.stack([abv[:, p] != abv[:, q] for p, q in edges], axis=1)  # (S, 3)
    lo = np.stack([np.minimum(tri[:, p], tri[:, q]) for p, q in edges], axis=1)
    hi = np.stack([np.maximum(tri[:, p], tri[:, q]) for p, q in edges], axis=1)
    vlo, vhi = values[lo], values[hi]
    den = np.where(cross, vhi - vlo, 1.0)
    t = np.where(cross, (level - vlo) / den, 0.0)
    pts = grid[lo] + t[..., None] * (grid[hi] - grid[lo])  # (S, 3 edges, 3)
    ids = lo * grid.shape[0] + hi
    # the two crossed edges of every active triangle, in edge order
    first = np.argmax(cross, axis=1)
    second = 2 - np.argmax(cross[:, ::-1], axis=1)
    rows = np.arange(tri.shape[0])
    seg = np.stack([pts[rows, first], pts[rows, second]], axis=1)
    seg_ids = np.stack([ids[rows, first], ids[rows, second]], axis=1)
    return seg, seg_ids


def _chain_segments(seg: np.ndarray, seg_ids: np.ndarray) -> list[np.ndarray]:
    """Join segments sharing an end point (same edge id) into polylines."""
    point: dict[int, np.ndarray] = {}
    adj: dict[int, list[int]] = {}
    for s, (k0, k1) in enumerate(seg_ids.tolist()):
        point.setdefault(k0, seg[s, 0])
        point.setdefault(k1, seg[s, 1])
        adj.setdefault(k0, []).append(s)
        adj.setdefault(k1, []).append(s)
    used = np.zeros(seg.shape[0], dtype=bool)
    lines = []
    # open lines start at an end of degree 1; what is left are closed loops
    starts = [k for k, ss in adj.items() if len(ss) == 1] + list(adj)
    for start in starts:
        key, path = start, [start]
        while True:
            nxt = next((s for s in adj[key] if not used[s]), None)
            if nxt is None:
                break
            used[nxt] = True
            k0, k1 = seg_ids[nxt].tolist()
            key = k1 if k0 == key else k0
            path.append(key)
        if len(path) > 1:
            lines.append(np.array([point[k] for k in path]))
    return lines


def simplex_contours(
    grid: np.ndarray, values: np.ndarray, levels: Sequence[float] | np.ndarray
) -> list[list[np.ndarray]]:
    """Iso-lines of a function sampled on a regular simplex grid (marching triangles).

    Parameters
    ----------
    grid
        ``(K, 3)`` barycentric points of a regular grid of the 2-simplex (e.g.
        ``simplex_grid(3, resolution)``, any order).
    values
        ``(K,)`` the function at those points (non-finite values leave their
        triangles out).
    levels
        The iso-values.

    Returns
    -------
    list of list of np.ndarray
        For each level, its polylines as ``(n, 3)`` barycentric points (each on
        an edge of the grid, linearly interpolated, so on the simplex). A level
        outside the range of ``values`` has none.
    """
    grid = np.asarray(grid, dtype=float)
    values = np.asarray(values, dtype=float).ravel()
    if grid.ndim != 2 or grid.shape[1] != 3 or values.shape[0] != grid.shape[0]:
        raise WeightsError(
            f"contours need (K, 3) grid points and K values, got {grid.shape} and {values.shape}"
        )
    tris = _simplex_triangles(grid)
    out = []
    for level in np.asarray(levels, dtype=float).ravel():
        seg, ids = _level_segments(grid, values, tris, float(level))
        out.append(_chain_segments(seg, ids))
    return out


def _contour_traces(
    grid: np.ndarray, values: np.ndarray, n: int, value_label: str
) -> list[go.Scatterternary]:
    """Thin iso-lines (one trace per level, polylines split by ``None``) and their labels.

    None of them reacts to the mouse (``hoverinfo="skip"``): a click near a
    line still reaches the heatmap marker under it. The level values are
    written on the lines instead (one label per level, mid-way along its
    longest polyline).
    """
    levels = contour_levels(values, n)
    traces = []
    labels: list[tuple[float, np.ndarray]] = []
    for level, lines in zip(levels, simplex_contours(grid, values, levels), strict=True):
        if not lines:
            continue
        abc: list[list[float | None]] = [[], [], []]
        for line in lines:
            for axis in range(3):
                abc[axis].extend([*line[:, axis].tolist(), None])
        traces.append(
            go.Scatterternary(
                a=abc[0],
                b=abc[1],
                c=abc[2],
                mode="lines",
                name=f"{value_label} = {level:.4g}",
                line={"color": _CONTOUR_COLOR, "width": 1.3},
                hoverinfo="skip",
                showlegend=False,
                meta={"contour_level": float(level)},
            )
        )
        longest = max(
            lines, key=lambda ln: float(np.linalg.norm(np.diff(ln, axis=0), axis=1).sum())
        )
        labels.append((float(level), longest[len(longest) // 2]))
    if labels:
        at = np.array([p for _, p in labels])
        font = {"size": 10, "color": _CONTOUR_TEXT, "shadow": "auto"}
        traces.append(
            go.Scatterternary(
                a=at[:, 0],
                b=at[:, 1],
                c=at[:, 2],
                mode="text",
                text=[f"{lv:.3g}" for lv, _ in labels],
                textfont=font,
                # a click elsewhere must not dim the labels
                selected={"textfont": {"color": _CONTOUR_TEXT}},
                unselected={"textfont": {"color": _CONTOUR_TEXT}},
                name="contour levels",
                hoverinfo="skip",
                showlegend=False,
            )
        )
    return traces


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
    contours: int = 8,
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
    contours
        Number of iso-lines of ``values`` (evenly spaced levels strictly
        between its min and max; ``0`` for none), computed by marching
        triangles on the grid (:func:`simplex_contours`). They ignore the
        mouse, so clicks still pick heatmap markers; each level is written on
        its line.

    Returns
    -------
    plotly.graph_objects.Figure
        Trace 0 is the heatmap (``customdata[:, :3]`` = weights,
        ``customdata[:, 3]`` = value), then one ``mode="lines"`` trace per
        contour level and a ``mode="text"`` trace of their labels (none for a
        constant function), then the ``a_hat`` and ``picked`` traces (on top).
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
    for trace in _contour_traces(grid, values, contours, value_label):
        fig.add_trace(trace)
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
    # the two references at the ends of the segment
    for x, name, anchor in ((0, names[0], "left"), (1, names[1], "right")):
        fig.add_annotation(
            x=x, y=0, yref="paper", yshift=-12, text=f"<b>{name}</b>", showarrow=False,
            xanchor=anchor,
        )  # fmt: skip
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
    with :func:`geoviz.geodesic.weights.display_weights` like the sliders.
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
