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

Example
-------
The whole chain on a line: two maps move a 1-D target by 2 and by -1 and keep every label
(label distances 0 between a class and itself, 5 otherwise). The (2,Q) distances are
``W_1 = 4``, ``W_2 = 1``, ``W_12 = 9``; ``a_hat = (1/3, 2/3)`` and ``P_a`` lands on the
target:

>>> import torch
>>> from geoviz.geodesic import (
...     generalized_geodesic_dataset, label_space, optimal_weights, two_q_distances,
... )
>>> x, y = torch.tensor([[0.0], [1.0]]), torch.tensor([0, 1])
>>> one_hot, m = torch.eye(2), torch.tensor([[0.0, 5.0], [5.0, 0.0]])
>>> d = two_q_distances(x, y, [x + 2, x - 1], [one_hot, one_hot], [m, m], {(0, 1): m})
>>> d.w_to_target, d.w_between
(array([4., 1.]), array([[0., 9.],
       [9., 0.]]))
>>> a_hat = optimal_weights(d.w_to_target, d.w_between)
>>> a_hat.round(4)
array([0.3333, 0.6667])
>>> space = label_space([("P1", ["0", "1"]), ("P2", ["0", "1"])])
>>> p_a = generalized_geodesic_dataset([x + 2, x - 1], [one_hot, one_hot], a_hat, space)
>>> torch.allclose(p_a.features, x, atol=1e-6)
True
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
    from geoviz.geodesic.config import GeodesicConfig
    from geoviz.geodesic.pipeline import fit_geodesic
    from geoviz.geodesic.result import GeodesicResult
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
