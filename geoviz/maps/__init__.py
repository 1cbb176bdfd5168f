"""OTDD maps from a target dataset to a reference (paper Sec. 3.1).

* :class:`FittedMap` — the base of every fitted map (``transform``,
  ``to_dataset``, ``diagnostics``, ``to_payload``/``from_payload``);
  :class:`DatasetMap` — the smaller protocol (``transform``,
  ``supports_out_of_sample``, ``reference_classes``).
* :class:`PlanDiagnostics` / :class:`NeuralDiagnostics` — what a fit reports.
* :class:`BarycentricMap` -> :class:`FittedBarycentricMap` — eq. (bary_map).
* :class:`EntropicMap` -> :class:`FittedEntropicMap` — entropic out-of-sample map.
* :class:`NeuralOTDDMap` -> :class:`FittedNeuralMap` — the neural OTDD map of
  eq. (max-min) (:mod:`geoviz.maps.neural`; networks in :mod:`geoviz.maps.networks`).
* :func:`map_estimator` — the estimator of a method name (:data:`MAP_METHODS`).
"""

from geoviz.maps.barycentric import (
    BarycentricMap,
    EntropicMap,
    FittedBarycentricMap,
    FittedEntropicMap,
)
from geoviz.maps.base import (
    DatasetMap,
    FittedMap,
    MapDiagnostics,
    MapKind,
    NeuralDiagnostics,
    PlanDiagnostics,
    PlanNeighbours,
    apply_map,
    check_transform_inputs,
)
from geoviz.maps.methods import (
    MAP_METHODS,
    TRAINED_MAP_METHODS,
    MapEstimator,
    map_estimator,
    map_method_label,
)
from geoviz.maps.neural import FittedNeuralMap, NeuralOTDDMap
from geoviz.maps.neural_config import NEURAL_PRESETS, NeuralMapConfig, get_neural_preset
from geoviz.vocabulary import MapMethod

__all__ = [
    "MAP_METHODS",
    "NEURAL_PRESETS",
    "TRAINED_MAP_METHODS",
    "BarycentricMap",
    "DatasetMap",
    "EntropicMap",
    "FittedBarycentricMap",
    "FittedEntropicMap",
    "FittedMap",
    "FittedNeuralMap",
    "MapDiagnostics",
    "MapEstimator",
    "MapKind",
    "MapMethod",
    "NeuralDiagnostics",
    "NeuralMapConfig",
    "NeuralOTDDMap",
    "PlanDiagnostics",
    "PlanNeighbours",
    "apply_map",
    "check_transform_inputs",
    "get_neural_preset",
    "map_estimator",
    "map_method_label",
]
