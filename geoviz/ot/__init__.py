"""Optimal-transport engine: label distances, stabilised Sinkhorn and OTDD.

* :func:`label_distances` — ``(C_a, C_b)`` squared W2 between class-conditional
  feature laws (Bures-Wasserstein or exact), paper Sec. 2.2.
* :class:`DenseCost`, :class:`PointCloudCost` — cost geometries (stored, or
  evaluated by row blocks).
* :class:`TransportProblem` -> :class:`Sinkhorn` -> :class:`SinkhornResult` —
  stabilised entropic OT with a marginal-error tolerance, one loop over a dense,
  truncated-sparse or online kernel (strategies :class:`KernelPolicy`,
  :class:`EpsilonScaling`, :class:`MultiscaleStart`); :func:`sinkhorn` is the
  functional shortcut.
* :func:`otdd` with :class:`OTDDConfig` / :class:`OTDDResult` — the OTDD
  coupling, cost and barycentric outputs (full, batched, streamed).

Conventions: squared Euclidean ground cost without 1/2; ``OTDDConfig.epsilon`` is
relative to the mean of the ground-cost matrix; a cost geometry holds epsilon
(relative or absolute) and resolves ``epsilon_abs`` once; ``sinkhorn`` takes an
absolute ``epsilon_abs``.

Example
-------
The OTDD from a dataset to a copy translated by ``t = (3, 0)``: each point goes to its own
image, at the cost ``|t|^2 = 9`` for the features plus ``W_2^2 = 9`` between its class and
the translated class; the barycentric projection is the translation and keeps the labels:

>>> import numpy as np, torch
>>> from geoviz.data.dataset import LabeledDataset
>>> from geoviz.ot import otdd
>>> rng = np.random.default_rng(0)
>>> x, y = rng.normal(size=(40, 2)), np.arange(40) % 2
>>> q = LabeledDataset(x + 4 * y[:, None], y, ("a", "b"), name="Q")
>>> p = LabeledDataset(x + 4 * y[:, None] + [3.0, 0.0], y, ("a", "b"), name="P")
>>> res = otdd(q, p, barycentric=True)
>>> round(res.cost)
18
>>> torch.allclose(res.mapped_features, p.features, atol=0.1)
True
>>> res.soft_labels.argmax(1).tolist() == y.tolist()
True
"""

from geoviz.ot.geometry import CostGeometry, DenseCost, PointCloudCost
from geoviz.ot.labels import class_samples, gaussian_w2, label_distances
from geoviz.ot.loop import SinkhornCallback
from geoviz.ot.otdd import ProgressFn, otdd
from geoviz.ot.otdd_cost import OTDDConfig, check_compatible, ground_cost, mean_ground_cost
from geoviz.ot.otdd_result import OTDDResult
from geoviz.ot.problem import TransportProblem, uniform_measure
from geoviz.ot.result import SinkhornResult
from geoviz.ot.sinkhorn import MultiscaleStart, Sinkhorn, sinkhorn
from geoviz.ot.strategies import EpsilonScaling, KernelPolicy, SinkhornMode
from geoviz.vocabulary import LabelMethod

__all__ = [
    "CostGeometry",
    "DenseCost",
    "EpsilonScaling",
    "KernelPolicy",
    "LabelMethod",
    "MultiscaleStart",
    "OTDDConfig",
    "OTDDResult",
    "PointCloudCost",
    "ProgressFn",
    "Sinkhorn",
    "SinkhornCallback",
    "SinkhornMode",
    "SinkhornResult",
    "TransportProblem",
    "check_compatible",
    "class_samples",
    "gaussian_w2",
    "ground_cost",
    "label_distances",
    "mean_ground_cost",
    "otdd",
    "sinkhorn",
    "uniform_measure",
]
