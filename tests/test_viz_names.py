"""Names in figures are text (issue 32, item 6): no link, tag or template placeholder.

Plotly reads a subset of HTML in every text it draws (titles, legend entries, tick
labels, annotations, hovers) and fills ``%{...}`` placeholders of hover templates. Every
figure builder of :mod:`geoviz.viz` is built twice, once with hostile dataset and class
names and once with plain ones of the same shape; walking the whole figure
(``fig.to_dict()``: data and layout), the hostile build may not hold one more tag or
placeholder than the plain one, and it shows the names escaped. ``customdata`` is not
drawn (:func:`geoviz.viz.scatter.selected_samples` reads the set name back from it) and
keeps names as typed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from geoviz.backend import DiskCache
from geoviz.data.dataset import LabeledDataset, SoftLabeledDataset
from geoviz.viz.compare import mixup_comparison, side_by_side_scatter
from geoviz.viz.images import image_grid, mapped_samples_grid, sample_captions, soft_label_captions
from geoviz.viz.literal import plotly_markup, plotly_name
from geoviz.viz.neighbours import plan_neighbours_grid, plan_neighbours_scatter
from geoviz.viz.plots import (
    class_histograms,
    label_mass_bars,
    label_transition,
    label_transition_heatmap,
    otdd_heatmap,
    soft_label_bars,
)
from geoviz.viz.point_sets import PointSet, point_set
from geoviz.viz.report import plotly_literal
from geoviz.viz.sample_card import sample_card
from geoviz.viz.scatter import scatter_sets

LINK = '<a href="http://x">c</a>'
BOLD = "<b>b</b>"
TEMPLATE = "%{x}"
SPAN = '<span style="color:red">s</span>'
#: dataset names (Q, P1, P2) and class names of the hostile build
HOSTILE_NAMES = (LINK, BOLD, TEMPLATE)
HOSTILE_CLASSES = (LINK, BOLD, TEMPLATE, SPAN)


def _plain(names: tuple[str, ...]) -> tuple[str, ...]:
    """Names of the same shape: same lengths, and ``/`` where the hostile ones have it
    (prefixes ``"dataset/class"`` split there), the other characters letters."""
    return tuple(re.sub(r"[^/]", "z", n) for n in names)


PLAIN_NAMES = _plain(HOSTILE_NAMES)
PLAIN_CLASSES = _plain(HOSTILE_CLASSES)
#: what a name could make Plotly act on
PATTERNS = ("<a", "<b>", "<span", "%{x}", "%{")

Names = tuple[str, ...]
Builder = Callable[[Names, Names], "go.Figure | list[go.Figure]"]


def _strings(value: Any, key: str = "") -> Iterator[str]:
    """Every string of a figure's dict, ``customdata`` (never drawn) left out."""
    if key == "customdata":
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v, key)
    elif isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        for v in value.ravel().tolist():
            yield from _strings(v, key)


def _text(figs: go.Figure | list[go.Figure]) -> list[str]:
    figs = figs if isinstance(figs, list) else [figs]
    assert figs, "no figure"
    return [s for fig in figs for s in _strings(fig.to_dict())]


# ---------------------------------------------------------------- data


def _labeled(name: str, classes: Names, seed: int, n: int = 24, dim: int = 2) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % len(classes)
    x = 3.0 * np.eye(max(dim, len(classes)))[y][:, :dim] + 0.3 * rng.normal(size=(n, dim))
    return LabeledDataset(x.astype(np.float32), y, classes, name=name)


def _image_set(name: str, classes: Names, seed: int, n: int = 24) -> LabeledDataset:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % len(classes)
    x = rng.random((n, 16)).astype(np.float32) * 0.5 + (y[:, None] / len(classes)) * 0.5
    return LabeledDataset(x, y, classes, name=name, image_shape=(1, 4, 4))


def _soft(names: Names, classes: Names, n: int = 24) -> tuple[np.ndarray, list[str]]:
    """Soft labels over ``"dataset/class"`` names of the two references, like P_a's."""
    full = [f"{d}/{c}" for d in names[1:] for c in classes]
    rng = np.random.default_rng(3)
    s = rng.random((n, len(full))) ** 4
    return s / s.sum(axis=1, keepdims=True), full


