"""McCann page: steps ``((1-t) Id + t T_i)#Q`` along one map."""

from __future__ import annotations

from typing import TYPE_CHECKING

from geoviz.app.scenario import Scenario
from geoviz.app.services.caches import store
from geoviz.data.dataset import SoftLabeledDataset

if TYPE_CHECKING:
    from geoviz.geodesic.pipeline import GeodesicResult


def mccann(scenario: Scenario, result: GeodesicResult, i: int, t: float) -> SoftLabeledDataset:
    """McCann interpolation ``((1-t) Id + t T_i)#Q``. Cached by ``(i, round(t, 3))``."""
    key = ("mccann", scenario.key(), int(i), round(float(t), 3))
    return store().get_or_compute(key, lambda: result.mccann(int(i), float(t)), tier="derived")
