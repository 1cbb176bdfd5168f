"""The embedding scatter: point sets in 2-D or 3-D, coloured by class or dataset.

:func:`scatter_sets` draws several :class:`~geoviz.viz.point_sets.PointSet` in one figure
(a symbol per set, a colour per class, an optional highlight of sets and classes and one
emphasised set on top); every point carries its set's name and sample index, which
:func:`selected_samples` reads back from a click or box selection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypedDict

import numpy as np
import plotly.graph_objects as go
from numpy.typing import NDArray

from geoviz.errors import DatasetError
from geoviz.viz.literal import plotly_markup, plotly_name
from geoviz.viz.point_sets import DATASET_PALETTE, OTHER_COLOR, PointSet, color_map

__all__ = ["scatter_sets", "selected_samples"]

_DIM_COLOR = "#909090"
#: Opacity of points outside a highlight (``scatter_sets(highlight_...)``).
_DIM_OPACITY = 0.2
_EMPHASIS_LINE = "#111111"
_EMPHASIS_SCALE = 1.35


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
        text = f"<b>{plotly_name(s.name)}</b> · sample #{int(idx[k])}<br>class: {plotly_name(lab)}"
        if s.hover is not None or conf < 1.0 - 1e-9:  # soft labels: the mass of the class
            text += f" ({float(conf):.2f})"
        if s.hover is not None and s.hover[k]:
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
    classes = _ClassLegend.of(sets, keep, max(1, int(max_legend)))
    ds_colors = color_map([s.name for s in sets], DATASET_PALETTE)
    plot = _ScatterTraces(sets, dim)

    if highlighting and not hide_others:
        _add_greyed(plot, keep, marker_size)  # 1. greyed context below everything else

    # 2. highlighted (or all) points, the emphasised set last so it is on top
    order = [si for si, s in enumerate(sets) if s.name != emphasis]
    order += [si for si, s in enumerate(sets) if s.name == emphasis]
    in_legend: set[str] = set()
    for si in order:
        s = sets[si]
        marker = partial(
            _point_marker,
            size=marker_size,
            opacity=opacity,
            faded=s.name in faded,
            emphasised=emphasis is not None and s.name == emphasis,
        )
        if color_by == "label":
            for lab, mask in classes.groups(s, keep[si]):
                entry = classes.entry(lab, first=lab not in in_legend)
                plot.add(si, mask, marker(classes.colors[lab]), entry)
                in_legend.add(lab)
        elif keep[si].any():
            entry = {"name": plotly_name(s.name), "legendgroup": plotly_name(s.name)}
            plot.add(si, keep[si], marker(ds_colors[s.name]), entry)

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


class _Marker(TypedDict, total=False):
    """A trace's Plotly ``marker``."""

    color: str
    size: float
    opacity: float
    line: dict[str, float | str]
    symbol: str


class _LegendEntry(TypedDict, total=False):
    """How a trace appears in the legend (Plotly trace attributes)."""

    name: str
    legendgroup: str
    legendrank: int
    showlegend: bool


@dataclass(frozen=True)
class _ClassLegend:
    """The classes of a ``color_by="label"`` scatter: their colours and legend entries.

    ``shown`` classes (sorted) have an entry each; the ``merged`` ones share the grey
    ``other`` entry (:func:`_legend_labels`).
    """

    shown: list[str]
    merged: set[str]
    other: str
    colors: dict[str, str]
    rank: dict[str, int]

    @classmethod
    def of(
        cls, sets: Sequence[PointSet], keep: Sequence[NDArray[np.bool_]], max_legend: int
    ) -> _ClassLegend:
        """The legend of the kept points (``keep[i]``: a mask of ``sets[i]``)."""
        shown, merged = _legend_labels(
            [
                [lab for lab, k in zip(s.labels, m, strict=True) if k]
                for s, m in zip(sets, keep, strict=True)
            ],
            max_legend,
        )
        other = f"other ({len(merged)} classes)"
        colors = color_map(shown)
        colors[other] = OTHER_COLOR
        rank = {lab: k for k, lab in enumerate([*shown, other])}
        return cls(shown, merged, other, colors, rank)

    def groups(self, s: PointSet, keep: NDArray[np.bool_]) -> list[tuple[str, NDArray[np.bool_]]]:
        """The kept points of ``s`` by legend class (merged ones as ``other``), legend order."""
        keys = np.array([self.other if x in self.merged else x for x in s.labels], dtype=object)
        present = set(keys[keep].tolist())
        return [(lab, (keys == lab) & keep) for lab in [*self.shown, self.other] if lab in present]

    def entry(self, lab: str, *, first: bool) -> _LegendEntry:
        """Class ``lab``'s legend entry: one per class (``first``), toggling it in every set."""
        return {
            "name": plotly_name(lab),
            "legendgroup": plotly_name(lab),
            "legendrank": 1000 + self.rank[lab],
            "showlegend": first,
        }


def _add_greyed(plot: _ScatterTraces, keep: Sequence[NDArray[np.bool_]], size: float) -> None:
    """Each set's points outside the highlight, grey and nearly transparent, no legend."""
    for si, s in enumerate(plot.sets):
        dim_mask = ~keep[si]
        if dim_mask.any():
            plot.add(
                si,
                dim_mask,
                {"color": _DIM_COLOR, "size": size * 0.8, "opacity": _DIM_OPACITY},
                {"name": plotly_name(f"{s.name} (not highlighted)"), "showlegend": False},
            )


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

    def add(self, si: int, mask: NDArray[np.bool_], marker: _Marker, legend: _LegendEntry) -> None:
        """Set ``si``'s points under ``mask``, in the set's symbol."""
        s = self.sets[si]
        texts = self.hovers[si][mask]
        custom = [[s.name, int(i)] for i in self.indices[si][mask]]
        p = s.points[mask]
        common = {
            "mode": "markers",
            **legend,
            "text": list(texts),
            "customdata": custom,
            "hovertemplate": "%{text}<extra></extra>",
        }
        if self.dim == 2:
            marker = {**marker, "symbol": _SYMBOLS_2D[si % len(_SYMBOLS_2D)]}
            self.fig.add_trace(go.Scatter(x=p[:, 0], y=p[:, 1], marker=marker, **common))
        else:
            marker = {**marker, "symbol": _SYMBOLS_3D[si % len(_SYMBOLS_3D)]}
            marker["size"] = marker["size"] * 0.6
            self.fig.add_trace(
                go.Scatter3d(x=p[:, 0], y=p[:, 1], z=p[:, 2], marker=marker, **common)
            )


def _point_marker(
    color: str, size: float, opacity: float, *, faded: bool, emphasised: bool
) -> _Marker:
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