def _soft_set(names: Names, classes: Names, dim: int = 2) -> SoftLabeledDataset:
    s, full = _soft(names, classes)
    x = np.random.default_rng(4).normal(size=(s.shape[0], dim)).astype(np.float32)
    return SoftLabeledDataset(torch.from_numpy(x), torch.from_numpy(s).float(), tuple(full), "P_a")


# ---------------------------------------------------------------- figures (called as the pages do)


def _scatter_by_label(names: Names, classes: Names) -> go.Figure:
    q, p = _labeled(names[0], classes, 0), _labeled(names[1], classes, 1)
    sets = [point_set(q, prefix_labels=True), point_set(p), point_set(_soft_set(names, classes))]
    return scatter_sets(sets, highlight_classes=[classes[0]], emphasis="P_a")


def _scatter_by_dataset_3d(names: Names, classes: Names) -> go.Figure:
    sets = [point_set(_labeled(n, classes, k, dim=3)) for k, n in enumerate(names)]
    return scatter_sets(sets, color_by="dataset", highlight_sets=[names[0]], faded=[names[1]])


def _sample_cards(names: Names, classes: Names) -> list[go.Figure]:
    s, full = _soft(names, classes)
    title = f"{plotly_literal(names[0])} · sample #3"  # the caller's Plotly text
    return [
        sample_card(np.random.default_rng(0).random((4, 4)), title, s[3], full, top=8),
        sample_card(None, title, None, classes, label=classes[1]),
    ]


def _histograms(names: Names, classes: Names) -> go.Figure:
    return class_histograms([_labeled(n, classes, k) for k, n in enumerate(names)])


def _otdd_heatmap(names: Names, classes: Names) -> go.Figure:
    return otdd_heatmap(np.arange(9.0).reshape(3, 3), list(names))


def _transition(names: Names, classes: Names) -> go.Figure:
    q = _labeled(names[0], classes, 0)
    s = np.random.default_rng(0).dirichlet(np.ones(len(classes)), size=q.n_samples)
    return label_transition_heatmap(
        label_transition(q.labels, s, q.n_classes),
        q.classes,
        classes,
        target_name=f"Q ({plotly_literal(names[0])})",  # as the Maps page passes them
        reference_name=plotly_literal(names[1]),
    )


def _soft_bars(names: Names, classes: Names) -> go.Figure:
    s, full = _soft(names, classes)
    rows = [f"#{i} ({classes[i % len(classes)]})" for i in range(5)]
    return soft_label_bars(s[:5], full, rows, min_mass=0.0, title="Soft labels of T1(x)")


def _mass_bars(names: Names, classes: Names) -> go.Figure:
    s, full = _soft(names, classes)
    return label_mass_bars(s, full)


def _grid_hard(names: Names, classes: Names) -> go.Figure:
    ds = _image_set(names[0], classes, 0)
    images = ds.features.numpy().reshape(-1, 4, 4)[:8]
    return image_grid(
        images,
        sample_captions(ds.labels[:8], ds.classes),
        ncols=4,
        title=f"{plotly_literal(names[0])}: first 8",
    )


def _grid_soft(names: Names, classes: Names) -> go.Figure:
    s, full = _soft(names, classes)
    images = np.random.default_rng(0).random((8, 4, 4))
    return image_grid(images, soft_label_captions(s[:8], full, two_lines=True), ncols=4)


def _mapped_grid(names: Names, classes: Names) -> go.Figure:
    s, full = _soft(names, classes)
    rng = np.random.default_rng(0)
    mapped = [
        (
            f"T{i + 1}(x)<br>{plotly_literal(name)}",
            rng.random((3, 4, 4)),
            soft_label_captions(s[:3], full),
        )
        for i, name in enumerate(names[1:])
    ]
    return mapped_samples_grid(
        rng.random((3, 4, 4)), sample_captions(np.arange(3), classes), mapped, title="rows"
    )


