"""Figures of fitted OTDD maps: plan neighbours, nearest real samples, two maps side by side.

Library code (no Streamlit): the app caches these figures per scenario
(:mod:`geoviz.app.services.maps`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from geoviz.errors import GeovizError
from geoviz.viz.images import (
    as_display_images,
    image_grid,
    mapped_samples_grid,
    sample_captions,
    soft_label_captions,
)
from geoviz.viz.literal import plotly_name
from geoviz.viz.neighbours import plan_neighbours_grid, plan_neighbours_scatter, reference_cloud

__all__ = [
    "as_index",
    "distance_caption",
    "has_plan_neighbours",
    "nearest_reference_figure",
    "plan_neighbours_figure",
    "require_plan",
    "side_by_side_figures",
    "side_by_side_images",
    "side_by_side_scatter",
]

if TYPE_CHECKING:
    import torch

    from geoviz.geodesic.result import GeodesicResult


def as_index(a: np.ndarray) -> torch.Tensor:
    """Indices as an int64 ``torch.Tensor`` (for indexing dataset tensors)."""
    import torch

    return torch.as_tensor(np.asarray(a, dtype=np.int64))


def has_plan_neighbours(result: GeodesicResult) -> bool:
    """Whether every map of ``result`` has plan neighbours
    (:meth:`~geoviz.maps.base.FittedMap.plan_neighbours`): maps read off a plan do,
    maps that generate their points (neural) do not."""
    return bool(result.neighbour_index)


def require_plan(result: GeodesicResult) -> None:
    """Raise :class:`~geoviz.errors.GeovizError` unless :func:`has_plan_neighbours`."""
    if not has_plan_neighbours(result):
        raise GeovizError(
            f"the {result.method} maps have no plan neighbours; use nearest_reference_figure / "
            "nearest_reference_table (the closest real reference samples) instead"
        )


def _name(result: GeodesicResult, i: int) -> str:
    return result.reference_names[i] if result.reference_names else result.references[i].name


def _axis_titles(dim: int) -> tuple[str, str]:
    return ("x₁", "x₂") if dim == 2 else (f"x₁ (of {dim})", f"x₂ (of {dim})")


def _target_points(x: np.ndarray, idx: np.ndarray, name: str, size: int) -> go.Scatter:
    """The chosen target points ``x`` (``(n, 2)``) as black crosses labelled ``#index``."""

    return go.Scatter(
        x=x[:, 0],
        y=x[:, 1],
        mode="markers+text",
        name=name,
        marker={"size": size, "color": "#222", "symbol": "x"},
        text=[f"#{int(t)}" for t in idx],
        textposition="top center",
    )


def distance_caption(d: float) -> str:
    """``"d 1.23"``: distance of a mapped point to a reference sample (3 significant digits)."""
    return f"d {float(d):.3g}"


def plan_neighbours_figure(
    result: GeodesicResult, i: int, idx: np.ndarray, k: int
) -> go.Figure | None:
    """Teaching figure for map ``i``: target points ``idx``, their ``k`` heaviest plan
    neighbours in ``P_i`` and ``T_i(x)``.

    Images give a tiled grid (:func:`geoviz.viz.neighbours.plan_neighbours_grid`), 2-D/3-D
    vectors a scatter (:func:`~geoviz.viz.neighbours.plan_neighbours_scatter`), other data
    ``None``. ``k`` must be at most the stored neighbours per point.
    """

    q, ref = result.target, result.references[i]
    name = result.reference_names[i] if result.reference_names else ref.name
    nb_idx, nb_w, perp = result.neighbours(i, idx)
    nb_idx, nb_w = nb_idx[:, :k], nb_w[:, :k]
    n = len(idx)
    flat = as_index(np.where(nb_idx >= 0, nb_idx, 0).reshape(-1))  # padding: any image, drawn blank
    rows = as_index(idx)
    map_name = f"T{i + 1}(x)"
    title = f"Where {map_name} comes from: the {k} largest plan weights over {plotly_name(name)}"
    shape = q.image_shape
    if shape is not None and ref.is_image:
        nb_images = as_display_images(ref.features[flat], shape)
        q_classes = sample_captions(q.labels[rows], q.classes, 9)
        nb_classes = sample_captions(ref.labels[flat], ref.classes, 10)
        return plan_neighbours_grid(
            as_display_images(q.features[rows], shape),
            [f"#{int(t)} · {c}" for t, c in zip(idx, q_classes, strict=True)],
            nb_images.reshape(n, k, *nb_images.shape[1:]),
            nb_w,
            as_display_images(result.mapped_features[i][rows], shape),
            perp,
            neighbour_captions=[nb_classes[r * k : (r + 1) * k] for r in range(n)],
            mapped_captions=soft_label_captions(result.soft_labels[i][rows], ref.classes, width=10),
            map_name=map_name,
            title=title,
        )
    if q.n_features in (2, 3):
        return plan_neighbours_scatter(
            q.features[rows, :2].numpy(),
            ref.features[flat, :2].numpy().reshape(n, k, 2),
            nb_w,
            result.mapped_features[i][rows, :2].numpy(),
            perp,
            reference_points=ref.features[:, :2].numpy(),
            target_labels=[f"#{int(t)}" for t in idx],
            reference_name=name,
            map_name=map_name,
            title=title,
            axis_titles=("x₁", "x₂") if q.n_features == 2 else ("x₁ (of 3)", "x₂ (of 3)"),
        )
    return None


