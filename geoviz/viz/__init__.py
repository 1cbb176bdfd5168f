"""Plotly figure builders for geoviz (no Streamlit import here).

* :mod:`geoviz.viz.images` — tiled image grids with captions.
* :mod:`geoviz.viz.neighbours` — what a mapped point is made of: its largest
  plan weights over the reference (sharp vs blurry maps).
* :mod:`geoviz.viz.plots` — class histograms, OTDD and label-transition heatmaps,
  soft-label bars; the one import path of every builder below it too.
* :mod:`geoviz.viz.point_sets` — :class:`PointSet` (a dataset's points for a scatter),
  the palettes.
* :mod:`geoviz.viz.scatter` — the embedding scatter (:func:`scatter_sets`): hover,
  highlight and click selection (:func:`selected_samples`).
* :mod:`geoviz.viz.sample_card` — a one-sample card (:func:`sample_card`).
* :mod:`geoviz.viz.embedding` — a UMAP (or PCA) embedding fitted once, reused
  for new points.
* :mod:`geoviz.viz.compare` — OT-map interpolation vs naive mixup.
* :mod:`geoviz.viz.literal` — names as Plotly text: every builder draws the dataset,
  class and reference names it is given escaped (no tag, link or template placeholder
  of a name); titles and captions are the caller's Plotly text.

The weight simplex itself (``W^2(P_a, Q)`` over the weights, the pick, â and its region,
the figure export) is drawn in the browser by the explorer (the ES modules of
``geoviz/explorer/frontend/``, entry ``explorer.js``), the product's one renderer of it.
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
    class_histograms,
    label_mass_bars,
    label_transition,
    label_transition_heatmap,
    otdd_heatmap,
    soft_label_bars,
)
from geoviz.viz.point_sets import PointSet, point_set, soft_label_summary
from geoviz.viz.sample_card import sample_card
from geoviz.viz.scatter import scatter_sets, selected_samples

__all__ = [
    "Embedding",
    "PointSet",
    "as_display_images",
    "class_histograms",
    "fit_embedding",
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
    "sample_captions",
    "sample_card",
    "scatter_sets",
    "selected_samples",
    "side_by_side_scatter",
    "soft_label_bars",
    "soft_label_captions",
    "soft_label_summary",
    "tile_images",
]
