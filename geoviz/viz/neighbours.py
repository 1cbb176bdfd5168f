"""What a mapped point is made of: the reference points with the largest plan weights.

Teaching figures for the sharp-or-blurry trade-off of the entropic OTDD maps
(paper Sec. 3.1, eq. (bary_map)): the barycentric map sends a target sample
``x_n`` to ``T(x_n) = sum_j w_nj x'_j`` with ``w_nj = pi_nj / sum_j pi_nj``.
With a small relative epsilon a row of the plan has a few large weights (a
sharp ``T(x_n)`` that looks like a reference sample); with a large one it
spreads over many reference points (a blurred average). Each figure shows,
per target point, the point itself, its ``k`` largest-weight reference points
with their weights, and ``T(x_n)``, with the row's effective number of
neighbours (plan-row perplexity).

Inputs are plain arrays (from :meth:`geoviz.geodesic.GeodesicResult.neighbours`);
entries with weight 0 are padding (rows with fewer than ``k`` plan entries)
and are left blank.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from geoviz.errors import DatasetError
from geoviz.viz.images import image_grid
from geoviz.viz.literal import plotly_markup, plotly_name

__all__ = [
    "neighbour_weight_caption",
    "plan_neighbours_grid",
    "plan_neighbours_scatter",
    "reference_cloud",
]


def neighbour_weight_caption(weight: float) -> str:
    """``"w .62"`` (``"w 1.00"``, ``"w <.01"``) for a row-normalised plan weight."""
    w = float(weight)
    if w >= 0.995:
        return "w 1.00"
    if w < 0.005:
        return "w <.01"
    return f"w {w:.2f}".replace("0.", ".", 1)


def _check_rows(
    n: int, weights: np.ndarray, perplexity: np.ndarray, what: str
) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(weights, dtype=float)
    p = np.asarray(perplexity, dtype=float).ravel()
    if w.ndim != 2 or w.shape[0] != n or w.shape[1] < 1:
        raise DatasetError(f"{what}: neighbour weights must be ({n}, k), got {w.shape}")
    if p.shape != (n,):
        raise DatasetError(f"{what}: perplexity must have {n} entries, got {p.shape}")
    if n == 0:
        raise DatasetError(f"{what}: need at least one target point")
    return w, p


def plan_neighbours_grid(
    target_images: np.ndarray,
    target_captions: Sequence[str],
    neighbour_images: np.ndarray,
    neighbour_weights: np.ndarray,
    mapped_images: np.ndarray,
    perplexity: np.ndarray,
    *,
    neighbour_captions: Sequence[Sequence[str]] | None = None,
    mapped_captions: Sequence[str] | None = None,
    map_name: str = "T(x)",
    title: str | None = None,
    tile_px: int = 84,
) -> go.Figure:
    """One row per target point: ``x``, its ``k`` heaviest reference points, ``T(x)``.

    Parameters
    ----------
    target_images
        ``(n, H, W)`` grey or ``(n, H, W, 3)`` RGB in ``[0, 1]``: the target points ``x``.
    target_captions
        ``n`` captions of the target points (index, class).
    neighbour_images
        ``(n, k, H, W[, 3])`` the reference points with the largest plan
        weights of each row, by decreasing weight.
    neighbour_weights
        ``(n, k)`` their row-normalised plan weights (0: padding, drawn blank).
    mapped_images
        ``(n, H, W[, 3])`` the mapped points ``T(x)``.
    perplexity
        ``(n,)`` effective number of reference points of each row.
    neighbour_captions
        Optional ``(n, k)`` first caption lines of the neighbours (their
        class); the weight ``"w .62"`` is always printed below.
    mapped_captions
        Optional ``n`` captions of ``T(x)`` (e.g. the top soft label); the
        effective number of neighbours is always printed first.
    map_name
        Column title of the mapped points (``"T₁(x)"``).

    Captions, ``map_name`` and ``title`` are Plotly text
    (:func:`geoviz.viz.images.image_grid`): names in them escaped by the caller, as
    :func:`~geoviz.viz.images.sample_captions` does.

    Returns
    -------
    go.Figure
        A single tiled image, captions under each tile, ``k + 2`` columns.
    """
    tgt = np.asarray(target_images, dtype=np.float32)
    nb = np.asarray(neighbour_images, dtype=np.float32)
    mp = np.asarray(mapped_images, dtype=np.float32)
    n = int(tgt.shape[0]) if tgt.ndim >= 3 else 0
    w, p = _check_rows(n, neighbour_weights, perplexity, "plan_neighbours_grid")
    k = w.shape[1]
    tile = tgt.shape[1:]
    if nb.shape != (n, k, *tile) or mp.shape != (n, *tile):
        raise DatasetError(
            f"plan_neighbours_grid: expected neighbour images {(n, k, *tile)} and mapped images "
            f"{(n, *tile)}, got {nb.shape} and {mp.shape}"
        )
    if len(target_captions) != n:
        raise DatasetError(
            f"plan_neighbours_grid: {n} target points but {len(target_captions)} captions"
        )
    if neighbour_captions is not None and (
        len(neighbour_captions) != n or any(len(row) != k for row in neighbour_captions)
    ):
        raise DatasetError(f"plan_neighbours_grid: neighbour captions must be {n} rows of {k}")
    if mapped_captions is not None and len(mapped_captions) != n:
        raise DatasetError(
            f"plan_neighbours_grid: {n} mapped points but {len(mapped_captions)} captions"
        )
    blank = np.ones(tile, dtype=np.float32)
    images: list[np.ndarray] = []
    captions: list[str] = []
    for r in range(n):
        images.append(tgt[r])
        captions.append(str(target_captions[r]))
        for j in range(k):
            if w[r, j] > 0:
                images.append(nb[r, j])
                first = "" if neighbour_captions is None else f"{neighbour_captions[r][j]}<br>"
                captions.append(first + neighbour_weight_caption(w[r, j]))
            else:
                images.append(blank)
                captions.append("")
        images.append(mp[r])
        extra = "" if mapped_captions is None else f"<br>{mapped_captions[r]}"
        captions.append(f"{p[r]:.1f} neighb.{extra}")
    columns = ["x ∈ Q", *(f"#{j + 1}" for j in range(k)), map_name]  # image_grid: markup
    return image_grid(
        np.stack(images),
        captions,
        ncols=k + 2,
        title=title,
        column_titles=columns,
        tile_px=tile_px,
        captions_below=True,
    )


#: colour of the reference samples drawn behind mapped points (light, see-through grey)
REFERENCE_CLOUD_COLOUR = "rgba(150,150,150,0.35)"


def reference_cloud(points: np.ndarray, name: str) -> go.Scattergl:
    """The reference samples ``(N_P, 2)`` as a faint grey background trace (no hover);
    ``name`` as typed (the legend shows it escaped)."""
    return go.Scattergl(
        x=points[:, 0],
        y=points[:, 1],
        mode="markers",
        name=plotly_name(name),
        marker={"size": 4, "color": REFERENCE_CLOUD_COLOUR},
        hoverinfo="skip",
    )


def plan_neighbours_scatter(
    target_points: np.ndarray,
    neighbour_points: np.ndarray,
    neighbour_weights: np.ndarray,
    mapped_points: np.ndarray,
    perplexity: np.ndarray,
    *,
    reference_points: np.ndarray | None = None,
    target_labels: Sequence[str] | None = None,
    reference_name: str = "P",
    map_name: str = "T(x)",
    title: str | None = None,
    axis_titles: tuple[str, str] = ("x₁", "x₂"),
) -> go.Figure:
    """2-D view of the same story: ``x``, segments to its heaviest reference points, ``T(x)``.

    Parameters
    ----------
    target_points
        ``(n, 2)`` target points (first two coordinates for 3-D data).
    neighbour_points
        ``(n, k, 2)`` their reference points with the largest plan weights.
    neighbour_weights
        ``(n, k)`` row-normalised plan weights (0: padding, not drawn); marker
        area and segment opacity grow with the weight.
    mapped_points
        ``(n, 2)`` the mapped points ``T(x)``.
    perplexity
        ``(n,)`` effective number of neighbours of each row.
    reference_points
        Optional ``(N_P, 2)`` whole reference, drawn faint grey.
    target_labels
        Optional ``n`` names of the target points for the hover text, as typed.
    reference_name
        The reference's name, as typed (drawn escaped).
    map_name, title
        Plotly text (names in them escaped by the caller).

    Returns
    -------
    go.Figure
        Traces: reference (optional), one segment trace per target point,
        ``"plan neighbours"``, ``"x ∈ Q"``, ``map_name``.
    """
    x = np.asarray(target_points, dtype=float)
    n = int(x.shape[0]) if x.ndim == 2 else 0
    w, p = _check_rows(n, neighbour_weights, perplexity, "plan_neighbours_scatter")
    k = w.shape[1]
    nb = np.asarray(neighbour_points, dtype=float)
    t = np.asarray(mapped_points, dtype=float)
    if x.shape != (n, 2) or nb.shape != (n, k, 2) or t.shape != (n, 2):
        raise DatasetError(
            "plan_neighbours_scatter: expected points (n, 2), neighbours (n, k, 2) and mapped "
            f"(n, 2), got {x.shape}, {nb.shape}, {t.shape}"
        )
    names = (
        [f"#{r}" for r in range(n)]
        if target_labels is None
        else [plotly_name(label) for label in target_labels]
    )
    map_name = plotly_markup(map_name)  # it goes into a hover template
    fig = go.Figure()
    if reference_points is not None:
        ref = np.asarray(reference_points, dtype=float)
        fig.add_trace(reference_cloud(ref, reference_name))
    for r in range(n):
        fig.add_trace(_segments(x[r], nb[r], w[r]))
    fig.add_trace(_neighbour_markers(nb, w, names))
    fig.add_trace(_target_markers(x, names))
    fig.add_trace(_mapped_markers(t, p, names, map_name))
    fig.update_layout(
        title=plotly_markup(title) if title else None,
        xaxis_title=axis_titles[0],
        yaxis_title=axis_titles[1],
        yaxis={"scaleanchor": "x", "scaleratio": 1},
        height=480,
        margin={"l": 40, "r": 10, "t": 50 if title else 20, "b": 40},
        legend={"orientation": "h", "y": -0.15},
    )
    return fig


def _segments(x: np.ndarray, neighbours: np.ndarray, weights: np.ndarray) -> go.Scatter:
    """Lines from one target point ``x`` ``(2,)`` to its neighbours ``(k, 2)`` of weight
    ``> 0`` (``weights`` ``(k,)``), as one trace (``None`` breaks the line between them)."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for j in range(weights.shape[0]):
        if weights[j] > 0:
            xs += [x[0], neighbours[j, 0], None]
            ys += [x[1], neighbours[j, 1], None]
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        line={"color": "rgba(31,119,180,0.45)", "width": 1},
        showlegend=False,
        hoverinfo="skip",
    )


