"""Values from the explorer's frame are bounded before Streamlit parses them (issues 32 and 41).

Streamlit reads a component's value with Python's JSON parser in ``on_script_will_rerun``
(``SessionState._call_callbacks`` -> ``WStates.__getitem__`` -> ``json.loads``), before any
page code runs: weights nested 1,100 deep failed there ("maximum recursion depth exceeded while
decoding a JSON array"), the unparsed value stayed in the session and every later rerun
(``_compact_state``) showed the generic error box, on every page. Issue 32 made the frame
rebuild every message it posts through ``window.parent``; issue 41's probe posted through
``window.top`` instead, around it. Now the explorer sends the JSON *text* of its event (a
string, which Python's parser reads flat), the page itself stops any other component value
before Streamlit's listener sees it (a capturing listener the frame installs), and the server
parses the text with bounded length and depth (:func:`geoviz.app.browser.component_value`)
and checks whatever arrives (:mod:`geoviz.app.browser`), which the unit tests below hold for
the hostile shapes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from geoviz.app.browser import (
    MAX_MESSAGE_CHARS,
    MAX_VALUE_CHARS,
    BrowserValueError,
    component_value,
    released_event,
    released_t,
    released_weights,
)


def _nested(depth: int, inner: Any) -> Any:
    """``inner`` wrapped in ``depth`` one-element lists (built without recursion)."""
    value = inner
    for _ in range(depth):
        value = [value]
    return value


def _deep_dict(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"x": value}
    return value


# ---------------------------------------------------------------- the server's checks

HOSTILE_EVENTS = {
    "deep weights": {"weights": _nested(1_100, [0.2, 0.3, 0.5]), "seq": 1, "id": "x"},
    "deep object weights": {"weights": _deep_dict(1_100), "seq": 1, "id": "x"},
    "huge weights": {"weights": [0.001] * 1_000_000, "seq": 1, "id": "x"},
    "nan weights": {"weights": [0.2, float("nan"), 0.8], "seq": 1, "id": "x"},
    "inf weights": {"weights": [float("inf"), 0.0, 0.0], "seq": 1, "id": "x"},
    "text weights": {"weights": "0.2,0.3,0.5", "seq": 1, "id": "x"},
    "text entries": {"weights": ["0.2", "0.3", "0.5"], "seq": 1, "id": "x"},
    "dict weights": {"weights": {"0": 0.2, "1": 0.3, "2": 0.5}, "seq": 1, "id": "x"},
    "off the simplex": {"weights": [0.5, 0.6, -0.1], "seq": 1, "id": "x"},
    "not summing to one": {"weights": [0.2, 0.3, 0.4], "seq": 1, "id": "x"},
}


@pytest.mark.parametrize("name", list(HOSTILE_EVENTS))
def test_hostile_released_weights_are_one_sentence(name):
    """Each shape the frame drops is also refused by the server's checks, in one short
    sentence, without recursing into the value (a 1,100-deep list is not walked)."""
    event = released_event(HOSTILE_EVENTS[name])
    assert event is not None
    with pytest.raises(BrowserValueError) as info:
        released_weights(event.fields["weights"], 3)
    text = str(info.value)
    assert 0 < len(text) <= MAX_MESSAGE_CHARS and "\n" not in text
    assert "last pick is kept" in text


@pytest.mark.parametrize(
    "value",
    [
        _nested(1_100, {"seq": 1}),
        _deep_dict(1_100),
        {"seq": _nested(1_100, 1), "id": "x"},
        {"seq": 1, "id": _nested(1_100, "x")},
        {"seq": 1, "id": "i" * 1_000_000},
        {"seq": float("nan"), "id": "x"},
        "x" * 1_000_000,
        list(range(1_000_000)),
    ],
    ids=["deep list", "deep dict", "deep seq", "deep id", "huge id", "nan seq", "text", "huge"],
)
def test_hostile_events_are_one_sentence(value):
    with pytest.raises(BrowserValueError) as info:
        released_event(value)
    assert 0 < len(str(info.value)) <= MAX_MESSAGE_CHARS


@pytest.mark.parametrize(
    "t", [_nested(1_100, 0.5), float("nan"), "0.5", {"t": 0.5}, [0.5] * 1_000_000]
)
def test_hostile_t_is_one_sentence(t):
    with pytest.raises(BrowserValueError) as info:
        released_t(t)
    assert 0 < len(str(info.value)) <= MAX_MESSAGE_CHARS


def _deep_text(depth: int) -> str:
    """The JSON text of weights nested ``depth`` deep in an event (built without recursion)."""
    return '{"seq": 1, "id": "x", "weights": ' + "[" * depth + "0.5" + "]" * depth + "}"


#: JSON texts the explorer never sends, as they reach the page (issue 41)
HOSTILE_TEXTS = {
    "2,000 deep": _deep_text(2_000),
    "1,100 deep": _deep_text(1_100),
    "3 deep": _deep_text(2),
    "deep, brackets in a string do not count": '{"id": "[[[[[[", "seq": 1, "x": [[[[1]]]]}',
    "too long": json.dumps({"weights": [0.1] * 1_000, "seq": 1, "id": "x"}),
    "NaN": '{"weights": [NaN, 0.5, 0.5], "seq": 1, "id": "x"}',
    "not JSON": '{"weights": [0.2, 0.3, 0.5], "seq": 1',
    "empty": "",
}

#: values other than a text, as Streamlit hands them over after parsing what was posted
HOSTILE_OBJECTS = {
    "1,100-deep list": _nested(1_100, [0.2, 0.3, 0.5]),
    "event object": {"weights": [0.2, 0.3, 0.5], "seq": 1, "id": "x"},
    "number": 0.5,
    "true": True,
    "huge list": list(range(1_000_000)),
}


@pytest.mark.parametrize("name", list(HOSTILE_TEXTS))
def test_component_texts_are_bounded_before_they_are_parsed(name):
    """Too long, too deep (counted without a parser: 2,000 deep is refused at once, brackets
    inside strings do not count), NaN or not JSON: one short sentence."""
    with pytest.raises(BrowserValueError) as info:
        component_value(HOSTILE_TEXTS[name])
    text = str(info.value)
    assert 0 < len(text) <= MAX_MESSAGE_CHARS and "\n" not in text and "ignored" in text
    assert "[[[[[[[[[[" not in text and "0.1, 0.1, 0.1" not in text


def test_a_string_bracket_does_not_count_as_nesting():
    text = '{"weights": [0.2, 0.3, 0.5], "seq": 1, "id": "[[[\\"[[[{{{"}'
    # an escaped quote does not end the string: what follows it is still inside
    assert component_value(text) == {"weights": [0.2, 0.3, 0.5], "seq": 1, "id": '[[["[[[{{{'}


@pytest.mark.parametrize("name", list(HOSTILE_OBJECTS))
def test_anything_but_a_text_is_refused_without_walking_it(name):
    with pytest.raises(BrowserValueError, match="instead of the text of an event") as info:
        component_value(HOSTILE_OBJECTS[name])
    assert len(str(info.value)) <= MAX_MESSAGE_CHARS


def test_the_explorers_texts_are_taken():
    assert component_value(None) is None  # nothing released yet
    event = {"weights": [0.2, 0.3, 0.5], "seq": 3, "id": "k-geodesic"}
    assert component_value(json.dumps(event)) == event
    longest = json.dumps({"weights": [1 / 3] * 64, "seq": 2**53 - 1, "id": "i" * 128})
    assert len(longest) < MAX_VALUE_CHARS and component_value(longest)["seq"] == 2**53 - 1


def test_a_json_integer_too_large_for_a_float_is_a_sentence():
    """``[1e400 as digits, 0, 0]`` parses to a Python int: float() raised OverflowError."""
    value = component_value('{"weights": [1' + "0" * 400 + ', 0, 0], "seq": 1, "id": "x"}')
    event = released_event(value)
    assert event is not None
    with pytest.raises(BrowserValueError, match="not a finite number"):
        released_weights(event.fields["weights"], 3)


def _rerun(at, key: str, value: object) -> None:
    at.session_state[key] = value
    at.run(timeout=120)
    assert not at.exception, [e.value for e in at.exception]


def test_deep_values_on_the_geodesic_page_are_a_warning_and_the_session_goes_on(fresh_server):
    """A 2,000-deep text, and a deep value that does reach the page as a Python object (as
    AppTest hands it over: Streamlit parsed it), are each one warning; the session's next
    release is taken, a rerun with nothing new shows no warning, and the other pages work."""
    from test_explorer import _app_test

    at = _app_test("pages/3_geodesic.py").run(timeout=600)
    assert not at.exception
    picks = ([0.5, 0.3, 0.2], [0.2, 0.3, 0.5])
    hostile = (HOSTILE_TEXTS["2,000 deep"], _nested(900, [0.2, 0.3, 0.5]))
    for seq, (bad, weights) in enumerate(zip(hostile, picks, strict=True), start=1):
        _rerun(at, "geodesic_explorer", bad)
        assert [w.value for w in at.warning if "ignored" in w.value]
        _rerun(at, "geodesic_explorer", json.dumps({"weights": weights, "seq": seq, "id": "x"}))
        assert at.query_params.get("a") == ",".join(str(w) for w in weights)
        assert not at.warning
        at.run(timeout=120)  # a rerun with nothing new keeps the pick and shows no warning
        assert not at.exception and not at.warning
        assert at.query_params.get("a") == ",".join(str(w) for w in weights)
    at.switch_page("pages/1_datasets.py").run(timeout=120)
    assert not at.exception, [e.value for e in at.exception]


def _as_the_browser_sends(at, json_value: str) -> None:
    """Rerun ``at`` as the browser does after a release: the page's widget states with the
    explorer's value as the wire carries it (``WidgetState.json_value``, the text Streamlit's
    frontend made with ``JSON.stringify``), so Streamlit's own ``json.loads`` in
    ``on_script_will_rerun`` reads it, as in the served app (``AppTest.run`` would not send
    a component's value)."""
    from streamlit.proto.WidgetStates_pb2 import WidgetStates

    component = next(e for e in at.main if type(e).__name__ == "UnknownElement")
    states = WidgetStates()
    states.CopyFrom(at._tree.get_widget_states())
    state = states.widgets.add()
    state.id = component.proto.id
    state.json_value = json_value
    at._run(states, timeout=120)
    assert not at.exception, [e.value for e in at.exception]


def test_the_explorers_text_is_parsed_flat_by_streamlit_and_the_session_goes_on(fresh_server):
    """The wire form of the explorer's value is a JSON string: Streamlit's parser reads the
    2,000-deep text as one string (no RecursionError before the page runs), the page refuses
    it in a sentence, and the next release is taken, on this page and then on the others."""
    from test_explorer import _app_test

    at = _app_test("pages/3_geodesic.py").run(timeout=600)
    assert not at.exception
    _as_the_browser_sends(at, json.dumps(HOSTILE_TEXTS["2,000 deep"]))
    assert any("nested more than 2 deep" in w.value for w in at.warning)
    good = {"weights": [0.5, 0.3, 0.2], "seq": 5, "id": "x"}
    _as_the_browser_sends(at, json.dumps(json.dumps(good)))
    assert at.query_params.get("a") == "0.5,0.3,0.2" and not at.warning
    at.switch_page("pages/1_datasets.py").run(timeout=120)
    assert not at.exception, [e.value for e in at.exception]


# ---------------------------------------------------------------- the frame's guard, in Chromium


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    import shutil
    from pathlib import Path

    bs = pytest.importorskip("browser_support")
    pytest.importorskip("playwright.sync_api")
    if not (Path(bs.CHROMIUM).exists() or shutil.which(bs.CHROMIUM)):
        pytest.skip(f"Chromium not found at {bs.CHROMIUM}")
    with bs.app_server(tmp_path_factory.mktemp("guard")) as info:
        yield info


def _post_from_frame(frame, value_js: str) -> None:
    """Post ``value_js`` (a JavaScript expression) as the component's value through the
    frame's ``window.parent``, as a script in the explorer's frame would."""
    frame.evaluate(
        "(expr) => { const value = eval(expr);"
        " window.parent.postMessage({isStreamlitMessage: true,"
        " type: 'streamlit:setComponentValue', value: value, dataType: 'json'}, '*'); }",
        value_js,
    )


DEEP = "(() => { let v = [0.2, 0.3, 0.5]; for (let i = 0; i < 1100; i++) v = [v]; return v; })()"
FRAME_HOSTILE = [
    f"({{weights: {DEEP}, seq: 10001, id: 'h'}})",
    f"({{seq: 10002, id: 'h', x: {DEEP}}})",
    f"{DEEP}",
    "({weights: Array(200000).fill(0.1), seq: 10003, id: 'h'})",
    "({weights: [0.2, NaN, 0.8], seq: 10004, id: 'h'})",
    "({weights: ['0.2', '0.3', '0.5'], seq: 10005, id: 'h'})",
    "({weights: {a: 1}, seq: 10006, id: 'h'})",
    "({weights: [0.2, 0.3, 0.5], seq: 10007, id: 'i'.repeat(1e6)})",
    "({weights: [0.2, 0.3, 0.5], seq: 1.5, id: 'h'})",
    "({t: 0.5, seq: 10008, id: 'h'})",
    "'w'.repeat(1e6)",
]


@pytest.mark.browser
def test_a_deep_value_from_the_frame_does_not_break_the_session(guarded_server):
    """The 1,100-deep weights of the probe, and the other hostile shapes, posted from the
    explorer's frame, are dropped there (counted, never sent): no error box, and the next
    release from the frame moves the pick and the link."""
    bs = pytest.importorskip("browser_support")
    pw = pytest.importorskip("playwright.sync_api")
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=bs.CHROMIUM, args=bs.CHROMIUM_ARGS, headless=True
        )
        try:
            pg = browser.new_page(viewport={"width": 1500, "height": 1900})
            pg.set_default_timeout(bs.PAGE_TIMEOUT_MS)
            pg.goto(f"{guarded_server['url']}/geodesic")
            frame = bs.explorer_frame(pg)
            bs.wait_idle(pg)
            dropped = frame.evaluate("() => geovizExplorer.dropped()")
            for expr in FRAME_HOSTILE:
                _post_from_frame(frame, expr)
            pg.wait_for_timeout(1500)  # a rerun the old frame caused would have started
            bs.wait_idle(pg)
            bs.assert_no_exception(pg, "after the deep value")
            # each was dropped in the frame, none reached the server (no warning either)
            assert frame.evaluate("() => geovizExplorer.dropped()") == dropped + len(FRAME_HOSTILE)
            assert not pg.locator("[data-testid='stAlertContentWarning']").count()
            # the session still works: a release from the frame is taken on the next rerun
            frame = bs.explorer_frame(pg, timeout_s=60)
            _post_from_frame(frame, "({weights: [0.5, 0.3, 0.2], seq: 20001, id: 'h'})")
            pg.wait_for_function(
                "() => decodeURIComponent(window.location.search).includes('a=0.5,0.3,0.2')",
                timeout=60_000,
            )
            bs.wait_idle(pg)
            bs.assert_no_exception(pg, "after the next release")
            frame = bs.explorer_frame(pg, timeout_s=60)
            assert frame.evaluate("() => geovizExplorer.pick()") == pytest.approx([0.5, 0.3, 0.2])
            assert "Picked a" in bs.main_text(pg)
            assert not pg.locator("[data-testid='stAlertContentWarning']").count()
        finally:
            browser.close()


