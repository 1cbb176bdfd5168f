"""Scatter plots, histograms and heatmaps of datasets, maps and labels.

All builders take plain arrays / dataset objects and return plotly figures;
nothing here imports Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.express as px
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.errors import DatasetError
from geoviz.glossary import OTDD_SHORT
from geoviz.viz.literal import plotly_markup, plotly_name

__all__ = [
    "PointSet",
    "class_histograms",
    "color_map",
    "label_mass_bars",
    "label_transition",
    "label_transition_heatmap",
    "otdd_heatmap",
    "point_set",
    "sample_card",
    "scatter_sets",
    "selected_samples",
    "soft_label_bars",
    "soft_label_summary",
]

_PALETTE = px.colors.qualitative.Dark24 + px.colors.qualitative.Light24
_DATASET_PALETTE = ["#222222", *px.colors.qualitative.Set1]
_OTHER_COLOR = "#b0b0b0"
_DIM_COLOR = "#909090"
#: Opacity of points outside a highlight (``scatter_sets(highlight_...)``).
_DIM_OPACITY = 0.2
_EMPHASIS_LINE = "#111111"
_EMPHASIS_SCALE = 1.35
#: Smallest soft-label mass listed in hovers and sample cards (below, it reads "0.00").
_SHOWN_MASS = 0.005


def color_map(names: Sequence[str], palette: Sequence[str] | None = None) -> dict[str, str]:
    """Stable name -> colour assignment in first-seen order."""
    pal = list(palette or _PALETTE)
    out: dict[str, str] = {}
    for n in names:
        if n not in out:
            out[n] = pal[len(out) % len(pal)]
    return out


def _np(x: torch.Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@dataclass(frozen=True)
class PointSet:
    """Points of one dataset prepared for a scatter plot.

    Attributes
    ----------
    name
        Dataset name (legend / symbol), as typed: the figures escape it
        (:func:`geoviz.viz.literal.plotly_name`) where they draw it.
    points
        ``(N, 2)`` or ``(N, 3)`` coordinates.
    labels
        ``N`` class names (hard label; argmax for soft labels), as typed.
    confidence
        ``(N,)`` mass of that class (1 for hard labels), shown on hover.
    indices
        ``(N,)`` index of each point in its dataset (shown on hover and sent
        back by a click, see :func:`selected_samples`); ``None`` means
        ``0..N-1``.
    hover
        ``N`` extra hover lines, e.g. the top soft labels of each point
        (:func:`soft_label_summary`), plain text; ``None`` for none.
    """

    name: str
    points: np.ndarray
    labels: tuple[str, ...]
    confidence: np.ndarray
    indices: np.ndarray | None = None
    hover: tuple[str, ...] | None = None

    def sample_indices(self) -> np.ndarray:
        """``(N,)`` int64 index of each point in its dataset (``0..N-1`` when unknown)."""
        if self.indices is None:
            return np.arange(len(self.labels), dtype=np.int64)
        idx = np.asarray(self.indices, dtype=np.int64).ravel()
        if idx.shape[0] != len(self.labels):
            raise DatasetError(f"{len(self.labels)} points but {idx.shape[0]} indices", self.name)
        return idx


def soft_label_summary(
    soft_labels: np.ndarray | torch.Tensor, class_names: Sequence[str], top: int = 3
) -> list[str]:
    """Per row, the ``top`` largest soft labels with their mass.

    ``"kmnist/tsu 0.62 · fashion_mnist/Bag 0.21 · usps/3 0.10"``; classes
    whose mass rounds to ``0.00`` are left out (the top one is always named).
    """
    s = _np(soft_labels).astype(np.float64)
    if s.ndim != 2 or s.shape[1] != len(class_names):
        raise DatasetError(
            f"soft labels of shape {s.shape} do not match {len(class_names)} class names"
        )
    k = max(1, min(int(top), s.shape[1]))
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    out = []
    for row, idx in zip(s, order, strict=True):
        parts = [
            f"{class_names[int(j)]} {row[j]:.2f}"
            for n, j in enumerate(idx)
            if n == 0 or row[j] >= _SHOWN_MASS
        ]
        out.append(" · ".join(parts))
    return out


def point_set(
    ds: LabeledDataset | SoftLabeledDataset,
    points: np.ndarray | torch.Tensor | None = None,
    *,
    name: str | None = None,
    prefix_labels: bool = False,
    indices: np.ndarray | None = None,
) -> PointSet:
    """Make a :class:`PointSet` from a dataset (its own features, or given ``points``).

    ``prefix_labels`` writes hard labels as ``"name/class"`` so classes of
    different datasets never share a colour; soft-labelled sets already carry
    prefixed names. ``indices`` selects rows of the dataset (``points``, when
    given, are already those rows).

    The point set records each point's row in the dataset (``indices``, for
    hover and click selection) and, for soft-labelled sets, the top-3 soft
    labels with their mass as an extra hover line.
    """
    rows = slice(None) if indices is None else np.asarray(indices, dtype=np.int64).ravel()
    pts = _np(ds.features[rows] if points is None else points).astype(np.float64)
    hover = None
    if isinstance(ds, SoftLabeledDataset):
        soft = _np(ds.soft_labels)[rows]
        idx = soft.argmax(axis=1)
        labels = tuple(ds.class_names[int(k)] for k in idx)
        conf = soft[np.arange(len(idx)), idx]
        hover = tuple(soft_label_summary(soft, ds.class_names, top=3))
    else:
        y = _np(ds.labels)[rows]
        labels = tuple(
            (f"{ds.name}/{ds.classes[int(k)]}" if prefix_labels else ds.classes[int(k)]) for k in y
        )
        conf = np.ones(len(y))
    if pts.shape[0] != len(labels):
        raise DatasetError(f"{pts.shape[0]} points but {len(labels)} labels", name or ds.name)
    sample_idx = (
        np.arange(len(labels), dtype=np.int64) if indices is None else np.asarray(rows).copy()
    )
    return PointSet(name or ds.name, pts, labels, conf, indices=sample_idx, hover=hover)


def _legend_labels(
    label_lists: Sequence[Sequence[str]], max_legend: int
) -> tuple[list[str], set[str]]:
    """Sorted class names that get their own legend entry, and those merged into "other".

    When there are more than ``max_legend`` distinct classes, the
    ``max_legend - 1`` most frequent ones (over all sets) are kept and the rest
    share one ``other`` entry, so the legend fits inside the figure.
    """
    counts: dict[str, int] = {}
    for labels in label_lists:
        for lab in labels:
            counts[lab] = counts.get(lab, 0) + 1
    if len(counts) <= max_legend:
        return sorted(counts), set()
    ranked = sorted(counts, key=lambda lab: (-counts[lab], lab))
    keep = sorted(ranked[: max(1, max_legend - 1)])
    return keep, set(ranked[len(keep) :])


def _class_matches(label: str, wanted: set[str]) -> bool:
    """``label`` is one of ``wanted``, or its class part after ``"dataset/"`` is."""
    if label in wanted:
        return True
    return "/" in label and label.split("/", 1)[1] in wanted


def _highlight_mask(s: PointSet, sets: set[str], classes: set[str]) -> np.ndarray:
    """Points of ``s`` that stay highlighted (all of them when nothing is asked for)."""
    n = len(s.labels)
    if sets and s.name not in sets:
        return np.zeros(n, bool)
    if not classes:
        return np.ones(n, bool)
    return np.array([_class_matches(lab, classes) for lab in s.labels], dtype=bool).reshape(n)


def _hover_texts(s: PointSet, idx: np.ndarray) -> list[str]:
    """``"<b>P_a</b> · sample #12<br>class: usps/3 (0.62)<br>usps/3 0.62 · …"`` per point
    (the set's and classes' names escaped)."""
    if s.hover is not None and len(s.hover) != len(s.labels):
        raise DatasetError(f"{len(s.labels)} points but {len(s.hover)} hover texts", s.name)
    out = []
    for k, (lab, conf) in enumerate(zip(s.labels, s.confidence, strict=True)):
        soft = s.hover is not None
        text = f"<b>{plotly_name(s.name)}</b> · sample #{int(idx[k])}<br>class: {plotly_name(lab)}"
        if soft or conf < 1.0 - 1e-9:
            text += f" ({float(conf):.2f})"
        if soft and s.hover[k]:
            text += f"<br>{plotly_name(s.hover[k])}"
        out.append(text)
    return out


def scatter_sets(
    sets: Sequence[PointSet],
    *,
    color_by: str = "label",
    title: str | None = None,
    axis_titles: Sequence[str] = ("x₁", "x₂", "x₃"),
    height: int = 520,
    opacity: float = 0.75,
    marker_size: float = 6,
    faded: Sequence[str] = (),
    max_legend: int = 20,
    highlight_sets: Sequence[str] = (),
    highlight_classes: Sequence[str] = (),
    hide_others: bool = False,
    emphasis: str | None = None,
) -> go.Figure:
    """2-D or 3-D scatter of several point sets.

    Every trace carries ``customdata = [set name, sample index]`` per point,
    so a click reported by ``st.plotly_chart(on_select=...)`` maps back to
    the sample with :func:`selected_samples`; the hover names the set, the
    sample index, the class and, for soft-labelled sets, the top soft labels.

    Parameters
    ----------
    sets
        Point sets sharing a dimension (2 or 3); their names and classes are drawn
        escaped (:func:`geoviz.viz.literal.plotly_name`).
    title
        Plotly text (names in it escaped by the caller).
    color_by
        ``"label"``: colour = class, symbol = dataset; ``"dataset"``: colour = dataset.
    faded
        Names of sets drawn small and translucent (context, e.g. references
        behind an interpolation).
    max_legend
        With ``color_by="label"``: at most this many legend entries. Classes
        are listed sorted, each name once (one legend entry toggles the class
        in every dataset); beyond ``max_legend`` classes the least frequent
        share a grey ``other`` entry. The symbol of each dataset is named in
        an annotation under the plot.
    highlight_sets, highlight_classes
        When either is given, only points of these sets (all sets if empty)
        *and* of these classes (all classes if empty) keep their colour,
        opacity and size; the others are drawn grey and nearly transparent,
        below the highlighted ones and without a legend entry. A class
        matches by its full name (``"usps/3"``) or, for ``"dataset/class"``
        names, by the class part alone (``"3"`` matches ``"usps/3"`` and
        ``"mnist/3"``), so one class can be followed across Q, P_i and P_a.
    hide_others
        Leave the non-highlighted points out instead of greying them.
    emphasis
        Name of a set (e.g. ``"P_a"``) drawn last, on top of every other
        set, with larger markers and a dark outline.

    Returns
    -------
    plotly.graph_objects.Figure
        Greyed (non-highlighted) traces first, one per set; then one trace
        per set (``color_by="dataset"``) or per set and class; the
        ``emphasis`` set's traces last.
    """
    dim = _scatter_dim(sets, color_by)
    hl_sets = {str(x) for x in highlight_sets}
    hl_classes = {str(x) for x in highlight_classes}
    highlighting = bool(hl_sets or hl_classes)
    keep = [_highlight_mask(s, hl_sets, hl_classes) for s in sets]
    shown, merged = _legend_labels(
        [
            [lab for lab, k in zip(s.labels, m, strict=True) if k]
            for s, m in zip(sets, keep, strict=True)
        ],
        max(1, int(max_legend)),
    )
    other = f"other ({len(merged)} classes)"
    lab_colors = color_map(shown)
    lab_colors[other] = _OTHER_COLOR
    rank = {lab: k for k, lab in enumerate([*shown, other])}
    ds_colors = color_map([s.name for s in sets], _DATASET_PALETTE)
    plot = _ScatterTraces(sets, dim)

    # 1. greyed context below everything else
    if highlighting and not hide_others:
        for si, s in enumerate(sets):
            dim_mask = ~keep[si]
            if dim_mask.any():
                plot.add(
                    si,
                    dim_mask,
                    {"color": _DIM_COLOR, "size": marker_size * 0.8, "opacity": _DIM_OPACITY},
                    {"name": plotly_name(f"{s.name} (not highlighted)"), "showlegend": False},
                )

    # 2. highlighted (or all) points, the emphasised set last so it is on top
    order = [si for si, s in enumerate(sets) if s.name != emphasis]
    order += [si for si, s in enumerate(sets) if s.name == emphasis]
    in_legend: set[str] = set()
    for si in order:
        s = sets[si]
        if color_by == "label":
            keys = np.array([other if x in merged else x for x in s.labels], dtype=object)
            present = set(keys[keep[si]].tolist())
            groups = [(lab, (keys == lab) & keep[si]) for lab in [*shown, other] if lab in present]
        else:
            groups = [(s.name, keep[si])] if keep[si].any() else []
        for lab, mask in groups:
            if color_by == "label":
                color = lab_colors[lab]
                legend = {
                    "name": plotly_name(lab),
                    "legendgroup": plotly_name(lab),
                    "legendrank": 1000 + rank[lab],
                    "showlegend": lab not in in_legend,
                }
                in_legend.add(lab)
            else:
                color = ds_colors[s.name]
                legend = {"name": plotly_name(s.name), "legendgroup": plotly_name(s.name)}
            marker = _point_marker(
                color,
                marker_size,
                opacity,
                faded=s.name in faded,
                emphasised=emphasis is not None and s.name == emphasis,
            )
            plot.add(si, mask, marker, legend)

    fig = plot.fig
    if highlighting and hide_others and not fig.data:
        fig.add_annotation(
            text="no point matches the highlight",
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            showarrow=False,
        )
    if color_by == "label":
        _symbol_key(fig, sets, dim)
    _scatter_layout(fig, dim, title, height, axis_titles)
    return fig


_SYMBOLS_2D = ("circle", "diamond", "square", "x", "cross", "triangle-up", "star", "pentagon")
_SYMBOLS_3D = (
    "circle",
    "diamond",
    "square",
    "x",
    "cross",
    "circle-open",
    "diamond-open",
    "square-open",
)


def _scatter_dim(sets: Sequence[PointSet], color_by: str) -> int:
    """The sets' common dimension (2 or 3); :class:`DatasetError` for anything else."""
    if not sets:
        raise DatasetError("nothing to plot: no point sets")
    dims = {s.points.shape[1] for s in sets}
    if len(dims) != 1 or next(iter(dims)) not in (2, 3):
        raise DatasetError(
            f"scatter plots need 2-D or 3-D points of one dimension, got dims {sorted(dims)}"
        )
    if color_by not in ("label", "dataset"):
        raise DatasetError(f"color_by must be 'label' or 'dataset', got {color_by!r}")
    dim: int = next(iter(dims))
    return dim