def _neighbour_markers(neighbours: np.ndarray, weights: np.ndarray, names: list[str]) -> go.Scatter:
    """The neighbours ``(n, k, 2)`` of weight ``> 0``, marker area growing with the weight."""
    rows, cols = np.nonzero(weights > 0)
    return go.Scatter(
        x=neighbours[rows, cols, 0],
        y=neighbours[rows, cols, 1],
        mode="markers",
        name="plan neighbours",
        marker={
            "size": 6 + 22 * np.sqrt(weights[rows, cols]),
            "color": "#1f77b4",
            "opacity": 0.8,
            "line": {"width": 0},
        },
        text=[
            f"{names[r]}: {neighbour_weight_caption(weights[r, c])}"
            for r, c in zip(rows, cols, strict=True)
        ],
        hovertemplate="%{text}<extra></extra>",
    )


def _target_markers(x: np.ndarray, names: list[str]) -> go.Scatter:
    """The target points ``(n, 2)``, each labelled with its name."""
    return go.Scatter(
        x=x[:, 0],
        y=x[:, 1],
        mode="markers+text",
        name="x ∈ Q",
        marker={"symbol": "x", "size": 11, "color": "#222"},
        text=names,
        textposition="top center",
        hovertemplate="%{text}<extra>x</extra>",
    )


def _mapped_markers(
    mapped: np.ndarray, perplexity: np.ndarray, names: list[str], map_name: str
) -> go.Scatter:
    """The mapped points ``T(x)`` ``(n, 2)``, hovering each row's effective neighbours."""
    return go.Scatter(
        x=mapped[:, 0],
        y=mapped[:, 1],
        mode="markers",
        name=map_name,
        marker={
            "symbol": "star",
            "size": 14,
            "color": "#d62728",
            "line": {"width": 1, "color": "#fff"},
        },
        text=[f"{names[r]}: {perplexity[r]:.1f} neighbours" for r in range(len(names))],
        hovertemplate="%{text}<extra>" + map_name + "</extra>",
    )