def _post_through_top(frame, value_js: str) -> None:
    """Post ``value_js`` (a JavaScript expression) as a component value through
    ``window.top``, from the explorer's frame: around the frame's own guard on
    ``window.parent``, as issue 41's probe did."""
    frame.evaluate(
        "(expr) => { const value = eval(expr);"
        " window.top.postMessage({isStreamlitMessage: true,"
        " type: 'streamlit:setComponentValue', value: value, dataType: 'json'}, '*'); }",
        value_js,
    )


DEEP_2000 = (
    "(() => { let v = [0.2, 0.3, 0.5]; for (let i = 0; i < 2000; i++) v = [v]; return v; })()"
)


@pytest.mark.browser
def test_a_2000_deep_value_through_window_top_does_not_break_the_session(guarded_server):
    """Issue 41: 2,000-deep weights posted through ``window.top`` gave the generic error box,
    which stayed through later valid values and on the Datasets page. As an object the page's
    guard stops it before Streamlit's listener (counted); as a JSON text (the form the
    explorer's values take) it reaches the server, which refuses it in a sentence. A valid
    value through ``window.top`` is then taken, and no error box shows here or on the
    Datasets page of the same session."""
    bs = pytest.importorskip("browser_support")
    tb = pytest.importorskip("test_browser")  # its _goto_page
    pw = pytest.importorskip("playwright.sync_api")
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=bs.CHROMIUM, args=bs.CHROMIUM_ARGS, headless=True
        )
        try:
            pg = browser.new_page(viewport={"width": 1500, "height": 1900})
            pg.set_default_timeout(bs.PAGE_TIMEOUT_MS)
            pg.goto(f"{guarded_server['url']}/geodesic")
            frame = bs.explorer_frame(pg)
            bs.wait_idle(pg)
            dropped = frame.evaluate("() => geovizExplorer.dropped()")
            _post_through_top(frame, f"({{weights: {DEEP_2000}, seq: 30001, id: 'h'}})")
            _post_through_top(frame, DEEP_2000)
            _post_through_top(frame, "({weights: [0.2, 0.3, 0.5], seq: 30002, id: 'h'})")
            pg.wait_for_timeout(1500)  # a rerun they caused would have started
            bs.wait_idle(pg)
            bs.assert_no_exception(pg, "after the 2,000-deep objects")
            assert frame.evaluate("() => geovizExplorer.dropped()") == dropped + 3
            assert not pg.locator("[data-testid='stAlertContentWarning']").count()
            # the same depth as the text of an event: the server's sentence, no error box
            _post_through_top(frame, f"JSON.stringify({{weights: {DEEP_2000}, seq: 30003}})")
            warning = pg.locator("[data-testid='stAlertContentWarning']")
            warning.first.wait_for(timeout=60_000)
            bs.wait_idle(pg)
            bs.assert_no_exception(pg, "after the 2,000-deep text")
            assert "nested more than 2 deep" in warning.first.inner_text()
            # the next valid value through window.top is taken
            frame = bs.explorer_frame(pg, timeout_s=60)
            _post_through_top(
                frame, "JSON.stringify({weights: [0.5, 0.3, 0.2], seq: 30004, id: 'h'})"
            )
            pg.wait_for_function(
                "() => decodeURIComponent(window.location.search).includes('a=0.5,0.3,0.2')",
                timeout=60_000,
            )
            bs.wait_idle(pg)
            bs.assert_no_exception(pg, "after the valid value")
            assert not pg.locator("[data-testid='stAlertContentWarning']").count()
            assert "Picked a" in bs.main_text(pg)
            tb._goto_page(pg, "1 · Datasets")  # the same session, another page
            bs.assert_no_exception(pg, "on the Datasets page")
        finally:
            browser.close()


def test_the_frame_holds_values_to_the_servers_limits():
    """The frame's guard (``frontend/streamlit.js``) and the server agree on the longest
    value text and the longest event id."""
    from geoviz.app.browser import MAX_ID_CHARS
    from geoviz.explorer.bundle import FRONTEND

    host = (FRONTEND / "streamlit.js").read_text(encoding="utf-8")
    assert f"valueChars: {MAX_VALUE_CHARS}," in host
    assert f"idChars: {MAX_ID_CHARS}," in host
