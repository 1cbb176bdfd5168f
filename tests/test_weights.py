"""The weight vector (geoviz.geodesic.weights)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geoviz.errors import WeightsError, short_repr
from geoviz.geodesic.weights import (
    ENTRY_DECIMALS,
    SimplexWeights,
    check_weights,
    display_weights,
    format_weights,
    project_to_simplex,
    round_to_simplex,
    uniform_weights,
    weights_tag,
    weights_text,
)

vectors = st.lists(st.floats(-5, 5, allow_nan=False, allow_infinity=False), min_size=1, max_size=7)


def _on_simplex(w: np.ndarray, atol: float = 1e-12) -> bool:
    return bool(np.all(w >= 0) and abs(w.sum() - 1.0) < atol)


# ---------------------------------------------------------------- projection


@pytest.mark.parametrize(
    ("v", "expected"),
    [
        ([0.5, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]),
        ([2.0, 0.0, 0.0], [1.0, 0.0, 0.0]),
        ([1.0, 1.0, -5.0], [0.5, 0.5, 0.0]),
        ([0.2, 0.3, 0.5], [0.2, 0.3, 0.5]),
        ([-1.0, -1.0], [0.5, 0.5]),
        ([3.0], [1.0]),
        ([0.6, 0.6, 0.0, -0.2], [0.5, 0.5, 0.0, 0.0]),
    ],
)
def test_projection_known_values(v, expected):
    np.testing.assert_allclose(project_to_simplex(v), expected, atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(vectors)
def test_projection_satisfies_kkt(v):
    """a = max(v - theta, 0): equal shift on the support, nothing off it below theta."""
    v = np.asarray(v)
    a = project_to_simplex(v)
    assert _on_simplex(a, 1e-9)
    support = a > 1e-12
    theta = v[support] - a[support]
    np.testing.assert_allclose(theta, theta[0], atol=1e-9)
    assert np.all(v[~support] <= theta[0] + 1e-9)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-2, 2, allow_nan=False), min_size=3, max_size=3))
def test_projection_is_closest_point_of_a_fine_grid(v):
    """Brute force: no point of a 1/200 simplex grid is closer to v than the projection."""
    v = np.asarray(v)
    a = project_to_simplex(v)
    r = 200
    i, j = np.meshgrid(np.arange(r + 1), np.arange(r + 1), indexing="ij")
    mask = i + j <= r
    grid = np.stack([i[mask], j[mask], r - i[mask] - j[mask]], axis=1) / r
    best = np.min(np.linalg.norm(grid - v, axis=1))
    assert np.linalg.norm(a - v) <= best + 1e-12
    assert (
        np.linalg.norm(a - v) >= best - np.sqrt(3) / r
    )  # the grid point next to a is within a cell


def test_projection_batches_and_idempotence():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(50, 4))
    a = project_to_simplex(v)
    assert a.shape == (50, 4)
    for row_v, row_a in zip(v, a, strict=True):
        np.testing.assert_allclose(project_to_simplex(row_v), row_a)
    np.testing.assert_allclose(project_to_simplex(a), a, atol=1e-12)
    # translation along the all-ones direction does not change the projection
    np.testing.assert_allclose(project_to_simplex(v + 3.7), a, atol=1e-12)


@pytest.mark.parametrize("bad", [[], [np.nan, 1.0], [np.inf, 0.0], 1.0])
def test_projection_rejects_bad_input(bad):
    with pytest.raises(WeightsError):
        project_to_simplex(bad)


# ---------------------------------------------------------------- synced sliders


# ---------------------------------------------------------------- rounding / formatting


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=8))
def test_round_to_simplex_sums_to_one_on_the_grid(raw):
    w = round_to_simplex(raw, 2)
    assert abs(w.sum() - 1) < 1e-12
    assert np.allclose(w * 100, np.round(w * 100))
    assert np.max(np.abs(w - project_to_simplex(raw))) <= 0.01 + 1e-12


def test_round_to_simplex_example():
    np.testing.assert_allclose(round_to_simplex([1 / 3, 1 / 3, 1 / 3], 2), [0.34, 0.33, 0.33])


def test_format_weights_and_uniform():
    assert format_weights([0.5, 0.25, 0.25], ["a", "b", "c"]) == "a 0.50 · b 0.25 · c 0.25"
    assert format_weights([0.5, 0.5]) == "(0.50, 0.50)"
    with pytest.raises(WeightsError):
        format_weights([0.5, 0.5], ["a"])
    np.testing.assert_allclose(uniform_weights(4), 0.25)
    assert check_weights(uniform_weights(7), 7).sum() == pytest.approx(1.0, abs=1e-15)
    with pytest.raises(WeightsError):
        uniform_weights(0)


def test_weights_tag_is_compact_ascii():
    assert weights_tag([0.5, 0.3, 0.2]) == "0.5,0.3,0.2"
    assert weights_tag([1 / 3, 2 / 3]) == "0.333,0.667"
    assert weights_tag(np.array([1.0, 0.0])) == "1,0"


def test_a_shown_weight_is_the_nearest_value_of_the_weight_it_stands_for():
    """Issue 26, item 7: 0.2138 reads 0.21, even when the shown values then sum to 0.99."""
    from geoviz.geodesic.weights import SimplexWeights

    a = [0.2138, 0.2138, 0.5724]
    np.testing.assert_allclose(display_weights(a), [0.21, 0.21, 0.57])
    assert format_weights(a, ["p", "q", "r"]) == "p 0.21 · q 0.21 · r 0.57"
    np.testing.assert_allclose(SimplexWeights.from_input(a, 3).display(), [0.21, 0.21, 0.57])
    np.testing.assert_allclose(display_weights([1 / 3, 1 / 3, 1 / 3]), [0.33, 0.33, 0.33])
    # within check_weights' tolerance below 0: shown as 0, never "-0.00"
    shown = display_weights([0.5 + 1e-8, 0.5, -1e-8])
    np.testing.assert_allclose(shown, [0.5, 0.5, 0.0])
    assert format_weights([0.5 + 1e-8, 0.5, -1e-8]) == "(0.50, 0.50, 0.00)"
    # off the simplex (sum 1.2, negative, NaN): plain rounding, nothing projected
    np.testing.assert_allclose(display_weights([0.604, 0.604]), [0.6, 0.6])
    np.testing.assert_allclose(display_weights([1.5, -0.5]), [1.5, -0.5])
    assert np.isnan(display_weights([np.nan, 1.0])[0])


def test_one_definition_per_weight_function():
    """viz and the geodesic package import the weight functions, they do not redefine them."""
    import importlib

    import geoviz.geodesic as geodesic
    import geoviz.geodesic.distances as distances
    import geoviz.geodesic.interpolate as interpolate

    problem = importlib.import_module("geoviz.ot.problem")  # Sinkhorn's measures

    import ast
    from pathlib import Path

    names = ("format_weights", "project_to_simplex", "uniform_weights", "round_to_simplex")
    # and nowhere else in the package: exactly one `def` per weight function
    package = Path(geodesic.__file__).resolve().parents[1]
    defined: dict[str, list[str]] = {n: [] for n in (*names, "check_weights")}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name in defined:
                defined[node.name].append(str(path.relative_to(package)))
    assert all(where == ["geodesic/weights.py"] for where in defined.values()), defined
    for mod in (geodesic, distances):
        assert mod.check_weights.__module__ == "geoviz.geodesic.weights"
    assert not hasattr(distances, "_project_simplex")
    assert not hasattr(interpolate, "format_weights")
    # the uniform *measure* of Sinkhorn is a different thing with a different name
    assert not hasattr(problem, "uniform_weights")
    assert problem.uniform_measure(4).dtype.is_floating_point


# ---------------------------------------------------------------- click -> weights


class _Attr:
    """Streamlit returns attribute-style objects; both styles must work."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


