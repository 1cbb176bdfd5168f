"""Optimal-transport engine: label distances, stabilised Sinkhorn and OTDD.

* :func:`label_distances` — ``(C_a, C_b)`` squared W2 between class-conditional
  feature laws (Bures-Wasserstein or exact), paper Sec. 2.2.
* :func:`sinkhorn` / :func:`sinkhorn_online` — stabilised entropic OT with a
  marginal-error tolerance (dense, or streamed over cost blocks).
* :func:`otdd` with :class:`OTDDConfig` / :class:`OTDDResult` — the OTDD
  coupling, cost and barycentric outputs (full, batched, streamed).

Conventions: squared Euclidean ground cost without 1/2; ``OTDDConfig.epsilon`` is
relative to the mean of the ground-cost matrix; ``sinkhorn`` takes an absolute
``epsilon_abs``.
"""

from geoviz.ot.labels import LabelMethod, class_samples, gaussian_w2, label_distances
from geoviz.ot.otdd import (
    OTDDConfig,
    OTDDResult,
    ProgressFn,
    check_compatible,
    ground_cost,
    mean_ground_cost,
    otdd,
)
from geoviz.ot.sinkhorn import SinkhornResult, sinkhorn, sinkhorn_online, uniform_weights

__all__ = [
    "LabelMethod",
    "OTDDConfig",
    "OTDDResult",
    "ProgressFn",
    "SinkhornResult",
    "check_compatible",
    "class_samples",
    "gaussian_w2",
    "ground_cost",
    "label_distances",
    "mean_ground_cost",
    "otdd",
    "sinkhorn",
    "sinkhorn_online",
    "uniform_weights",
]
