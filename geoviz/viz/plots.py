"""Bar charts and heatmaps of datasets and labels.

Here: class counts per dataset (:func:`class_histograms`), the pairwise OTDD matrix
(:func:`otdd_heatmap`), the label transition ``Y_Q^T S / N`` (:func:`label_transition`,
:func:`label_transition_heatmap`) and soft labels as bars (:func:`soft_label_bars`,
:func:`label_mass_bars`). The scatter of point sets (:mod:`geoviz.viz.scatter`), the
point sets themselves (:mod:`geoviz.viz.point_sets`) and the one-sample card
(:mod:`geoviz.viz.sample_card`) live in their own modules; import them from there.

All builders take plain arrays / dataset objects and return plotly figures;
nothing here imports Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from geoviz.data.dataset import LabeledDataset
from geoviz.errors import DatasetError
from geoviz.glossary import OTDD_SHORT
from geoviz.viz.literal import plotly_markup, plotly_name
from geoviz.viz.point_sets import (
    DATASET_PALETTE,
    as_array,
    color_map,
)

__all__ = [
    "class_histograms",
    "label_mass_bars",
    "label_transition",
    "label_transition_heatmap",
    "otdd_heatmap",
    "soft_label_bars",
]


def class_histograms(
    datasets: Sequence[LabeledDataset], *, title: str = "Samples per class", height: int = 330
) -> go.Figure:
    """One bar chart of class counts per dataset, side by side (``title``: Plotly text;
    the datasets' and classes' names are drawn escaped)."""
    if not datasets:
        raise DatasetError("no datasets to summarise")
    n = len(datasets)
    fig = make_subplots(
        rows=1, cols=n, subplot_titles=[plotly_name(ds.name) for ds in datasets], shared_yaxes=True
    )
    colors = color_map([ds.name for ds in datasets], DATASET_PALETTE)
    for j, ds in enumerate(datasets, start=1):
        counts = ds.class_counts()
        fig.add_trace(
            go.Bar(
                x=[plotly_name(c) for c in ds.classes],
                y=counts,
                name=plotly_name(ds.name),
                marker={"color": colors[ds.name]},
                hovertemplate="%{x}: %{y} samples<extra>" + plotly_name(ds.name) + "</extra>",
                showlegend=False,
            ),
            row=1,
            col=j,
        )
        fig.update_xaxes(
            title_text="class",
            type="category",
            tickangle=-45 if max(len(c) for c in ds.classes) > 2 else 0,
            row=1,
            col=j,
        )
    fig.update_yaxes(title_text="samples", row=1, col=1)
    fig.update_layout(
        title={"text": plotly_markup(title)}, height=height, margin={"t": 70, "b": 40}
    )
    return fig


def otdd_heatmap(
    matrix: np.ndarray,
    names: Sequence[str],
    *,
    title: str = "Pairwise OTDD d²",
    value_label: str = OTDD_SHORT,
    height: int = 460,
) -> go.Figure:
    """Annotated heatmap of a symmetric ``(n, n)`` distance matrix between datasets.

    ``names`` as typed (drawn escaped); ``title`` and ``value_label`` are Plotly text.
    """
    mat = np.asarray(matrix, dtype=float)
    names = [plotly_name(n) for n in names]  # category ticks and %{x}/%{y} of the hover
    if mat.shape != (len(names), len(names)):
        raise DatasetError(
            f"distance matrix of shape {mat.shape} does not match {len(names)} names"
        )
    text = [[("" if not np.isfinite(v) else f"{v:.3g}") for v in row] for row in mat]
    fig = go.Figure(
        go.Heatmap(
            z=mat,
            x=names,
            y=names,
            text=text,
            texttemplate="%{text}",
            colorscale="Blues",
            colorbar={"title": {"text": value_label}},
            hovertemplate="d²(%{y}, %{x}) = %{z:.4g}<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": plotly_markup(title)},
        xaxis={
            "title": {"text": "dataset"},
            "side": "bottom",
            "showgrid": False,
            "type": "category",
        },
        yaxis={
            "title": {"text": "dataset"},
            "autorange": "reversed",
            "showgrid": False,
            "type": "category",
        },
        height=height,
    )
    return fig


def label_transition(
    target_labels: np.ndarray | torch.Tensor,
    soft_labels: np.ndarray | torch.Tensor,
    n_target_classes: int,
) -> np.ndarray:
    """Mass of each target class sent to each reference class: ``Y_Q^T S / N``.

    Parameters
    ----------
    target_labels
        ``(N,)`` hard labels of ``Q`` in ``0..C_Q-1``.
    soft_labels
        ``(N, C_P)`` soft labels of the mapped samples ``T(x)`` (rows sum to 1).
    n_target_classes
        ``C_Q``.

    Returns
    -------
    np.ndarray
        ``(C_Q, C_P)``, non-negative, summing to 1; row ``c`` sums to the
        fraction of ``Q`` in class ``c``.
    """
    y = as_array(target_labels).astype(np.int64).ravel()
    s = as_array(soft_labels).astype(np.float64)
    if s.ndim != 2 or s.shape[0] != y.shape[0]:
        raise DatasetError(f"{y.shape[0]} target labels but soft labels of shape {s.shape}")
    if y.size and (y.min() < 0 or y.max() >= n_target_classes):
        raise DatasetError(f"target labels must lie in 0..{n_target_classes - 1}")
    onehot = np.zeros((y.shape[0], int(n_target_classes)))
    onehot[np.arange(y.shape[0]), y] = 1.0
    transition: np.ndarray = onehot.T @ s / max(y.shape[0], 1)
    return transition


def label_transition_heatmap(
    matrix: np.ndarray,
    target_classes: Sequence[str],
    reference_classes: Sequence[str],
    *,
    target_name: str = "Q",
    reference_name: str = "P",
    title: str | None = None,
    row_normalize: bool = True,
    height: int = 430,
) -> go.Figure:
    """Heatmap of a label-transition matrix (rows: ``Q`` classes, columns: ``P_i`` classes).

    With ``row_normalize`` the colour shows, for each target class, the
    fraction of its mass that lands in each reference class (rows sum to 1);
    the hover also gives the raw mass ``Y_Q^T S / N``.

    The class names are as typed (drawn escaped); ``target_name``, ``reference_name`` and
    ``title`` are Plotly text, their names escaped by the caller
    (:func:`geoviz.viz.report.plotly_literal`); a ``%`` in them is no placeholder of the
    hover template.
    """
    target_name, reference_name = plotly_markup(target_name), plotly_markup(reference_name)
    mat = np.asarray(matrix, dtype=float)
    if mat.shape != (len(target_classes), len(reference_classes)):
        raise DatasetError(
            f"transition matrix of shape {mat.shape} does not match "
            f"{len(target_classes)} x {len(reference_classes)} classes"
        )
    rows = mat.sum(axis=1, keepdims=True)
    shown = np.divide(mat, rows, out=np.zeros_like(mat), where=rows > 0) if row_normalize else mat
    label = "fraction of row" if row_normalize else "mass"
    fig = go.Figure(
        go.Heatmap(
            z=shown,
            x=[plotly_name(c) for c in reference_classes],
            y=[plotly_name(c) for c in target_classes],
            customdata=mat,
            text=[[f"{v:.2f}" if v >= 0.005 else "" for v in row] for row in shown],
            texttemplate="%{text}",
            textfont={"size": 9},
            colorscale="Purples",
            zmin=0,
            zmax=1 if row_normalize else None,
            colorbar={"title": {"text": label}},
            hovertemplate=(
                f"{target_name} class %{{y}} → {reference_name} class %{{x}}<br>"
                f"{label}: %{{z:.3f}}<br>mass Y_Qᵀ S / N: %{{customdata:.4f}}<extra></extra>"
            ),
        )
    )
    fig.update_layout(
        title={
            "text": plotly_markup(title)
            if title
            else f"Label transition {target_name} → {reference_name}"
        },
        xaxis={
            "title": {"text": f"{reference_name} class (soft label of T(x))"},
            "tickangle": -45,
            "type": "category",
        },
        yaxis={
            "title": {"text": f"{target_name} class of x"},
            "autorange": "reversed",
            "type": "category",
        },
        height=height,
        margin={"t": 60},
    )
    return fig


def soft_label_bars(
    soft_labels: np.ndarray | torch.Tensor,
    class_names: Sequence[str],
    sample_names: Sequence[str],
    *,
    title: str = "Soft labels",
    min_mass: float = 0.03,
    height: int | None = None,
) -> go.Figure:
    """Stacked horizontal bars: one bar per sample, segments = classes.

    Classes whose mass never exceeds ``min_mass`` in any shown sample are
    merged into an ``other`` segment so that the legend stays readable. Class and sample
    names are as typed (drawn escaped); ``title`` is Plotly text.
    """
    s = as_array(soft_labels).astype(float)
    if s.ndim != 2 or s.shape[1] != len(class_names) or s.shape[0] != len(sample_names):
        raise DatasetError(
            f"soft labels of shape {s.shape} do not match {len(sample_names)} samples x {len(class_names)} classes"
        )
    keep = np.flatnonzero(s.max(axis=0) > min_mass)
    colors = color_map([class_names[int(k)] for k in keep])
    rows = [plotly_name(n) for n in sample_names]
    fig = go.Figure()
    for k in keep:
        shown = plotly_name(class_names[int(k)])
        fig.add_trace(
            go.Bar(
                y=rows,
                x=s[:, k],
                name=shown,
                orientation="h",
                marker={"color": colors[class_names[int(k)]]},
                hovertemplate="%{y}: " + shown + " %{x:.2f}<extra></extra>",
            )
        )
    other = 1.0 - s[:, keep].sum(axis=1)
    if np.any(other > 1e-3):
        fig.add_trace(
            go.Bar(
                y=rows,
                x=other,
                name="other",
                orientation="h",
                marker={"color": "#cccccc"},
            )
        )
    fig.update_layout(
        barmode="stack",
        title={"text": plotly_markup(title)},
        xaxis={"title": {"text": "soft-label mass"}, "range": [0, 1]},
        yaxis={"title": {"text": "sample"}, "autorange": "reversed"},
        height=height or max(400, 60 + 34 * len(sample_names)),
        legend={"title": {"text": "class"}},
        margin={"t": 50},
    )
    return fig


def label_mass_bars(
    soft_labels: np.ndarray | torch.Tensor,
    class_names: Sequence[str],
    *,
    title: str = "Average soft label",
    height: int = 340,
) -> go.Figure:
    """Mean soft-label mass per class, coloured by the dataset block of the class.

    Class names are ``"dataset/class"``; the blocks show how label mass moves
    between datasets (e.g. from ``Q``'s block to ``P_i``'s along McCann's
    interpolation, or how ``P_a`` shares mass among references). Names as typed (drawn
    escaped); ``title`` is Plotly text.
    """
    s = as_array(soft_labels).astype(float)
    if s.ndim != 2 or s.shape[1] != len(class_names):
        raise DatasetError(
            f"soft labels of shape {s.shape} do not match {len(class_names)} class names"
        )
    mean = s.mean(axis=0)
    blocks = [str(c).split("/", 1)[0] if "/" in str(c) else "" for c in class_names]
    colors = color_map(blocks, DATASET_PALETTE[1:])
    fig = go.Figure()
    for b in dict.fromkeys(blocks):
        idx = [i for i, x in enumerate(blocks) if x == b]
        fig.add_trace(
            go.Bar(
                x=[plotly_name(class_names[i]) for i in idx],
                y=mean[idx],
                name=plotly_name(f"{b} (total {mean[idx].sum():.2f})") if b else "classes",
                marker={"color": colors[b]},
                hovertemplate="%{x}: %{y:.3f}<extra></extra>",
            )
        )
    # the colour says which dataset a class belongs to: ticks show the class only
    short = [str(c).split("/", 1)[1] if "/" in str(c) else str(c) for c in class_names]
    fig.update_layout(
        title={"text": plotly_markup(title)},
        xaxis={
            "title": {"text": "class (colour: dataset block)"},
            "tickangle": -60,
            "type": "category",
            "tickmode": "array",
            "tickvals": [plotly_name(c) for c in class_names],
            "ticktext": [plotly_name(c) for c in short],
        },
        yaxis={"title": {"text": "mean soft-label mass"}, "rangemode": "tozero"},
        height=height,
        legend={
            "title": {"text": "label block"},
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.02,
            "x": 0,
        },
        margin={"t": 90, "b": 110},
        bargap=0.15,
    )
    return fig