class _ScatterTraces:
    """One figure's traces: each set's points under a mask, with its hover and customdata."""

    def __init__(self, sets: Sequence[PointSet], dim: int) -> None:
        self.sets, self.dim, self.fig = sets, dim, go.Figure()
        self.indices = [s.sample_indices() for s in sets]
        # hover texts escape the names; customdata keeps them as typed (never drawn: read
        # back by selected_samples to find the sample)
        self.hovers = [
            np.array(_hover_texts(s, i), dtype=object)
            for s, i in zip(sets, self.indices, strict=True)
        ]

    def add(self, si: int, mask: np.ndarray, marker: dict, common: dict) -> None:
        """Set ``si``'s points under ``mask``, in the set's symbol."""
        s = self.sets[si]
        texts = self.hovers[si][mask]
        custom = [[s.name, int(i)] for i in self.indices[si][mask]]
        p = s.points[mask]
        common = {
            "mode": "markers",
            **common,
            "text": list(texts),
            "customdata": custom,
            "hovertemplate": "%{text}<extra></extra>",
        }
        marker = dict(marker)
        if self.dim == 2:
            marker["symbol"] = _SYMBOLS_2D[si % len(_SYMBOLS_2D)]
            self.fig.add_trace(go.Scatter(x=p[:, 0], y=p[:, 1], marker=marker, **common))
        else:
            marker["symbol"] = _SYMBOLS_3D[si % len(_SYMBOLS_3D)]
            marker["size"] = marker["size"] * 0.6
            self.fig.add_trace(
                go.Scatter3d(x=p[:, 0], y=p[:, 1], z=p[:, 2], marker=marker, **common)
            )


