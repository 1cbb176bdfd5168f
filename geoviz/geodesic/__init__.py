"""Generalized geodesics in dataset space (paper Sec. 3.2-3.3).

* :mod:`~geoviz.geodesic.weights` — the weights ``a`` on the simplex: the one
  validator :func:`check_weights`, projection, uniform weights, formatting.
* :mod:`~geoviz.geodesic.labels` — the concatenated label space ``[P_1 | ... | P_m]``.
* :mod:`~geoviz.geodesic.interpolate` — ``P_a = (sum_i a_i T_i)#Q`` and McCann.
* :mod:`~geoviz.geodesic.mixup` — the Mixup baseline (random pairs instead of OTDD maps).
* :mod:`~geoviz.geodesic.distances` — (2,Q) distances (Def. 2), the objective
  ``W^2(P_a, Q)`` (eq. (ds_eq)), ``a_hat`` (eq. (hat_a)), simplex grids.
* :mod:`~geoviz.geodesic.pipeline` — :func:`fit_geodesic` (its stages: the OTDD maps, the
  (2,Q) distances, ``a_hat``); it re-exports :class:`GeodesicConfig`
  (:mod:`~geoviz.geodesic.config`) and :class:`GeodesicResult` (:mod:`~geoviz.geodesic.result`).
* :mod:`~geoviz.geodesic.spec` — :class:`GeodesicSpec` (datasets and options of one
  problem, built by every front-end) and :func:`load_spec_datasets`.

The commands ``geoviz distance | project | grid`` are in :mod:`geoviz.cli.geodesic`.

The pipeline names are imported lazily so that the pure-math parts do not pull
in the OT engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from geoviz.geodesic.distances import (
    TwoQDistances,
    objective,
    optimal_weights,
    simplex_grid,
    two_q_distances,
)
from geoviz.geodesic.interpolate import generalized_geodesic_dataset, mccann_dataset
from geoviz.geodesic.labels import LabelSpace, label_space, pad_labels, unique_names
from geoviz.geodesic.mixup import mixup_interpolation
from geoviz.geodesic.weights import (
    check_weights,
    format_weights,
    project_to_simplex,
    uniform_weights,
)

if TYPE_CHECKING:
    from geoviz.geodesic.pipeline import GeodesicConfig, GeodesicResult, fit_geodesic
    from geoviz.geodesic.spec import GeodesicSpec, SpecDatasets, load_spec_datasets

__all__ = [
    "GeodesicConfig",
    "GeodesicResult",
    "GeodesicSpec",
    "LabelSpace",
    "SpecDatasets",
    "TwoQDistances",
    "check_weights",
    "fit_geodesic",
    "format_weights",
    "generalized_geodesic_dataset",
    "label_space",
    "load_spec_datasets",
    "mccann_dataset",
    "mixup_interpolation",
    "objective",
    "optimal_weights",
    "pad_labels",
    "project_to_simplex",
    "simplex_grid",
    "two_q_distances",
    "uniform_weights",
    "unique_names",
]

_LAZY = {"GeodesicConfig", "GeodesicResult", "fit_geodesic"}
_LAZY_SPEC = {"GeodesicSpec", "SpecDatasets", "load_spec_datasets"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from geoviz.geodesic import pipeline

        return getattr(pipeline, name)
    if name in _LAZY_SPEC:
        from geoviz.geodesic import spec

        return getattr(spec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