# ---------------------------------------------------------------- SimplexWeights


simplex_points = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=7).filter(
    lambda v: sum(v) > 1e-3
)


@given(simplex_points)
def test_simplex_weights_are_todays_validation_and_rounding(values):
    w = np.asarray(values) / np.sum(values)
    a = SimplexWeights.from_input(w, len(w))
    expected = round_to_simplex(check_weights(w, len(w)), ENTRY_DECIMALS)
    assert np.asarray(a).tolist() == expected.tolist() and a.key() == tuple(expected.tolist())
    assert len(a) == a.m == len(w) and list(a) == expected.tolist() and a[0] == expected[0]
    assert np.asarray(a, dtype=np.float32).dtype == np.float32
    # already valid: check_weights hands back the same numbers without a second rounding
    assert check_weights(a, len(w)).tolist() == expected.tolist()
    assert SimplexWeights.from_input(a, len(w)) is a
    # unrounded: exactly check_weights' numbers, and its text form is exact as well
    exact = SimplexWeights.from_input(w, len(w), decimals=None)
    assert exact.tolist() == check_weights(w, len(w)).tolist()
    assert SimplexWeights.from_text(exact.to_text(), len(w), decimals=None) == exact
    # the displayed form is display_weights' rule, so sliders, text and labels agree
    assert a.display().tolist() == display_weights(expected).tolist()
    assert display_weights(a).tolist() == display_weights(expected).tolist()
    assert a.format(None) == format_weights(expected)