def _panels(names: Names, classes: Names) -> go.Figure:
    q, p = _labeled(names[0], classes, 0), _labeled(names[1], classes, 1)
    mapped = PointSet(
        "T1#Q",
        q.features.numpy().astype(float),
        tuple(f"{names[1]}/{classes[int(k)]}" for k in q.labels),
        np.ones(q.n_samples),
    )
    panels = [
        ("Q", [point_set(q, name="Q")]),
        (f"T1#Q → {names[1]}", [point_set(p, name=f"{names[1]} samples"), mapped]),
    ]
    return side_by_side_scatter(panels, faded=[f"{names[1]} samples"], title="Q and its images")


def _mixup(names: Names, classes: Names) -> go.Figure:
    q = _labeled(names[0], classes, 0)
    refs = [_labeled(n, classes, k + 1) for k, n in enumerate(names[1:])]
    pa, naive = _soft_set(names, classes), _soft_set(names, classes)
    return mixup_comparison(q, refs, pa, naive, list(names[1:]), "Same weights a = (0.5, 0.5)")


def _neighbours(names: Names, classes: Names) -> list[go.Figure]:
    rng = np.random.default_rng(0)
    w = np.array([[0.6, 0.4], [1.0, 0.0]])
    grid = plan_neighbours_grid(
        rng.random((2, 4, 4)),
        [f"#0 · {c}" for c in sample_captions(np.arange(2), classes)],
        rng.random((2, 2, 4, 4)),
        w,
        rng.random((2, 4, 4)),
        np.array([1.9, 1.0]),
        neighbour_captions=[sample_captions(np.arange(2), classes)] * 2,
        title=f"over {plotly_literal(names[1])}",
    )
    scatter = plan_neighbours_scatter(
        rng.random((2, 2)),
        rng.random((2, 2, 2)),
        w,
        rng.random((2, 2)),
        np.array([1.9, 1.0]),
        reference_points=rng.random((10, 2)),
        target_labels=list(classes[:2]),
        reference_name=names[1],
        map_name=plotly_markup(f"T1(x) {plotly_literal(names[2])}"),
    )
    return [grid, scatter]


def _fitted(names: Names, classes: Names, images: bool, cache_dir) -> Any:
    from geoviz.geodesic.pipeline import fit_geodesic

    make = _image_set if images else _labeled
    q = make(names[0], classes, 0)
    refs = [make(n, classes, k + 1) for k, n in enumerate(names[1:])]
    return fit_geodesic(q, refs, cache=DiskCache(cache_dir))


def _fitted_figures(names: Names, classes: Names, images: bool, cache_dir) -> list[go.Figure]:
    from geoviz.viz import fitted_maps

    res = _fitted(names, classes, images, cache_dir)
    idx = np.array([0, 5])
    return [
        fitted_maps.plan_neighbours_figure(res, 0, idx, 2),
        fitted_maps.nearest_reference_figure(res, 1, idx, 2),
        *fitted_maps.side_by_side_figures(res, res, idx),
    ]


def _studies(names: Names, classes: Names) -> list[go.Figure]:
    from geoviz.transfer.study import GridStudy
    from geoviz.transfer.study_stats import GridPoint
    from geoviz.viz.study_figure import correlation_figure

    figs = []
    for m in (2, 3):
        weights = np.eye(m)
        points = tuple(
            GridPoint(i, tuple(w), 0.1 * (i + 1), (0.5, 0.6), 1.0) for i, w in enumerate(weights)
        )
        study = GridStudy(
            points, 0.5, 0.5, "tiny", 2, (0, 1), 1, reference_names=names[:m], note=classes[1]
        )
        figs.append(correlation_figure(study))
        figs.append(correlation_figure(study, kind="scatter", label=f"Q = {names[0]}"))
    return figs


