"""Plotly figure builders for geoviz (no Streamlit import here).

* :mod:`geoviz.viz.ternary` — ``W^2(P_a, Q)`` over the simplex (ternary heatmap,
  line for ``m = 2``) and the weights bar; iso-lines by marching triangles.
* :mod:`geoviz.viz.images` — tiled image grids with captions.
* :mod:`geoviz.viz.neighbours` — what a mapped point is made of: its largest
  plan weights over the reference (sharp vs blurry maps).
* :mod:`geoviz.viz.plots` — scatter plots, class histograms, OTDD and
  label-transition heatmaps, soft-label bars; hover, highlight and click
  selection (:func:`selected_samples`) of the embedding scatter, and a
  one-sample card (:func:`sample_card`).
* :mod:`geoviz.viz.embedding` — a UMAP (or PCA) embedding fitted once, reused
  for new points.
* :mod:`geoviz.viz.compare` — OT-map interpolation vs naive mixup.
* :mod:`geoviz.viz.weights` — pure logic of the weight widgets.
"""

from geoviz.viz.compare import side_by_side_scatter
from geoviz.viz.embedding import Embedding, fit_embedding
from geoviz.viz.images import (
    as_display_images,
    image_grid,
    mapped_samples_grid,
    sample_captions,
    soft_label_captions,
    tile_images,
)
from geoviz.viz.neighbours import (
    neighbour_weight_caption,
    plan_neighbours_grid,
    plan_neighbours_scatter,
)
from geoviz.viz.plots import (
    PointSet,
    class_histograms,
    label_mass_bars,
    label_transition,
    label_transition_heatmap,
    otdd_heatmap,
    point_set,
    sample_card,
    scatter_sets,
    selected_samples,
    soft_label_bars,
    soft_label_summary,
)
from geoviz.viz.ternary import (
    OBJECTIVE_LABEL,
    contour_levels,
    geodesic_line,
    simplex_contours,
    ternary_heatmap,
    weights_bar,
)
from geoviz.viz.weights import selection_signature, sync_weights, weights_from_selection

__all__ = [
    "OBJECTIVE_LABEL",
    "Embedding",
    "PointSet",
    "as_display_images",
    "class_histograms",
    "contour_levels",
    "fit_embedding",
    "format_weights",
    "geodesic_line",
    "image_grid",
    "label_mass_bars",
    "label_transition",
    "label_transition_heatmap",
    "mapped_samples_grid",
    "neighbour_weight_caption",
    "otdd_heatmap",
    "plan_neighbours_grid",
    "plan_neighbours_scatter",
    "point_set",
    "project_to_simplex",
    "round_to_simplex",
    "sample_captions",
    "sample_card",
    "scatter_sets",
    "selected_samples",
    "selection_signature",
    "side_by_side_scatter",
    "simplex_contours",
    "soft_label_bars",
    "soft_label_captions",
    "soft_label_summary",
    "sync_weights",
    "ternary_heatmap",
    "tile_images",
    "uniform_weights",
    "weights_bar",
    "weights_from_selection",
]