def _point_marker(
    color: str, size: float, opacity: float, *, faded: bool, emphasised: bool
) -> dict[str, Any]:
    """A highlighted point's marker: faded sets small and translucent, the emphasised set
    large with a dark outline."""
    if emphasised:
        return {
            "color": color,
            "size": size * _EMPHASIS_SCALE,
            "opacity": max(opacity, 0.9),
            "line": {"width": 1.2, "color": _EMPHASIS_LINE},
        }
    return {
        "color": color,
        "size": size * (0.6 if faded else 1.0),
        "opacity": 0.25 if faded else opacity,
    }


def _symbol_key(fig: go.Figure, sets: Sequence[PointSet], dim: int) -> None:
    """Under the plot: which symbol each dataset has (colours are classes)."""
    symbols = _SYMBOLS_2D if dim == 2 else _SYMBOLS_3D
    key = " · ".join(
        f"{plotly_name(s.name)}: {symbols[si % len(_SYMBOLS_2D)]}" for si, s in enumerate(sets)
    )
    fig.add_annotation(
        text=f"symbol = dataset ({key})",
        xref="paper",
        yref="paper",
        x=0.0,
        y=-0.02,
        yshift=-40,
        xanchor="left",
        yanchor="top",
        showarrow=False,
        font={"size": 11},
    )
    fig.update_layout(
        legend={"title": {"text": "class"}, "font": {"size": 11}, "tracegroupgap": 0},
        margin={"b": 90},
    )


