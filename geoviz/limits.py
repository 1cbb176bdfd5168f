"""Bounds on every size a user, a link or a file can ask for: one place, one check each.

The app's form, a shared link (``?scenario=`` token), the CLI and the library all build
their values through the same constructors (:class:`geoviz.app.scenario.Scenario`,
:class:`geoviz.geodesic.config.GeodesicConfig`, :class:`geoviz.ot.otdd_cost.OTDDConfig`,
the loaders), and those constructors check against the constants below. A value outside
its range is a :class:`~geoviz.errors.GeovizError` that names the value, the range and
why the range exists, raised *before* anything is loaded, allocated or fitted.

The ranges are generous for real use (the full MNIST training split, 64x64 RGB images,
ten reference datasets) and small enough that no single request can take the server's
memory: memory itself is checked separately against the process's real limit
(:mod:`geoviz.memory`).
"""

from __future__ import annotations

import math
from typing import Any

from geoviz.errors import GeovizError

__all__ = [
    "EPSILON_MAX",
    "EPSILON_MIN",
    "MAX_CLASSES",
    "MAX_CSV_CELLS",
    "MAX_CSV_COLUMNS",
    "MAX_FEW_SHOT_K",
    "MAX_GRID_POINTS",
    "MAX_GRID_RESOLUTION",
    "MAX_IMAGE_SIZE",
    "MAX_NEIGHBOURS",
    "MAX_NEURAL_ITERATIONS",
    "MAX_PREVIEW_PER_CLASS",
    "MAX_PREVIEW_ZOOM",
    "MAX_REFERENCES",
    "MAX_SAMPLES",
    "MAX_SEED",
    "MAX_SERVED_ENTRIES",
    "MAX_SYNTHETIC_SAMPLES",
    "MAX_TOKEN_CHARS",
    "MAX_TOKEN_INFLATED_BYTES",
    "MIN_IMAGE_SIZE",
    "MIN_SAMPLES",
    "RelativeEpsilon",
    "check_epsilon",
    "check_grid",
    "check_int",
    "check_reference_count",
]

#: samples drawn from one dataset (the largest *NIST training split is 60,000)
MIN_SAMPLES = 10
MAX_SAMPLES = 100_000
#: side of the common square image size (``harmonize(size=...)``), pixels
MIN_IMAGE_SIZE = 4
MAX_IMAGE_SIZE = 128
#: reference datasets P_1..P_m of one geodesic
MAX_REFERENCES = 10
#: classes of one dataset (labels are one-hot (N, C) matrices in several places)
MAX_CLASSES = 1000
#: samples one synthetic generator may draw in total (n_classes x n_per_class, 16 x n_per_component)
MAX_SYNTHETIC_SAMPLES = 200_000
#: directory entries walked to check a served dataset folder (every symbolic link in it must
#: stay inside the operator's data folder)
MAX_SERVED_ENTRIES = 1_000_000
#: columns of a CSV table (features and label), read from its header before any row is
#: parsed: 128x128 RGB images as columns are 49,152 features
MAX_CSV_COLUMNS = 65_536
#: cells of a CSV table (rows x columns, the rows counted by line breaks) before parsing:
#: the full MNIST training split as a CSV is 47 million
MAX_CSV_CELLS = 100_000_000
#: few-shot labels per class and kNN neighbours for the pseudo-labels
MAX_FEW_SHOT_K = 1000
MAX_NEIGHBOURS = 50
#: seeds (numpy and torch accept any 32-bit value)
MAX_SEED = 2**31 - 1
#: relative epsilon (``eps_abs = epsilon * mean(C)``). Measured on the bundled MNIST against
#: Fashion-MNIST, USPS and KMNIST (n = 200, 500, 2000; 32x32; float32 and float64 alike): at
#: 1e-4 every map is already one-to-one (1.00 to 1.02 effective neighbours), so a smaller
#: epsilon sharpens nothing, while the Sinkhorn iterations it needs explode (MNIST -> USPS,
#: n = 500: 6,500 at 1e-4, 48,000 at 3e-5, more than 50,000 at 1e-5, where the default
#: budget of 5,000 leaves a marginal error of 1e-2 instead of 1e-4); far below it the float32
#: cost cannot resolve exp(-C/eps_abs) at all (1e-8: marginal error 1e44; 1e-20: inf).
EPSILON_MIN = 1e-4
#: above EPSILON_MAX every plan is the independent coupling to many digits: nothing to see
EPSILON_MAX = 10.0
#: ``geoviz show --grid``: sample columns per class and pixel magnification of the PNG
MAX_PREVIEW_PER_CLASS = 100
MAX_PREVIEW_ZOOM = 16
#: critic iterations of one neural OTDD map (the paper's budget is 10^4)
MAX_NEURAL_ITERATIONS = 100_000
#: simplex grids: resolution R (points i/R) and the number of grid points it gives
MAX_GRID_RESOLUTION = 500
MAX_GRID_POINTS = 200_000
#: a ``?scenario=`` token: characters in the link and bytes once inflated (a scenario with
#: ten references and preset options is about 1.5 kB of JSON)
MAX_TOKEN_CHARS = 4096
MAX_TOKEN_INFLATED_BYTES = 32 * 1024


