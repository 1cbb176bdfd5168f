"""The figure of the simplex study (paper Figs. "ternary" / "corr").

:func:`correlation_figure` draws a :class:`~geoviz.transfer.study.GridStudy`:
``W^2(P_a, Q)`` beside the fine-tuned accuracy over the weight grid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from geoviz.errors import GeovizError
from geoviz.glossary import OBJECTIVE
from geoviz.transfer.study import GridStudy

__all__ = ["correlation_figure"]


def correlation_figure(study: GridStudy, names: Sequence[str] | None = None) -> Any:
    """Side-by-side plots of ``W^2(P_a, Q)`` (left) and mean accuracy (right).

    ``m = 3``: two ternary plots (vertex ``i`` is ``names[i]``), markers
    coloured by value, each with its colour bar (accuracy on the reversed
    scale, so the negative correlation the paper reports shows as two alike
    pictures: dark = small ``W^2`` / high accuracy). ``m = 2``: two line plots
    against the weight of ``names[1]`` (accuracy with ± std error bars).
    Other ``m``: one scatter plot of accuracy against ``W^2(P_a, Q)``. The
    title gives the Pearson ``r`` and Spearman ``rho``.

    Parameters
    ----------
    study
        A :class:`GridStudy`.
    names
        The ``m`` reference names; default ``study.reference_names``.

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
    names = [str(n) for n in (study.vertex_names() if names is None else names)]
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
    if study.note:
        title += f"<br><sub>{study.note}</sub>"
    hover = "<br>".join(f"{n}: %{{customdata[{i}]:.3f}}" for i, n in enumerate(names))
    custom = np.column_stack([grid, values, acc, std])
    hover_values = (
        f"<br>{OBJECTIVE} = %{{customdata[{m}]:.4g}}"
        f"<br>accuracy = %{{customdata[{m + 1}]:.3f}} ± %{{customdata[{m + 2}]:.3f}}<extra></extra>"
    )

    if m == 3:
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

    if m == 2:
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

    fig = go.Figure(
        go.Scatter(
            x=values,
            y=acc,
            mode="markers",
            error_y={"type": "data", "array": std, "visible": True},
            customdata=custom,
            hovertemplate=hover + hover_values,
        )
    )
    fig.update_layout(
        title={"text": title}, xaxis_title=OBJECTIVE, yaxis_title=acc_label, height=460
    )
    return fig