def _scatter_layout(
    fig: go.Figure, dim: int, title: str | None, height: int, axis_titles: Sequence[str]
) -> None:
    """Title, height, legend, click-to-select and the axes (equal scales in 2-D)."""
    fig.update_layout(
        title={"text": plotly_markup(title)} if title else None,
        height=height,
        legend={"itemsizing": "constant", "yanchor": "top", "y": 1.0},
        clickmode="event+select",
    )
    if dim == 2:
        fig.update_layout(
            xaxis={"title": {"text": axis_titles[0]}},
            yaxis={"title": {"text": axis_titles[1]}, "scaleanchor": "x", "scaleratio": 1},
        )
    else:
        fig.update_layout(
            scene={
                "xaxis": {"title": {"text": axis_titles[0]}},
                "yaxis": {"title": {"text": axis_titles[1]}},
                "zaxis": {"title": {"text": axis_titles[2]}},
            }
        )


def _get(obj: object, key: str) -> object:
    """``obj[key]`` for mappings (Streamlit's selection state is a dict), else ``obj.key``."""
    if isinstance(obj, dict):
        return obj.get(key)
    getter = getattr(obj, "get", None)
    if callable(getter):
        try:
            return getter(key)
        except (KeyError, TypeError):
            return None
    return getattr(obj, key, None)


