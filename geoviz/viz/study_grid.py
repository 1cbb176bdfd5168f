"""``a_hat`` on the simplex study's grid: the grid point nearest to it, the accuracy-best one.

Both are marked on the study's figure (:mod:`geoviz.viz.study_figure`) and named in its
sentence (:func:`geoviz.viz.study.a_hat_sentence`), under the labels :data:`NEAREST_LABEL`
and :data:`BEST_LABEL`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geoviz.errors import GeovizError
from geoviz.glossary import A_HAT
from geoviz.transfer.study import GridStudy

__all__ = ["BEST_LABEL", "NEAREST_LABEL", "best_grid_point", "nearest_grid_point", "weights_text"]

#: Marker of the grid point nearest to ``a_hat``, and of the accuracy-best grid point.
NEAREST_LABEL = f"nearest grid point to {A_HAT}"
BEST_LABEL = "accuracy-best grid point"


def nearest_grid_point(
    weights: np.ndarray | Sequence[Sequence[float]], point: Sequence[float]
) -> int:
    """Index of the grid row closest to ``point`` (Euclidean; the first of equals).

    Parameters
    ----------
    weights
        ``(K, m)`` grid weights (``GridStudy.weights``).
    point
        ``m`` weights, e.g. ``a_hat``.

    Raises
    ------
    GeovizError
        An empty grid, or ``point`` of another length than the grid's rows.
    """
    grid = np.asarray(weights, dtype=float)
    target = np.asarray(point, dtype=float).reshape(-1)
    if grid.ndim != 2 or grid.shape[0] == 0 or grid.shape[1] != target.size:
        raise GeovizError(
            f"nearest_grid_point needs a (K, {target.size}) grid, got shape {grid.shape}"
        )
    return int(np.argmin(np.linalg.norm(grid - target, axis=1)))


def best_grid_point(study: GridStudy) -> int:
    """Index of the point with the highest mean accuracy over the seeds (the first of equals)."""
    if not study.points:
        raise GeovizError("the study has no points")
    return int(np.nanargmax(study.mean_accuracies))


def weights_text(weights: Sequence[float]) -> str:
    """``"(0.14, 0.57, 0.29)"``: weights on the simplex, two decimals each."""
    return "(" + ", ".join(f"{w:.2f}" for w in weights) + ")"
