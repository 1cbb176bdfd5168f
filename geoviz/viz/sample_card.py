"""One sample at a glance: its image next to bars of its largest labels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from geoviz.errors import DatasetError
from geoviz.viz.literal import plotly_markup, plotly_name
from geoviz.viz.point_sets import OTHER_COLOR, SHOWN_MASS, as_array

__all__ = ["sample_card"]


def _display_rgb(image: np.ndarray) -> np.ndarray:
    """``(H, W)``, ``(H, W, 1|3|4)`` uint8 or float in ``[0, 1]`` -> ``(H, W, 3)`` uint8."""
    img = np.asarray(image)
    if img.ndim == 3 and img.shape[2] in (1, 3, 4):
        img = img[:, :, :3] if img.shape[2] != 1 else img[:, :, 0]
    if img.ndim not in (2, 3):
        raise DatasetError(f"an image must be (H, W) or (H, W, 3), got shape {img.shape}")
    if img.dtype != np.uint8:
        x = np.nan_to_num(img.astype(np.float64), nan=0.0)
        if x.size and x.max() > 1.5:  # 0..255 scale
            x = x / 255.0
        img = (np.clip(x, 0.0, 1.0) * 255).round().astype(np.uint8)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    return img


def sample_card(
    image: np.ndarray | None,
    title: str,
    soft_label: np.ndarray | torch.Tensor | None,
    class_names: Sequence[str],
    *,
    label: str | None = None,
    top: int = 5,
    height: int = 260,
) -> go.Figure:
    """One sample at a glance: its image (if any) next to bars of its top labels.

    Parameters
    ----------
    image
        ``(H, W)`` grey or ``(H, W, 3)`` RGB display image, float in ``[0, 1]``
        (one row of :func:`geoviz.viz.images.as_display_images`) or uint8;
        ``None`` for non-image data (bars only).
    title
        Figure title (Plotly text: names in it escaped by the caller), e.g.
        ``"P_a · sample #12"``.
    soft_label
        ``(K,)`` soft label over ``class_names``: the ``top`` largest masses are
        drawn (those of mass ``>= 0.005``), the remaining mass as one grey
        ``other`` bar. ``None`` for a
        hard-labelled sample: one full bar of class ``label`` (or of the only
        entry of ``class_names``).
    class_names
        ``K`` class names, as typed (drawn escaped).

    Returns
    -------
    plotly.graph_objects.Figure
        With an image: ``go.Image`` (trace 0, left) and a horizontal ``go.Bar``
        (trace 1, right, largest mass on top); without: the bar only.
    """
    names = [str(c) for c in class_names]
    if soft_label is not None:
        s = as_array(soft_label).astype(np.float64).ravel()
        if s.shape[0] != len(names):
            raise DatasetError(f"soft label of {s.shape[0]} entries but {len(names)} class names")
        k = max(1, min(int(top), s.shape[0]))
        order = [int(j) for j in np.argsort(-s, kind="stable")[:k]]
        order = [j for n, j in enumerate(order) if n == 0 or s[j] >= SHOWN_MASS]
        bars = [(names[j], float(s[j])) for j in order]
        rest = float(s.sum() - sum(m for _, m in bars))
        if rest >= SHOWN_MASS:
            bars.append((f"other ({s.shape[0] - len(order)} classes)", rest))
        axis_title = "soft-label mass"
    else:
        if label is None and len(names) != 1:
            raise DatasetError("a hard-labelled sample needs `label` (or a single class name)")
        bars = [(str(label) if label is not None else names[0], 1.0)]
        axis_title = "hard label"
    colors = ["#5b8db8" if not n.startswith("other (") else OTHER_COLOR for n, _ in bars]
    bar = go.Bar(
        x=[m for _, m in bars],
        y=[plotly_name(n) for n, _ in bars],  # category ticks and %{y} show the names
        orientation="h",
        marker={"color": colors},
        text=[f"{m:.2f}" for _, m in bars],
        textposition="outside",
        cliponaxis=False,
        showlegend=False,
        hovertemplate="%{y}: %{x:.3f}<extra></extra>",
    )
    bar_axes = {"range": [0, 1.18], "title": {"text": axis_title}}
    if image is None:
        fig = go.Figure(bar)
        fig.update_xaxes(**bar_axes)
        fig.update_yaxes(autorange="reversed", type="category")
    else:
        fig = make_subplots(rows=1, cols=2, column_widths=[0.32, 0.68], horizontal_spacing=0.12)
        fig.add_trace(go.Image(z=_display_rgb(image), hoverinfo="skip"), row=1, col=1)
        fig.add_trace(bar, row=1, col=2)
        fig.update_xaxes(visible=False, row=1, col=1)
        fig.update_yaxes(visible=False, scaleanchor="x", row=1, col=1)
        fig.update_xaxes(**bar_axes, row=1, col=2)
        fig.update_yaxes(autorange="reversed", type="category", row=1, col=2)
    fig.update_layout(
        title={"text": plotly_markup(title)},
        height=height,
        margin={"l": 10, "r": 20, "t": 50, "b": 40},
        bargap=0.25,
    )
    return fig
