"""OTDD maps from a target dataset to a reference (paper Sec. 3.1).

* :class:`DatasetMap` — the protocol consumers rely on (``transform``,
  ``supports_out_of_sample``, ``reference_classes``); a neural map can be added
  by implementing it.
* :class:`BarycentricMap` -> :class:`FittedBarycentricMap` — eq. (bary_map).
* :class:`EntropicMap` -> :class:`FittedEntropicMap` — entropic out-of-sample map.
"""

from geoviz.maps.barycentric import (
    BarycentricMap,
    EntropicMap,
    FittedBarycentricMap,
    FittedEntropicMap,
)
from geoviz.maps.base import DatasetMap, apply_map, check_transform_inputs

__all__ = [
    "BarycentricMap",
    "DatasetMap",
    "EntropicMap",
    "FittedBarycentricMap",
    "FittedEntropicMap",
    "apply_map",
    "check_transform_inputs",
]
