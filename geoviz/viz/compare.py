"""OT-map interpolation versus naive mixup, for low-dimensional teaching examples.

Paper Fig. "Visualization and comparison of dataset interpolation methods" (b):
``P_hat_a = (sum_i a_i T*_i)#Q`` with the OTDD maps keeps the class structure
of ``Q``, whereas the same convex combination with *random* maps ``T_i``
(pairing every ``x`` with a uniformly drawn sample of ``P_i``, i.e. mixup
across datasets with random couplings) collapses towards the mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import WeightsError
from geoviz.viz.plots import PointSet, color_map
from geoviz.viz.weights import project_to_simplex

__all__ = ["naive_interpolation", "side_by_side_scatter"]


def naive_interpolation(
    target: LabeledDataset,
    references: Sequence[LabeledDataset],
    weights: Sequence[float] | np.ndarray,
    *,
    seed: int = 0,
) -> SoftLabeledDataset:
    """``(sum_i a_i T_i)#Q`` with random maps: naive mixup baseline.

    Each target sample ``n`` is paired with one uniformly random sample
    ``j_i(n)`` of every reference (a random coupling, drawn without
    replacement while the reference has samples left); features and padded
    one-hot labels are combined with the weights ``a`` exactly as for the OT
    interpolation (paper Sec. 3.2), so the two differ only in the coupling.

    Parameters
    ----------
    target
        ``Q`` with ``N`` samples (only its size is used).
    references
        ``P_1..P_m`` in one feature space.
    weights
        ``(m,)`` weights on the simplex.

    Returns
    -------
    SoftLabeledDataset
        ``N`` samples, class names ``"ref_name/class"`` concatenated over references.
    """
    m = len(references)
    w = np.asarray(weights, dtype=float).ravel()
    if w.shape[0] != m:
        raise WeightsError(f"{w.shape[0]} weights for {m} reference datasets")
    if np.any(w < -1e-9) or abs(w.sum() - 1) > 1e-6:
        raise WeightsError(
            f"weights must lie on the simplex (non-negative, sum 1), got {w.tolist()}"
        )
    w = project_to_simplex(w)
    dims = {ds.n_features for ds in references}
    if len(dims) != 1:
        raise WeightsError(f"references must share one feature space, got D = {sorted(dims)}")
    rng = np.random.default_rng(seed)
    n = target.n_samples
    feats = torch.zeros(n, next(iter(dims)), dtype=torch.float32)
    blocks = []
    names: list[str] = []
    for a_i, ref in zip(w, references, strict=True):
        if ref.n_samples >= n:
            idx = rng.permutation(ref.n_samples)[:n]
        else:
            idx = rng.integers(0, ref.n_samples, size=n)
        idx_t = torch.as_tensor(idx, dtype=torch.long)
        feats += float(a_i) * ref.features[idx_t]
        blocks.append(float(a_i) * ref.one_hot(torch.float32)[idx_t])
        names += [f"{ref.name}/{c}" for c in ref.classes]
    return SoftLabeledDataset(
        features=feats,
        soft_labels=torch.cat(blocks, dim=1),
        class_names=tuple(names),
        name="naive mixup",
        image_shape=references[0].image_shape,
        metadata={"weights": w.tolist(), "coupling": "random", "seed": int(seed)},
    )


def side_by_side_scatter(
    panels: Sequence[tuple[str, Sequence[PointSet]]],
    *,
    faded: Sequence[str] = (),
    title: str | None = None,
    axis_titles: Sequence[str] = ("x₁", "x₂", "x₃"),
    height: int = 460,
    marker_size: float = 5,
) -> go.Figure:
    """Several 2-D or 3-D scatter panels in one row, coloured by class.

    ``panels`` is ``[(panel title, [PointSet, ...]), ...]``; the sets named
    in ``faded`` (e.g. the references, for context) are drawn small and light
    grey. A class keeps its colour across panels; the legend lists each class
    once.
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
        subplot_titles=[t for t, _ in panels],
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
    colors = color_map(labels)
    shown: set[str] = set()
    for col, (_, sets) in enumerate(panels, start=1):
        for s in sets:
            fade = s.name in faded
            groups = (
                [("reference samples", np.ones(len(s.labels), bool))]
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
                legend_key = "reference samples" if fade else lab
                common = {
                    "mode": "markers",
                    "name": legend_key,
                    "legendgroup": legend_key,
                    "showlegend": legend_key not in shown,
                    "marker": marker,
                    "hovertemplate": f"{s.name}: {lab}<extra></extra>",
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
        title={"text": title} if title else None,
        height=height,
        legend={"title": {"text": "class (argmax label)"}, "itemsizing": "constant"},
        margin={"t": 80 if title else 50},
    )
    return fig
