"""A didactic picture of the method (for the app's About page).

Three reference datasets ``P_1, P_2, P_3`` (point clouds at the corners of a
triangle), the target ``Q`` outside, the OTDD maps ``T_i`` from ``Q`` to each
``P_i``, the generalized geodesic ``{P_a : a in Delta_2}`` (the shaded
triangle, drawn as a flat set only for the picture) and the projection
``P_hat_a`` of ``Q`` onto it (paper Fig. 3a).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

__all__ = ["method_schematic"]


def _cloud(
    rng: np.random.Generator, center: np.ndarray, n: int, scale: float, labels: int
) -> tuple[np.ndarray, np.ndarray]:
    """A small labelled point cloud: ``labels`` sub-clusters around ``center``."""
    angles = 2 * np.pi * np.arange(labels) / labels + rng.uniform(0, 2 * np.pi)
    offsets = 0.55 * scale * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    y = rng.integers(0, labels, size=n)
    x = center + offsets[y] + rng.normal(scale=0.22 * scale, size=(n, 2))
    return x, y


def method_schematic(seed: int = 3, height: int = 520) -> go.Figure:
    """The picture described in the module docstring, as a plotly figure."""
    rng = np.random.default_rng(seed)
    corners = np.array([[0.0, 0.0], [4.0, 0.0], [2.0, 3.4]])
    names = ["P₁", "P₂", "P₃"]
    q_center = np.array([4.9, 3.3])
    a_hat = np.array([0.15, 0.55, 0.30])
    p_hat = a_hat @ corners
    palette = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"]

    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[*corners[:, 0], corners[0, 0]],
            y=[*corners[:, 1], corners[0, 1]],
            fill="toself",
            fillcolor="rgba(91,91,143,0.12)",
            line={"color": "rgba(91,91,143,0.6)", "dash": "dot"},
            name="generalized geodesic {P_a : a ∈ Δ}",
            hoverinfo="skip",
        )
    )
    for k, (c, nm) in enumerate(zip(corners, names, strict=True)):
        x, y = _cloud(rng, c, 60, 0.5, 3)
        fig.add_trace(
            go.Scatter(
                x=x[:, 0],
                y=x[:, 1],
                mode="markers",
                marker={"size": 5, "color": [palette[(j + k) % 4] for j in y], "opacity": 0.8},
                name=f"reference {nm}",
                showlegend=False,
                hoverinfo="skip",
            )
        )
        fig.add_annotation(
            x=c[0], y=c[1] - 0.75, text=f"<b>{nm}</b>", showarrow=False, font={"size": 16}
        )
    xq, yq = _cloud(rng, q_center, 60, 0.5, 2)
    fig.add_trace(
        go.Scatter(
            x=xq[:, 0],
            y=xq[:, 1],
            mode="markers",
            marker={"size": 6, "color": ["#222" if j else "#999" for j in yq], "symbol": "diamond"},
            name="target Q",
            hoverinfo="skip",
        )
    )
    fig.add_annotation(
        x=q_center[0] + 0.2,
        y=q_center[1] + 0.75,
        text="<b>Q</b> (target)",
        showarrow=False,
        font={"size": 16},
    )
    for c, nm in zip(corners, names, strict=True):
        start = q_center + 0.6 * (c - q_center) / np.linalg.norm(c - q_center)
        end = c + 0.55 * (q_center - c) / np.linalg.norm(q_center - c)
        fig.add_annotation(
            x=end[0],
            y=end[1],
            ax=start[0],
            ay=start[1],
            xref="x",
            yref="y",
            axref="x",
            ayref="y",
            showarrow=True,
            arrowhead=3,
            arrowwidth=1.5,
            arrowcolor="#5b8db8",
            text="",
        )
        mid = 0.55 * start + 0.45 * end
        fig.add_annotation(
            x=mid[0],
            y=mid[1] + 0.18,
            text=f"T{nm[1:]}",
            showarrow=False,
            font={"color": "#2f5f8a", "size": 13},
        )
    fig.add_trace(
        go.Scatter(
            x=[q_center[0], p_hat[0]],
            y=[q_center[1], p_hat[1]],
            mode="lines",
            line={"color": "#e4572e", "dash": "dash"},
            name="projection: â = argmin W²(P_a, Q)",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[p_hat[0]],
            y=[p_hat[1]],
            mode="markers+text",
            marker={
                "symbol": "star",
                "size": 20,
                "color": "#e4572e",
                "line": {"width": 1, "color": "#111"},
            },
            text=["P̂_a = (Σ â_i T_i)#Q  "],
            textposition="middle left",
            textfont={"size": 14, "color": "#b03a1a"},
            name="P̂_a",
            hoverinfo="skip",
        )
    )
    fig.update_layout(
        title={"text": "Projecting a target dataset onto the generalized geodesic of references"},
        xaxis={"visible": False, "range": [-1.0, 6.2]},
        yaxis={"visible": False, "range": [-1.3, 4.6], "scaleanchor": "x"},
        height=height,
        legend={"orientation": "h", "yanchor": "top", "y": -0.02, "x": 0},
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        plot_bgcolor="white",
    )
    return fig