@given(simplex_points)
def test_simplex_weights_text_round_trip_is_exact(values):
    w = np.asarray(values) / np.sum(values)
    a = SimplexWeights.from_input(w, len(w))
    text = a.to_text()
    assert text == weights_text(a) and " " not in text
    back = SimplexWeights.from_text(text, len(w))
    assert back == a and back.key() == a.key() and hash(back) == hash(a)


def test_simplex_weights_closed_form_and_library_use():
    a = SimplexWeights.from_input([0.6, 0.25, 0.15], 3)
    assert a.values == (0.6, 0.25, 0.15) and a.to_text() == "0.6,0.25,0.15"
    assert a.format(["x", "y", "z"]) == "x 0.60 · y 0.25 · z 0.15"
    assert weights_tag(a) == "0.6,0.25,0.15"
    # 1/3 each at 4 places: largest remainder keeps the sum exactly 1
    third = SimplexWeights.from_input(np.full(3, 1 / 3), 3)
    assert third.values == (0.3334, 0.3333, 0.3333) and sum(third) == pytest.approx(1.0)
    arr = np.asarray(a)
    arr[0] = 9.0  # a copy: the value object cannot be changed through its array
    assert a.values[0] == 0.6


@pytest.mark.parametrize(
    ("weights", "m"),
    [([0.5, 0.5], 3), ([0.5, float("nan"), 0.5], 3), ([0.7, 0.6, -0.3], 3), ([0.2, 0.2, 0.2], 3)],
)
def test_simplex_weights_refuse_what_check_weights_refuses(weights, m):
    with pytest.raises(WeightsError):
        SimplexWeights.from_input(weights, m)
    with pytest.raises(WeightsError):
        check_weights(weights, m)


def test_simplex_weights_wrong_length_and_bad_text_and_direct_construction():
    a = SimplexWeights.from_input([0.5, 0.5], 2)
    with pytest.raises(WeightsError, match="3 entries"):
        check_weights(a, 3)
    with pytest.raises(WeightsError, match="comma-separated"):
        SimplexWeights.from_text("0.5;0.5", 2)
    with pytest.raises(WeightsError):
        SimplexWeights((0.7, 0.6))  # off the simplex even when built directly
    with pytest.raises(WeightsError):
        SimplexWeights((1.5, -0.5))


def _nested(depth: int, inner: object) -> object:
    for _ in range(depth):
        inner = [inner]
    return inner


@pytest.mark.parametrize(
    "bad",
    [
        _nested(5_000, [0.2, 0.3, 0.5]),
        _nested(900, [0.2, 0.3, 0.5]),
        [10**400, 0, 0],
        [0, 0, 10**5000],
        np.array([10**400, 0, 0], dtype=object),
    ],
    ids=["nested 5,000 deep", "nested 900 deep", "10**400", "10**5000", "object array"],
)
def test_weights_nested_deep_or_too_large_for_a_float_are_a_weights_error(bad):
    """Issue 41: these raised RecursionError (the message's repr), OverflowError (float of
    10**400) or ValueError (repr of a 5,000-digit integer) instead of WeightsError."""
    for call in (lambda: check_weights(bad, 3), lambda: SimplexWeights.from_input(bad, 3)):
        with pytest.raises(WeightsError) as caught:
            call()
        assert len(str(caught.value)) < 200
    with pytest.raises(WeightsError, match="SimplexWeights needs"):
        SimplexWeights((10**400, 0, 0))


def test_short_repr_never_fails():
    class Hostile:
        def __repr__(self):
            raise RuntimeError("no")

    assert short_repr(_nested(5_000, 1)) == "<list that cannot be shown>"
    assert short_repr(10**5000) == "<int that cannot be shown>"
    assert short_repr(Hostile()) == "<Hostile that cannot be shown>"
    assert short_repr([1, 2]) == "[1, 2]"
