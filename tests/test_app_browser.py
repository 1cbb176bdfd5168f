"""Values the browser sends (geoviz.app.browser), and the explorer pages that receive them.

Issue 25, rows 4-7: McCann's t and the weights were taken with ``float()``; NaN was stored,
``null``/text/lists/objects raised TypeError, a nested list crashed the Geodesic section,
the explorer vanished after a refusal, and the whole bad input was echoed back.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_explorer import _app_test

from geoviz.app.browser import (
    MAX_MESSAGE_CHARS,
    BrowserValueError,
    released_event,
    released_t,
    released_weights,
)
from geoviz.app.session import SessionModel
from geoviz.errors import GeovizError, WeightsError
from geoviz.geodesic.weights import SimplexWeights

HOSTILE = [
    "nan",
    float("nan"),
    float("inf"),
    None,
    "abc",
    "0.5",
    [0.5],
    {},
    {"t": 0.5},
    True,
    [[0.2, 0.3, 0.5]],
    ["0.2", "0.3", "0.5"],
    [0.2, None, 0.8],
    [0.2, True, 0.8],
    [0.2, 0.3, float("nan")],
    [0.5, 0.6, -0.1],
    [0.2, 0.3, 0.4],
    list(range(1_000_000)),
    "x" * 1_000_000,
    [[[[0.1]]]],
]


@pytest.mark.parametrize("value", HOSTILE, ids=lambda v: repr(v)[:30])
def test_hostile_weights_are_one_short_sentence(value):
    with pytest.raises(BrowserValueError) as info:
        released_weights(value, 3)
    text = str(info.value)
    assert 0 < len(text) <= MAX_MESSAGE_CHARS
    assert "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" not in text  # no long echo of the input
    assert "last pick is kept" in text


@pytest.mark.parametrize("value", [*HOSTILE, -0.1, 1.5, 1e300], ids=lambda v: repr(v)[:30])
def test_hostile_t_is_one_short_sentence(value):
    with pytest.raises(BrowserValueError) as info:
        released_t(value)
    assert len(str(info.value)) <= MAX_MESSAGE_CHARS


def test_good_values_pass_and_are_rounded_once():
    w = released_weights([0.2, 0.3, 0.5], 3)
    assert isinstance(w, SimplexWeights) and w.tolist() == [0.2, 0.3, 0.5]
    assert released_weights([1, 0, 0], 3).tolist() == [1.0, 0.0, 0.0]  # JSON integers
    assert released_t(0) == 0.0 and released_t(0.25) == 0.25 and released_t(1) == 1.0


@given(st.lists(st.floats(min_value=0, max_value=1), min_size=3, max_size=3))
def test_weights_from_the_browser_agree_with_the_library(values):
    """Whatever the numbers, the browser check says what SimplexWeights.from_input says."""
    try:
        expected = SimplexWeights.from_input(values, 3)
    except WeightsError:
        with pytest.raises(BrowserValueError):
            released_weights(values, 3)
    else:
        assert released_weights(values, 3) == expected


def test_events_need_an_integer_seq_and_a_short_id():
    assert released_event(None) is None
    event = released_event({"weights": [1, 0], "seq": 3, "id": "abc"})
    assert event is not None and event.marker == ("abc", 3)
    for bad in (
        "x",
        [1],
        {"seq": "1"},
        {"seq": 1.5},
        {"seq": True},
        {"seq": 1, "id": "i" * 10_000},
        {"seq": 1, "id": 5},
        {str(k): k for k in range(100)},
    ):
        with pytest.raises(BrowserValueError) as info:
            released_event(bad)
        assert len(str(info.value)) <= MAX_MESSAGE_CHARS


def test_nested_weights_are_a_weights_error_not_a_type_error():
    """Row 5: SessionModel.set_weights([[0.2, 0.3, 0.5]]) raised TypeError from float()."""
    model = SessionModel({})
    with pytest.raises(WeightsError, match="one weight vector"):
        model.set_weights([[0.2, 0.3, 0.5]])
    with pytest.raises(WeightsError):
        SimplexWeights(((0.2, 0.3), (0.5,)))  # type: ignore[arg-type]


def test_library_messages_do_not_echo_a_huge_input():
    """Row 7: a 1 MB string came back whole in the message."""
    from geoviz.geodesic.interpolate import check_t
    from geoviz.geodesic.weights import check_weights

    huge = "y" * 1_000_000
    for call in (lambda: check_weights(huge, 3), lambda: check_t(huge)):
        with pytest.raises(GeovizError) as info:
            call()
        assert len(str(info.value)) < 200
    with pytest.raises(GeovizError) as info:
        SimplexWeights.from_text(huge, 3)
    assert len(str(info.value)) < 200
    assert math.isfinite(released_t(0.5))


# ---------------------------------------------------------------- the pages (AppTest)


def _explorer_drawn(at) -> bool:
    return any(type(e).__name__ == "UnknownElement" for e in at.main)


def test_geodesic_page_keeps_the_explorer_and_the_last_pick_after_hostile_values(fresh_server):
    at = _app_test("pages/3_geodesic.py")
    at.session_state["geodesic_explorer"] = json.dumps(
        {"weights": [0.5, 0.3, 0.2], "seq": 1, "id": "x"}
    )
    at.run()
    assert "0.5,0.3,0.2" in str(at.query_params["a"])
    hostile = [
        {"weights": [[0.2, 0.3, 0.5]], "seq": 2, "id": "x"},
        {"weights": "nan", "seq": 3, "id": "x"},
        {"weights": None, "seq": 4, "id": "x"},
        {"weights": {}, "seq": 5, "id": "x"},
        {"weights": "z" * 1_000_000, "seq": 6, "id": "x"},
        {"weights": [0.1] * 100_000, "seq": 7, "id": "x"},
        "not an event",
        [0.2, 0.3, 0.5],
    ]
    for value in hostile:
        at.session_state["geodesic_explorer"] = json.dumps(value)  # as the explorer sends it
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert _explorer_drawn(at), value  # row 6: the explorer stays on the page
        warnings = [w.value for w in at.warning]
        assert warnings and all(len(w) <= MAX_MESSAGE_CHARS for w in warnings)
        assert "0.5,0.3,0.2" in str(at.query_params["a"])  # the last good pick
        assert any("Picked a" in m.value and "0.50" in m.value for m in at.markdown)
    # a good release after the hostile ones is taken
    at.session_state["geodesic_explorer"] = json.dumps(
        {"weights": [0.2, 0.2, 0.6], "seq": 9, "id": "x"}
    )
    at.run()
    assert not at.warning
    assert "0.2,0.2,0.6" in str(at.query_params["a"])


def test_mccann_page_keeps_the_last_t_after_hostile_values(fresh_server):
    """Row 4: "nan" was stored as t (the browser then could not parse the payload)."""
    at = _app_test("pages/4_mccann.py")
    at.session_state["mccann_explorer_0"] = json.dumps({"t": 0.25, "seq": 1, "id": "x"})
    at.run()
    assert any("Released t = 0.25" in c.value for c in at.caption)
    for seq, bad in enumerate(["nan", None, "abc", [0.5], {}, 1.5, "q" * 1_000_000], start=2):
        at.session_state["mccann_explorer_0"] = json.dumps({"t": bad, "seq": seq, "id": "x"})
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert _explorer_drawn(at)
        assert any("Released t = 0.25" in c.value for c in at.caption), bad
        assert at.warning and len(at.warning[0].value) <= MAX_MESSAGE_CHARS
        assert math.isfinite(at.session_state["mc_t"])