def check_int(
    value: Any,
    what: str,
    low: int,
    high: int,
    *,
    why: str = "",
    error: type[GeovizError] = GeovizError,
) -> int:
    """``int(value)`` if it is an integer in ``[low, high]``, else ``error`` saying so.

    Booleans, floats with a fraction, NaN and strings that are not integers are refused
    (a link can carry any JSON value).
    """
    if isinstance(value, bool):
        raise error(f"{what} must be an integer, got {value!r}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise error(f"{what} must be an integer, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise error(f"{what} must be an integer, got {value!r}") from None
    if not low <= number <= high:
        reason = f" ({why})" if why else ""
        raise error(f"{what} must be between {low:,} and {high:,}, got {number:,}{reason}")
    return number


class RelativeEpsilon(float):
    """A relative epsilon in ``[EPSILON_MIN, EPSILON_MAX]`` (``eps_abs = epsilon * mean(C)``),
    checked when it is made: ``RelativeEpsilon(value)`` raises ``error`` (default
    :class:`~geoviz.errors.GeovizError`) for anything else.

    Made once, where the value enters (a CLI option, the app's scenario, a library caller's
    :class:`~geoviz.ot.otdd_cost.OTDDConfig`); made again from a :class:`RelativeEpsilon` it is
    returned as it is, unchecked, so everything downstream receives a checked value
    (issue 24). Arithmetic on it gives plain floats; it is a float to JSON, pickle and ``==``.
    """

    __slots__ = ()

    def __new__(cls, value: Any, error: type[GeovizError] = GeovizError) -> RelativeEpsilon:
        if isinstance(value, RelativeEpsilon):
            return value
        return super().__new__(cls, _epsilon_in_range(value, error))

    def __reduce__(self) -> tuple[Any, ...]:
        return (RelativeEpsilon, (float(self),))


def check_epsilon(value: Any, *, error: type[GeovizError] = GeovizError) -> RelativeEpsilon:
    """``RelativeEpsilon(value)``: a relative epsilon in ``[EPSILON_MIN, EPSILON_MAX]``, else
    ``error``; a :class:`RelativeEpsilon` (checked already) is returned as it is."""
    return RelativeEpsilon(value, error)


def _epsilon_in_range(value: Any, error: type[GeovizError]) -> float:
    if isinstance(value, bool):
        raise error(f"epsilon must be a number, got {value!r}")
    try:
        eps = float(value)
    except (TypeError, ValueError, OverflowError):
        raise error(f"epsilon must be a number, got {value!r}") from None
    if not math.isfinite(eps) or eps <= 0:
        raise error(f"epsilon must be a positive number, got {value!r}")
    if eps < EPSILON_MIN:
        raise error(
            f"epsilon {eps:g} is below {EPSILON_MIN:g} (relative to the mean cost): at "
            f"{EPSILON_MIN:g} the maps are already one-to-one (about 1 effective neighbour), and "
            "below it Sinkhorn needs tens of thousands of iterations (~1/epsilon) and the float32 "
            f"cost can no longer resolve the kernel exp(-C/eps_abs); use epsilon >= {EPSILON_MIN:g}"
        )
    if eps > EPSILON_MAX:
        raise error(
            f"epsilon {eps:g} is above {EPSILON_MAX:g} (relative to the mean cost): every plan "
            "would be the independent coupling (each mapped point the reference mean)"
        )
    return eps


def grid_points(resolution: int, m: int) -> int:
    """Points of the simplex grid ``{a : a_i = k_i / R, sum k_i = R}``: C(R + m - 1, m - 1)."""
    return math.comb(int(resolution) + int(m) - 1, int(m) - 1)


def check_reference_count(m: int, *, error: type[GeovizError] = GeovizError) -> int:
    """``m`` as the number of reference datasets of one geodesic, ``2 <= m <=``
    :data:`MAX_REFERENCES`: the one rule and the one sentence of every front door (the spec,
    :func:`~geoviz.geodesic.pipeline.fit_geodesic`, the app's scenario and links, the CLI).

    A geodesic between fewer than two datasets is a point (paper Sec. 3: ``P_a`` mixes the
    maps of ``m >= 2`` references); each reference costs one OTDD map and ``m - 1``
    label-distance matrices, hence the upper bound.
    """
    if not 2 <= m <= MAX_REFERENCES:
        raise error(
            f"a generalized geodesic needs 2 to {MAX_REFERENCES} reference datasets P_i, got {m} "
            "(one OTDD map is fitted per reference)"
        )
    return int(m)


def check_grid(resolution: Any, m: int, *, error: type[GeovizError] = GeovizError) -> int:
    """A simplex-grid resolution whose grid for ``m`` references stays under MAX_GRID_POINTS."""
    m = check_int(m, "the number of references m", 1, MAX_REFERENCES, error=error)
    res = check_int(resolution, "grid resolution", 1, MAX_GRID_RESOLUTION, error=error)
    points = grid_points(res, m)
    if points > MAX_GRID_POINTS:
        raise error(
            f"a grid of resolution {res} on the simplex of m = {m} references has {points:,} "
            f"points, more than {MAX_GRID_POINTS:,}; use a smaller resolution"
        )
    return res


#: the sparse kernel's default cap per row when the OTDD cost is streamed (full size): at
#: the default epsilon a mapped point averages 2-5 reference points, so 256 candidates per
#: row leave a dropped mass the verification measures as negligible (benchmarks/README.md,
#: "Full size"), in 60,000 x 256 x 72 bytes = 1.1 GB
STREAMED_SUPPORT_PER_ROW = 256

#: one OTDD problem with more cost entries than this is streamed on every machine (its
#: stored float32 cost would take 4 GB, with a dense kernel buffer as large again): a
#: rule by size, not by free memory, so the CLI and the app choose the same solve and
#: find each other's full-size fits in the disk cache (``OTDDConfig.sized_for``)
STREAM_ABOVE_ENTRIES = 1_000_000_000

#: the app's default bound on one scenario's float32 features, MB (``GEOVIZ_APP_MAX_MB``);
#: the CLI's ``app`` line names a larger value when a fit needs it
APP_MAX_SCENARIO_MB = 1024
