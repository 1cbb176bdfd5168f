"""The map methods a generalized geodesic can use, by name (paper Sec. 3.1).

:func:`map_estimator` turns a method name into its estimator, so code that fits
maps (:func:`geoviz.geodesic.pipeline.fit_geodesic`) never branches on the
method: a new method is one entry in :data:`MAP_METHODS`, one estimator and one
:class:`~geoviz.maps.base.FittedMap` subclass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from geoviz.backend import DiskCache
from geoviz.data.dataset import LabeledDataset
from geoviz.errors import GeovizError
from geoviz.maps.barycentric import BarycentricMap
from geoviz.maps.base import FittedMap
from geoviz.maps.neural import NeuralOTDDMap
from geoviz.maps.neural_config import NeuralMapConfig
from geoviz.ot.otdd_cost import OTDDConfig
from geoviz.vocabulary import MapMethod

__all__ = [
    "MAP_METHODS",
    "TRAINED_MAP_METHODS",
    "MapEstimator",
    "map_estimator",
    "map_method_label",
]

#: How the OTDD maps ``T_i`` are computed: the barycentric projection of the
#: entropic plan (eq. (bary_map)), or the neural map of eq. (max-min).
MAP_METHODS: tuple[MapMethod, ...] = ("barycentric", "neural")
#: Methods that train networks, so the neural budget is one of their settings.
TRAINED_MAP_METHODS: frozenset[MapMethod] = frozenset({"neural"})

_LABELS: dict[MapMethod, str] = {"barycentric": "OTDD map", "neural": "neural OTDD map"}


class MapEstimator(Protocol):
    """An unfitted map: ``fit(target, reference, progress)`` gives a :class:`FittedMap`."""

    def fit(
        self,
        target: LabeledDataset,
        reference: LabeledDataset,
        progress: Callable[[str, float], None] | None = None,
    ) -> FittedMap[Any]: ...


def _barycentric(otdd: OTDDConfig, neural: NeuralMapConfig, cache: DiskCache) -> MapEstimator:
    return BarycentricMap(otdd, cache=cache)


def _neural(otdd: OTDDConfig, neural: NeuralMapConfig, cache: DiskCache) -> MapEstimator:
    return NeuralOTDDMap(neural, otdd, cache=cache)


_FACTORIES: dict[MapMethod, Callable[[OTDDConfig, NeuralMapConfig, DiskCache], MapEstimator]] = {
    "barycentric": _barycentric,
    "neural": _neural,
}


def _check(method: str) -> MapMethod:
    for known in MAP_METHODS:
        if method == known:
            return known
    raise GeovizError(f"map method must be one of {list(MAP_METHODS)}, got {method!r}")


def map_estimator(
    method: MapMethod, otdd: OTDDConfig, neural: NeuralMapConfig, cache: DiskCache
) -> MapEstimator:
    """The estimator of ``method`` with the OTDD cost ``otdd`` (and budget ``neural``).

    Every method optimises the same cost (``lambda_x``, ``lambda_y``, label
    distances of ``otdd``) and caches its fitted maps in ``cache``.
    """
    return _FACTORIES[_check(method)](otdd, neural, cache)


def map_method_label(method: MapMethod) -> str:
    """``"OTDD map"`` / ``"neural OTDD map"`` (progress messages)."""
    return _LABELS[_check(method)]
