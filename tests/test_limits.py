"""geoviz.limits: the shared bounds and their checks (and the places that must use them)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import torch

from geoviz import limits
from geoviz.errors import DatasetError, GeovizError, WeightsError
from geoviz.geodesic.distances import simplex_grid

# --------------------------------------------------------------------------- check_int


@pytest.mark.parametrize(("value", "expected"), [(5, 5), (np.int64(7), 7), (3.0, 3), ("12", 12)])
def test_check_int_accepts_integers(value, expected):
    out = limits.check_int(value, "n", 1, 100)
    assert out == expected and type(out) is int


@pytest.mark.parametrize("value", [True, False, 2.5, float("nan"), float("inf"), "x", None, [3]])
def test_check_int_refuses_non_integers(value):
    with pytest.raises(GeovizError, match=r"^n must be an integer, got "):
        limits.check_int(value, "n", 0, 100)


def test_check_int_range_message_names_value_range_and_reason():
    with pytest.raises(DatasetError) as info:
        limits.check_int(
            10**9, "--n", 10, 100_000, why="samples of one dataset", error=DatasetError
        )
    assert str(info.value) == (
        "--n must be between 10 and 100,000, got 1,000,000,000 (samples of one dataset)"
    )
    with pytest.raises(GeovizError, match=r"between 10 and 100,000, got 9$"):
        limits.check_int(9, "--n", 10, 100_000)
    assert limits.check_int(10, "--n", 10, 10) == 10


# --------------------------------------------------------------------------- check_epsilon


@pytest.mark.parametrize("value", [1e-12, 1e-20, 1e-40, 1e-100, 9.9e-5])
def test_check_epsilon_refuses_the_issue_values_with_the_reason(value):
    with pytest.raises(GeovizError) as info:
        limits.check_epsilon(value)
    message = str(info.value)
    assert message.startswith(f"epsilon {value:g} is below 0.0001 (relative to the mean cost)")
    assert "one-to-one" in message and message.endswith("use epsilon >= 0.0001")
    assert "\n" not in message


@pytest.mark.parametrize("value", [0, -1e-3, float("nan"), float("inf"), "abc", True, None])
def test_check_epsilon_refuses_non_positive_and_non_numbers(value):
    with pytest.raises(WeightsError, match=r"^epsilon must be a (positive )?number"):
        limits.check_epsilon(value, error=WeightsError)


def test_check_epsilon_range_edges():
    assert limits.check_epsilon(limits.EPSILON_MIN) == limits.EPSILON_MIN == 1e-4
    assert limits.check_epsilon("0.001") == 1e-3
    assert limits.check_epsilon(limits.EPSILON_MAX) == 10.0
    with pytest.raises(GeovizError, match="above 10"):
        limits.check_epsilon(10.5)


# --------------------------------------------------------------------------- grids


@pytest.mark.parametrize(("res", "m"), [(1, 1), (7, 3), (20, 3), (100, 4)])
def test_grid_points_is_the_stars_and_bars_count(res, m):
    assert limits.grid_points(res, m) == math.comb(res + m - 1, m - 1)
    assert limits.grid_points(res, m) == simplex_grid(m, res).shape[0]


def test_check_grid_refuses_large_grids_before_building_them():
    assert limits.check_grid(20, 3) == 20
    with pytest.raises(GeovizError, match=r"grid resolution must be between 1 and 500, got 501"):
        limits.check_grid(501, 2)
    # 1e9 points for m = 10 (the issue's "grid-size errors come only after the full fit")
    with pytest.raises(GeovizError, match=r"resolution 100 .* m = 10 .* more than 200,000"):
        limits.check_grid(100, 10)
    with pytest.raises(GeovizError, match=r"number of references m must be between 1 and 10"):
        limits.check_grid(3, 11)


def test_simplex_grid_uses_the_shared_bounds_quickly():
    start = time.perf_counter()
    with pytest.raises(WeightsError, match="more than 200,000"):
        simplex_grid(10, 100)  # C(109, 9) ~ 4e12 points: refused by counting, not enumerating
    with pytest.raises(WeightsError, match="grid resolution must be between 1 and 500"):
        simplex_grid(2, 10**6)
    with pytest.raises(WeightsError, match="grid resolution must be an integer"):
        simplex_grid(3, 2.5)
    assert time.perf_counter() - start < 1.0
    grid = simplex_grid(3, limits.MAX_GRID_RESOLUTION)
    assert grid.shape == (limits.grid_points(limits.MAX_GRID_RESOLUTION, 3), 3)


def test_a_relative_epsilon_is_checked_where_it_is_made_and_never_again(monkeypatch):
    """Issue 24: the CLI, the app's scenario or a caller makes a RelativeEpsilon once; the
    configuration, the cost geometry and the solver receive that value and do not check it
    again (the range check is not even called), while a plain float is still checked."""
    import pickle

    from geoviz.ot.geometry import DenseCost
    from geoviz.ot.otdd_cost import OTDDConfig

    eps = limits.check_epsilon(0.002)
    assert isinstance(eps, limits.RelativeEpsilon) and eps == 0.002
    assert json.loads(json.dumps({"e": eps})) == {"e": 0.002}
    assert pickle.loads(pickle.dumps(eps)) == eps
    calls = []
    real = limits._epsilon_in_range

    def counting(value, error):
        calls.append(value)
        return real(value, error)

    monkeypatch.setattr(limits, "_epsilon_in_range", counting)
    config = OTDDConfig(epsilon=eps)
    geometry = DenseCost(torch.ones(3, 3)).with_epsilon(config.epsilon, relative=True)
    assert config.epsilon is eps and geometry.epsilon is eps
    assert limits.check_epsilon(eps) is eps and limits.RelativeEpsilon(eps) is eps
    assert calls == []
    # a plain float is checked once, where the configuration is made, and kept checked
    plain = OTDDConfig(epsilon=0.01)
    assert calls == [0.01] and isinstance(plain.epsilon, limits.RelativeEpsilon)
    DenseCost(torch.ones(3, 3)).with_epsilon(plain.epsilon, relative=True)
    assert calls == [0.01]
    with pytest.raises(GeovizError, match=r"below 0\.0001"):
        limits.RelativeEpsilon(1e-9)
    with pytest.raises(GeovizError, match="epsilon"):
        OTDDConfig(epsilon=1e-9)