CASES: dict[str, tuple[Builder, Names]] = {
    # figure: (builder, the hostile strings it must show, escaped)
    "scatter by label": (_scatter_by_label, (LINK, BOLD, TEMPLATE, SPAN)),
    "scatter by dataset 3d": (_scatter_by_dataset_3d, (LINK, BOLD, TEMPLATE, SPAN)),
    "sample cards": (_sample_cards, (LINK, BOLD, TEMPLATE, SPAN)),
    "class histograms": (_histograms, (LINK, BOLD, TEMPLATE, SPAN)),
    "otdd heatmap": (_otdd_heatmap, HOSTILE_NAMES),
    "label transition": (_transition, (LINK, BOLD, SPAN, TEMPLATE)),
    "soft-label bars": (_soft_bars, (BOLD, TEMPLATE, SPAN, LINK)),
    "label mass bars": (_mass_bars, (BOLD, TEMPLATE, SPAN, LINK)),
    "image grid, hard labels": (_grid_hard, (LINK, BOLD, TEMPLATE, SPAN)),
    "image grid, soft labels": (_grid_soft, (TEMPLATE,)),
    "mapped samples grid": (_mapped_grid, (BOLD, TEMPLATE, LINK, SPAN)),
    "side-by-side panels": (_panels, (BOLD, LINK, TEMPLATE, SPAN)),
    "mixup comparison": (_mixup, (BOLD, TEMPLATE, LINK, SPAN)),
    "plan neighbours": (_neighbours, (BOLD, TEMPLATE, LINK)),
    "correlation figures": (_studies, (LINK, BOLD, TEMPLATE)),
}


def _check(hostile: list[str], plain: list[str], shown: Names) -> None:
    h, p = "\n".join(hostile), "\n".join(plain)
    for pattern in PATTERNS:
        # the figure's own markup and templates are in both builds; a name adds none
        assert h.count(pattern) == p.count(pattern), (pattern, [s for s in hostile if pattern in s])
    for raw in (LINK, BOLD, SPAN):
        assert raw not in h, [s for s in hostile if raw in s]
    for name in shown:
        # shown escaped (captions cut long names after 8 characters or more)
        assert plotly_name(name[:8]) in h, (name, plotly_name(name[:8]))


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_names_are_text_in_every_figure(case):
    build, shown = CASES[case]
    hostile = _text(build(HOSTILE_NAMES, HOSTILE_CLASSES))
    plain = _text(build(PLAIN_NAMES, PLAIN_CLASSES))
    _check(hostile, plain, shown)


@pytest.mark.parametrize("images", [False, True], ids=["vectors", "images"])
def test_hostile_names_are_text_in_the_fitted_map_figures(images, tmp_path):
    hostile = _text(_fitted_figures(HOSTILE_NAMES, HOSTILE_CLASSES, images, tmp_path / "h"))
    plain = _text(_fitted_figures(PLAIN_NAMES, PLAIN_CLASSES, images, tmp_path / "p"))
    _check(hostile, plain, (LINK, BOLD, TEMPLATE) if images else (BOLD, TEMPLATE))


def test_selection_still_reads_the_set_name_as_typed():
    """customdata keeps the name (not drawn): a click maps back to the dataset."""
    from geoviz.viz.scatter import selected_samples

    fig = _scatter_by_dataset_3d(HOSTILE_NAMES, HOSTILE_CLASSES)
    trace = next(t for t in fig.data if t.showlegend is not False and len(t.customdata))
    point = {"customdata": list(trace.customdata[0])}
    assert selected_samples({"selection": {"points": [point]}})[0][0] in HOSTILE_NAMES


@pytest.mark.parametrize("text", [LINK, BOLD, TEMPLATE, SPAN, "a & b\nc", "50% {y}"])
def test_plotly_name_is_plotly_literal_with_percent_as_a_reference(text):
    assert plotly_name(text) == plotly_literal(text).replace("%", "&#37;")
    assert "%" not in plotly_name(text) and "<" not in plotly_name(text)
    assert plotly_markup(plotly_markup(f"<b>{text}</b>")) == plotly_markup(f"<b>{text}</b>")


def test_a_reference_named_by_its_role_is_titled_once():
    """The Maps page's titles: "P2: usps", but "P2" (not "P2: P2") for a vector preset's
    reference, and a hostile name stays escaped (issue 45)."""
    from geoviz.viz.fitted_maps import _role_title

    assert _role_title(1, "usps") == "P2: usps"
    assert _role_title(1, "P2") == "P2"
    assert _role_title(0, "P2") == "P1: P2"
    assert "<b>" not in _role_title(0, "<b>x</b>")
