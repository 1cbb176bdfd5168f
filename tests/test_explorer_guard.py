"""Values from the explorer's frame are bounded before Streamlit parses them (issue 32, item 8).

Streamlit reads a component's value with Python's JSON parser in ``on_script_will_rerun``,
before any page code runs: weights nested 1,100 deep failed there ("maximum recursion depth
exceeded while decoding a JSON array") and every later rerun of the session showed the generic
error box. The explorer's frame now rebuilds every message it posts (its own and any posted
through ``window.parent`` in the frame) from the documented shape and drops anything else; the
server still checks whatever arrives (:mod:`geoviz.app.browser`), which the unit tests below
hold for the hostile shapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from geoviz.app.browser import (
    MAX_MESSAGE_CHARS,
    BrowserValueError,
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


def test_a_deep_value_on_the_geodesic_page_is_a_warning_and_the_next_release_counts(
    fresh_server,
):
    """A deep value that does reach the page (a Python object, as AppTest hands it over) is
    one warning; the session's next release is taken (the refusal does not stick)."""
    from test_explorer import _app_test

    at = _app_test("pages/3_geodesic.py").run(timeout=600)
    assert not at.exception
    at.session_state["geodesic_explorer"] = HOSTILE_EVENTS["deep weights"]
    at.run(timeout=120)
    assert not at.exception
    assert any("last pick is kept" in w.value for w in at.warning)
    at.session_state["geodesic_explorer"] = {"weights": [0.5, 0.3, 0.2], "seq": 2, "id": "x"}
    at.run(timeout=120)
    assert not at.exception
    assert at.query_params.get("a") == "0.5,0.3,0.2"
    at.run(timeout=120)  # a rerun with nothing new keeps the pick and shows no warning
    assert not at.exception and not at.warning
    assert at.query_params.get("a") == "0.5,0.3,0.2"


# ---------------------------------------------------------------- the frame's guard, in Chromium


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    import shutil
    from pathlib import Path

    tb = pytest.importorskip("test_browser")
    pytest.importorskip("playwright.sync_api")
    if not (Path(tb.CHROMIUM).exists() or shutil.which(tb.CHROMIUM)):
        pytest.skip(f"Chromium not found at {tb.CHROMIUM}")
    with tb._app_server(tmp_path_factory.mktemp("guard")) as info:
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
    tb = pytest.importorskip("test_browser")
    pw = pytest.importorskip("playwright.sync_api")
    with pw.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=tb.CHROMIUM, args=tb.CHROMIUM_ARGS, headless=True
        )
        try:
            pg = browser.new_page(viewport={"width": 1500, "height": 1900})
            pg.set_default_timeout(tb.PAGE_TIMEOUT_MS)
            pg.goto(f"{guarded_server['url']}/geodesic")
            frame = tb._explorer(pg)
            tb._wait_idle(pg)
            dropped = frame.evaluate("() => geovizExplorer.dropped()")
            for expr in FRAME_HOSTILE:
                _post_from_frame(frame, expr)
            pg.wait_for_timeout(1500)  # a rerun the old frame caused would have started
            tb._wait_idle(pg)
            tb._assert_no_exception(pg, "after the deep value")
            # each was dropped in the frame, none reached the server (no warning either)
            assert frame.evaluate("() => geovizExplorer.dropped()") == dropped + len(FRAME_HOSTILE)
            assert not pg.locator("[data-testid='stAlertContentWarning']").count()
            # the session still works: a release from the frame is taken on the next rerun
            frame = tb._explorer(pg, timeout_s=60)
            _post_from_frame(frame, "({weights: [0.5, 0.3, 0.2], seq: 20001, id: 'h'})")
            pg.wait_for_function(
                "() => decodeURIComponent(window.location.search).includes('a=0.5,0.3,0.2')",
                timeout=60_000,
            )
            tb._wait_idle(pg)
            tb._assert_no_exception(pg, "after the next release")
            frame = tb._explorer(pg, timeout_s=60)
            assert frame.evaluate("() => geovizExplorer.pick()") == pytest.approx([0.5, 0.3, 0.2])
            assert "Picked a" in tb._main_text(pg)
            assert not pg.locator("[data-testid='stAlertContentWarning']").count()
        finally:
            browser.close()
