"""OTDD maps from a target dataset to a reference (paper Sec. 3.1).

* :class:`DatasetMap` — the protocol consumers rely on (``transform``,
  ``supports_out_of_sample``, ``reference_classes``).
* :class:`BarycentricMap` -> :class:`FittedBarycentricMap` — eq. (bary_map).
* :class:`EntropicMap` -> :class:`FittedEntropicMap` — entropic out-of-sample map.
* :class:`NeuralOTDDMap` -> :class:`FittedNeuralMap` — the neural OTDD map of
  eq. (max-min) (:mod:`geoviz.maps.neural`; networks in :mod:`geoviz.maps.networks`).
"""

from geoviz.maps.barycentric import (
    BarycentricMap,
    EntropicMap,
    FittedBarycentricMap,
    FittedEntropicMap,
)
from geoviz.maps.base import DatasetMap, apply_map, check_transform_inputs
from geoviz.maps.neural import (
    NEURAL_PRESETS,
    FittedNeuralMap,
    NeuralMapConfig,
    NeuralOTDDMap,
    get_neural_preset,
)

__all__ = [
    "NEURAL_PRESETS",
    "BarycentricMap",
    "DatasetMap",
    "EntropicMap",
    "FittedBarycentricMap",
    "FittedEntropicMap",
    "FittedNeuralMap",
    "NeuralMapConfig",
    "NeuralOTDDMap",
    "apply_map",
    "check_transform_inputs",
    "get_neural_preset",
]