def nearest_reference_figure(result: GeodesicResult, i: int, idx: np.ndarray, k: int) -> go.Figure:
    """For maps without a plan (neural), per target point ``x`` in ``idx``: ``T_i(x)`` and
    the ``k`` closest *real* samples of ``P_i`` with their distances.

    Images give a tiled grid, vectors a scatter of the first two coordinates (the caller
    handles one-feature data). Works for barycentric results too.
    """

    q, ref = result.target, result.references[i]
    name = _name(result, i)
    nb_idx, nb_d = result.nearest_references(i, idx, k=k)
    k = nb_idx.shape[1]
    n = len(idx)
    rows = as_index(idx)
    map_name = f"T{i + 1}(x)"
    title = f"{map_name} next to real data: the {k} closest samples of {plotly_name(name)}"
    shape = q.image_shape
    if shape is not None and ref.is_image:
        x_img = as_display_images(q.features[rows], shape)
        t_img = as_display_images(result.mapped_features[i][rows], shape)
        nb_img = as_display_images(ref.features[as_index(nb_idx.reshape(-1))], shape)
        nb_img = nb_img.reshape(n, k, *nb_img.shape[1:])
        q_caps = sample_captions(q.labels[rows], q.classes, 9)
        nb_caps = sample_captions(ref.labels[as_index(nb_idx.reshape(-1))], ref.classes, 10)
        t_caps = soft_label_captions(result.soft_labels[i][rows], ref.classes, width=10)
        images, captions = [], []
        for r in range(n):
            images.append(x_img[r])
            captions.append(f"#{int(idx[r])} · {q_caps[r]}")
            images.append(t_img[r])
            captions.append(f"generated<br>{t_caps[r]}")
            for j in range(k):
                images.append(nb_img[r, j])
                captions.append(f"{nb_caps[r * k + j]}<br>{distance_caption(nb_d[r, j])}")
        return image_grid(
            np.stack(images),
            captions,
            ncols=k + 2,
            title=title,
            column_titles=["x ∈ Q", map_name, *(f"#{j + 1}" for j in range(k))],
            tile_px=84,
            captions_below=True,
        )
    x = q.features[rows, :2].numpy().astype(float)
    t = result.mapped_features[i][rows, :2].numpy().astype(float)
    nb = ref.features[as_index(nb_idx.reshape(-1)), :2].numpy().astype(float).reshape(n, k, 2)
    refs = ref.features[:, :2].numpy().astype(float)
    fig = go.Figure()
    fig.add_trace(reference_cloud(refs, name))
    seg_x: list[float | None] = []
    seg_y: list[float | None] = []
    for r in range(n):
        seg_x += [x[r, 0], t[r, 0], None]
        seg_y += [x[r, 1], t[r, 1], None]
    fig.add_trace(
        go.Scatter(
            x=seg_x,
            y=seg_y,
            mode="lines",
            name="x → T(x)",
            line={"color": "rgba(31,119,180,0.5)", "width": 1, "dash": "dot"},
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=nb[..., 0].ravel(),
            y=nb[..., 1].ravel(),
            mode="markers",
            name=f"closest samples of {plotly_name(name)}",
            marker={"size": 8, "color": "#2ca02c", "symbol": "circle-open", "line": {"width": 2}},
            text=[
                f"#{int(nb_idx[r, j])} · {distance_caption(nb_d[r, j])}"
                for r in range(n)
                for j in range(k)
            ],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    fig.add_trace(_target_points(x, idx, "x ∈ Q", size=9))
    fig.add_trace(
        go.Scatter(
            x=t[:, 0],
            y=t[:, 1],
            mode="markers",
            name=map_name,
            marker={"size": 11, "color": "#d62728", "symbol": "star"},
        )
    )
    ax = _axis_titles(q.n_features)
    fig.update_layout(
        title=title, height=460, xaxis_title=ax[0], yaxis_title=ax[1], legend={"orientation": "h"}
    )
    return fig


def side_by_side_images(
    first: GeodesicResult, second: GeodesicResult, idx: np.ndarray, tile_px: int
) -> list[go.Figure]:
    """Image data: one grid per reference ``P_i``, rows ``[x | first T_i(x) | second T_i(x)]``
    (:func:`side_by_side_figures`)."""
    q = first.target
    rows = as_index(idx)
    shape = q.image_shape
    if shape is None:
        raise GeovizError(f"side_by_side_images needs image data; {q.name} holds vectors")
    x_img = as_display_images(q.features[rows], shape)
    x_caps = [
        f"#{int(t)} · {c}"
        for t, c in zip(idx, sample_captions(q.labels[rows], q.classes, 9), strict=True)
    ]
    figs = []
    for i in range(first.m):
        ref = first.references[i]
        columns = []
        for res in (first, second):
            columns.append(
                (
                    f"{res.method}<br>T{i + 1}(x)",
                    as_display_images(res.mapped_features[i][rows], shape),
                    soft_label_captions(res.soft_labels[i][rows], ref.classes, width=10),
                )
            )
        figs.append(
            mapped_samples_grid(
                x_img,
                x_caps,
                columns,
                title=_role_title(i, _name(first, i)),
                tile_px=tile_px,
            )
        )
    return figs


def side_by_side_scatter(
    first: GeodesicResult, second: GeodesicResult, idx: np.ndarray
) -> list[go.Figure]:

    q = first.target
    rows = as_index(idx)
    x = q.features[rows, :2].numpy().astype(float)
    ax = _axis_titles(q.n_features)
    figs = []
    # one colour and marker per result, by position (the first result's map in blue)
    styles = tuple(
        (res.method, res, color, symbol)
        for res, color, symbol in zip(
            (first, second), ("#1f77b4", "#ff7f0e"), ("circle", "diamond"), strict=True
        )
    )
    for i in range(first.m):
        ref = first.references[i]
        refs = ref.features[:, :2].numpy().astype(float)
        fig = go.Figure()
        fig.add_trace(reference_cloud(refs, f"{_name(first, i)} samples"))
        for label, res, color, symbol in styles:
            pts = res.mapped_features[i][:, :2].numpy().astype(float)
            top = res.soft_labels[i].argmax(dim=1).numpy()
            fig.add_trace(
                go.Scattergl(
                    x=pts[:, 0],
                    y=pts[:, 1],
                    mode="markers",
                    name=f"{label} T{i + 1}#Q",
                    marker={"size": 5, "color": color, "symbol": symbol, "opacity": 0.55},
                    text=[plotly_name(ref.classes[int(k)]) for k in top],
                    hovertemplate="%{text}<extra>" + label + "</extra>",
                )
            )
        seg: dict[str, list[float | None]] = {"x": [], "y": []}
        for label, res, color, symbol in styles:
            t = res.mapped_features[i][rows, :2].numpy().astype(float)
            for r in range(len(idx)):
                seg["x"] += [x[r, 0], t[r, 0], None]
                seg["y"] += [x[r, 1], t[r, 1], None]
            fig.add_trace(
                go.Scatter(
                    x=t[:, 0],
                    y=t[:, 1],
                    mode="markers",
                    name=f"{label} T{i + 1}(x), chosen x",
                    marker={
                        "size": 11,
                        "color": color,
                        "symbol": symbol,
                        "line": {"width": 1.5, "color": "#222"},
                    },
                    showlegend=False,
                )
            )
        fig.add_trace(
            go.Scatter(
                x=seg["x"],
                y=seg["y"],
                mode="lines",
                line={"color": "rgba(40,40,40,0.5)", "width": 1, "dash": "dot"},
                showlegend=False,
                hoverinfo="skip",
            )
        )
        fig.add_trace(_target_points(x, idx, "chosen x ∈ Q", size=10))
        fig.update_layout(
            title=_role_title(i, _name(first, i)),
            height=420,
            xaxis_title=ax[0],
            yaxis_title=ax[1],
            legend={"orientation": "h", "y": -0.2},
            margin={"l": 10, "r": 10, "t": 40, "b": 10},
        )
        figs.append(fig)
    return figs


def side_by_side_figures(
    first: GeodesicResult, second: GeodesicResult, idx: np.ndarray, tile_px: int = 96
) -> list[go.Figure]:
    """One figure per reference ``P_i`` comparing two results' maps on the SAME target points.

    Images: rows ``[x | first T_i(x) | second T_i(x)]``, headed by each result's method
    (:func:`side_by_side_images`);
    vectors: a scatter of the first two coordinates (:func:`side_by_side_scatter`).
    """
    if first.target.is_image:
        return side_by_side_images(first, second, idx, int(tile_px))
    return side_by_side_scatter(first, second, idx)


def _role_title(i: int, name: str) -> str:
    """``"P2: usps"``; just ``"P2"`` where the reference is named by its role (the vector
    presets), not ``"P2: P2"`` (issue 45; the Datasets page and the explorer's corners read
    the same)."""
    role = f"P{i + 1}"
    return role if name == role else f"{role}: {plotly_name(name)}"
