"""Pure logic behind the app's weight widgets (no Streamlit, no plotting).

The interpolation weights ``a`` of a generalized geodesic live on the
probability simplex ``Delta_{m-1} = {a in R^m : a_i >= 0, sum_i a_i = 1}``
(paper Sec. 3.3, eq. (hat_a)). The app lets a user pick ``a`` in three ways:

* clicking a point of the ternary heatmap (``m = 3``) or of the line plot
  (``m = 2``): :func:`weights_from_selection`;
* moving one of ``m`` sliders: the others follow so that the vector stays on
  the simplex (:func:`sync_weights`);
* typing arbitrary values: :func:`~geoviz.geodesic.weights.project_to_simplex`
  (Euclidean projection).

The weight vector itself — validation (:func:`~geoviz.geodesic.weights.check_weights`),
projection, uniform weights, the one rounding and formatting rule — lives in
:mod:`geoviz.geodesic.weights`; its names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from geoviz.errors import WeightsError

# the weight vector itself (validation, projection, rounding, formatting) lives in the
# library, geoviz.geodesic.weights; this module only turns widget events into weights
from geoviz.geodesic.weights import project_to_simplex

__all__ = ["selection_signature", "sync_weights", "weights_from_selection"]


def sync_weights(weights: Sequence[float] | np.ndarray, index: int, value: float) -> np.ndarray:
    """Move one weight and let the others follow so the vector stays on the simplex.

    ``a_index`` becomes ``value`` (clipped to ``[0, 1]``); the remaining mass
    ``1 - value`` is shared among the other weights in proportion to their
    previous values, or equally when they were all zero. This is what a user
    expects from linked sliders: ratios between untouched weights are kept.

    Parameters
    ----------
    weights
        ``(m,)`` current weights (projected onto the simplex first if they
        drifted off it).
    index
        Which weight the user moved, ``0 <= index < m``.
    value
        Its new value.

    Returns
    -------
    np.ndarray
        ``(m,)`` weights on the simplex with ``out[index] == clip(value, 0, 1)``.
    """
    w = project_to_simplex(weights)
    m = w.shape[0]
    if not 0 <= int(index) < m:
        raise WeightsError(f"slider index {index} out of range for {m} weights")
    if not np.isfinite(value):
        raise WeightsError(f"weight value must be a finite number, got {value!r}")
    i = int(index)
    v = float(np.clip(value, 0.0, 1.0))
    if m == 1:
        return np.ones(1)
    others = np.delete(w, i)
    rest = 1.0 - v
    total = others.sum()
    others = np.full(m - 1, rest / (m - 1)) if total <= 1e-12 else others * (rest / total)
    out = np.insert(others, i, v)
    out = np.maximum(out, 0.0)
    # keep the moved weight exact; put rounding drift on the others
    drift = 1.0 - out.sum()
    if abs(drift) > 0 and m > 1:
        j = int(np.argmax(np.where(np.arange(m) == i, -np.inf, out)))
        out[j] = max(out[j] + drift, 0.0)
    return out


def _point_get(point: Any, key: str) -> Any:
    if isinstance(point, Mapping):
        return point.get(key)
    return getattr(point, key, None)


def weights_from_selection(
    selection: Any,
    m: int,
    grid: np.ndarray | None = None,
    *,
    axis: str = "x",
) -> np.ndarray | None:
    """Turn a plotly selection event (as Streamlit returns it) into weights.

    Understands, in this order of preference:

    1. ``customdata`` holding the full ``(m,)`` weight vector of the clicked
       marker (how :func:`geoviz.viz.ternary.ternary_heatmap` and
       :func:`geoviz.viz.ternary.geodesic_line` build their traces);
    2. ternary coordinates ``a, b, c`` (``m = 3``), normalised by their sum;
    3. for ``m = 2`` the ``axis`` coordinate, read as the weight of the second
       reference ``a_2`` (so ``a = (1 - x, x)``);
    4. ``point_index`` into ``grid`` (``(K, m)``).

    Parameters
    ----------
    selection
        The ``event.selection`` mapping (``{"points": [...], ...}``), the event
        itself (with a ``selection`` entry) or a list of points. Only the last
        point is used (the one the user clicked most recently).
    m
        Number of references.
    grid
        Optional ``(K, m)`` weights of the markers, for index lookup.

    Returns
    -------
    np.ndarray or None
        ``(m,)`` weights on the simplex, or ``None`` when nothing was selected
        or the point carries no usable information.
    """
    if selection is None:
        return None
    points: Any = selection
    inner = _point_get(selection, "selection")
    if inner is not None:
        points = inner
    if not isinstance(points, (list, tuple)):
        points = _point_get(points, "points")
    if not points:
        return None
    point = points[-1]

    custom = _point_get(point, "customdata")
    if isinstance(custom, Mapping):
        # plotly.js typed arrays reach Python through JSON as {"0": v0, "1": v1, ...}
        try:
            custom = [custom[k] for k in sorted(custom, key=lambda k: int(k))]
        except (TypeError, ValueError):
            custom = None
    if custom is not None:
        try:
            arr = np.asarray(custom, dtype=float).ravel()
        except (TypeError, ValueError):
            arr = np.zeros(0)
        if arr.shape[0] >= m and np.all(np.isfinite(arr[:m])) and arr[:m].sum() > 0:
            return project_to_simplex(arr[:m] / arr[:m].sum())

    if m == 3:
        abc = [_point_get(point, k) for k in ("a", "b", "c")]
        if all(isinstance(x, (int, float)) for x in abc):
            arr = np.asarray(abc, dtype=float)
            if arr.sum() > 0:
                return project_to_simplex(arr / arr.sum())

    if m == 2:
        x = _point_get(point, axis)
        if isinstance(x, (int, float)) and np.isfinite(x):
            t = float(np.clip(x, 0.0, 1.0))
            return np.array([1.0 - t, t])

    idx = _point_get(point, "point_index")
    if idx is None:
        idx = _point_get(point, "point_number")
    if grid is not None and isinstance(idx, (int, np.integer)):
        g = np.asarray(grid, dtype=float)
        if 0 <= int(idx) < g.shape[0] and g.shape[1] == m:
            return project_to_simplex(g[int(idx)])
    return None


def selection_signature(selection: Any) -> str | None:
    """A short string identifying a selection, so a page applies each click once.

    Streamlit keeps a chart's selection in its widget state across reruns, so
    the same event is seen again on every rerun (e.g. after a slider moved);
    the page compares signatures and only applies a *new* click.
    """
    if selection is None:
        return None
    inner = _point_get(selection, "selection")
    points = inner if inner is not None else selection
    if not isinstance(points, (list, tuple)):
        points = _point_get(points, "points")
    if not points:
        return None
    point = points[-1]
    parts = []
    for key in ("curve_number", "point_index", "a", "b", "c", "x", "y", "customdata"):
        val = _point_get(point, key)
        if val is not None:
            parts.append(f"{key}={val}")
    return "|".join(parts) or None
