"""Side-by-side scatter panels: OT-map interpolation versus the Mixup baseline.

Paper Fig. "Visualization and comparison of dataset interpolation methods" (b):
``P_hat_a = (sum_i a_i T*_i)#Q`` with the OTDD maps keeps the class structure
of ``Q``, whereas the same convex combination with *random* maps ``T_i``
collapses towards the mean. Both datasets are computed in the library
(:meth:`geoviz.geodesic.result.GeodesicResult.interpolate`,
:func:`geoviz.geodesic.mixup.mixup_interpolation`); this module only draws them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import WeightsError
from geoviz.viz.literal import plotly_markup, plotly_name
from geoviz.viz.point_sets import PointSet, as_array, color_map

__all__ = ["EXPLORER_PALETTE", "mixup_comparison", "side_by_side_scatter"]


def _points(name: str, x: torch.Tensor | np.ndarray, labels: tuple[str, ...]) -> PointSet:
    pts = as_array(x).astype(np.float64)
    return PointSet(name, pts, labels, np.ones(len(labels)))


def side_by_side_scatter(
    panels: Sequence[tuple[str, Sequence[PointSet]]],
    *,
    faded: Sequence[str] = (),
    title: str | None = None,
    axis_titles: Sequence[str] = ("x₁", "x₂", "x₃"),
    height: int = 460,
    marker_size: float = 5,
    class_order: Sequence[str] | None = None,
    palette: Sequence[str] | None = None,
    legend_title: str = "class (argmax label)",
) -> go.Figure:
    """Several 2-D or 3-D scatter panels in one row, coloured by class.

    ``panels`` is ``[(panel title, [PointSet, ...]), ...]``; the sets named
    in ``faded`` (e.g. the references, for context) are drawn small and light
    grey. A class keeps its colour across panels; the legend lists each class
    once. ``class_order`` and ``palette`` fix the colours (class ``k`` of
    ``class_order`` gets ``palette[k]``), e.g. to match the browser explorer's.

    Panel titles and the sets' and classes' names are as typed (drawn escaped:
    :func:`geoviz.viz.literal.plotly_name`); ``title`` and ``legend_title`` are Plotly
    text.
    """
    if not panels:
        raise WeightsError("no panels to draw")
    dims = {s.points.shape[1] for _, sets in panels for s in sets}
    if len(dims) != 1 or next(iter(dims)) not in (2, 3):
        raise WeightsError(f"panels need points of one dimension, 2 or 3; got {sorted(dims)}")
    dim = next(iter(dims))
    specs = [[{"type": "scene" if dim == 3 else "xy"} for _ in panels]]
    fig = make_subplots(
        rows=1,
        cols=len(panels),
        subplot_titles=[plotly_name(t) for t, _ in panels],
        specs=specs,
        horizontal_spacing=0.04,
        shared_xaxes=dim == 2,
        shared_yaxes=dim == 2,
    )
    labels = [
        lab
        for _, sets in panels
        for s in sets
        if s.name not in faded
        for lab in dict.fromkeys(s.labels)
    ]
    colors = color_map([*(class_order or ()), *labels], palette)
    shown: set[str] = set()
    for col, (_, sets) in enumerate(panels, start=1):
        for s in sets:
            fade = s.name in faded
            groups = (
                [("references", np.ones(len(s.labels), bool))]
                if fade
                else [
                    (lab, np.array([x == lab for x in s.labels])) for lab in dict.fromkeys(s.labels)
                ]
            )
            for lab, mask in groups:
                p = s.points[mask]
                marker = {
                    "size": marker_size * (0.7 if fade else 1.0) * (0.6 if dim == 3 else 1.0),
                    "color": "#bbbbbb" if fade else colors[lab],
                    "opacity": 0.35 if fade else 0.85,
                }
                legend_key = "references" if fade else lab
                common = {
                    "mode": "markers",
                    "name": plotly_name(legend_key),
                    "legendgroup": plotly_name(legend_key),
                    "showlegend": legend_key not in shown,
                    "marker": marker,
                    "hovertemplate": f"{plotly_name(s.name)}: {plotly_name(lab)}<extra></extra>",
                }
                shown.add(legend_key)
                if dim == 2:
                    fig.add_trace(go.Scatter(x=p[:, 0], y=p[:, 1], **common), row=1, col=col)
                else:
                    fig.add_trace(
                        go.Scatter3d(x=p[:, 0], y=p[:, 1], z=p[:, 2], **common), row=1, col=col
                    )
    if dim == 2:
        for col in range(1, len(panels) + 1):
            fig.update_xaxes(title_text=axis_titles[0], row=1, col=col)
        fig.update_yaxes(title_text=axis_titles[1], row=1, col=1)
    else:
        scene = {
            "xaxis": {"title": {"text": axis_titles[0]}},
            "yaxis": {"title": {"text": axis_titles[1]}},
            "zaxis": {"title": {"text": axis_titles[2]}},
        }
        fig.update_scenes(**scene)
    fig.update_layout(
        title={"text": plotly_markup(title)} if title else None,
        height=height,
        legend={"title": {"text": plotly_markup(legend_title)}, "itemsizing": "constant"},
        margin={"t": 80 if title else 50},
    )
    return fig


#: the browser explorer's class colours (D3 category10, ``PALETTE`` in ``drawing_kit.js``)
EXPLORER_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip


def mixup_comparison(
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    pa: SoftLabeledDataset,
    naive: SoftLabeledDataset,
    names: Sequence[str],
    title: str,
) -> go.Figure:
    """Q, ``P_a`` with the OTDD maps and the naive mixup at the same weights, side by side.

    Every point of ``P_a`` and of the mixup is coloured by the class in Q of the target sample
    it comes from (output ``n`` from target sample ``n``), with the explorer's colours, so
    the figure reads like the browser's teaching view (issue 26, item 5): the maps keep a
    class together, random partners do not. The references are drawn faded.

    ``names`` are the references' names as typed (drawn escaped); ``title`` is Plotly text.
    """
    q_labels = tuple(target.classes[int(k)] for k in target.labels.tolist())
    refs = [
        _points(f"{n} samples", r.features, tuple("" for _ in range(r.n_samples)))
        for r, n in zip(references, names, strict=True)
    ]

    def by_q(ds: SoftLabeledDataset, name: str) -> PointSet:
        if ds.n_samples != len(q_labels):
            raise WeightsError(f"{name} has {ds.n_samples} points, Q has {len(q_labels)}")
        return _points(name, ds.features, q_labels)

    faded = [r.name for r in refs]
    return side_by_side_scatter(
        [
            ("Q", [_points("Q", target.features, q_labels)]),
            ("P_a with OTDD maps", [*refs, by_q(pa, "P_a")]),
            ("naive mixup (random couplings)", [*refs, by_q(naive, "naive")]),
        ],
        faded=faded,
        title=title,
        class_order=list(target.classes),
        palette=EXPLORER_PALETTE,
        legend_title="class in Q of the target sample",
    )