def selected_samples(selection_state: object) -> list[tuple[str, int]]:
    """``(set name, sample index)`` of every point selected in a :func:`scatter_sets` figure.

    Reads the state returned by ``st.plotly_chart(fig, on_select="rerun")``:
    ``{"selection": {"points": [{"customdata": [name, index], ...}, ...]}}``;
    the inner ``{"points": [...]}`` or the bare list of points are accepted
    too. Missing keys, ``None`` and points without a ``[str, integer]``
    ``customdata`` (e.g. from another figure) are skipped; each sample is listed once, in
    selection order.
    """
    if selection_state is None:
        return []
    inner = _get(selection_state, "selection")
    container = selection_state if inner is None else inner
    points = container if isinstance(container, (list, tuple)) else _get(container, "points")
    if not isinstance(points, (list, tuple)):
        return []
    out: list[tuple[str, int]] = []
    for point in points:
        custom = _get(point, "customdata")
        if isinstance(custom, dict):
            # plotly.js arrays may reach Python through JSON as {"0": v0, "1": v1}
            custom = [custom.get("0", custom.get(0)), custom.get("1", custom.get(1))]
        if isinstance(custom, np.ndarray):
            custom = custom.tolist()
        if not isinstance(custom, (list, tuple)) or len(custom) < 2:
            continue
        name, index = custom[0], custom[1]
        if not isinstance(name, str) or isinstance(index, bool):
            continue  # e.g. weights of a ternary marker: not a scatter_sets point
        try:
            fidx = float(index)
        except (TypeError, ValueError):
            continue
        if not np.isfinite(fidx) or fidx != int(fidx):
            continue
        key = (str(name), int(fidx))
        if key not in out:
            out.append(key)
    return out


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
        s = _np(soft_label).astype(np.float64).ravel()
        if s.shape[0] != len(names):
            raise DatasetError(f"soft label of {s.shape[0]} entries but {len(names)} class names")
        k = max(1, min(int(top), s.shape[0]))
        order = [int(j) for j in np.argsort(-s, kind="stable")[:k]]
        order = [j for n, j in enumerate(order) if n == 0 or s[j] >= _SHOWN_MASS]
        bars = [(names[j], float(s[j])) for j in order]
        rest = float(s.sum() - sum(m for _, m in bars))
        if rest >= _SHOWN_MASS:
            bars.append((f"other ({s.shape[0] - len(order)} classes)", rest))
        axis_title = "soft-label mass"
    else:
        if label is None and len(names) != 1:
            raise DatasetError("a hard-labelled sample needs `label` (or a single class name)")
        bars = [(str(label) if label is not None else names[0], 1.0)]
        axis_title = "hard label"
    colors = ["#5b8db8" if not n.startswith("other (") else _OTHER_COLOR for n, _ in bars]
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
    colors = color_map([ds.name for ds in datasets], _DATASET_PALETTE)
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
    y = _np(target_labels).astype(np.int64).ravel()
    s = _np(soft_labels).astype(np.float64)
    if s.ndim != 2 or s.shape[0] != y.shape[0]:
        raise DatasetError(f"{y.shape[0]} target labels but soft labels of shape {s.shape}")
    if y.size and (y.min() < 0 or y.max() >= n_target_classes):
        raise DatasetError(f"target labels must lie in 0..{n_target_classes - 1}")
    onehot = np.zeros((y.shape[0], int(n_target_classes)))
    onehot[np.arange(y.shape[0]), y] = 1.0
    return onehot.T @ s / max(y.shape[0], 1)


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
    s = _np(soft_labels).astype(float)
    if s.ndim != 2 or s.shape[1] != len(class_names) or s.shape[0] != len(sample_names):
        raise DatasetError(
            f"soft labels of shape {s.shape} do not match {len(sample_names)} samples x {len(class_names)} classes"
        )
    keep = np.flatnonzero(s.max(axis=0) > min_mass)
    colors = color_map([class_names[k] for k in keep])
    rows = [plotly_name(n) for n in sample_names]
    fig = go.Figure()
    for k in keep:
        shown = plotly_name(class_names[k])
        fig.add_trace(
            go.Bar(
                y=rows,
                x=s[:, k],
                name=shown,
                orientation="h",
                marker={"color": colors[class_names[k]]},
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
    s = _np(soft_labels).astype(float)
    if s.ndim != 2 or s.shape[1] != len(class_names):
        raise DatasetError(
            f"soft labels of shape {s.shape} do not match {len(class_names)} class names"
        )
    mean = s.mean(axis=0)
    blocks = [str(c).split("/", 1)[0] if "/" in str(c) else "" for c in class_names]
    colors = color_map(blocks, _DATASET_PALETTE[1:])
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
