"""Maps page: epsilon and map method, sharpness, teaching panels, barycentric vs neural."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from geoviz.app.scenario import Scenario
from geoviz.app.services.caches import store
from geoviz.app.services.geodesic import geodesic_if_ready
from geoviz.app.session import SessionModel
from geoviz.errors import GeovizError
from geoviz.geodesic.config import space_allows
from geoviz.viz import fitted_maps, report
from geoviz.viz.images import example_indices
from geoviz.vocabulary import MAP_METHODS

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from geoviz.geodesic.result import GeodesicResult


def set_epsilon(model: SessionModel, epsilon: float) -> bool:
    """Make ``epsilon`` (relative to the mean ground cost) the scenario's; ``True`` if it changed.

    The new scenario has a new key, so pages fit its geodesic in the
    background; maps fitted before at this epsilon come from the disk cache
    (and the whole geodesic from the process store).

    Raises
    ------
    DatasetError
        ``epsilon`` is not a positive number.
    """
    eps = float(epsilon)
    if eps == float(model.scenario.epsilon):
        return False
    model.scenario = model.scenario.with_(epsilon=eps)
    return True


def set_map_method(model: SessionModel, method: str, preset: str | None = None) -> bool:
    """Make ``method`` (one of :data:`~geoviz.app.scenario.MAP_METHODS`) and, if given,
    the neural budget ``preset`` the scenario's; ``True`` if the scenario changed.

    Like :func:`set_epsilon`: the new scenario has its own key, so its geodesic is
    fitted in the background once (or read back from the store / disk cache).

    Raises
    ------
    DatasetError
        Unknown method or preset.
    """
    changes: dict[str, Any] = {"map_method": str(method)}
    if not space_allows(str(method), model.scenario.features):
        changes["features"] = "pixels"  # neural maps generate images: pixel space
    if preset is not None:
        changes["neural_preset"] = str(preset)
    new = model.scenario.with_(**changes)
    if new == model.scenario:
        return False
    model.scenario = new
    return True


def companion_scenario(scenario: Scenario) -> Scenario:
    """The scenario with the next map method of :data:`~geoviz.app.scenario.MAP_METHODS`
    (the *other* one of two; same data, OTDD options and neural budget)."""
    at = MAP_METHODS.index(scenario.map_method)
    return scenario.with_method(MAP_METHODS[(at + 1) % len(MAP_METHODS)])


#: most target points the teaching panel shows at once
MAX_TEACHING_POINTS = 8


def teaching_indices(n_target: int, n: int, seed: int, text: str = "") -> np.ndarray:
    """Target points for the teaching panel: parsed from ``text`` or ``n`` seeded random ones.

    Parameters
    ----------
    n_target
        ``N_Q``.
    n
        How many random points (``1..MAX_TEACHING_POINTS``) when ``text`` is empty.
    seed
        Seed of the random choice.
    text
        Optional comma- or space-separated sample indices of ``Q`` (at most
        ``MAX_TEACHING_POINTS``; repeats dropped).

    Returns
    -------
    np.ndarray
        ``(n',)`` int64 indices in ``0..n_target-1``.

    Raises
    ------
    GeovizError
        ``text`` holds something other than indices in range, or too many.
    """
    parts = [p for p in str(text).replace(",", " ").split() if p]
    if not parts:
        k = int(min(max(int(n), 1), MAX_TEACHING_POINTS, n_target))
        return np.random.default_rng(int(seed)).choice(int(n_target), size=k, replace=False)
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise GeovizError(
            f"target indices must be whole numbers separated by commas, got {text!r}"
        ) from None
    bad = [v for v in values if not 0 <= v < n_target]
    if bad:
        raise GeovizError(f"target indices must be in 0..{n_target - 1}; out of range: {bad}")
    values = list(dict.fromkeys(values))
    if len(values) > MAX_TEACHING_POINTS:
        raise GeovizError(f"at most {MAX_TEACHING_POINTS} target points at once, got {len(values)}")
    return np.asarray(values, dtype=np.int64)


def plan_neighbours_figure(
    scenario: Scenario, result: GeodesicResult, i: int, indices: np.ndarray, k: int
) -> go.Figure | None:
    """Teaching figure for map ``i``: target points, their ``k`` heaviest plan neighbours, ``T_i(x)``.

    :func:`geoviz.viz.fitted_maps.plan_neighbours_figure` (``None`` for data that is
    neither images nor 2-D/3-D vectors), cached by scenario, map, indices and ``k``.
    """
    fitted_maps.require_plan(result)
    idx = np.asarray(indices, dtype=np.int64).ravel()
    k = int(min(max(int(k), 1), result.neighbour_index[i].shape[1]))
    key = ("teach", scenario.key(), int(i), tuple(idx.tolist()), k)
    return store().get_or_compute(
        key, lambda: fitted_maps.plan_neighbours_figure(result, int(i), idx, k), tier="derived"
    )


def nearest_reference_figure(
    scenario: Scenario, result: GeodesicResult, i: int, indices: np.ndarray, k: int
) -> go.Figure | None:
    """The teaching figure for maps without a plan (neural): per target point ``x``,
    ``T_i(x)`` and the ``k`` closest *real* samples of ``P_i`` with their distances.

    Images give a tiled grid, vectors a scatter of the first two coordinates; ``None``
    for data with a single feature. Works for barycentric results too. Cached by
    scenario, map, indices and ``k``.
    """
    idx = np.asarray(indices, dtype=np.int64).ravel()
    k = int(min(max(int(k), 1), result.references[int(i)].n_samples))
    if not result.target.is_image and result.target.n_features < 2:
        return None
    key = ("nearest-fig", scenario.key(), int(i), tuple(idx.tolist()), k)
    return store().get_or_compute(
        key, lambda: fitted_maps.nearest_reference_figure(result, int(i), idx, k), tier="derived"
    )


def map_pair(scenario: Scenario) -> tuple[GeodesicResult | None, ...]:
    """The geodesics of the scenario's data and OTDD options, one per map method of
    :data:`~geoviz.app.scenario.MAP_METHODS` in that order (``(barycentric, neural)``),
    each the one in memory or ``None`` (never computes). The neural one uses the
    scenario's neural budget."""
    return tuple(geodesic_if_ready(scenario.with_method(method)) for method in MAP_METHODS)


def comparison_indices(result: GeodesicResult, n: int, seed: int = 0) -> np.ndarray:
    """``n`` target points, one class after the other (seeded): the same points are
    shown under both maps."""
    q = result.target
    return example_indices(q.labels, int(min(max(int(n), 1), q.n_samples)), seed=int(seed))


def _pair_key(scenario: Scenario, what: str, *extra: Hashable) -> tuple[Hashable, ...]:
    keys = tuple(scenario.with_method(method).key() for method in MAP_METHODS)
    return (what, *keys, *extra)


def map_comparison_tables(
    scenario: Scenario, first: GeodesicResult, second: GeodesicResult
) -> list[pd.DataFrame]:
    """:func:`geoviz.viz.report.map_comparison_tables` of the scenario's two geodesics
    (:func:`map_pair`; one table per map ``T_i``). Cached per pair (derived tier)."""
    report.check_pair(first, second)
    return store().get_or_compute(
        _pair_key(scenario, "compare-tables", first.method, second.method),
        lambda: report.map_comparison_tables(first, second),
        tier="derived",
    )


def side_by_side_figures(
    scenario: Scenario,
    first: GeodesicResult,
    second: GeodesicResult,
    indices: np.ndarray,
    tile_px: int = 96,
) -> list[go.Figure]:
    """:func:`geoviz.viz.fitted_maps.side_by_side_figures`: one figure per reference ``P_i``
    comparing both maps on the SAME target points. Cached by the pair, the indices and
    ``tile_px`` (derived tier)."""
    report.check_pair(first, second)
    idx = np.asarray(indices, dtype=np.int64).ravel()
    key = _pair_key(
        scenario, "compare-figs", first.method, second.method, tuple(idx.tolist()), int(tile_px)
    )
    return store().get_or_compute(
        key,
        lambda: fitted_maps.side_by_side_figures(first, second, idx, int(tile_px)),
        tier="derived",
    )
